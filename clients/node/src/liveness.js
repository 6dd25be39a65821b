// The liveness probe of a connection (docs/protocol.md, "Budgets, deadlines and how long to wait"):
// in a long wait, a supervisor that has said nothing for LIVENESS_AFTER seconds is sent a Ping, and
// one that does not answer it within LIVENESS_WAIT seconds is gone (killed with kill -9, its ipc
// socket file stays and ZeroMQ queues requests for ever), so the long waits end UNREACHABLE within
// seconds rather than at a call's hour. Pure: times are passed in. Used by client.js.

/** Seconds of silence in a long wait before the client pings the supervisor. */
export const LIVENESS_AFTER = 5;
/** Seconds that ping has to be answered; else the supervisor is UNREACHABLE. */
export const LIVENESS_WAIT = 5;

/**
 * Whether a wait of `seconds` is long enough to be watched (shorter ones end by themselves soon).
 * @param {number} seconds
 */
export function watched(seconds) {
  return seconds > LIVENESS_AFTER + LIVENESS_WAIT;
}

/**
 * @typedef {{ at: number, ping?: true } | { gone: string }} Step
 * `at`: look again then (seconds, on the caller's clock); `ping`: send a Ping now; `gone`: the
 * supervisor did not answer the ping: end every watched wait with this reason.
 */

export class Liveness {
  /** @param {string} endpoint */
  constructor(endpoint) {
    this.endpoint = endpoint;
    this._heard = -Infinity;
    /** @type {number | null} when the ping in flight was sent */
    this._pingAt = null;
  }

  /**
   * The supervisor said something (any reply on the connection): it is there, no ping is awaited.
   * @param {number} now
   */
  heard(now) {
    this._heard = now;
    this._pingAt = null;
  }

  /**
   * What to do now. `since`: when the oldest watched wait began (null: none is in progress); the
   * silence of a wait counts from the later of its start and the supervisor's last word.
   * @param {number} now
   * @param {number | null} since
   * @returns {Step | null}
   */
  next(now, since) {
    if (since === null) {
      this._pingAt = null;
      return null;
    }
    if (this._pingAt !== null) {
      if (now - this._pingAt < LIVENESS_WAIT) return { at: this._pingAt + LIVENESS_WAIT };
      this._pingAt = null;
      const silent = LIVENESS_AFTER + LIVENESS_WAIT;
      return { gone: `the supervisor at ${this.endpoint} stopped answering (not a word for ${silent} s)` };
    }
    const due = Math.max(this._heard, since) + LIVENESS_AFTER;
    if (now < due) return { at: due };
    this._pingAt = now;
    return { at: now + LIVENESS_WAIT, ping: true };
  }
}
