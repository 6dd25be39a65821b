// The errors a SupervisorClient throws: one class per error code of the wire (docs/protocol.md,
// "Error codes"), plus the client's own (no supervisor or one that stopped answering, a reply that
// does not decode, a request too large to send, a closed client). Used by client.js; nothing below it.

/** An error of a request: `code` is the wire's code (or the client's own), `message` says what. */
export class SupervisorError extends Error {
  /**
   * @param {string} code
   * @param {string} message
   * @param {{ id?: number, cause?: unknown }} [options]
   */
  constructor(code, message, options = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.id = options.id ?? null;
  }
}

export class UnknownToolError extends SupervisorError {}
export class UnavailableError extends SupervisorError {}
/** TIMEOUT: the request's budget ran out (from the supervisor), or no reply came in time. */
export class RequestTimeoutError extends SupervisorError {}
/** TOOL_ERROR: the tool ran and reported an error; `result` is its ToolResult. */
export class ToolError extends SupervisorError {
  /**
   * @param {string} message
   * @param {object} result
   * @param {{ id?: number }} [options]
   */
  constructor(message, result, options = {}) {
    super("TOOL_ERROR", message, options);
    this.result = result;
  }
}
export class ServerError extends SupervisorError {}
export class WorkerCrashedError extends SupervisorError {}
export class InvalidArgumentsError extends SupervisorError {}
export class OverloadedError extends SupervisorError {}
export class BadRequestError extends SupervisorError {}
export class InternalError extends SupervisorError {}
/** CANCELLED: cancelled by the caller (an AbortSignal) or, on the wire, by a Cancel. */
export class CancelledError extends SupervisorError {}
/**
 * UNREACHABLE (the client's own): no supervisor at the endpoint, or, in a long wait, one that
 * stopped answering (a Ping unanswered: killed, its socket file left behind).
 */
export class UnreachableError extends SupervisorError {}
/** PROTOCOL (the client's own): a reply that does not decode, or not the kind its request expects. */
export class ProtocolError extends SupervisorError {}
/** MESSAGE_TOO_LARGE (the client's own): a request over the 64 MiB frame limit, never sent. */
export class MessageTooLargeError extends SupervisorError {}
/** CLOSED (the client's own): the client was closed with the request in flight. */
export class ClientClosedError extends SupervisorError {}

const BY_CODE = {
  UNKNOWN_TOOL: UnknownToolError,
  UNAVAILABLE: UnavailableError,
  TIMEOUT: RequestTimeoutError,
  SERVER_ERROR: ServerError,
  WORKER_CRASHED: WorkerCrashedError,
  INVALID_ARGUMENTS: InvalidArgumentsError,
  OVERLOADED: OverloadedError,
  BAD_REQUEST: BadRequestError,
  INTERNAL: InternalError,
  CANCELLED: CancelledError,
};

/**
 * The error for an ErrorReply's code: its class, or SupervisorError for a code this client does
 * not know (a newer supervisor's), which keeps the code as it came.
 * @param {string} code
 * @param {string} message
 * @param {number} id
 */
export function errorFromReply(code, message, id) {
  const Class = Object.hasOwn(BY_CODE, code) ? BY_CODE[code] : SupervisorError;
  return new Class(code, message, { id });
}
