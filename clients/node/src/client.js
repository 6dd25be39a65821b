// SupervisorClient: requests on one DEALER connection to the supervisor's front socket, replies
// matched by id (docs/protocol.md, "The conversation"); in long waits, a supervisor that falls
// silent is pinged (liveness.js). Exported by index.js; below it codec.js (bytes and payloads),
// endpoint.js (where), events.js (the events socket), liveness.js, errors.js, zeromq.

import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";

import { Dealer } from "zeromq";

import {
  MAX_ARGUMENT_DEPTH,
  MAX_MESSAGE_SIZE,
  completion,
  decodeMessage,
  encodeRequest,
  isMap,
  progress,
  status,
  toolInfo,
  toolResult,
  tooDeep,
} from "./codec.js";
import { defaultEndpoint, eventsEndpoint, loadKeys, missingSocket } from "./endpoint.js";
import {
  CancelledError,
  ClientClosedError,
  InvalidArgumentsError,
  ProtocolError,
  RequestTimeoutError,
  ToolError,
  UnreachableError,
  errorFromReply,
} from "./errors.js";
import { CHANGES, EventStream, MESSAGES } from "./events.js";
import { LIVENESS_WAIT, Liveness, watched } from "./liveness.js";

/** Seconds added to a call's budget for its reply to come back. */
export const REPLY_MARGIN = 2;
/** Seconds a call sent without a budget waits (plus the margin): the server's own is not known. */
export const UNBUDGETED_WAIT = 3600;
/** Seconds the requests the supervisor answers itself wait, by default. */
export const REQUEST_TIMEOUT = 10;

const MAX_ID = 2 ** 53 - 1;
const MAX_TIMER = 2 ** 31 - 1; // milliseconds: setTimeout's largest delay
const MAX_LIST_WAIT = 300; // seconds a ListTools may wait for the servers' first starts (the supervisor cuts it)

