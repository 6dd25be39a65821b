// mcp-supervisor's Node client: the public names. The client is in client.js, the events socket
// in events.js, the liveness probe in liveness.js, the errors in errors.js, the
// federated client of several supervisors in federation.js; docs/protocol.md is the
// protocol they speak.

export { LOG_LEVELS, REPLY_MARGIN, REQUEST_TIMEOUT, SupervisorClient, UNBUDGETED_WAIT } from "./client.js";
export { MAX_ARGUMENT_DEPTH, MAX_MESSAGE_SIZE } from "./codec.js";
export { defaultEndpoint, loadKeys } from "./endpoint.js";
export {
  BadRequestError,
  CancelledError,
  ClientClosedError,
  InternalError,
  InvalidArgumentsError,
  MessageTooLargeError,
  OverloadedError,
  ProtocolError,
  RequestTimeoutError,
  ServerError,
  SupervisorError,
  ToolError,
  UnavailableError,
  UnknownToolError,
  UnreachableError,
  WorkerCrashedError,
  errorFromReply,
} from "./errors.js";
export { EventStream } from "./events.js";
export { FederatedClient } from "./federation.js";
export { LIVENESS_AFTER, LIVENESS_WAIT } from "./liveness.js";
