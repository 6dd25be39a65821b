// The events socket (docs/protocol.md, "Events"): a SUB socket whose events come out of an async
// iterator. Made by SupervisorClient.watchEvents (client.js); below it codec.js and zeromq.

import { Subscriber } from "zeromq";

import { MAX_MESSAGE_SIZE, decodeMessage, event } from "./codec.js";
import { RequestTimeoutError, SupervisorError } from "./errors.js";

/** Events queued for a reader that does not keep up; past it the oldest are dropped (`lost`). */
export const QUEUE_LIMIT = 10000;

/** The topics of registry and state changes, and of the version beacon: a subscription's default. */
export const CHANGES = Object.freeze(["registry", "state", "version"]);
/**
 * The topics of the servers' log messages and of resource updates, which a subscriber must ask for
 * (a busy server's log would cost every other subscriber).
 */
export const MESSAGES = Object.freeze(["log", "resource"]);

/**
 * A subscription. Iterate it (`for await`), or call next(); close() (or leaving a `for await`)
 * ends it. `lost` counts events dropped because the reader fell behind.
 */
export class EventStream {
  /**
   * @param {Promise<string>} endpoint where the events socket is, once known
   * @param {{ topics?: readonly string[], curve?: object, signal?: AbortSignal }} options
   */
  constructor(endpoint, { topics = CHANGES, curve, signal } = {}) {
    /** @type {any[]} */
    this._queue = [];
    /** @type {((result: IteratorResult<any>) => void) | null} */
    this._waiter = null;
    /** @type {((error: unknown) => void) | null} */
    this._waiterFail = null;
    this._closed = false;
    /** @type {unknown} */
    this._error = null;
    this.lost = 0;
    /** @type {Subscriber | null} */
    this._sub = null;
    /** @type {() => void} */
    let joined = () => {};
    /** @type {Promise<void>} */
    this._joined = new Promise((resolve) => {
      joined = resolve;
    });
    this._markJoined = joined;
    this._onAbort = () => this.close();
    if (signal) {
      if (signal.aborted) this._closed = true;
      else signal.addEventListener("abort", this._onAbort, { once: true });
    }
    this._signal = signal;
    this._started = endpoint.then(
      (where) => this._start(where, topics, curve),
      (error) => this._fail(error),
    );
  }

  /**
   * @param {string} where
   * @param {readonly string[]} topics
   * @param {object | undefined} curve
   */
  _start(where, topics, curve) {
    if (this._closed) return;
    const sub = new Subscriber({ linger: 0, receiveHighWaterMark: 0, maxMessageSize: MAX_MESSAGE_SIZE, ...curve });
    try {
      sub.connect(where);
    } catch (error) {
      sub.close();
      this._fail(new SupervisorError("UNREACHABLE", `cannot connect to the events socket ${where}: ${/** @type {Error} */ (error).message}`));
      return;
    }
    for (const topic of topics) sub.subscribe(topic);
    this._sub = sub;
    void this._loop(sub);
  }

  /** @param {Subscriber} sub */
  async _loop(sub) {
    while (!this._closed) {
      let frames;
      try {
        frames = await sub.receive();
      } catch (error) {
        if (!this._closed) this._fail(error);
        return;
      }
      this._markJoined();
      if (frames.length !== 2) continue;
      const message = decodeMessage(frames[1]);
      const item = message && event(frames[0].toString("utf8"), message);
      if (!item) continue; // an event of a kind this client does not know
      if (this._waiter) {
        const waiter = this._waiter;
        this._waiter = this._waiterFail = null;
        waiter({ value: item, done: false });
      } else {
        if (this._queue.length >= QUEUE_LIMIT) {
          this._queue.shift();
          this.lost += 1;
        }
        this._queue.push(item);
      }
    }
  }

  /** @param {unknown} error */
  _fail(error) {
    this._error = error;
    if (this._waiterFail) {
      const fail = this._waiterFail;
      this._waiter = this._waiterFail = null;
      fail(error);
    }
    this.close();
  }

  /**
   * Resolves once the subscription has taken effect (its first event came: the version beacon
   * comes every second); rejects after `seconds` without one.
   * @param {number} [seconds]
   * @returns {Promise<void>}
   */
  async joined(seconds = 5) {
    /** @type {NodeJS.Timeout | undefined} */
    let timer;
    const expired = new Promise((_, reject) => {
      timer = setTimeout(
        () => reject(new RequestTimeoutError("TIMEOUT", `no event within ${seconds} s of subscribing`)),
        seconds * 1000,
      );
    });
    try {
      await Promise.race([this._started, expired]);
      if (this._error) throw this._error;
      await Promise.race([this._joined, expired]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** @returns {Promise<IteratorResult<any>>} */
  async next() {
    await this._started;
    if (this._queue.length) return { value: this._queue.shift(), done: false };
    if (this._error) throw this._error;
    if (this._closed) return { value: undefined, done: true };
    return new Promise((resolve, reject) => {
      this._waiter = resolve;
      this._waiterFail = reject;
    });
  }

  /** @returns {Promise<IteratorResult<any>>} */
  async return() {
    this.close();
    return { value: undefined, done: true };
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  /** Stop listening; a pending next() ends the iteration. Safe to call again. */
  close() {
    if (this._closed && this._sub === null) {
      this._finishWaiter();
      return;
    }
    this._closed = true;
    this._signal?.removeEventListener("abort", this._onAbort);
    this._sub?.close();
    this._sub = null;
    this._finishWaiter();
  }

  _finishWaiter() {
    if (this._waiter) {
      const waiter = this._waiter;
      this._waiter = this._waiterFail = null;
      waiter({ value: undefined, done: true });
    }
  }
}
