"""The front link: agents and the CLI (a DEALER) talk to the supervisor's ROUTER.

Requests are ``FrontRequest``; each gets exactly one terminal ``FrontReply`` carrying the caller's
``id`` (a ``CallTool`` that asked for progress may first get ``CallProgress`` replies, which are not
terminal). The one exception is ``Cancel``, which gets no reply of its own: the request it cancels
gets its terminal reply instead (``ErrorReply`` with code ``CANCELLED``). Tool arguments and
results are carried as ``msgspec.Raw``: the supervisor routes on names, ids and budgets and never
decodes a payload it only relays. The operator's ``GetLogs``, ``Shutdown`` and ``GetAudit`` (and their
replies) are declared in ``supervisor.protocol.control``.
"""

from __future__ import annotations

from typing import Final

import msgspec

from supervisor.protocol.codec import _Message, total_decoder
from supervisor.protocol.control import AuditRecords, GetAudit, GetLogs, LogLines, Shutdown
from supervisor.protocol.payloads import FrontStats, ReloadSummary, ServerFailure, ServerStatus, ToolInfo

ASKABLE: Final = ("sampling/createMessage", "elicitation/create")
"""The server requests a caller may answer itself (``CallTool.answers``)."""

MAX_IDENTITY: Final = 128
"""Characters of a client identity (``client``), and of a ``principal`` or ``session``, all printable;
a longer one is ``BAD_REQUEST``."""


LOG_LEVELS: Final = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
"""MCP's log levels (RFC 5424's severities), least severe first."""

MAX_LIST_WAIT: Final = 300.0
"""Seconds a ``ListTools`` may ask to wait for the servers' first starts; a longer ``wait`` is cut to it."""


class ListTools(_Message):
    """Every tool in the registry. With ``wait`` (seconds), a supervisor still bringing its servers up
    answers once every enabled server has concluded its first start (ready, failed, needs-login), or
    once ``wait`` has passed, whichever comes first; 0 answers at once."""

    id: int
    wait: float = 0.0


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
    client: str = ""  # the caller's identity (its session on a ``scope: client`` server); "": its connection
    # Requests of the server the caller answers itself, during this call (``ASKABLE``): each reaches it
    # as a ``ServerRequest`` reply, which it answers with ``Answer``. Others are answered by the config.
    answers: list[str] = []
    # W3C trace context of the caller's span (``supervisor.shared.tracing``); one that is not valid is
    # ignored.
    traceparent: str = ""
    tracestate: str = ""
    # Who the caller authenticated as (a gateway client's name, an OAuth subject), and the host session
    # the request came from: named in the audit trail; "" when the caller has none to say.
    principal: str = ""
    session: str = ""


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
    client: str = ""  # as for ``CallTool``


class ListResourceTemplates(_Message):
    id: int
    server: str | None = None
    timeout: float | None = None
    client: str = ""  # as for ``CallTool``


class ListPrompts(_Message):
    id: int
    server: str | None = None
    timeout: float | None = None
    client: str = ""  # as for ``CallTool``


class ReadResource(_Message):
    """Read ``uri`` from ``server``; answered with a ``CallResult`` holding a ``ResourceResult``."""

    id: int
    server: str
    uri: str
    timeout: float | None = None
    client: str = ""
    principal: str = ""  # as for ``CallTool``
    session: str = ""  # as for ``CallTool``


class GetPrompt(_Message):
    """Get a prompt by its prefixed name, or by the server's own name when ``server`` is given.

    Answered with a ``CallResult`` holding a ``PromptResult``; ``arguments`` is a msgpack map of strings.
    """

    id: int
    name: str
    arguments: msgspec.Raw = msgspec.Raw(b"\x80")  # msgpack {}
    server: str | None = None
    timeout: float | None = None
    client: str = ""
    principal: str = ""  # as for ``CallTool``
    session: str = ""  # as for ``CallTool``


