"""Every message that crosses a ZeroMQ socket, and the codecs for each direction.

This package depends on nothing but msgspec, so an agent that imports the client loads no config
parsing. Its modules: ``codec`` (the message base, error codes, total decoders), ``payloads``,
``front``, ``link`` (the worker link) and ``events``; everything is re-exported here.

Two links use this module:

- the *front* link: agents and the CLI (a DEALER in ``supervisor.client``) talk
  to the supervisor's ROUTER. Requests are ``FrontRequest``; each gets exactly
  one terminal ``FrontReply`` carrying the caller's ``id`` (a ``CallTool`` that
  asked for progress may first get ``CallProgress`` replies, which are not terminal).
  ``Cancel`` alone gets no reply: the request it cancels is answered ``CANCELLED``.
- the *worker* link: each worker process (a DEALER in ``workers.link``)
  talks to the supervisor's worker ROUTER. The supervisor sends
  ``WorkerCommand``; the worker sends ``WorkerEvent``.

Messages are msgpack, tagged by class name. Tool arguments and tool results are
carried as ``msgspec.Raw``: the supervisor routes on names, ids and budgets and
never decodes a payload it only relays. New fields always get defaults, so an
older peer still decodes a newer message (unknown fields are skipped).
"""

from __future__ import annotations

from supervisor.protocol.codec import (
    ERROR_CODES,
    ErrorCode,
    MalformedMessage,
    WorkerState,
    encode,
    is_error_code,
    total_decoder,
)
from supervisor.protocol.events import (
    EVENT_TOPICS,
    Event,
    RegistryChanged,
    RegistryVersion,
    StateChanged,
    decode_event,
)
from supervisor.protocol.front import (
    MAX_IDENTITY,
    CallProgress,
    CallResult,
    CallTool,
    Cancel,
    Done,
    ErrorReply,
    FrontReply,
    FrontRequest,
    GetPrompt,
    GetStatus,
    Listing,
    ListPrompts,
    ListResources,
    ListResourceTemplates,
    ListTools,
    Ping,
    ReadResource,
    Reload,
    Reloaded,
    Restart,
    Start,
    StatusReply,
    Stop,
    ToolList,
    decode_front_reply,
    decode_front_request,
)
from supervisor.protocol.link import (
    HEARTBEAT,
    Abort,
    Fetch,
    FetchMethod,
    Heartbeat,
    Invoke,
    InvokeFailed,
    InvokeProgress,
    InvokeResult,
    Ready,
    Started,
    ToolsChanged,
    WorkerCommand,
    WorkerEvent,
    decode_worker_command,
    decode_worker_event,
    salvage_call,
)
from supervisor.protocol.payloads import (
    FrontStats,
    ProgressCallback,
    PromptInfo,
    PromptResult,
    ReloadSummary,
    ResourceInfo,
    ResourceResult,
    ResourceTemplateInfo,
    ServerFailure,
    ServerStatus,
    ToolInfo,
    ToolResult,
    WorkerStatus,
    WorkerTool,
)

__all__ = [
    "ERROR_CODES",
    "EVENT_TOPICS",
    "HEARTBEAT",
    "MAX_IDENTITY",
    "Abort",
    "CallProgress",
    "CallResult",
    "CallTool",
    "Cancel",
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
    "ProgressCallback",
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
    "WorkerCommand",
    "WorkerEvent",
    "WorkerState",
    "WorkerStatus",
    "WorkerTool",
    "decode_event",
    "decode_front_reply",
    "decode_front_request",
    "decode_worker_command",
    "decode_worker_event",
    "encode",
    "is_error_code",
    "salvage_call",
    "total_decoder",
]
