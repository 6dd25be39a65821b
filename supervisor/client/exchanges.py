"""The client stubs' requests: each one built, with how long to wait and how to read its reply.

Above: the stubs' methods (``supervisor.client.methods``, written once for ``SupervisorClient`` and
``AsyncSupervisorClient``), each of which returns an ``Exchange`` from here that the stub carries over
its socket (blocking, or async), handing the reply to ``parse``. Below: the front protocol
(``supervisor.protocol``) and the exceptions of ``supervisor.client.errors``. No I/O here, so the two
clients cannot drift: a request's arguments are checked, its id taken and its reply read in one
place. A tool call made in an application that uses OpenTelemetry gets a CLIENT span from the
application's tracer provider, whose context goes to the supervisor (``supervisor.shared.tracing``); the
clients wait for its reply inside ``Exchange.traced``. A client that stops waiting for a request's
terminal reply (its task cancelled, its caller interrupted, its wait over) sends ``Requests.cancel``
for it, on the socket that sent the request: the supervisor then answers the request ``CANCELLED``
(a reply nobody reads) and tells its server.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

import msgspec

from supervisor.client.errors import SupervisorError, ToolExecutionError, error_for
from supervisor.protocol import (
    MAX_GRACE,
    MAX_IDENTITY,
    MAX_LIST_WAIT,
    AuditRecords,
    CallResult,
    CallTool,
    Cancel,
    Complete,
    Completion,
    Done,
    ErrorReply,
    FrontReply,
    FrontRequest,
    FrontStats,
    GetAudit,
    GetLogs,
    GetPrompt,
    GetStatus,
    Listing,
    ListPrompts,
    ListResources,
    ListResourceTemplates,
    ListTools,
    LogLines,
    Ping,
    ProgressCallback,
    PromptInfo,
    PromptResult,
    ReadResource,
    Reload,
    Reloaded,
    ReloadSummary,
    ResourceInfo,
    ResourceResult,
    ResourceTemplateInfo,
    Restart,
    ServerLog,
    ServerStatus,
    SetLogLevel,
    Shutdown,
    Start,
    StatusReply,
    Stop,
    Subscribe,
    ToolInfo,
    ToolList,
    ToolResult,
    Unsubscribe,
)
from supervisor.shared import trace_context, tracing

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = [
    "LIVENESS_AFTER",
    "LIVENESS_TICK",
    "LIVENESS_WAIT",
    "REQUEST_TIMEOUT",
    "Exchange",
    "Requests",
    "check_identity",
    "default_identity",
]

log = logging.getLogger("mcp_supervisor.client")

REQUEST_TIMEOUT: Final = 10.0  # seconds to wait for an answer to list/status/restart/ping
CALL_WAIT_WITHOUT_TIMEOUT: Final = (
    3600.0  # seconds a call with no timeout waits (the server's toolTimeout rules)
)
RELOAD_WAIT: Final = 30.0  # seconds for a reload: removed servers' workers get up to 10 s each to stop
REPLY_MARGIN: Final = 2.0  # seconds past a call's own timeout before the client stops waiting
LIVENESS_AFTER: Final = 5.0  # seconds of silence in a longer wait before the client pings the supervisor
LIVENESS_WAIT: Final = 5.0  # seconds that ping has to be answered; else the supervisor is UNREACHABLE
LIVENESS_TICK: Final = 1.0  # seconds between the async client's looks at a long wait's silence

_T = TypeVar("_T")
_E = TypeVar("_E", ResourceInfo, ResourceTemplateInfo, PromptInfo)
_R = TypeVar("_R", ResourceResult, PromptResult, Completion)

_decode_result = msgspec.msgpack.Decoder(ToolResult).decode
_encode_arguments = msgspec.msgpack.Encoder().encode
_decode_resources = msgspec.msgpack.Decoder(list[ResourceInfo]).decode
_decode_templates = msgspec.msgpack.Decoder(list[ResourceTemplateInfo]).decode
_decode_prompts = msgspec.msgpack.Decoder(list[PromptInfo]).decode
_decode_resource = msgspec.msgpack.Decoder(ResourceResult).decode
_decode_prompt = msgspec.msgpack.Decoder(PromptResult).decode
_decode_completion = msgspec.msgpack.Decoder(Completion).decode


@dataclass(frozen=True, slots=True)
class Exchange(Generic[_T]):
    """One request and what its terminal reply means."""

    request: FrontRequest
    parse: Callable[[FrontReply], _T]  # raises the SupervisorError an ErrorReply stands for
    wait: float | None = None  # seconds for the reply; None: the client's request_timeout
    progress: ProgressCallback | None = None  # for CallProgress replies, while it waits
    span: Span | None = None  # a tool call's CLIENT span, in an application that traces

    def traced(self) -> AbstractContextManager[None]:
        """Around the wait for the reply: the call's span current, ended with the outcome."""
        return tracing.traced(self.span, SupervisorError)


