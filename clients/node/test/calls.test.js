// Calls against a real supervisor running the repository's test server as "test".

import assert from "node:assert/strict";
import { after, test } from "node:test";

import {
  CancelledError,
  InvalidArgumentsError,
  RequestTimeoutError,
  ServerError,
  SupervisorClient,
  ToolError,
  UnknownToolError,
} from "../src/index.js";
import { ENDPOINT, marker, rejection, within } from "./helpers.js";

const client = new SupervisorClient(); // the endpoint from $MCP_SUPERVISOR_ENDPOINT
after(() => client.close());

test("the endpoint comes from the environment", () => {
  assert.equal(client.endpoint, ENDPOINT);
});

test("listTools gives the registry's tools with their defaults filled in", async () => {
  const { tools, version } = await within(10, "ListTools", client.listToolsVersioned());
  const echo = tools.find((t) => t.name === "mcp_test_echo");
  assert.ok(echo, `mcp_test_echo not in ${tools.map((t) => t.name)}`);
  assert.equal(echo.server, "test");
  assert.equal(echo.originalName, "echo");
  assert.equal(echo.description, "Echo the text back.");
  assert.equal(echo.inputSchema.type, "object");
  assert.equal(echo.title, null);
  assert.ok(Number.isInteger(version) && version >= 1, `version ${version}`);
  assert.ok(tools.every((t) => /^mcp_[A-Za-z0-9_-]{1,60}$/.test(t.name)));
});

test("listTools with wait answers once the servers' first starts are over, and says who still starts", async () => {
  const { tools, starting } = await within(20, "ListTools wait", client.listToolsVersioned({ wait: 10 }));
  assert.ok(tools.some((t) => t.name === "mcp_test_echo"));
  assert.deepEqual(starting, []); // every server of this supervisor is ready
  for (const wait of [-1, Number.NaN, Infinity, "5"]) {
    await assert.rejects(client.listTools({ wait }), TypeError);
  }
});

test("callTool returns the tool's result", async () => {
  const result = await within(10, "echo", client.callTool("mcp_test_echo", { text: "héllo ✓" }, { timeout: 5 }));
  assert.deepEqual(result.content, [{ type: "text", text: "héllo ✓" }]);
  assert.equal(result.text, "héllo ✓");
  assert.equal(result.isError, false);
  assert.equal(result.structuredContent, null);
});

test("a structured result comes as structuredContent", async () => {
  const result = await client.callTool("mcp_test_add", { a: 2, b: 3.5 }, { timeout: 5 });
  assert.deepEqual(result.structuredContent, { sum: 5.5 });
});

test("many calls at once on one connection each get their own reply", async () => {
  const texts = Array.from({ length: 50 }, (_, i) => `call ${i}`);
  const results = await within(
    20,
    "50 concurrent echoes",
    Promise.all(texts.map((text) => client.callTool("mcp_test_echo", { text }, { timeout: 10 }))),
  );
  assert.deepEqual(
    results.map((r) => r.text),
    texts,
  );
});

test("a call past its budget is TIMEOUT from the supervisor, in about the budget", async () => {
  const started = Date.now();
  const error = await rejection(client.callTool("mcp_test_slow", { seconds: 30, tag: "budget" }, { timeout: 0.5 }));
  assert.ok(error instanceof RequestTimeoutError, String(error));
  assert.equal(error.code, "TIMEOUT");
  assert.match(error.message, /0\.5 s budget/);
  const elapsed = (Date.now() - started) / 1000;
  assert.ok(elapsed >= 0.5 && elapsed < 2.5, `answered after ${elapsed} s`);
  await marker("budget", "cancelled");
});

test("progress notifications reach onProgress, the last one before the result", async () => {
  const seen = [];
  const result = await within(
    10,
    "progress call",
    client.callTool("mcp_test_progress", { count: 20, message: "step" }, { timeout: 5, onProgress: (p) => seen.push(p) }),
  );
  assert.equal(result.text, "sent 20");
  assert.ok(seen.length >= 1, "no progress at all");
  assert.deepEqual(seen.at(-1), { progress: 20, total: 20, message: "step 20" });
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress, JSON.stringify(seen));
});

test("a call without onProgress gets no progress", async () => {
  const result = await client.callTool("mcp_test_progress", { count: 3 }, { timeout: 5 });
  assert.equal(result.text, "sent 3");
});

test("an unknown tool is UNKNOWN_TOOL, naming it", async () => {
  const error = await rejection(client.callTool("mcp_test_no_such_tool", {}, { timeout: 5 }));
  assert.ok(error instanceof UnknownToolError, String(error));
  assert.equal(error.code, "UNKNOWN_TOOL");
  assert.match(error.message, /mcp_test_no_such_tool/);
});

test("a tool that reports an error is a ToolError holding the result", async () => {
  const error = await rejection(client.callTool("mcp_test_fail", { message: "it broke" }, { timeout: 5 }));
  assert.ok(error instanceof ToolError, String(error));
  assert.equal(error.code, "TOOL_ERROR");
  assert.match(error.message, /it broke/);
  assert.equal(error.result.isError, true);
  const result = await client.callTool("mcp_test_fail", { message: "kept" }, { timeout: 5, throwOnToolError: false });
  assert.equal(result.isError, true);
  assert.equal(result.text, "kept");
});

test("a JSON-RPC error is SERVER_ERROR; arguments off the schema are INVALID_ARGUMENTS", async () => {
  const error = await rejection(client.callTool("mcp_test_raise_error", { message: "rpc says no" }, { timeout: 5 }));
  assert.ok(error instanceof ServerError, String(error));
  assert.equal(error.code, "SERVER_ERROR");
  assert.match(error.message, /rpc says no/);
  const invalid = await rejection(client.callTool("mcp_test_echo", { text: 5 }, { timeout: 5 }));
  assert.ok(invalid instanceof InvalidArgumentsError, String(invalid));
  assert.match(invalid.message, /text/);
});

test("aborting a call rejects it at once and cancels it on the server", async () => {
  const controller = new AbortController();
  const call = client.callTool("mcp_test_slow", { seconds: 30, tag: "aborted" }, { timeout: 60, signal: controller.signal });
  await marker("aborted", "started");
  const started = Date.now();
  controller.abort();
  const error = await rejection(call, 2);
  assert.ok(error instanceof CancelledError, String(error));
  assert.equal(error.code, "CANCELLED");
  assert.ok(Date.now() - started < 1000);
  await marker("aborted", "cancelled"); // the supervisor passed the Cancel on to the server
  const front = (await client.status()).front;
  assert.equal(front.inFlight, 0, JSON.stringify(front));
});

test("a signal aborted before the call sends nothing", async () => {
  const error = await rejection(
    client.callTool("mcp_test_slow", { seconds: 30, tag: "never" }, { signal: AbortSignal.abort() }),
  );
  assert.ok(error instanceof CancelledError, String(error));
});

test("status gives every server's state and the events endpoint", async () => {
  const { servers, events, front } = await client.status();
  const row = servers.find((s) => s.server === "test");
  assert.equal(row.state, "ready");
  assert.ok(Number.isInteger(row.workerPid));
  assert.equal(row.transport, "stdio");
  assert.equal(row.scope, "shared");
  assert.deepEqual(row.workers, []);
  assert.match(events, /^ipc:\/\/.*-events\.sock$/);
  assert.ok(front && Number.isInteger(front.malformed));
  await client.ping();
});
