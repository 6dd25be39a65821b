// Events from a real supervisor: restarts and a crash of its "spare" server (a second test server,
// so that the calls of the other test files are not disturbed).

import assert from "node:assert/strict";
import { after, test } from "node:test";

import { SupervisorClient, WorkerCrashedError } from "../src/index.js";
import { rejection, within } from "./helpers.js";

const client = new SupervisorClient({ requestTimeout: 5 });
after(() => client.close());

/** Events of `stream` until one satisfies `done`; every one seen, bounded. */
async function until(stream, done, what, seconds = 30) {
  const seen = [];
  await within(
    seconds,
    what,
    (async () => {
      for (;;) {
        const { value, done: ended } = await stream.next();
        assert.ok(!ended, `the stream ended while waiting for ${what}`);
        seen.push(value);
        if (done(value)) return;
      }
    })(),
  );
  return seen;
}

const readyAgain = (e) => e.type === "StateChanged" && e.server === "spare" && e.state === "ready";

test("a restart gives state events and registry events, in order", async () => {
  const stream = client.watchEvents();
  try {
    await stream.joined();
    await client.restart("spare");
    const seen = await until(stream, readyAgain, "spare to be ready again");
    const states = seen.filter((e) => e.type === "StateChanged" && e.server === "spare").map((e) => e.state);
    assert.deepEqual(states, ["restarting", "starting", "ready"]);
    const registry = seen.filter((e) => e.type === "RegistryChanged" && e.server === "spare");
    assert.ok(registry.some((e) => e.removed.includes("mcp_spare_echo")), JSON.stringify(registry));
    const added = registry.find((e) => e.added.length);
    assert.ok(added, "no RegistryChanged adding the tools back");
    assert.ok(added.added.some((t) => t.name === "mcp_spare_echo" && t.originalName === "echo"));
    const versions = registry.map((e) => e.version);
    assert.deepEqual(versions, [...versions].sort((a, b) => a - b));
    assert.equal(stream.lost, 0);
  } finally {
    stream.close();
  }
  assert.deepEqual(await stream.next(), { value: undefined, done: true });
});

test("a crash fails its call with WORKER_CRASHED and the server comes back", async () => {
  const stream = client.watchEvents({ topics: ["state", "version"] });
  try {
    await stream.joined();
    const error = await rejection(client.callTool("mcp_spare_crash", { code: 7 }, { timeout: 10 }));
    assert.ok(error instanceof WorkerCrashedError, String(error));
    assert.equal(error.code, "WORKER_CRASHED");
    const seen = await until(stream, readyAgain, "spare to come back after its crash");
    assert.ok(seen.every((e) => e.topic === "state" || e.topic === "version"), JSON.stringify(seen));
    assert.ok(seen.some((e) => e.state === "restarting" && e.restarts >= 1), JSON.stringify(seen));
  } finally {
    stream.close();
  }
});

test("leaving a for-await loop closes the stream; an AbortSignal ends one too", async () => {
  for await (const event of client.watchEvents({ topics: ["version"] })) {
    assert.equal(event.type, "RegistryVersion");
    assert.ok(Number.isInteger(event.version));
    break;
  }
  const controller = new AbortController();
  const stream = client.watchEvents({ signal: controller.signal });
  await stream.joined();
  controller.abort();
  const drained = (async () => {
    while (!(await stream.next()).done);
  })();
  await within(5, "the aborted stream to end", drained);
});
