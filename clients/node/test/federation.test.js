// FederatedClient over two real supervisors (tests/e2e/test_node_client.py starts the second, with a
// server of its own, "other", and one named "test" too, which the first has): the merged listing,
// the clash on "test" named, calls routed to each server's owner, status rows per member, a
// restart on the owner. Each server's env tool says TAG: "first" or "second", its supervisor.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { FederatedClient, SupervisorClient, UnknownToolError, UnreachableError } from "../src/index.js";
import { ENDPOINT, within } from "./helpers.js";

const SECOND = process.env.MCP_SUPERVISOR_ENDPOINT_2;
const skip = SECOND ? false : "no second supervisor (MCP_SUPERVISOR_ENDPOINT_2)";

/** @type {FederatedClient} */
let fed;
before(() => {
  if (SECOND) fed = new FederatedClient([{ endpoint: ENDPOINT, name: "first" }, { endpoint: SECOND, name: "second" }]);
});
after(() => fed?.close());

test("the merged listing: the first's tools, the second's own, the clash on test named", { skip }, async () => {
  const { tools, owners, clashes, failures } = await within(30, "the merged listing", fed.listTools({ wait: 20 }));
  assert.deepEqual(failures, []);
  const single = new SupervisorClient({ endpoint: ENDPOINT });
  try {
    const firsts = (await single.listTools()).map((tool) => tool.name);
    const names = tools.map((tool) => tool.name);
    for (const name of firsts) assert.ok(names.includes(name), `${name} is missing from the merged listing`);
    assert.ok(names.includes("mcp_other_echo"), "the second supervisor's own server is listed");
    assert.equal(names.length, new Set(names).size, "each tool once");
  } finally {
    single.close();
  }
  assert.equal(owners.test.name, "first");
  assert.equal(owners.other.name, "second");
  assert.deepEqual(
    clashes.map((clash) => [clash.server, clash.owner.name, clash.leftOut.name]),
    [["test", "first", "second"]],
  );
});

test("calls go to each tool's owner", { skip }, async () => {
  const echoed = await within(20, "mcp_other_echo", fed.callTool("mcp_other_echo", { text: "over there" }));
  assert.equal(echoed.text, "over there");
  assert.equal((await within(20, "mcp_other_env", fed.callTool("mcp_other_env", { name: "TAG" }))).text, "second");
  assert.equal((await within(20, "mcp_test_echo", fed.callTool("mcp_test_echo", { text: "here" }))).text, "here");
  assert.equal((await within(20, "mcp_test_env", fed.callTool("mcp_test_env", { name: "TAG" }))).text, "first");
});

test("a tool no member has: UnknownToolError naming the servers", { skip }, async () => {
  const error = await within(20, "the rejection", fed.callTool("mcp_nowhere_echo", { text: "x" }).catch((e) => e));
  assert.ok(error instanceof UnknownToolError, String(error));
  assert.equal(error.code, "UNKNOWN_TOOL");
  assert.match(error.message, /mcp_nowhere_echo/);
  assert.match(error.message, /other/);
});

test("status rows per member, the clash named; a restart goes to the owner", { skip }, async () => {
  const { rows, clashes, failures } = await within(20, "the status", fed.status());
  assert.deepEqual(failures, []);
  const on = (/** @type {string} */ name) => rows.filter((row) => row.member.name === name).map((row) => row.status.server).sort();
  assert.ok(on("first").includes("test"));
  assert.ok(!on("first").includes("other"));
  assert.deepEqual(on("second"), ["other", "test"]);
  assert.deepEqual(clashes.map((clash) => [clash.server, clash.owner.name, clash.leftOut.name]), [["test", "first", "second"]]);
  const owner = await within(20, "the restart", fed.restart("other"));
  assert.equal(owner.name, "second");
});

test("a member that does not answer is a failure naming it; the others' answers stand", { skip }, async () => {
  const gone = `ipc:///tmp/mcp-supervisor-node-absent-${process.pid}.sock`;
  const partial = new FederatedClient([SECOND ?? "", { endpoint: gone, name: "absent" }], { requestTimeout: 2 });
  try {
    const { tools, failures } = await within(20, "the listing", partial.listTools());
    assert.ok(tools.some((tool) => tool.name === "mcp_other_echo"));
    assert.deepEqual(failures.map((failure) => [failure.member.name, failure.error.code]), [["absent", "UNREACHABLE"]]);
    const error = await within(20, "the rejection", partial.callTool("mcp_nowhere_echo").catch((e) => e));
    assert.ok(error instanceof UnreachableError, String(error));
    assert.match(error.message, /absent/);
  } finally {
    partial.close();
  }
});