/** The log levels of SetLogLevel (MCP's), least severe first. */
export const LOG_LEVELS = Object.freeze(["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]);

/** Seconds on a monotonic clock. */
function clock() {
  return performance.now() / 1000;
}

/**
 * @param {unknown} value
 * @param {string} what
 */
function positiveSeconds(value, what) {
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw new RangeError(`${what} must be a positive finite number of seconds, got ${String(value)}`);
  }
  return value;
}

/** What `value` is, for an error's message. @param {unknown} value */
function kindOf(value) {
  return value === null ? "null" : Array.isArray(value) ? "an array" : typeof value;
}

/**
 * @param {unknown} value
 * @param {string} what
 * @returns {string}
 */
function text(value, what) {
  if (typeof value !== "string") throw new TypeError(`${what} must be a string, got ${kindOf(value)}`);
  return value;
}

/**
 * A server's name, or null/undefined for none.
 * @param {unknown} value
 * @param {string} what
 * @returns {string | undefined}
 */
function optionalServer(value, what) {
  return value === undefined || value === null ? undefined : text(value, what);
}

/**
 * A map of strings (a prompt's argument values), named `what` in the error.
 * @param {unknown} value
 * @param {string} what
 * @returns {Record<string, string>}
 */
function stringMap(value, what) {
  if (!isMap(value)) throw new TypeError(`${what} must be an object of strings, got ${kindOf(value)}`);
  for (const [key, item] of Object.entries(/** @type {object} */ (value))) {
    if (typeof item !== "string") throw new TypeError(`${what}: ${key} must be a string, got ${kindOf(item)}`);
  }
  return /** @type {Record<string, string>} */ (value);
}

/**
 * A client of one supervisor. Every method sends one request and resolves with its reply, or
 * rejects with a SupervisorError whose `code` says why. Close it when done.
 */
export class SupervisorClient {
  /**
   * @param {{ endpoint?: string, identity?: string, requestTimeout?: number, replyMargin?: number,
   *   curve?: { serverKey: string, publicKey: string, secretKey: string }, keys?: string }} [options]
   */
  constructor(options = {}) {
    this.endpoint = defaultEndpoint(options.endpoint);
    const identity = options.identity ?? `${process.pid}-${randomBytes(4).toString("hex")}`;
    if (typeof identity !== "string" || identity.length < 1 || identity.length > 128) {
      throw new RangeError(`identity must be a string of 1 to 128 characters, got ${JSON.stringify(identity)}`);
    }
    this.identity = identity;
    this.requestTimeout = positiveSeconds(options.requestTimeout ?? REQUEST_TIMEOUT, "requestTimeout");
    this.replyMargin = options.replyMargin ?? REPLY_MARGIN;
    const curve = options.curve ?? (options.keys ? loadKeys(options.keys) : null);
    /** @type {Record<string, string>} */
    this._curve = curve
      ? { curveServerKey: curve.serverKey, curvePublicKey: curve.publicKey, curveSecretKey: curve.secretKey }
      : {};
    /** @type {Map<number, any>} */
    this._pending = new Map();
    this._nextId = 1;
    /** @type {Dealer | null} */
    this._sock = null;
    /** @type {Promise<void>} */
    this._sending = Promise.resolve();
    this._closed = false;
    /** @type {Set<EventStream>} */
    this._streams = new Set();
    this._liveness = new Liveness(this.endpoint);
    /** @type {Map<number, any>} the requests in flight whose waits are watched, oldest first */
    this._watched = new Map();
    /** @type {NodeJS.Timeout | null} */
    this._livenessTimer = null;
  }

  /**
   * Every tool in the registry; with `wait` (seconds), once every server's first start is over (a
   * supervisor just started answers with every ready server's tools), or after `wait` at most.
   * @param {{ wait?: number }} [options]
   */
  async listTools(options = {}) {
    return (await this.listToolsVersioned(options)).tools;
  }

  /**
   * Every tool in the registry, the registry's version they are at, and the servers still starting
   * for the first time; `wait` as for `listTools`.
   * @param {{ wait?: number }} [options]
   */
  async listToolsVersioned(options = {}) {
    const wait = options.wait ?? 0;
    if (typeof wait !== "number" || !Number.isFinite(wait) || wait < 0) {
      throw new TypeError(`wait must be a number of seconds, 0 or more, got ${String(wait)}`);
    }
    const fields = wait > 0 ? { type: "ListTools", wait } : { type: "ListTools" };
    const waiting = wait > 0 ? { wait: Math.min(wait, MAX_LIST_WAIT) + this.requestTimeout } : {};
    return this._request(fields, "ToolList", (m) => ({
      tools: Array.isArray(m.tools) ? m.tools.filter(isMap).map(toolInfo) : [],
      version: m.version ?? 0,
      starting: Array.isArray(m.starting) ? m.starting.filter((name) => typeof name === "string") : [],
    }), waiting);
  }

  /**
   * Call a tool by its registry name; resolves with its ToolResult. A result with isError rejects
   * with a ToolError (holding the result), unless `throwOnToolError` is false.
   * @param {string} name
   * @param {Record<string, unknown>} [args]
   * @param {{ timeout?: number, onProgress?: (p: any) => void, signal?: AbortSignal,
   *   answers?: Record<string, (params: any) => unknown>, throwOnToolError?: boolean }} [options]
   */
  async callTool(name, args = {}, options = {}) {
    if (typeof name !== "string") throw new TypeError(`the tool's name must be a string, got ${typeof name}`);
    if (!isMap(args)) {
      throw new TypeError(`${name}: the arguments must be an object of JSON values, got ${Array.isArray(args) ? "an array" : String(args)}`);
    }
    if (tooDeep(args, MAX_ARGUMENT_DEPTH)) {
      throw new InvalidArgumentsError(
        "INVALID_ARGUMENTS",
        `${name}: the arguments are nested deeper than ${MAX_ARGUMENT_DEPTH} levels (or hold a cycle); not sent`,
      );
    }
    const { timeout, onProgress, signal, answers = {}, throwOnToolError = true } = options;
    if (timeout !== undefined) positiveSeconds(timeout, `${name}: timeout`);
    const message = {
      type: "CallTool",
      name,
      arguments: args,
      timeout,
      progress: onProgress ? true : undefined,
      client: this.identity,
      answers: Object.keys(answers).length ? Object.keys(answers) : undefined,
    };
    const wait = (timeout ?? UNBUDGETED_WAIT) + this.replyMargin;
    const result = await this._request(message, "CallResult", (m) => toolResult(isMap(m.result) ? m.result : {}), {
      wait,
      cancellable: true,
      signal,
      onProgress,
      answers,
      what: name,
    });
    if (result.isError && throwOnToolError) {
      throw new ToolError(`${name}: ${result.text || "the tool reported an error"}`, result);
    }
    return result;
  }

  /** Every server's state, the events endpoint and the front socket's figures. */
  async status() {
    return this._request({ type: "GetStatus" }, "StatusReply", status);
  }

  /** Resolves once the supervisor has answered. */
  async ping() {
    await this._request({ type: "Ping" }, "Done", () => undefined);
  }

  /** @param {string} server */
  async restart(server) {
    await this._request({ type: "Restart", server }, "Done", () => undefined);
  }

  /** @param {string} server */
  async stop(server) {
    await this._request({ type: "Stop", server }, "Done", () => undefined);
  }

  /** @param {string} server */
  async start(server) {
    await this._request({ type: "Start", server }, "Done", () => undefined);
  }

  /**
   * Completions for `argument` (its name and the value typed so far) of a prompt (`{type:
   * "ref/prompt", name}`: its registry name, or the server's own with `server`) or of a resource
   * template (`{type: "ref/resource", uri}`, with `server`); `context`: the other arguments' values.
   * @param {{ type: string, name?: string, uri?: string }} ref
   * @param {{ name: string, value: string }} argument
   * @param {{ context?: Record<string, string> | null, server?: string | null, timeout?: number,
   *   signal?: AbortSignal }} [options]
   */
  async complete(ref, argument, options = {}) {
    const kind = isMap(ref) ? ref.type : undefined;
    if (kind !== "ref/prompt" && kind !== "ref/resource") {
      const given = isMap(ref) ? JSON.stringify(kind ?? null) : kindOf(ref);
      throw new TypeError(`ref must be a ref/prompt (name) or a ref/resource (uri), not ${given}`);
    }
    const what = kind === "ref/prompt" ? text(ref.name, "a ref/prompt's name") : text(ref.uri, "a ref/resource's uri");
    if (!isMap(argument)) throw new TypeError(`${what}: the argument must be {name, value}, got ${kindOf(argument)}`);
    const name = text(argument.name, `${what}: the argument's name`);
    const value = text(argument.value, `${what}: the argument's value`);
    const { context, server, timeout, signal } = options;
    if (timeout !== undefined) positiveSeconds(timeout, `${what}: timeout`);
    const message = {
      type: "Complete",
      ref,
      argument: { name, value },
      context: context === undefined || context === null ? undefined : { arguments: stringMap(context, `${what}: context`) },
      server: optionalServer(server, `${what}: server`),
      timeout,
      client: this.identity,
    };
    return this._request(message, "CallResult", (m) => completion(isMap(m.result) ? m.result : {}), {
      wait: (timeout ?? UNBUDGETED_WAIT) + this.replyMargin,
      cancellable: true,
      signal,
      what: `complete ${what}`,
    });
  }

  /**
   * Ask `server` (every server by default) for its log messages from `level` up (one of
   * LOG_LEVELS; "" withdraws this connection's wish). A server is set to the most verbose level its
   * connections ask for; its messages come as ServerMessage events to `watchEvents({messages: true})`.
   * @param {string} level
   * @param {{ server?: string | null }} [options]
   */
  async setLogLevel(level, options = {}) {
    const fields = { type: "SetLogLevel", level: text(level, "level"), server: optionalServer(options.server, "server") };
    await this._request(fields, "Done", () => undefined);
  }

  /**
   * Hear when `server`'s resource `uri` changes: a ResourceUpdated event to `watchEvents({messages:
   * true})` (kept across the server's restarts, until `unsubscribe`).
   * @param {string} server
   * @param {string} uri
   */
  async subscribe(server, uri) {
    const fields = { type: "Subscribe", server: text(server, "server"), uri: text(uri, "uri") };
    await this._request(fields, "Done", () => undefined);
  }

  /**
   * Withdraw this connection's `subscribe` (a resource it had not subscribed to is no error).
   * @param {string} server
   * @param {string} uri
   */
  async unsubscribe(server, uri) {
    const fields = { type: "Unsubscribe", server: text(server, "server"), uri: text(uri, "uri") };
    await this._request(fields, "Done", () => undefined);
  }

  /**
   * Registry and state events, as an async iterator: `for await (const e of client.watchEvents())`;
   * with `messages`, the servers' log messages (ServerMessage, see `setLogLevel`) and the updates of
   * the resources subscribed to (ResourceUpdated, see `subscribe`) too. `topics` chooses them
   * instead ("registry", "state", "version", "log", "resource"; "" for every one); await `joined()`
   * on it before relying on seeing every change.
   * @param {{ topics?: string[], messages?: boolean, signal?: AbortSignal, endpoint?: string }} [options]
   */
  watchEvents(options = {}) {
    const chosen = options.topics ?? CHANGES;
    if (!Array.isArray(chosen) || !chosen.every((topic) => typeof topic === "string")) {
      throw new TypeError(`topics must be an array of strings, got ${String(chosen)}`);
    }
    const topics = options.messages ? [...new Set([...chosen, ...MESSAGES])] : [...chosen];
    const where = options.endpoint
      ? Promise.resolve(options.endpoint)
      : this.status().then((s) => {
          if (!s.events) throw new ProtocolError("PROTOCOL", "the supervisor gave no events endpoint");
          return eventsEndpoint(s.events, this.endpoint);
        });
    const stream = new EventStream(where, { topics, curve: this._curve, signal: options.signal });
    this._streams.add(stream);
    return stream;
  }

  /** Close the connection and every event stream; requests in flight reject with CLOSED. */
  close() {
    if (this._closed) return;
    this._closed = true;
    for (const [id, entry] of this._pending) {
      this._settle(id, entry);
      entry.reject(new ClientClosedError("CLOSED", `${entry.what}: the client was closed`, { id }));
    }
    this._sock?.close();
    this._sock = null;
    if (this._livenessTimer) clearTimeout(this._livenessTimer);
    this._livenessTimer = null;
    for (const stream of this._streams) stream.close();
  }

  /**
   * Send one request and wait (bounded) for its terminal reply.
   * @param {Record<string, unknown>} fields the request without its id
   * @param {string} terminal the reply type that answers it
   * @param {(message: Record<string, any>) => any} convert
   * @param {{ wait?: number, cancellable?: boolean, signal?: AbortSignal, onProgress?: (p: any) => void,
   *   answers?: Record<string, (params: any) => unknown>, what?: string, probe?: boolean }} [options]
   *   `probe`: the liveness Ping, sent on the connection as it is (no check of the socket file)
   */
  _request(fields, terminal, convert, options = {}) {
    const what = options.what ?? String(fields.type);
    if (this._closed) return Promise.reject(new ClientClosedError("CLOSED", `${what}: the client is closed`));
    const missing = options.probe ? null : missingSocket(this.endpoint);
    if (missing) return Promise.reject(new UnreachableError("UNREACHABLE", missing));
    const { signal } = options;
    if (signal?.aborted) {
      return Promise.reject(new CancelledError("CANCELLED", `${what}: cancelled before it was sent`, { cause: signal.reason }));
    }
    const id = this._takeId();
    let frame;
    try {
      frame = encodeRequest({ type: fields.type, id, ...fields }, what);
      this._connect();
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise((resolve, reject) => {
      const wait = options.wait ?? this.requestTimeout;
      const entry = { terminal, convert, resolve, reject, what, options, timer: null, onAbort: null };
      entry.timer = setTimeout(() => {
        this._giveUp(id, entry, new RequestTimeoutError("TIMEOUT", `${what}: no reply from the supervisor within ${wait} s`, { id }));
      }, Math.min(wait * 1000, MAX_TIMER));
      if (signal) {
        entry.onAbort = () =>
          this._giveUp(id, entry, new CancelledError("CANCELLED", `${what}: cancelled`, { id, cause: signal.reason }));
        signal.addEventListener("abort", entry.onAbort, { once: true });
      }
      this._pending.set(id, entry);
      if (!options.probe && watched(wait)) {
        // A long wait: a supervisor that falls silent is pinged (one killed leaves its socket file).
        entry.since = clock();
        this._watched.set(id, entry);
        this._checkLiveness();
      }
      this._send(frame).catch((error) => {
        if (this._pending.get(id) !== entry) return;
        this._settle(id, entry);
        reject(new UnreachableError("UNREACHABLE", `${what}: could not send to ${this.endpoint}: ${error.message}`, { id }));
      });
    });
  }

  _takeId() {
    for (;;) {
      const id = this._nextId;
      this._nextId = id >= MAX_ID ? 1 : id + 1;
      if (!this._pending.has(id)) return id;
    }
  }

  _connect() {
    if (this._sock) return;
    const sock = new Dealer({
      linger: 0,
      sendHighWaterMark: 0,
      receiveHighWaterMark: 0,
      maxMessageSize: MAX_MESSAGE_SIZE,
      ...this._curve,
    });
    try {
      sock.connect(this.endpoint);
    } catch (error) {
      sock.close();
      throw new UnreachableError("UNREACHABLE", `cannot connect to ${this.endpoint}: ${/** @type {Error} */ (error).message}`);
    }
    this._sock = sock;
    void this._receive(sock);
  }

  /** @param {Uint8Array} frame */
  _send(frame) {
    const sock = this._sock;
    const sent = this._sending.then(() => {
      if (sock === null || sock.closed) throw new Error("the socket is closed");
      return sock.send(frame);
    });
    this._sending = sent.catch(() => {});
    return sent;
  }

  /** A request that needs no reply (Cancel, Answer); a failure to send is of no consequence. */
  _post(fields) {
    if (this._closed || !this._sock) return;
    try {
      this._send(encodeRequest(fields, String(fields.type))).catch(() => {});
    } catch {
      // an Answer too large or not encodable: the call's budget ends it
    }
  }

  /** @param {number} id @param {any} entry */
  _settle(id, entry) {
    this._pending.delete(id);
    this._watched.delete(id);
    clearTimeout(entry.timer);
    if (entry.onAbort) entry.options.signal?.removeEventListener("abort", entry.onAbort);
  }

  /** Stop waiting for `id`: tell the supervisor (a late reply is dropped), and reject. */
  _giveUp(id, entry, error) {
    if (this._pending.get(id) !== entry) return;
    this._settle(id, entry);
    if (entry.options.cancellable) this._post({ type: "Cancel", id });
    entry.reject(error);
  }

  /**
   * The liveness probe's next step for the watched waits: look again later, send a Ping, or end
   * them UNREACHABLE when the supervisor did not answer the last one.
   */
  _checkLiveness() {
    if (this._livenessTimer) clearTimeout(this._livenessTimer);
    this._livenessTimer = null;
    if (this._closed) return;
    const now = clock();
    const oldest = this._watched.values().next();
    const step = this._liveness.next(now, oldest.done ? null : oldest.value.since);
    if (step === null) return;
    if ("gone" in step) {
      for (const [id, entry] of [...this._watched]) {
        this._giveUp(id, entry, new UnreachableError("UNREACHABLE", `${entry.what}: ${step.gone}`, { id }));
      }
      return;
    }
    if (step.ping) {
      // Its reply (any reply) is a word from the supervisor; its own outcome does not matter.
      this._request({ type: "Ping" }, "Done", () => undefined, { wait: LIVENESS_WAIT, probe: true }).catch(() => {});
    }
    this._livenessTimer = setTimeout(() => this._checkLiveness(), Math.max(0, (step.at - now) * 1000));
    this._livenessTimer.unref();
  }

  /** Read replies for as long as the connection is open. @param {Dealer} sock */
  async _receive(sock) {
    while (!sock.closed) {
      let frames;
      try {
        frames = await sock.receive();
      } catch {
        return; // closed
      }
      this._liveness.heard(clock());
      if (frames.length === 1) this._dispatch(frames[0]);
    }
  }

  /** @param {Uint8Array} frame */
  _dispatch(frame) {
    const message = decodeMessage(frame);
    if (message === null || !Number.isInteger(message.id)) return; // not a reply of ours
    const id = message.id;
    const entry = this._pending.get(id);
    if (entry === undefined) return; // a late reply to a request given up on
    const { type } = message;
    if (type === "CallProgress" && entry.terminal === "CallResult") {
      this._progress(id, entry, message);
    } else if (type === "ServerRequest" && entry.terminal === "CallResult") {
      this._answer(id, entry, message);
    } else if (type === "ErrorReply") {
      this._settle(id, entry);
      const { code, message: text } = message;
      entry.reject(
        typeof code === "string" && typeof text === "string"
          ? errorFromReply(code, text, id)
          : new ProtocolError("PROTOCOL", `${entry.what}: an ErrorReply without a code and message`, { id }),
      );
    } else if (type === entry.terminal) {
      this._settle(id, entry);
      let value;
      try {
        value = entry.convert(message);
      } catch (error) {
        entry.reject(new ProtocolError("PROTOCOL", `${entry.what}: a ${type} that does not decode`, { id, cause: error }));
        return;
      }
      entry.resolve(value);
    } else {
      this._settle(id, entry);
      if (entry.options.cancellable) this._post({ type: "Cancel", id });
      entry.reject(new ProtocolError("PROTOCOL", `${entry.what}: an unexpected ${type} reply`, { id }));
    }
  }

  _progress(id, entry, message) {
    if (typeof message.progress !== "number") return;
    try {
      entry.options.onProgress?.(progress(message));
    } catch (error) {
      this._giveUp(id, entry, error);
    }
  }

  _answer(id, entry, message) {
    const { ask, method, params } = message;
    if (!Number.isInteger(ask)) return;
    const handler = typeof method === "string" && Object.hasOwn(entry.options.answers ?? {}, method) ? entry.options.answers[method] : null;
    if (!handler) {
      this._post({ type: "Answer", id, ask, error: `this client does not answer ${String(method)}` });
      return;
    }
    Promise.resolve()
      .then(() => handler(params))
      .then(
        (result) => this._pending.get(id) === entry && this._post({ type: "Answer", id, ask, result }),
        (error) =>
          this._pending.get(id) === entry &&
          this._post({ type: "Answer", id, ask, error: String(error?.message ?? error) || "the caller's handler failed" }),
      );
  }
}

