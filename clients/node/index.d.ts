// TypeScript types of mcp-supervisor-client (src/index.js). Times are in seconds, as on the wire
// (docs/protocol.md).

export interface ClientOptions {
  /** The front endpoint; default: $MCP_SUPERVISOR_ENDPOINT, else the default ipc path. */
  endpoint?: string;
  /** The `client` identity sent with calls (1 to 128 printable characters); default `{pid}-{8 hex}`. */
  identity?: string;
  /** Seconds to wait for requests the supervisor answers itself (list, status, restart...); default 10. */
  requestTimeout?: number;
  /** Seconds added to a call's `timeout` for its reply to come back; default 2. */
  replyMargin?: number;
  /** CURVE keys (Z85) for a tcp:// endpoint. */
  curve?: CurveKeys;
  /** A key directory (server.key, client.key, client.key_secret) to load `curve` from. */
  keys?: string;
}

export interface CurveKeys {
  serverKey: string;
  publicKey: string;
  secretKey: string;
}

export interface ToolInfo {
  name: string;
  server: string;
  originalName: string;
  description: string;
  inputSchema: Record<string, unknown>;
  title: string | null;
  outputSchema: Record<string, unknown> | null;
  annotations: Record<string, unknown> | null;
}

export interface ToolResult {
  /** MCP content items as the server sent them (`{type: "text", text}`, ...). */
  content: Record<string, unknown>[];
  structuredContent: unknown;
  isError: boolean;
  /** The content rendered as text. */
  text: string;
}

export interface Progress {
  progress: number;
  total: number | null;
  message: string | null;
}

export interface CallOptions {
  /** The budget in seconds (> 0); without it the server's `toolTimeout` applies and the client waits up to an hour. */
  timeout?: number;
  /** Asks for the server's progress notifications. */
  onProgress?: (progress: Progress) => void;
  /** Aborting it sends Cancel and rejects the call with a CancelledError. */
  signal?: AbortSignal;
  /** Server requests this caller answers itself, by method ("sampling/createMessage", "elicitation/create"). */
  answers?: Record<string, (params: Record<string, unknown>) => unknown>;
  /** false: a result with isError resolves instead of rejecting with a ToolError. Default true. */
  throwOnToolError?: boolean;
}

/** A reference to what is completed: a prompt (its registry name, or the server's own with `server`) or a resource template. */
export type CompletionRef = { type: "ref/prompt"; name: string } | { type: "ref/resource"; uri: string };

export interface CompletionArgument {
  /** The argument's name. */
  name: string;
  /** The value typed so far. */
  value: string;
}

export interface CompleteOptions {
  /** The other arguments' values, by name. */
  context?: Record<string, string> | null;
  /** The server to ask; default: the one a ref/prompt's registry name names (a ref/resource needs it). */
  server?: string | null;
  /** The budget in seconds (> 0); without it the server's `toolTimeout` applies. */
  timeout?: number;
  /** Aborting it sends Cancel and rejects with a CancelledError. */
  signal?: AbortSignal;
}

export interface Completion {
  /** The completions, at most 100. */
  values: string[];
  /** How many there are in all, if the server said. */
  total: number | null;
  /** Whether there are more than `values`, if the server said. */
  hasMore: boolean | null;
}

/** MCP's log levels, least severe first. */
export type LogLevel = "debug" | "info" | "notice" | "warning" | "error" | "critical" | "alert" | "emergency";

/** A server's state: "starting", "ready", "restarting", "failed", "stopped", "needs-login", or a newer one. */
export type WorkerState = string;

export interface WorkerStatus {
  name: string;
  state: WorkerState;
  workerPid: number | null;
  serverPid: number | null;
  restarts: number;
  lastError: string | null;
  nextRestartIn: number | null;
  inFlight: number;
  client: string | null;
  idle: number | null;
}

export interface ServerStatus {
  server: string;
  state: WorkerState;
  workerPid: number | null;
  serverPid: number | null;
  restarts: number;
  tools: number;
  lastError: string | null;
  transport: string;
  nextRestartIn: number | null;
  tokenExpiresAt: number | null;
  scope: string;
  workers: WorkerStatus[];
}

export interface FrontStats {
  clients: number;
  inFlight: number;
  overloaded: number;
  malformed: number;
  droppedReplies: number;
  droppedCalls: number;
}

