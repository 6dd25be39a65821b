// Log messages, completions and resource subscriptions, from a server nobody here wrote: the
// supervisor's "ev" is @modelcontextprotocol/server-everything on stdio. It logs at info when a
// client subscribes or unsubscribes, sends notifications/resources/updated for the subscribed URIs
// when its toggle-subscriber-updates tool is called, and completes the arguments of its
// completable-prompt (a department, then a name within it) and of its resource templates.

import assert from "node:assert/strict";
import { after, test } from "node:test";

import { BadRequestError, LOG_LEVELS, SupervisorClient, UnknownToolError } from "../src/index.js";
import { rejection, within } from "./helpers.js";

const URI = "demo://resource/dynamic/text/1";
const TEMPLATE = "demo://resource/dynamic/text/{resourceId}";
const SUBSCRIBED = "Received Subscribe Resource request for URI: ";
const UNSUBSCRIBED = "Received Unsubscribe Resource request: ";
const EVENT_WAIT = 20; // seconds for an event to arrive

const client = new SupervisorClient({ requestTimeout: 5 });
after(() => client.close());

/** The first event of `stream` that `wanted` accepts, and every one seen until then; bounded. */
async function until(stream, wanted, what, seconds = EVENT_WAIT) {
  const seen = [];
  try {
    await within(
      seconds,
      what,
      (async () => {
        for (;;) {
          const { value, done } = await stream.next();
          assert.ok(!done, `the stream ended while waiting for ${what}`);
          seen.push(value);
          if (wanted(value)) return;
        }
      })(),
    );
  } catch (error) {
    error.message += `; events seen: ${JSON.stringify(seen)}`;
    throw error;
  }
  return { event: seen.at(-1), seen };
}

const logged = (text) => (e) => e.type === "ServerMessage" && e.server === "ev" && String(e.data).includes(text);
const updated = (uri) => (e) => e.type === "ResourceUpdated" && e.server === "ev" && e.uri === uri;

test("a watch with messages hears the server's log messages and the updates of a resource subscribed to", async () => {
  const stream = client.watchEvents({ messages: true });
  try {
    await stream.joined();
    await client.setLogLevel("debug");
    await client.subscribe("ev", URI);
    const { event: message } = await until(stream, logged(SUBSCRIBED + URI), "the log message about the subscription");
    assert.equal(message.topic, "log");
    assert.equal(message.level, "info");
    assert.equal(typeof message.logger, "string");
    assert.equal(typeof message.data, "string"); // decoded from the event's msgpack
    await client.callTool("mcp_ev_toggle-subscriber-updates", {}, { timeout: 10 });
    const { event: update } = await until(stream, updated(URI), "the resource update");
    assert.deepEqual(update, { topic: "resource", type: "ResourceUpdated", server: "ev", uri: URI });
    await client.unsubscribe("ev", URI);
    await until(stream, logged(UNSUBSCRIBED + URI), "the log message about the unsubscription");
    await client.callTool("mcp_ev_toggle-subscriber-updates", {}, { timeout: 10 }); // the updates off again
    assert.equal(stream.lost, 0);
  } finally {
    stream.close();
  }
});

test("a plain watch hears no log messages nor updates; `topics` with `messages` adds them", async () => {
  const uri = "demo://resource/dynamic/text/2";
  const plain = client.watchEvents();
  const asking = client.watchEvents({ messages: true, topics: ["version"] });
  try {
    await Promise.all([plain.joined(), asking.joined()]);
    await client.setLogLevel("info", { server: "ev" });
    await client.subscribe("ev", uri);
    const { seen } = await until(asking, logged(SUBSCRIBED + uri), "the log message, on the watch that asked");
    assert.ok(seen.every((e) => ["version", "log", "resource"].includes(e.topic)), JSON.stringify(seen));
    // A restart's state events come after the message: the plain watch has them, and nothing of
    // the log or resource topics before or among them (the new server is subscribed again, and says so).
    await client.restart("ev");
    const ready = (e) => e.type === "StateChanged" && e.server === "ev" && e.state === "ready";
    const { seen: heard } = await until(plain, ready, "ev ready again, on the plain watch");
    assert.ok(heard.every((e) => ["registry", "state", "version"].includes(e.topic)), JSON.stringify(heard));
    await until(asking, logged(SUBSCRIBED + uri), "the subscription made again after the restart");
    await client.unsubscribe("ev", uri);
  } finally {
    plain.close();
    asking.close();
  }
});

