"""Every message that crosses a ZeroMQ socket, and the codecs for each direction.

Two links use this module:

- the *front* link: agents and the CLI (a DEALER in ``supervisor.client``) talk
  to the supervisor's ROUTER. Requests are ``FrontRequest``; each gets exactly
  one terminal ``FrontReply`` carrying the caller's ``id`` (a ``CallTool`` that
  asked for progress may first get ``CallProgress`` replies, which are not terminal).
- the *worker* link: each worker process (a DEALER in ``workers.worker``)
  talks to the supervisor's worker ROUTER. The supervisor sends
  ``WorkerCommand``; the worker sends ``WorkerEvent``.

Messages are msgpack, tagged by class name. Tool arguments and tool results are
carried as ``msgspec.Raw``: the supervisor routes on names, ids and budgets and
never decodes a payload it only relays. New fields always get defaults, so an
older peer still decodes a newer message (unknown fields are skipped).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Final, Literal, TypeVar

import msgspec

from supervisor.config import ServerSpec

__all__ = [
    "ERROR_CODES",
    "EVENT_TOPICS",
    "HEARTBEAT",
    "STOP_LINE",
    "CallProgress",
    "CallResult",
    "CallTool",
    "Done",
    "ErrorCode",
    "ErrorReply",
    "Event",
    "Fetch",
    "FetchMethod",
    "FrontReply",
    "FrontRequest",
    "FrontStats",
    "GetPrompt",
    "GetStatus",
    "Heartbeat",
    "Invoke",
    "InvokeFailed",
    "InvokeProgress",
    "InvokeResult",
    "ListPrompts",
    "ListResourceTemplates",
    "ListResources",
    "ListTools",
    "Listing",
    "MalformedMessage",
    "Ping",
    "PromptInfo",
    "PromptResult",
    "ReadResource",
    "Ready",
    "RegistryChanged",
    "RegistryVersion",
    "Reload",
    "ReloadSummary",
    "Reloaded",
    "ResourceInfo",
    "ResourceResult",
    "ResourceTemplateInfo",
    "Restart",
    "ServerFailure",
    "ServerStatus",
    "Start",
    "Started",
    "StateChanged",
    "StatusReply",
    "Stop",
    "ToolInfo",
    "ToolList",
    "ToolResult",
    "ToolsChanged",
    "WorkerBoot",
    "WorkerCommand",
    "WorkerEvent",
    "WorkerExit",
    "WorkerTool",
    "decode_event",
    "decode_front_reply",
    "decode_front_request",
    "decode_worker_boot",
    "decode_worker_command",
    "decode_worker_event",
    "encode",
    "total_decoder",
]

ErrorCode = Literal[
    "UNKNOWN_TOOL",  # no tool of that name in the registry
    "UNAVAILABLE",  # the server exists but is not ready (starting, restarting, failed, stopped)
    "TIMEOUT",  # the call's budget ran out; the server was sent notifications/cancelled
    "TOOL_ERROR",  # reserved for callers: the server answered with isError (a result, not an error reply)
    "SERVER_ERROR",  # the MCP server answered with a JSON-RPC error
    "WORKER_CRASHED",  # the worker or its MCP server died while the call was in flight
    "INVALID_ARGUMENTS",  # arguments are not an object, or the server rejected them as invalid params
    "OVERLOADED",  # too many calls in flight
    "BAD_REQUEST",  # a frame that does not decode, or a request that makes no sense
    "INTERNAL",  # a bug in mcp-supervisor; the message says where
]
ERROR_CODES: Final[frozenset[str]] = frozenset(ErrorCode.__args__)  # type: ignore[attr-defined]

WorkerState = Literal["starting", "ready", "restarting", "failed", "stopped"]


class _Message(msgspec.Struct, tag=True, kw_only=True, omit_defaults=True):
    """Base of every wire message; the tag is the class name."""


# --------------------------------------------------------------------- payloads


class ToolResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool call's outcome as the worker encodes it and the client decodes it.

    ``content`` keeps every MCP content item as the server sent it (text, image,
    audio, resource_link, resource), in its JSON shape.
    """

    content: list[dict[str, Any]] = []
    structured_content: Any = None
    is_error: bool = False
    text: str = ""


class ToolInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A registry entry as agents see it."""

    name: str
    server: str
    original_name: str
    description: str = ""
    input_schema: dict[str, Any] = {}
    title: str | None = None
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None


class WorkerTool(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool as the MCP server listed it, before prefixing."""

    name: str
    description: str = ""
    input_schema: Any = None
    title: str | None = None
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None


class ResourceInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A resource as its server listed it; resources are addressed by ``server`` and ``uri``."""

    server: str
    uri: str
    name: str = ""
    title: str | None = None
    description: str = ""
    mime_type: str | None = None
    size: int | None = None
    annotations: dict[str, Any] | None = None


class ResourceTemplateInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A resource template (an RFC 6570 ``uri_template``) as its server listed it."""

    server: str
    uri_template: str
    name: str = ""
    title: str | None = None
    description: str = ""
    mime_type: str | None = None
    annotations: dict[str, Any] | None = None


class PromptInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A prompt under its prefixed name (``mcp_{server}_{prompt}``, as tools are named).

    ``arguments`` are the server's ``PromptArgument`` objects in their JSON shape
    (``name``, ``description``, ``required``, ``title``); their values are strings.
    """

    name: str
    server: str
    original_name: str
    title: str | None = None
    description: str = ""
    arguments: list[dict[str, Any]] = []


class ResourceResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What ``resources/read`` returned: every item of ``contents`` in its JSON shape
    (``uri``, ``mimeType``, and ``text`` or base64 ``blob``); ``text`` joins the text items
    (a blob shows as a ``[blob ...]`` line)."""

    contents: list[dict[str, Any]] = []
    text: str = ""


class PromptResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What ``prompts/get`` returned: ``messages`` (``role`` and ``content``) in their JSON shape;
    ``text`` renders them as ``role: text`` lines."""

    description: str = ""
    messages: list[dict[str, Any]] = []
    text: str = ""


class ServerFailure(msgspec.Struct, frozen=True, kw_only=True):
    """A server left out of an aggregated listing, and why (an error code and message)."""

    server: str
    code: str
    message: str


class ServerStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``status``."""

    server: str
    state: WorkerState
    worker_pid: int | None = None
    server_pid: int | None = None
    restarts: int = 0
    tools: int = 0
    last_error: str | None = None
    transport: str = "stdio"
    next_restart_in: float | None = None


class FrontStats(msgspec.Struct, kw_only=True):
    """The front door's figures, in ``status``: requests in flight now, and what was refused or dropped
    since the supervisor started (see the README's Reliability section)."""

    clients: int = 0  # clients with requests in flight
    in_flight: int = 0  # their requests in flight (calls, resources and prompts requests)
    overloaded: int = 0  # requests answered OVERLOADED (maxCallsPerClient, maxCallsInFlight)
    malformed: int = 0  # front messages that were not requests (answered BAD_REQUEST, or dropped)
    dropped_replies: int = 0  # replies to clients that do not read theirs (maxQueuedReplies)
    dropped_calls: int = 0  # requests in flight of those clients, forgotten with them


class ReloadSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What a reload did: server names by outcome, and the top-level settings that changed (applied)."""

    config: str = ""  # the file that was read
    added: list[str] = []  # started
    removed: list[str] = []  # stopped and forgotten
    changed: list[str] = []  # restarted with their new spec (stopped if now disabled)
    unchanged: list[str] = []  # not touched
    settings: list[str] = []  # "supervisor" keys whose value changed, as spelled in the file


# ------------------------------------------------------------- front requests


class ListTools(_Message):
    id: int


class CallTool(_Message):
    """Call a prefixed tool; ``timeout`` is a relative budget in seconds (None: the server's toolTimeout).

    With ``progress``, the caller also gets the server's progress notifications as ``CallProgress``
    replies (coalesced, never after the terminal reply); without it, none.
    """

    id: int
    name: str
    arguments: msgspec.Raw = msgspec.Raw(b"\x80")  # msgpack {}
    timeout: float | None = None
    progress: bool = False


class GetStatus(_Message):
    id: int


class Restart(_Message):
    id: int
    server: str


class Stop(_Message):
    """Stop a server's worker and keep it stopped until Start or Restart."""

    id: int
    server: str


class Start(_Message):
    """Start a stopped or failed server (a running one is left alone)."""

    id: int
    server: str


class Ping(_Message):
    id: int


class ListResources(_Message):
    """List resources of ``server``, or of every ready server; ``timeout`` as for ``CallTool``."""

    id: int
    server: str | None = None
    timeout: float | None = None


class ListResourceTemplates(_Message):
    id: int
    server: str | None = None
    timeout: float | None = None


class ListPrompts(_Message):
    id: int
    server: str | None = None
    timeout: float | None = None


class ReadResource(_Message):
    """Read ``uri`` from ``server``; answered with a ``CallResult`` holding a ``ResourceResult``."""

    id: int
    server: str
    uri: str
    timeout: float | None = None


class GetPrompt(_Message):
    """Get a prompt by its prefixed name, or by the server's own name when ``server`` is given.

    Answered with a ``CallResult`` holding a ``PromptResult``; ``arguments`` is a msgpack map of strings.
    """

    id: int
    name: str
    arguments: msgspec.Raw = msgspec.Raw(b"\x80")  # msgpack {}
    server: str | None = None
    timeout: float | None = None


class Reload(_Message):
    """Re-read the config file the supervisor was started with and apply the differences."""

    id: int


FrontRequest = (
    ListTools
    | CallTool
    | GetStatus
    | Restart
    | Stop
    | Start
    | Ping
    | ListResources
    | ListResourceTemplates
    | ListPrompts
    | ReadResource
    | GetPrompt
    | Reload
)


# --------------------------------------------------------------- front replies


class ToolList(_Message):
    id: int
    tools: list[ToolInfo]
    version: int = 0


class CallResult(_Message):
    id: int
    result: (
        msgspec.Raw
    )  # an encoded ToolResult (ResourceResult, PromptResult), relayed untouched from the worker


class StatusReply(_Message):
    id: int
    servers: list[ServerStatus]
    events: str = ""  # the PUB endpoint of registry and state events
    front: FrontStats | None = None  # None from a supervisor older than the figures


class Done(_Message):
    id: int


class ErrorReply(_Message):
    id: int
    code: str  # one of ERROR_CODES; a str so a newer supervisor's code still decodes
    message: str


class Listing(_Message):
    """The answer to a List* request: one part per server that answered, each an encoded
    list of ``ResourceInfo``, ``ResourceTemplateInfo`` or ``PromptInfo`` relayed untouched;
    ``failures`` names the ready servers that did not answer (aggregated listings only)."""

    id: int
    parts: list[msgspec.Raw] = []
    failures: list[ServerFailure] = []


class Reloaded(_Message):
    id: int
    summary: ReloadSummary


class CallProgress(_Message):
    """Not a terminal reply: a progress notification for a ``CallTool`` that asked for them.

    Any number may precede the call's one terminal reply (``CallResult`` or ``ErrorReply``); none follow it.
    """

    id: int
    progress: float
    total: float | None = None
    message: str | None = None


FrontReply = ToolList | CallResult | StatusReply | Done | ErrorReply | Listing | Reloaded | CallProgress

# ------------------------------------------------------------------ worker link


class Invoke(_Message):
    """Supervisor -> worker: call ``tool`` (the server's own name) within ``budget`` seconds.

    With ``progress``, the worker asks the server for progress and relays it as ``InvokeProgress``.
    """

    call: int
    tool: str
    arguments: msgspec.Raw
    budget: float
    progress: bool = False


class Heartbeat(_Message):
    """Either direction: I am alive."""


FetchMethod = Literal[
    "resources/list", "resources/templates/list", "prompts/list", "resources/read", "prompts/get"
]


class Fetch(_Message):
    """Supervisor -> worker: one resources or prompts request within ``budget`` seconds.

    ``target`` is the URI for ``resources/read`` and the prompt's name for ``prompts/get``
    (its prefixed name when ``prefixed``). Answered like ``Invoke``: ``InvokeResult`` (an encoded
    list of entries for the list methods, a ``ResourceResult`` or ``PromptResult``) or ``InvokeFailed``.
    """

    call: int
    method: FetchMethod
    budget: float
    target: str = ""
    prefixed: bool = False
    arguments: msgspec.Raw = msgspec.Raw(b"\x80")  # msgpack {}: the prompt's arguments


WorkerCommand = Invoke | Heartbeat | Fetch


class Ready(_Message):
    """Worker -> supervisor: the session is initialized and these are all its tools."""

    tools: list[WorkerTool]
    server_pid: int | None = None
    server_name: str = ""
    server_version: str = ""


class Started(_Message):
    """Worker -> supervisor: the server process exists (sent before initialize, so its pid is known early)."""

    server_pid: int


class InvokeResult(_Message):
    call: int
    result: msgspec.Raw  # an encoded ToolResult


class InvokeFailed(_Message):
    call: int
    code: str
    message: str


class ToolsChanged(_Message):
    """Worker -> supervisor: the server's tools changed (it said so, or a refresh found it); all of them."""

    tools: list[WorkerTool]


# ------------------------------------------------------------------ events (PUB)


class RegistryChanged(_Message):
    """Published when a server's tools enter, change in or leave the registry (topic ``registry``).

    ``version`` is the registry's version after the change: a subscriber holding a listing of
    ``version - 1`` applies this diff; one that missed a version lists the tools again.
    """

    version: int
    server: str
    added: list[ToolInfo] = []
    removed: list[str] = []  # prefixed names
    changed: list[ToolInfo] = []


class StateChanged(_Message):
    """Published when a server's worker changes state (topic ``state``)."""

    server: str
    state: WorkerState
    previous: WorkerState
    restarts: int = 0
    last_error: str | None = None


class RegistryVersion(_Message):
    """Published every second (topic ``version``): the registry's version, for subscribers to check."""

    version: int


Event = RegistryChanged | StateChanged | RegistryVersion
EVENT_TOPICS: Final = {RegistryChanged: b"registry", StateChanged: b"state", RegistryVersion: b"version"}


class InvokeProgress(_Message):
    """A progress notification for a call whose ``Invoke`` asked for it (coalesced by the worker)."""

    call: int
    progress: float
    total: float | None = None
    message: str | None = None


WorkerEvent = Started | Ready | InvokeResult | InvokeFailed | InvokeProgress | Heartbeat | ToolsChanged

# ------------------------------------------------------------------- codecs

_encoder = msgspec.msgpack.Encoder()
encode = _encoder.encode

_T = TypeVar("_T")


class MalformedMessage(msgspec.DecodeError):
    """Bytes from another process that are not a message of the kind expected there.

    Every decoder of this module raises it (or another ``msgspec.DecodeError``) for *any* input that
    is not such a message: wrong shape, invalid UTF-8 in a string, nesting deeper than the
    interpreter's recursion limit. Each edge answers it with its own documented error, so a peer's
    bytes can never end the process that reads them."""


def total_decoder(decode: Callable[[bytes], _T]) -> Callable[[bytes], _T]:
    """``decode`` (a msgspec decoder's ``decode``), made total: every failure is a ``DecodeError``.

    msgspec raises ``UnicodeDecodeError`` for a string that is not UTF-8 and ``RecursionError`` for
    deep nesting (about 1000 levels, e.g. 7 KB of ``[[[[...``), neither a ``DecodeError``."""

    def decode_total(data: bytes) -> _T:
        try:
            return decode(data)
        except UnicodeDecodeError as exc:
            raise MalformedMessage(f"a string is not valid UTF-8 ({exc.reason})") from None
        except RecursionError:
            raise MalformedMessage("nested too deeply") from None

    return decode_total


_front_request = msgspec.msgpack.Decoder(FrontRequest)
_front_reply = msgspec.msgpack.Decoder(FrontReply)
_worker_command = msgspec.msgpack.Decoder(WorkerCommand)
_worker_event = msgspec.msgpack.Decoder(WorkerEvent)
_event: msgspec.msgpack.Decoder[Event] = msgspec.msgpack.Decoder(Event)
decode_front_request = total_decoder(_front_request.decode)
decode_front_reply = total_decoder(_front_reply.decode)
decode_worker_command = total_decoder(_worker_command.decode)
decode_worker_event = total_decoder(_worker_event.decode)
decode_event = total_decoder(_event.decode)
HEARTBEAT: Final = encode(Heartbeat())  # the same bytes every time, both ways


# ------------------------------------------------------------ worker start-up


class WorkerExit(enum.IntEnum):
    """A worker process's exit status, as its keeper reads it."""

    LIFELINE = 0  # the supervisor closed the lifeline: an orderly stop
    SERVER_DIED = 3  # the server exited abnormally, its connection closed, or it stopped answering pings
    START_FAILED = 4  # the server could not be started or initialized
    SERVER_DONE = 5  # the server exited on its own with status 0


STOP_LINE: Final = b"stop\n"  # written to a worker's lifeline before closing it: an orderly stop


class WorkerBoot(msgspec.Struct, frozen=True, kw_only=True):
    """The one JSON line a keeper writes to a new worker's stdin (so secrets stay out of argv)."""

    server: str
    endpoint: str  # the supervisor's worker ROUTER
    identity: str  # this incarnation's routing id
    spec: ServerSpec
    log_level: int = 20
    stderr_lines_per_second: float = 100.0  # the server's stderr beyond this rate is counted, not logged


decode_worker_boot = total_decoder(msgspec.json.Decoder(WorkerBoot).decode)