export interface Status {
  servers: ServerStatus[];
  /** The events endpoint. */
  events: string;
  front: FrontStats | null;
}

export interface RegistryChanged {
  topic: string;
  type: "RegistryChanged";
  version: number;
  server: string;
  added: ToolInfo[];
  removed: string[];
  changed: ToolInfo[];
}

export interface StateChanged {
  topic: string;
  type: "StateChanged";
  server: string;
  state: WorkerState;
  previous: WorkerState;
  restarts: number;
  lastError: string | null;
}

export interface RegistryVersion {
  topic: string;
  type: "RegistryVersion";
  version: number;
}

/** A server's log message (topic "log"): only to a watch with `messages`, once `setLogLevel` asked for them. */
export interface ServerMessage {
  topic: string;
  type: "ServerMessage";
  server: string;
  level: LogLevel;
  /** The logger the server named ("": none). */
  logger: string;
  /** The message: any JSON value (one over 64 KiB is cut to a string saying so). */
  data: unknown;
}

/** A resource subscribed to (`subscribe`) changed: read it again (topic "resource"; a watch with `messages`). */
export interface ResourceUpdated {
  topic: string;
  type: "ResourceUpdated";
  server: string;
  uri: string;
}

export type SupervisorEvent = RegistryChanged | StateChanged | RegistryVersion | ServerMessage | ResourceUpdated;

export interface WatchOptions {
  /** "registry", "state", "version", "log", "resource" ("" for every one); default: "registry", "state", "version". */
  topics?: readonly string[];
  /** Also the servers' log messages and resource updates (topics "log" and "resource"). */
  messages?: boolean;
  signal?: AbortSignal;
  /** The events endpoint; default: asked of the supervisor (GetStatus). */
  endpoint?: string;
}

export class EventStream implements AsyncIterableIterator<SupervisorEvent> {
  /** Events dropped because the reader fell behind (more than 10,000 queued). */
  readonly lost: number;
  /** Resolves at the subscription's first event; rejects after `seconds` (default 5) without one. */
  joined(seconds?: number): Promise<void>;
  next(): Promise<IteratorResult<SupervisorEvent>>;
  return(): Promise<IteratorResult<SupervisorEvent>>;
  [Symbol.asyncIterator](): EventStream;
  close(): void;
}

export class SupervisorClient {
  constructor(options?: ClientOptions);
  readonly endpoint: string;
  readonly identity: string;
  /** With `wait` (seconds): once every server's first start is over, or after `wait` at most. */
  listTools(options?: { wait?: number }): Promise<ToolInfo[]>;
  listToolsVersioned(options?: { wait?: number }): Promise<{ tools: ToolInfo[]; version: number; starting: string[] }>;
  callTool(name: string, args?: Record<string, unknown>, options?: CallOptions): Promise<ToolResult>;
  status(): Promise<Status>;
  ping(): Promise<void>;
  restart(server: string): Promise<void>;
  stop(server: string): Promise<void>;
  start(server: string): Promise<void>;
  /** Completions for an argument of a prompt or a resource template. */
  complete(ref: CompletionRef, argument: CompletionArgument, options?: CompleteOptions): Promise<Completion>;
  /** Ask for servers' log messages from `level` up ("" withdraws this connection's wish); default: every server. */
  setLogLevel(level: LogLevel | "", options?: { server?: string | null }): Promise<void>;
  /** Hear when a resource changes: ResourceUpdated events to a watch with `messages`. */
  subscribe(server: string, uri: string): Promise<void>;
  unsubscribe(server: string, uri: string): Promise<void>;
  watchEvents(options?: WatchOptions): EventStream;
  /** Close the connection and every event stream; requests in flight reject with CLOSED. */
  close(): void;
}

/** A supervisor of a federation: its front endpoint, its label, its own CURVE key directory (or null). */
export interface Member {
  readonly endpoint: string;
  readonly name: string;
  readonly keys: string | null;
}

/** A member as given: an endpoint, or one with a name (default: its host, "local" for ipc://) and keys. */
export type MemberSpec = string | { endpoint: string; name?: string; keys?: string };

export interface FederationOptions {
  /** The CURVE key directory of the members that name none of their own. */
  keys?: string;
  requestTimeout?: number;
  identity?: string;
  replyMargin?: number;
}

/** A member that did not answer, or answered with an error. */
export interface Failure {
  member: Member;
  error: SupervisorError;
}