test("complete gives the completions of a prompt's arguments and of a resource template's", async () => {
  const prompt = { type: "ref/prompt", name: "mcp_ev_completable-prompt" };
  const department = await within(
    10,
    "a completion",
    client.complete(prompt, { name: "department", value: "E" }, { timeout: 5 }),
  );
  assert.deepEqual(department.values, ["Engineering"]);
  assert.ok(department.total === null || Number.isInteger(department.total), JSON.stringify(department));
  assert.ok(department.hasMore === null || typeof department.hasMore === "boolean", JSON.stringify(department));
  assert.deepEqual(Object.keys(department).sort(), ["hasMore", "total", "values"]);
  const own = { type: "ref/prompt", name: "completable-prompt" };
  const context = { department: "Engineering" };
  const name = await client.complete(own, { name: "name", value: "A" }, { context, server: "ev" });
  assert.deepEqual(name.values, ["Alice"]);
  const template = { type: "ref/resource", uri: TEMPLATE };
  const id = await client.complete(template, { name: "resourceId", value: "7" }, { server: "ev", timeout: 5 });
  assert.deepEqual(id.values, ["7"]);
  const departmentE = { name: "department", value: "E" };
  const unprefixed = await rejection(client.complete({ type: "ref/prompt", name: "nobody" }, departmentE));
  assert.ok(unprefixed instanceof UnknownToolError, String(unprefixed));
  assert.match(unprefixed.message, /prefixed name \(mcp_/);
  const unknown = await rejection(client.complete({ type: "ref/prompt", name: "mcp_ev_nothing" }, departmentE));
  assert.ok(unknown instanceof UnknownToolError, String(unknown));
  assert.match(unknown.message, /no prompt named/);
});

test("bad completions, levels and subscriptions are refused naming what is wrong", async () => {
  const argument = { name: "department", value: "E" };
  const prompt = { type: "ref/prompt", name: "mcp_ev_completable-prompt" };
  for (const ref of [{ type: "ref/tool", name: "x" }, {}, null, "mcp_ev_completable-prompt", ["ref/prompt"]]) {
    await assert.rejects(client.complete(ref, argument), {
      name: "TypeError",
      message: /^ref must be a ref\/prompt \(name\) or a ref\/resource \(uri\), not /,
    });
  }
  const refused = [
    [{ type: "ref/prompt" }, argument, {}, /^a ref\/prompt's name must be a string, got undefined$/],
    [{ type: "ref/resource", name: "x" }, argument, {}, /^a ref\/resource's uri must be a string/],
    [prompt, ["department", "E"], {}, /: the argument must be \{name, value\}, got an array$/],
    [prompt, { name: "department" }, {}, /: the argument's value must be a string/],
    [prompt, argument, { context: { department: 1 } }, /: context: department must be a string, got number$/],
    [prompt, argument, { context: "department" }, /: context must be an object of strings/],
    [prompt, argument, { server: 5 }, /: server must be a string/],
  ];
  for (const [ref, arg, options, message] of refused) {
    await assert.rejects(client.complete(ref, arg, options), { name: "TypeError", message });
  }
  await assert.rejects(client.complete(prompt, argument, { timeout: 0 }), {
    name: "RangeError",
    message: /^mcp_ev_completable-prompt: timeout must be a positive/,
  });
  await assert.rejects(client.setLogLevel(5), { name: "TypeError", message: /level must be a string/ });
  await assert.rejects(client.subscribe("ev", null), { name: "TypeError", message: /uri must be a string/ });
  assert.throws(() => client.watchEvents({ topics: "log" }), { name: "TypeError", message: /topics/ });

  const loud = await rejection(client.setLogLevel("loud"));
  assert.ok(loud instanceof BadRequestError, String(loud));
  assert.match(loud.message, /log level must be one of debug/);
  for (const refused of [client.subscribe("nope", URI), client.setLogLevel("info", { server: "nope" })]) {
    const error = await rejection(refused);
    assert.ok(error instanceof UnknownToolError, String(error));
    assert.match(error.message, /no server named 'nope'/);
  }
  const empty = await rejection(client.subscribe("ev", ""));
  assert.ok(empty instanceof BadRequestError, String(empty));
  assert.match(empty.message, /resource URI must be 1 to/);
  await client.unsubscribe("ev", "demo://resource/dynamic/text/3"); // never subscribed: no error
  await client.setLogLevel(""); // this connection's wish withdrawn
  assert.deepEqual(LOG_LEVELS, ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]);
  const row = (await client.status()).servers.find((s) => s.server === "ev");
  assert.equal(row.state, "ready");
});