def default_identity() -> str:
    """A client's identity when it names none: this process and a random part, so that two clients
    never share a ``scope: client`` session unless they name the same identity."""
    return f"{os.getpid()}-{secrets.token_hex(4)}"


def check_identity(identity: str, what: str = "identity") -> str:
    """A client identity (or a ``principal``, a ``session``: ``what``) as a client names it: 1 to
    ``MAX_IDENTITY`` printable characters."""
    if not isinstance(identity, str) or not 0 < len(identity) <= MAX_IDENTITY or not identity.isprintable():
        raise ValueError(f"{what} must be 1 to {MAX_IDENTITY} printable characters, not {identity!r}")
    return identity


class Requests:
    """Builds each request with a fresh id (one counter per client), on behalf of ``identity`` (the
    client's session on ``scope: client`` servers); tool calls say which server requests the client
    answers itself (``answers``: ``SAMPLING``, ``ELICITATION``)."""

    def __init__(
        self,
        identity: str | None = None,
        answers: Iterable[str] = (),
        ids: Iterator[int] | None = None,
        principal: str = "",
        session: str = "",
    ) -> None:
        """``ids``: a counter shared with the client's other ``Requests`` (one connection, one id space);
        ``principal`` and ``session`` go with every call, read and prompt (the audit trail names them)."""
        self._ids = itertools.count(1) if ids is None else ids
        self.identity = default_identity() if identity is None else check_identity(identity)
        self.principal = principal and check_identity(principal, "principal")
        self.session = session and check_identity(session, "session")
        self.answers = sorted(answers)

    def twin(self, identity: str, answers: Iterable[str], principal: str = "", session: str = "") -> Requests:
        """Requests for another identity over the same connection (the same ids)."""
        return Requests(identity, answers, self._ids, principal, session)

    def _parties(self) -> dict[str, str]:
        """Who a call, read or prompt is for: ``client``, ``principal`` and ``session``."""
        return {"client": self.identity, "principal": self.principal, "session": self.session}

    def tool_list(self, wait: float = 0.0) -> Exchange[ToolList]:
        return Exchange(_list_tools(next(self._ids), wait), _expecting(ToolList), _list_wait(wait))

    def list_tools(self, wait: float = 0.0) -> Exchange[list[ToolInfo]]:
        parse: Callable[[FrontReply], list[ToolInfo]] = lambda reply: _expect(reply, ToolList).tools  # noqa: E731
        return Exchange(_list_tools(next(self._ids), wait), parse, _list_wait(wait))

    def status(self) -> Exchange[list[ServerStatus]]:
        return Exchange(GetStatus(id=next(self._ids)), lambda reply: _expect(reply, StatusReply).servers)

    def events_endpoint(self) -> Exchange[str]:
        return Exchange(GetStatus(id=next(self._ids)), lambda reply: _expect(reply, StatusReply).events)

    def front_stats(self) -> Exchange[FrontStats]:
        return Exchange(
            GetStatus(id=next(self._ids)), lambda reply: _expect(reply, StatusReply).front or FrontStats()
        )

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        timeout: float | None,
        raise_on_error: bool,
        progress: ProgressCallback | None,
    ) -> Exchange[ToolResult]:
        span = tracing.client_span(name)  # None: the application has no trace to join
        traceparent, tracestate = ("", "") if span is None else trace_context.wire_context(span)
        request = CallTool(
            id=next(self._ids),
            name=name,
            arguments=msgspec.Raw(_encode_arguments(arguments or {})),
            timeout=_check_timeout(timeout),
            progress=progress is not None,
            answers=self.answers,
            traceparent=traceparent,
            tracestate=tracestate,
            **self._parties(),
        )
        return Exchange(
            request, lambda reply: _result(reply, name, raise_on_error), _call_wait(timeout), progress, span
        )

    def list_resources(self, server: str | None, timeout: float | None) -> Exchange[list[ResourceInfo]]:
        request = ListResources(
            id=next(self._ids), server=server, timeout=_check_timeout(timeout), client=self.identity
        )
        return Exchange(request, lambda reply: _entries(reply, _decode_resources), _call_wait(timeout))

    def list_resource_templates(
        self, server: str | None, timeout: float | None
    ) -> Exchange[list[ResourceTemplateInfo]]:
        request = ListResourceTemplates(
            id=next(self._ids), server=server, timeout=_check_timeout(timeout), client=self.identity
        )
        return Exchange(request, lambda reply: _entries(reply, _decode_templates), _call_wait(timeout))

    def read_resource(self, server: str, uri: str, timeout: float | None) -> Exchange[ResourceResult]:
        timeout = _check_timeout(timeout)
        request = ReadResource(id=next(self._ids), server=server, uri=uri, timeout=timeout, **self._parties())
        return Exchange(request, lambda reply: _fetched(reply, _decode_resource), _call_wait(timeout))

    def list_prompts(self, server: str | None, timeout: float | None) -> Exchange[list[PromptInfo]]:
        request = ListPrompts(
            id=next(self._ids), server=server, timeout=_check_timeout(timeout), client=self.identity
        )
        return Exchange(request, lambda reply: _entries(reply, _decode_prompts), _call_wait(timeout))

    def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None, server: str | None, timeout: float | None
    ) -> Exchange[PromptResult]:
        raw = msgspec.Raw(_encode_arguments(arguments or {}))
        request = GetPrompt(
            id=next(self._ids),
            name=name,
            arguments=raw,
            server=server,
            timeout=_check_timeout(timeout),
            **self._parties(),
        )
        return Exchange(request, lambda reply: _fetched(reply, _decode_prompt), _call_wait(timeout))

    def complete(
        self,
        ref: Mapping[str, str],
        argument: tuple[str, str],
        context: Mapping[str, str] | None,
        server: str | None,
        timeout: float | None,
    ) -> Exchange[Completion]:
        kind = ref.get("type")
        if kind not in ("ref/prompt", "ref/resource"):
            raise ValueError(f"ref must be a ref/prompt (name) or a ref/resource (uri), not {kind!r}")
        name, value = argument
        request = Complete(
            id=next(self._ids),
            ref=msgspec.Raw(msgspec.msgpack.encode(dict(ref))),
            argument=msgspec.Raw(msgspec.msgpack.encode({"name": name, "value": value})),
            server=server,
            timeout=_check_timeout(timeout),
            client=self.identity,
        )
        if context is not None:
            request.context = msgspec.Raw(msgspec.msgpack.encode({"arguments": dict(context)}))
        return Exchange(request, lambda reply: _fetched(reply, _decode_completion), _call_wait(timeout))

    def set_log_level(self, level: str, server: str | None) -> Exchange[None]:
        return Exchange(SetLogLevel(id=next(self._ids), level=level, server=server), _done)

    def subscribe(self, server: str, uri: str) -> Exchange[None]:
        return Exchange(Subscribe(id=next(self._ids), server=server, uri=uri), _done)

    def unsubscribe(self, server: str, uri: str) -> Exchange[None]:
        return Exchange(Unsubscribe(id=next(self._ids), server=server, uri=uri), _done)

    def restart(self, server: str) -> Exchange[None]:
        return Exchange(Restart(id=next(self._ids), server=server), _done)

    def stop(self, server: str) -> Exchange[None]:
        return Exchange(Stop(id=next(self._ids), server=server), _done)

    def start(self, server: str) -> Exchange[None]:
        return Exchange(Start(id=next(self._ids), server=server), _done)

    def ping(self) -> Exchange[None]:
        return Exchange(Ping(id=next(self._ids)), _done)

    def reload(self, request_timeout: float) -> Exchange[ReloadSummary]:
        wait = max(request_timeout, RELOAD_WAIT)
        return Exchange(Reload(id=next(self._ids)), lambda reply: _expect(reply, Reloaded).summary, wait)

    def logs(self, server: str, after: int, limit: int) -> Exchange[ServerLog]:
        if after < 0 or limit < 0:
            raise ValueError(f"after and limit must be >= 0, not {after!r} and {limit!r}")
        request = GetLogs(id=next(self._ids), server=server, after=after, limit=limit)
        return Exchange(request, lambda reply: _expect(reply, LogLines).log)

    def audit(self, filters: Mapping[str, Any], limit: int) -> Exchange[AuditRecords]:
        """``filters``: ``since``, ``identity``, ``tool``, ``server`` of ``GetAudit`` (None: any)."""
        if limit < 0:
            raise ValueError(f"limit must be >= 0, not {limit!r}")
        request = GetAudit(id=next(self._ids), limit=limit, **filters)
        return Exchange(request, _expecting(AuditRecords))

    def shutdown(self, grace: float | None) -> Exchange[None]:
        if grace is not None and not (0 <= grace <= MAX_GRACE):  # NaN too
            raise ValueError(f"grace must be 0 to {MAX_GRACE:g} seconds, not {grace!r}")
        return Exchange(Shutdown(id=next(self._ids), grace=grace), _done)

    @staticmethod
    def cancel(id: int) -> Cancel:
        """Cancel request ``id``, which this connection sent and no longer waits for. It has no reply
        of its own (and takes no id): a request in flight is answered ``CANCELLED``, anything else
        ignored, so it is safe to send for a request that may have been answered already."""
        return Cancel(id=id)


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return timeout