/** A server several members list: the member that keeps it, and one whose copy is left out. */
export interface Clash {
  server: string;
  owner: Member;
  leftOut: Member;
}

export interface FederatedTools {
  tools: ToolInfo[];
  /** Server -> the member that owns it. */
  owners: Record<string, Member>;
  clashes: Clash[];
  failures: Failure[];
}

export interface FederatedStatus {
  /** Every reachable member's rows, clashing servers' too. */
  rows: { member: Member; status: ServerStatus }[];
  owners: Record<string, Member>;
  clashes: Clash[];
  failures: Failure[];
}

export type Outcome<R> = { member: Member; value: R; failure?: undefined } | { member: Member; value?: undefined; failure: Failure };

/**
 * Several supervisors seen as one registry: a server listed by several members belongs to the first
 * in order (the others' copies are left out, reported as clashes); a tool or server request goes to
 * its owner. Close it when done.
 */
export class FederatedClient {
  constructor(members: MemberSpec[], options?: FederationOptions);
  readonly members: readonly Member[];
  /** The client of one member (a member or its name). */
  client(member: Member | string): SupervisorClient;
  /** `ask` of every member at once; a member's SupervisorError is its failure. */
  each<R>(ask: (client: SupervisorClient) => Promise<R>): Promise<Outcome<R>[]>;
  listTools(options?: { wait?: number }): Promise<FederatedTools>;
  status(): Promise<FederatedStatus>;
  /** Rejects with UnknownToolError when no member has it, UnreachableError when a member that did not answer may. */
  toolOwner(name: string): Promise<Member>;
  serverOwner(server: string): Promise<Member>;
  callTool(name: string, args?: Record<string, unknown>, options?: CallOptions): Promise<ToolResult>;
  /** Resolve with the member that owns the server. */
  restart(server: string): Promise<Member>;
  stop(server: string): Promise<Member>;
  start(server: string): Promise<Member>;
  /** Close every member's client; requests in flight reject with CLOSED. */
  close(): void;
}

/**
 * An error of a request. `code` is the wire's (UNKNOWN_TOOL, UNAVAILABLE, TIMEOUT, SERVER_ERROR,
 * WORKER_CRASHED, INVALID_ARGUMENTS, OVERLOADED, BAD_REQUEST, INTERNAL, CANCELLED, or a newer one),
 * TOOL_ERROR, or the client's own: UNREACHABLE, PROTOCOL, MESSAGE_TOO_LARGE, CLOSED.
 */
export class SupervisorError extends Error {
  constructor(code: string, message: string, options?: { id?: number; cause?: unknown });
  readonly code: string;
  /** The request's id, when it had one. */
  readonly id: number | null;
}
export class UnknownToolError extends SupervisorError {}
export class UnavailableError extends SupervisorError {}
export class RequestTimeoutError extends SupervisorError {}
export class ToolError extends SupervisorError {
  constructor(message: string, result: ToolResult, options?: { id?: number });
  readonly result: ToolResult;
}
export class ServerError extends SupervisorError {}
export class WorkerCrashedError extends SupervisorError {}
export class InvalidArgumentsError extends SupervisorError {}
export class OverloadedError extends SupervisorError {}
export class BadRequestError extends SupervisorError {}
export class InternalError extends SupervisorError {}
export class CancelledError extends SupervisorError {}
/** No supervisor at the endpoint, or (in a long wait) one that stopped answering the liveness Ping. */
export class UnreachableError extends SupervisorError {}
export class ProtocolError extends SupervisorError {}
export class MessageTooLargeError extends SupervisorError {}
export class ClientClosedError extends SupervisorError {}

export function errorFromReply(code: string, message: string, id: number): SupervisorError;
export function defaultEndpoint(given?: string, env?: Record<string, string | undefined>): string;
export function loadKeys(dir: string): CurveKeys;

export const LOG_LEVELS: readonly LogLevel[];
/** Seconds of silence in a long wait (over 10 s) before the client pings the supervisor. */
export const LIVENESS_AFTER: number;
/** Seconds that ping has to be answered; else the long waits end UNREACHABLE. */
export const LIVENESS_WAIT: number;
export const MAX_MESSAGE_SIZE: number;
export const MAX_ARGUMENT_DEPTH: number;
export const REPLY_MARGIN: number;
export const REQUEST_TIMEOUT: number;
export const UNBUDGETED_WAIT: number;
