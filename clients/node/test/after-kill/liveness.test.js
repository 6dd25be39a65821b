// A supervisor killed with kill -9 leaves its ipc socket file, and ZeroMQ would queue requests for
// ever: long waits (calls without a timeout) end UNREACHABLE within seconds, because the client pings
// a supervisor that falls silent. Run by tests/e2e/test_node_client.py with a supervisor of its own
// (SUPERVISOR_PID), which this test kills.

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { after, test } from "node:test";

import { LIVENESS_AFTER, LIVENESS_WAIT, RequestTimeoutError, SupervisorClient, UnreachableError } from "../../src/index.js";
import { ENDPOINT, marker, rejection, within } from "../helpers.js";

const PID = Number(process.env.SUPERVISOR_PID);
if (!Number.isInteger(PID) || PID <= 0) throw new Error("SUPERVISOR_PID: the supervisor this test kills");
const SILENCE = LIVENESS_AFTER + LIVENESS_WAIT; // the longest a long wait goes without a word
const SLACK = 4; // seconds: the look after each step, a loaded machine

const client = new SupervisorClient({ requestTimeout: 5 });
after(() => client.close());

/** Whether `pid` is gone (or a zombie its parent has not reaped yet). */
function dead(pid) {
  const path = `/proc/${pid}/stat`;
  if (!existsSync(path)) return true;
  try {
    return readFileSync(path, "utf8").split(")").at(-1).trim().split(" ")[0] === "Z";
  } catch {
    return true;
  }
}

async function killed(pid, seconds = 10) {
  process.kill(pid, "SIGKILL");
  const deadline = Date.now() + seconds * 1000;
  while (!dead(pid)) {
    if (Date.now() > deadline) throw new Error(`${pid} still alive ${seconds} s after SIGKILL`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

test("a long call to a live supervisor outlasts the silence: the pings are answered", async () => {
  const started = Date.now();
  const result = await within(
    SILENCE + 15,
    "a silent call of 11 s",
    client.callTool("mcp_test_slow", { seconds: SILENCE + 1, tag: "long" }),
  );
  assert.equal(result.text, "done long");
  assert.ok((Date.now() - started) / 1000 >= SILENCE + 1);
});

test("after kill -9 of the supervisor, waits without a timeout end UNREACHABLE within seconds", async () => {
  const bound = SILENCE + SLACK + 15; // seconds any of these may take, from now
  const inflight = rejection(client.callTool("mcp_test_slow", { seconds: 3000, tag: "stale" }), bound);
  await marker("stale", "started", 20);
  const short = rejection(client.callTool("mcp_test_echo", { text: "short" }, { timeout: 1 }), bound); // in flight too
  await killed(PID);
  const killedAt = Date.now();
  assert.ok(existsSync(ENDPOINT.slice("ipc://".length)), "the socket file should outlive the supervisor");
  const other = new SupervisorClient();
  try {
    const waits = {
      "the call in flight": inflight,
      "a new call on the same connection": rejection(client.callTool("mcp_test_echo", { text: "x" }), bound),
      "a new call on a new connection": rejection(other.callTool("mcp_test_echo", { text: "x" }), bound),
      "a listing that waits": rejection(other.listTools({ wait: 60 }), bound),
    };
    const outcomes = await Promise.all(
      Object.entries(waits).map(async ([what, rejected]) => {
        const error = await rejected;
        return { what, error, after: (Date.now() - killedAt) / 1000 };
      }),
    );
    for (const { what, error, after: seconds } of outcomes) {
      assert.ok(error instanceof UnreachableError, `${what}: ${error}`);
      assert.equal(error.code, "UNREACHABLE");
      assert.match(error.message, /the supervisor at ipc:\/\/.* stopped answering \(not a word for 10 s\)/);
      assert.ok(seconds <= SILENCE + SLACK, `${what}: UNREACHABLE only after ${seconds} s`);
    }
    // A short wait is bounded by itself: no ping, its own timeout.
    const timedOut = await short;
    assert.ok(timedOut instanceof RequestTimeoutError, String(timedOut));
    assert.match(timedOut.message, /no reply from the supervisor within 3 s/);
  } finally {
    other.close();
  }
});