def _call_wait(timeout: float | None) -> float:
    return (CALL_WAIT_WITHOUT_TIMEOUT if timeout is None else timeout) + REPLY_MARGIN


def _result(reply: FrontReply, name: str, raise_on_error: bool) -> ToolResult:
    if isinstance(reply, ErrorReply):
        raise error_for(reply.code, reply.message)
    if not isinstance(reply, CallResult):
        raise SupervisorError(f"unexpected reply {type(reply).__name__} to a tool call")
    result = _decode_result(reply.result)
    if result.is_error and raise_on_error:
        raise ToolExecutionError(f"tool {name!r} reported an error: {result.text}", result)
    return result


def _entries(reply: FrontReply, decode: Callable[[bytes], list[_E]]) -> list[_E]:
    """Every server's entries of a ``Listing``; a server that did not answer is logged and left out."""
    listing = _expect(reply, Listing)
    for failure in listing.failures:
        log.warning("left out of the listing: %s: %s", failure.code, failure.message)
    return [entry for part in listing.parts for entry in decode(part)]


def _fetched(reply: FrontReply, decode: Callable[[bytes], _R]) -> _R:
    return decode(_expect(reply, CallResult).result)


def _done(reply: FrontReply) -> None:
    _expect(reply, Done)


def _expecting(kind: type[_T]) -> Callable[[FrontReply], _T]:
    return lambda reply: _expect(reply, kind)


def _expect(reply: FrontReply, kind: type[_T]) -> _T:
    if isinstance(reply, ErrorReply):
        raise error_for(reply.code, reply.message)
    if not isinstance(reply, kind):
        raise SupervisorError(f"unexpected reply {type(reply).__name__}, wanted {kind.__name__}")
    return reply


def _list_tools(id: int, wait: float) -> ListTools:
    if not (wait >= 0 and math.isfinite(wait)):
        raise ValueError(f"wait must be a number of seconds, 0 or more, not {wait!r}")
    return ListTools(id=id, wait=wait)


def _list_wait(wait: float) -> float | None:
    """How long a client waits for a listing that may wait ``wait`` seconds (None: its request_timeout)."""
    return min(wait, MAX_LIST_WAIT) + REQUEST_TIMEOUT if wait > 0 else None
