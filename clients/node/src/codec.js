// Messages to and from bytes (docs/protocol.md, "Encoding"), and the payloads of replies and
// events as this client hands them out: camelCase names, every missing field at its default,
// unknown keys left out. Used by client.js and events.js; below it @msgpack/msgpack.

import { Decoder, Encoder } from "@msgpack/msgpack";

import { MessageTooLargeError } from "./errors.js";

/** The largest frame either side takes (ZMQ_MAXMSGSIZE): 64 MiB. */
export const MAX_MESSAGE_SIZE = 67108864;

// Deep enough that a too-deep argument reaches the supervisor, which names the problem
// (INVALID_ARGUMENTS past 64 levels, BAD_REQUEST past about a thousand).
const encoder = new Encoder({ ignoreUndefined: true, maxDepth: 2000 });
const decoder = new Decoder();

/**
 * One request as one frame; refused (never sent) when it is over the frame limit.
 * @param {Record<string, unknown>} message
 * @param {string} what the request, for the error's message
 * @returns {Uint8Array}
 */
export function encodeRequest(message, what) {
  let bytes;
  try {
    bytes = encoder.encode(message);
  } catch (error) {
    throw new TypeError(`${what}: cannot be encoded as msgpack: ${/** @type {Error} */ (error).message}`);
  }
  if (bytes.byteLength > MAX_MESSAGE_SIZE) {
    throw new MessageTooLargeError(
      "MESSAGE_TOO_LARGE",
      `${what}: the request is ${bytes.byteLength} bytes, over the supervisor's limit of ${MAX_MESSAGE_SIZE} bytes (64 MiB); not sent`,
    );
  }
  return bytes;
}

/** The deepest nesting of a call's arguments (the map itself is one level). */
export const MAX_ARGUMENT_DEPTH = 64;

/**
 * Whether `value` is nested deeper than `limit` levels (maps and arrays; a cycle is too deep).
 * @param {unknown} value
 * @param {number} limit
 */
export function tooDeep(value, limit) {
  /** @type {[unknown, number][]} */
  const stack = [[value, 1]];
  while (stack.length) {
    const [item, depth] = /** @type {[unknown, number]} */ (stack.pop());
    if (typeof item !== "object" || item === null || item instanceof Uint8Array) continue;
    if (depth > limit) return true;
    for (const child of Array.isArray(item) ? item : Object.values(item)) stack.push([child, depth + 1]);
  }
  return false;
}

/** @param {unknown} value */
export function isMap(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
}

/**
 * A frame as a message: a map with a string `type`, or null when it is not one.
 * @param {Uint8Array} frame
 * @returns {Record<string, any> | null}
 */
export function decodeMessage(frame) {
  let value;
  try {
    value = decoder.decode(frame);
  } catch {
    return null;
  }
  return isMap(value) && typeof value.type === "string" ? /** @type {Record<string, any>} */ (value) : null;
}

/**
 * @template T
 * @param {unknown} value
 * @param {T} fallback
 * @returns {T}
 */
function or(value, fallback) {
  return value === undefined ? fallback : /** @type {T} */ (value);
}

/** @param {unknown} list @param {(item: any) => any} each */
function listOf(list, each) {
  return Array.isArray(list) ? list.filter(isMap).map(each) : [];
}

/** @param {Record<string, any>} t */
export function toolInfo(t) {
  return {
    name: t.name,
    server: t.server,
    originalName: t.original_name,
    description: or(t.description, ""),
    inputSchema: or(t.input_schema, {}),
    title: or(t.title, null),
    outputSchema: or(t.output_schema, null),
    annotations: or(t.annotations, null),
  };
}

/** @param {Record<string, any>} r */
export function toolResult(r) {
  return {
    content: or(r.content, []),
    structuredContent: or(r.structured_content, null),
    isError: or(r.is_error, false),
    text: or(r.text, ""),
  };
}

/** @param {Record<string, any>} w */
function workerStatus(w) {
  return {
    name: w.name,
    state: w.state,
    workerPid: or(w.worker_pid, null),
    serverPid: or(w.server_pid, null),
    restarts: or(w.restarts, 0),
    lastError: or(w.last_error, null),
    nextRestartIn: or(w.next_restart_in, null),
    inFlight: or(w.in_flight, 0),
    client: or(w.client, null),
    idle: or(w.idle, null),
  };
}

/** @param {Record<string, any>} s */
function serverStatus(s) {
  return {
    server: s.server,
    state: s.state,
    workerPid: or(s.worker_pid, null),
    serverPid: or(s.server_pid, null),
    restarts: or(s.restarts, 0),
    tools: or(s.tools, 0),
    lastError: or(s.last_error, null),
    transport: or(s.transport, "stdio"),
    nextRestartIn: or(s.next_restart_in, null),
    tokenExpiresAt: or(s.token_expires_at, null),
    scope: or(s.scope, "shared"),
    workers: listOf(s.workers, workerStatus),
  };
}

/** @param {Record<string, any> | null | undefined} f */
function frontStats(f) {
  if (!isMap(f)) return null;
  const s = /** @type {Record<string, any>} */ (f);
  return {
    clients: or(s.clients, 0),
    inFlight: or(s.in_flight, 0),
    overloaded: or(s.overloaded, 0),
    malformed: or(s.malformed, 0),
    droppedReplies: or(s.dropped_replies, 0),
    droppedCalls: or(s.dropped_calls, 0),
  };
}

/** @param {Record<string, any>} m a StatusReply */
export function status(m) {
  return { servers: listOf(m.servers, serverStatus), events: or(m.events, ""), front: frontStats(m.front) };
}

/** @param {Record<string, any>} c a Completion */
export function completion(c) {
  return {
    values: Array.isArray(c.values) ? c.values.filter((value) => typeof value === "string") : [],
    total: or(c.total, null),
    hasMore: or(c.has_more, null),
  };
}

/** @param {Record<string, any>} m a CallProgress */
export function progress(m) {
  return { progress: m.progress, total: or(m.total, null), message: or(m.message, null) };
}

/**
 * An event as handed out, with its topic, or null for one this client does not know.
 * @param {string} topic
 * @param {Record<string, any>} e
 */
export function event(topic, e) {
  switch (e.type) {
    case "RegistryChanged":
      return {
        topic,
        type: e.type,
        version: e.version,
        server: e.server,
        added: listOf(e.added, toolInfo),
        removed: or(e.removed, []),
        changed: listOf(e.changed, toolInfo),
      };
    case "StateChanged":
      return {
        topic,
        type: e.type,
        server: e.server,
        state: e.state,
        previous: e.previous,
        restarts: or(e.restarts, 0),
        lastError: or(e.last_error, null),
      };
    case "RegistryVersion":
      return { topic, type: e.type, version: e.version };
    case "ServerMessage":
      // `data` is any JSON value, embedded in the event as msgpack: decoded with it
      return { topic, type: e.type, server: e.server, level: e.level, logger: or(e.logger, ""), data: or(e.data, null) };
    case "ResourceUpdated":
      return { topic, type: e.type, server: e.server, uri: e.uri };
    default:
      return null;
  }
}
