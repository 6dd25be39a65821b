// The liveness probe (src/liveness.js) on a fake clock; test/after-kill/ has it against a supervisor
// killed with kill -9 (tests/e2e/test_node_client.py runs that one with a supervisor of its own).

import assert from "node:assert/strict";
import { test } from "node:test";

import { LIVENESS_AFTER, LIVENESS_WAIT } from "../src/index.js";
import { Liveness, watched } from "../src/liveness.js";

test("only waits longer than a ping's whole round are watched", () => {
  assert.equal(watched(LIVENESS_AFTER + LIVENESS_WAIT), false);
  assert.equal(watched(10), false); // the default request timeout
  assert.equal(watched(7), false); // a call with timeout 5, plus the margin
  assert.equal(watched(3602), true); // a call without a timeout
  assert.equal(watched(LIVENESS_AFTER + LIVENESS_WAIT + 0.1), true);
});

test("no wait watched, nothing to do", () => {
  const probe = new Liveness("ipc://x");
  assert.equal(probe.next(0, null), null);
  assert.equal(probe.next(1e6, null), null);
});

test("silence brings a ping, whose answer keeps the wait going", () => {
  const probe = new Liveness("ipc://x");
  assert.deepEqual(probe.next(0, 0), { at: LIVENESS_AFTER }); // the wait starts
  assert.deepEqual(probe.next(LIVENESS_AFTER - 0.1, 0), { at: LIVENESS_AFTER });
  assert.deepEqual(probe.next(LIVENESS_AFTER, 0), { at: LIVENESS_AFTER + LIVENESS_WAIT, ping: true });
  assert.deepEqual(probe.next(LIVENESS_AFTER + 1, 0), { at: LIVENESS_AFTER + LIVENESS_WAIT }); // one ping at a time
  probe.heard(LIVENESS_AFTER + 1); // its answer (or any reply)
  assert.deepEqual(probe.next(LIVENESS_AFTER + 2, 0), { at: 2 * LIVENESS_AFTER + 1 }); // silence counts from it
  assert.equal(probe.next(2 * LIVENESS_AFTER + 1, 0).ping, true);
});

test("silence counts from the later of the wait's start and the last word", () => {
  const probe = new Liveness("ipc://x");
  probe.heard(0);
  assert.deepEqual(probe.next(100, 100), { at: 100 + LIVENESS_AFTER }); // a wait begun long after the last word
  assert.deepEqual(probe.next(101, 100), { at: 100 + LIVENESS_AFTER });
  probe.heard(103);
  assert.deepEqual(probe.next(104, 100), { at: 103 + LIVENESS_AFTER });
});

test("a ping unanswered is the supervisor gone, once; the next wait pings anew", () => {
  const probe = new Liveness("ipc://here");
  probe.next(0, 0);
  assert.equal(probe.next(LIVENESS_AFTER, 0).ping, true);
  assert.deepEqual(probe.next(LIVENESS_AFTER + LIVENESS_WAIT - 0.01, 0), { at: LIVENESS_AFTER + LIVENESS_WAIT });
  const step = probe.next(LIVENESS_AFTER + LIVENESS_WAIT, 0);
  assert.deepEqual(step, { gone: "the supervisor at ipc://here stopped answering (not a word for 10 s)" });
  // the waits ended; a new one starts its own count
  const later = LIVENESS_AFTER + LIVENESS_WAIT + 1;
  assert.deepEqual(probe.next(later, later), { at: later + LIVENESS_AFTER });
  assert.equal(probe.next(later + LIVENESS_AFTER, later).ping, true);
});

test("a word while the ping is out ends it; no wait left forgets it", () => {
  const probe = new Liveness("ipc://x");
  probe.next(0, 0);
  assert.equal(probe.next(LIVENESS_AFTER, 0).ping, true);
  probe.heard(LIVENESS_AFTER + 4.9);
  assert.deepEqual(probe.next(LIVENESS_AFTER + LIVENESS_WAIT, 0), { at: 2 * LIVENESS_AFTER + 4.9 });
  assert.equal(probe.next(2 * LIVENESS_AFTER + 4.9, 0).ping, true);
  assert.equal(probe.next(2 * LIVENESS_AFTER + 5, null), null); // the wait was answered
  assert.deepEqual(probe.next(100, 100), { at: 100 + LIVENESS_AFTER }); // no stale ping
});
