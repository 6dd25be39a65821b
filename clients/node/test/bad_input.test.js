// Bad input: refused with an error naming what was wrong, and nothing else harmed.

import assert from "node:assert/strict";
import { mkdtempSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";

import {
  BadRequestError,
  ClientClosedError,
  InvalidArgumentsError,
  MAX_MESSAGE_SIZE,
  MessageTooLargeError,
  SupervisorClient,
  SupervisorError,
  UnreachableError,
  defaultEndpoint,
  errorFromReply,
} from "../src/index.js";
import { rejection, within } from "./helpers.js";

const client = new SupervisorClient({ requestTimeout: 5 });
after(() => client.close());

async function stillServes() {
  const result = await within(10, "an echo after bad input", client.callTool("mcp_test_echo", { text: "ok" }, { timeout: 5 }));
  assert.equal(result.text, "ok");
}

test("a call with a huge argument is refused by name, before it is sent", async () => {
  const error = await rejection(client.callTool("mcp_test_echo", { text: "x".repeat(MAX_MESSAGE_SIZE) }, { timeout: 5 }));
  assert.ok(error instanceof MessageTooLargeError, String(error));
  assert.equal(error.code, "MESSAGE_TOO_LARGE");
  assert.match(error.message, /^mcp_test_echo: the request is \d+ bytes, over the supervisor's limit of 67108864 bytes/);
  await stillServes();
});

test("a large argument under the limit goes through", async () => {
  const text = "y".repeat(4 * 1024 * 1024);
  const result = await within(20, "a 4 MiB echo", client.callTool("mcp_test_echo", { text }, { timeout: 15 }));
  assert.equal(result.text.length, text.length);
});

test("arguments nested past 64 levels are refused; 64 levels pass", async () => {
  const nest = (levels) => {
    const top = {};
    let at = top;
    for (let i = 1; i < levels; i++) at = at.a = {};
    return top;
  };
  const error = await rejection(client.callTool("mcp_test_echo", { text: "t", x: nest(64) }, { timeout: 5 }));
  assert.ok(error instanceof InvalidArgumentsError, String(error));
  assert.match(error.message, /nested deeper than 64 levels/);
  const cyclic = { text: "t" };
  cyclic.self = cyclic;
  assert.ok((await rejection(client.callTool("mcp_test_echo", cyclic))) instanceof InvalidArgumentsError);
  const result = await client.callTool("mcp_test_echo", { text: "deep", x: nest(63) }, { timeout: 5 });
  assert.equal(result.text, "deep");
});

test("wrong types are refused naming the argument", async () => {
  await assert.rejects(client.callTool(42, {}), { name: "TypeError", message: /name must be a string/ });
  await assert.rejects(client.callTool("mcp_test_echo", ["text"]), { name: "TypeError", message: /an array/ });
  await assert.rejects(client.callTool("mcp_test_echo", null), { name: "TypeError", message: /null/ });
  for (const timeout of [0, -1, Number.NaN, Infinity, "5"]) {
    await assert.rejects(client.callTool("mcp_test_echo", { text: "t" }, { timeout }), {
      name: "RangeError",
      message: /timeout must be a positive finite number/,
    });
  }
  await assert.rejects(client.callTool("mcp_test_echo", { text: 10n }), { name: "TypeError", message: /msgpack/ });
  assert.throws(() => new SupervisorClient({ identity: "" }), { name: "RangeError", message: /identity/ });
  assert.throws(() => new SupervisorClient({ identity: "x".repeat(129) }), { name: "RangeError" });
  assert.throws(() => new SupervisorClient({ requestTimeout: -1 }), { name: "RangeError", message: /requestTimeout/ });
  await stillServes();
});

test("an identity the supervisor refuses is BAD_REQUEST, naming it", async () => {
  const odd = new SupervisorClient({ identity: "tab\there" });
  try {
    const error = await rejection(odd.callTool("mcp_test_echo", { text: "t" }, { timeout: 5 }));
    assert.ok(error instanceof BadRequestError, String(error));
    assert.equal(error.code, "BAD_REQUEST");
    assert.match(error.message, /client identity/);
  } finally {
    odd.close();
  }
});

test("a restart of an unknown server is UNKNOWN_TOOL", async () => {
  const error = await rejection(client.restart("no-such-server"));
  assert.equal(error.code, "UNKNOWN_TOOL");
  assert.match(error.message, /no-such-server/);
});

test("no supervisor at an ipc endpoint is UNREACHABLE at once", async () => {
  const endpoint = `ipc://${join(mkdtempSync(join(tmpdir(), "nosup-")), "supervisor.sock")}`;
  const lonely = new SupervisorClient({ endpoint });
  try {
    const started = Date.now();
    const error = await rejection(lonely.listTools(), 2);
    assert.ok(error instanceof UnreachableError, String(error));
    assert.match(error.message, /no supervisor at ipc:\/\/.*the socket file does not exist/);
    assert.ok(Date.now() - started < 500);
  } finally {
    lonely.close();
  }
  const closed = new SupervisorClient();
  closed.close();
  assert.ok((await rejection(closed.ping())) instanceof ClientClosedError);
});

test("error codes this client does not know keep their code", () => {
  const error = errorFromReply("SOMETHING_NEW", "a newer supervisor's error", 3);
  assert.equal(error.constructor, SupervisorError);
  assert.equal(error.code, "SOMETHING_NEW");
  assert.equal(error.id, 3);
  assert.equal(errorFromReply("constructor", "not a code", 1).constructor, SupervisorError);
  assert.equal(errorFromReply("TIMEOUT", "t", 1).name, "RequestTimeoutError");
});

test("the default endpoint follows the spec's order", () => {
  const dir = mkdtempSync(join(tmpdir(), "endpoint-"));
  const runtime = join(dir, "run");
  mkdirSync(runtime);
  assert.equal(defaultEndpoint("tcp://h:1", { MCP_SUPERVISOR_ENDPOINT: "ipc:///x" }), "tcp://h:1");
  assert.equal(defaultEndpoint(undefined, { MCP_SUPERVISOR_ENDPOINT: "ipc:///x", XDG_RUNTIME_DIR: runtime }), "ipc:///x");
  assert.equal(
    defaultEndpoint(undefined, { MCP_SUPERVISOR_ENDPOINT: "", XDG_RUNTIME_DIR: runtime }),
    `ipc://${runtime}/mcp-supervisor/supervisor.sock`,
  );
  const uid = process.getuid();
  assert.equal(
    defaultEndpoint(undefined, { XDG_RUNTIME_DIR: join(dir, "missing"), TMPDIR: dir }),
    `ipc://${dir}/mcp-supervisor-${uid}/supervisor.sock`,
  );
  assert.equal(defaultEndpoint(undefined, { TEMP: dir }), `ipc://${dir}/mcp-supervisor-${uid}/supervisor.sock`);
  assert.equal(defaultEndpoint(undefined, {}), `ipc:///tmp/mcp-supervisor-${uid}/supervisor.sock`);
});
