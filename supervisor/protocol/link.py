"""The worker link: each worker process (a DEALER) talks to the supervisor's worker ROUTER.

The supervisor sends ``WorkerCommand``; the worker sends ``WorkerEvent``. ``salvage_call`` finds the
call id of a command too deep to decode, so that the call can still be answered.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from supervisor.protocol.codec import _Message, encode, total_decoder
from supervisor.protocol.payloads import WorkerTool
from supervisor.protocol.scan import top_level_fields


class Invoke(_Message):
    """Supervisor -> worker: call ``tool`` (the server's own name) within ``budget`` seconds.

    With ``progress``, the worker asks the server for progress and relays it as ``InvokeProgress``.
    """

    call: int
    tool: str
    arguments: msgspec.Raw
    budget: float
    progress: bool = False
    client: str = ""  # whose call it is (server requests go to a caller only when one client is busy)
    answers: list[str] = []  # server requests its caller answers (``Ask``), as in ``CallTool``
    traceparent: str = ""  # W3C trace context of the supervisor's span for the call, while tracing
    tracestate: str = ""


class Heartbeat(_Message):
    """Either direction: I am alive."""


FetchMethod = Literal[
    "resources/list",
    "resources/templates/list",
    "prompts/list",
    "resources/read",
    "prompts/get",
    "completion/complete",
]


class Fetch(_Message):
    """Supervisor -> worker: one resources or prompts request within ``budget`` seconds.

    ``target`` is the URI for ``resources/read`` and the prompt's name for ``prompts/get``
    (its prefixed name when ``prefixed``). For ``completion/complete``, ``arguments`` is the MCP
    params (``ref``, ``argument``, ``context``), a prompt's name in ``ref`` prefixed when ``prefixed``.
    Answered like ``Invoke``: ``InvokeResult`` (an encoded list of entries for the list methods, a
    ``ResourceResult``, ``PromptResult`` or ``Completion``) or ``InvokeFailed``.
    """

    call: int
    method: FetchMethod
    budget: float
    target: str = ""
    prefixed: bool = False
    arguments: msgspec.Raw = msgspec.Raw(b"\x80")  # msgpack {}: the prompt's arguments
    client: str = ""


class Abort(_Message):
    """Supervisor -> worker: stop working on ``call`` (an ``Invoke`` or a ``Fetch``) and send nothing for
    it: its caller cancelled it and has been answered. The server is sent the MCP cancellation. An
    ``Abort`` for a call the worker no longer has is ignored."""

    call: int


class Answered(_Message):
    """Supervisor -> worker: the caller's answer to the worker's ``Ask`` (as ``Answer`` carries it)."""

    call: int
    ask: int
    result: msgspec.Raw = msgspec.Raw(b"\xc0")  # msgpack nil
    error: str = ""


class Interest(_Message):
    """Supervisor -> worker: what its callers want of the server besides calls, all of it each time
    (sent when it changes and when the worker is ready): the log ``level`` to set (``""``: none asked,
    leave the server's own) and the resource ``uris`` to be subscribed to. The worker makes it so,
    setting and subscribing only what differs from what it did before."""

    level: str = ""
    uris: list[str] = []


WorkerCommand = Invoke | Heartbeat | Fetch | Abort | Answered | Interest


class Ready(_Message):
    """Worker -> supervisor: the session is initialized and these are all its tools."""

    tools: list[WorkerTool]
    server_pid: int | None = None
    server_name: str = ""
    server_version: str = ""
    tools_change: bool = False  # the server says its tools may change (``tools.listChanged``)


class Started(_Message):
    """Worker -> supervisor: the server process exists (sent before initialize, so its pid is known early)."""

    server_pid: int


class InvokeResult(_Message):
    call: int
    result: msgspec.Raw  # an encoded ToolResult


class InvokeFailed(_Message):
    call: int
    code: str  # one of ERROR_CODES (``is_error_code``); a str on the wire, as ``ErrorReply.code`` is
    message: str


class NotRun(_Message):
    """Worker -> supervisor: ``call`` came after the worker's server had ended, so it was never sent to
    it: it may run on the server that replaces it (``CallTable.not_run``)."""

    call: int


class ToolsChanged(_Message):
    """Worker -> supervisor: the server's tools changed (it said so, or a refresh found it); all of them."""

    tools: list[WorkerTool]


class InvokeProgress(_Message):
    """A progress notification for a call whose ``Invoke`` asked for it (coalesced by the worker)."""

    call: int
    progress: float
    total: float | None = None
    message: str | None = None


class Ask(_Message):
    """Worker -> supervisor: the server asks ``method`` (of ``ASKABLE``) during ``call``, whose caller
    answers such requests; relayed to it as ``ServerRequest``, answered with ``Answered``."""

    call: int
    ask: int
    method: str
    params: msgspec.Raw


class Logged(_Message):
    """Worker -> supervisor: the server's log message (``notifications/message``), rate-bounded by
    the worker; published as ``ServerMessage``."""

    level: str
    logger: str = ""
    data: msgspec.Raw = msgspec.Raw(b"\xc0")  # msgpack nil


class Updated(_Message):
    """Worker -> supervisor: the server said a subscribed resource changed; published as
    ``ResourceUpdated``."""

    uri: str


WorkerEvent = (
    Started
    | Ready
    | InvokeResult
    | InvokeFailed
    | NotRun
    | InvokeProgress
    | Heartbeat
    | ToolsChanged
    | Ask
    | Logged
    | Updated
)

_worker_command = msgspec.msgpack.Decoder(WorkerCommand)
_worker_event = msgspec.msgpack.Decoder(WorkerEvent)
decode_worker_command = total_decoder(_worker_command.decode)
decode_worker_event = total_decoder(_worker_event.decode)
HEARTBEAT: Final = encode(Heartbeat())  # the same bytes every time, both ways


def salvage_call(frame: bytes) -> tuple[str, int] | None:
    """The type tag and ``call`` of a worker command that does not decode (its arguments nested
    deeper than msgspec recurses, say), found by a scan of its top level that does not recurse, so
    the call can still be answered; None when the frame has no such fields."""
    fields = top_level_fields(frame, ("type", "call"))
    kind, call = fields.get("type"), fields.get("call")
    return (kind, call) if isinstance(kind, str) and type(call) is int else None