class Complete(_Message):
    """Completions for an argument of a prompt or a resource template (MCP ``completion/complete``).

    ``ref`` is MCP's reference as a msgpack map in its JSON shape: ``{"type": "ref/prompt", "name":
    N}`` or ``{"type": "ref/resource", "uri": TEMPLATE}``; ``argument`` is ``{"name": ..., "value":
    ...}``; ``context`` is ``{"arguments": {...}}`` or nil. A prompt is named by its prefixed name, or
    by the server's own name when ``server`` is given; a resource template needs ``server``.
    Answered with a ``CallResult`` holding a ``Completion``.
    """

    id: int
    ref: msgspec.Raw
    argument: msgspec.Raw
    context: msgspec.Raw = msgspec.Raw(b"\xc0")  # msgpack nil
    server: str | None = None
    timeout: float | None = None
    client: str = ""


class SetLogLevel(_Message):
    """The least severe log messages (``LOG_LEVELS``) this connection wants from ``server``'s
    ``notifications/message`` (None: from every server), or ``""`` to withdraw its wish. Each server
    is set to the most verbose level its connections ask for (``logging/setLevel``, now and after every
    restart); its messages are published as ``ServerMessage`` events. Answered ``Done`` at once."""

    id: int
    level: str
    server: str | None = None


class Subscribe(_Message):
    """Hear of changes to the resource ``uri`` of ``server`` (MCP ``resources/subscribe``, kept across
    restarts): each is published as a ``ResourceUpdated`` event. Answered ``Done`` at once."""

    id: int
    server: str
    uri: str


class Unsubscribe(_Message):
    """Withdraw this connection's ``Subscribe`` (the server is unsubscribed when nobody else wants it)."""

    id: int
    server: str
    uri: str


class Reload(_Message):
    """Re-read the config file the supervisor was started with and apply the differences."""

    id: int


class Cancel(_Message):
    """Cancel this client's own request ``id`` while it is in flight (sent on the same connection).

    No reply of its own: the cancelled request gets its one terminal reply, ``ErrorReply`` with code
    ``CANCELLED``, at once, and its server is sent the MCP cancellation. Tool calls, ``ReadResource``,
    ``GetPrompt`` and ``Complete`` can be cancelled; a ``Cancel`` for anything else (a listing, a
    request already answered, an id never sent) is ignored.
    """

    id: int


class Answer(_Message):
    """The caller's answer to a ``ServerRequest`` (``ask``) of its call ``id``; no reply of its own.

    ``result`` is the MCP result as a msgpack map in its JSON shape (a ``CreateMessageResult``, an
    ``ElicitResult``); or ``error`` says why there is none. An answer for a call no longer in flight,
    or an ``ask`` its worker no longer waits for, is dropped.
    """

    id: int
    ask: int
    result: msgspec.Raw = msgspec.Raw(b"\xc0")  # msgpack nil
    error: str = ""


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
    | Complete
    | SetLogLevel
    | Subscribe
    | Unsubscribe
    | Reload
    | Cancel
    | Answer
    | GetLogs
    | Shutdown
    | GetAudit
)


# --------------------------------------------------------------- front replies


class ToolList(_Message):
    id: int
    tools: list[ToolInfo]
    version: int = 0
    starting: list[str] = msgspec.field(default_factory=list)  # servers whose first start is not over


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


class ServerRequest(_Message):
    """Not a terminal reply: the server asks something (``method``, one of ``ASKABLE``) during the call
    ``id``, whose caller said it answers such requests; ``params`` are the MCP request's params as a
    msgpack map in their JSON shape. The caller answers with ``Answer`` (same ``id`` and ``ask``) within
    the call's deadline."""

    id: int
    ask: int
    method: str
    params: msgspec.Raw


FrontReply = (
    ToolList
    | CallResult
    | StatusReply
    | Done
    | ErrorReply
    | Listing
    | Reloaded
    | CallProgress
    | ServerRequest
    | LogLines
    | AuditRecords
)

_front_request = msgspec.msgpack.Decoder(FrontRequest)
_front_reply = msgspec.msgpack.Decoder(FrontReply)
decode_front_request = total_decoder(_front_request.decode)
decode_front_reply = total_decoder(_front_reply.decode)
