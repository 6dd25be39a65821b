"""The W3C trace context on the wire: ``traceparent`` and ``tracestate`` strings checked, read into an
OpenTelemetry context, and written from a span; and the attribute names every span made here shares.

Above: ``supervisor.shared.tracing`` (its spans join a caller's context, and pass theirs on in an MCP
request's ``_meta``), the client stubs and the router (``wire_context``: a span's context into the
``CallTool`` or ``Invoke`` they send); ``supervisor.protocol``'s tests hold the wire's field
limits to ``MAX_TRACEPARENT`` and ``MAX_TRACESTATE``. Below: the OpenTelemetry API, imported only when
a context is read or written. One that is not valid, or too long, is ignored: never an error, never
passed on.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span
    from opentelemetry.trace.span import TraceState

__all__ = [
    "ERROR_TYPE",
    "MAX_STATUS",
    "MAX_TRACEPARENT",
    "MAX_TRACESTATE",
    "METHOD",
    "OPERATION",
    "OUTCOME",
    "SERVER",
    "TOOL",
    "TOOL_NAME",
    "meta",
    "parent",
    "trace_state",
    "valid_traceparent",
    "valid_tracestate",
    "wire_context",
]

MAX_TRACEPARENT: Final = 55  # characters of a W3C traceparent: 00-{32 hex}-{16 hex}-{2 hex}
MAX_TRACESTATE: Final = 512  # characters of a tracestate passed on (W3C asks for at least 512)
_TRACEPARENT: Final = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_KEY: Final = r"(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
_VALUE: Final = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_MEMBER: Final = re.compile(rf"[ \t]*({_KEY})=({_VALUE})[ \t]*")
_MAX_MEMBERS: Final = 32

# Attributes: the MCP and GenAI semantic conventions where they have a name, ours otherwise.
METHOD: Final = "mcp.method.name"
OPERATION: Final = "gen_ai.operation.name"
TOOL_NAME: Final = "gen_ai.tool.name"
SERVER: Final = "mcp.server"  # the server's name in the config
TOOL: Final = "mcp.tool"  # the tool's own name on its server
OUTCOME: Final = "mcp_supervisor.outcome"  # "ok", or the error code of the terminal reply
ERROR_TYPE: Final = "error.type"
MAX_STATUS: Final = 500  # characters of an error message kept as a span's status description


def valid_traceparent(value: str) -> bool:
    """Whether ``value`` is a W3C traceparent this side can join: 55 characters of lowercase hex in
    four fields, a version other than ``ff``, and neither id all zeros."""
    return (
        len(value) == MAX_TRACEPARENT
        and _TRACEPARENT.fullmatch(value) is not None
        and not value.startswith("ff")
        and value[3:35] != "0" * 32
        and value[36:52] != "0" * 16
    )


def valid_tracestate(value: str) -> bool:
    """Whether ``value`` is a W3C tracestate of at most ``MAX_TRACESTATE`` characters (at most 32
    ``key=value`` members, comma-separated, each key once; empty members allowed)."""
    if len(value) > MAX_TRACESTATE:
        return False
    members = [_MEMBER.fullmatch(member) for member in value.split(",") if member.strip(" \t")]
    keys = {member[1] for member in members if member is not None}
    return len(members) <= _MAX_MEMBERS and None not in members and len(keys) == len(members)


def parent(traceparent: str, tracestate: str = "") -> Context | None:
    """The context whose (remote) span is the one ``traceparent`` names, or None when it names none
    that is valid (a new trace then starts here). An invalid ``tracestate`` alone is dropped."""
    if not valid_traceparent(traceparent):
        return None
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

    state = trace_state(tracestate) if tracestate and valid_tracestate(tracestate) else None
    remote = SpanContext(
        trace_id=int(traceparent[3:35], 16),
        span_id=int(traceparent[36:52], 16),
        is_remote=True,
        trace_flags=TraceFlags(int(traceparent[53:55], 16)),
        trace_state=state,
    )
    return set_span_in_context(NonRecordingSpan(remote))


def trace_state(tracestate: str) -> TraceState:
    """A valid ``tracestate`` (``valid_tracestate``) as OpenTelemetry's ``TraceState``, read here, so
    that OpenTelemetry has nothing to warn about."""
    from opentelemetry.trace.span import TraceState

    matches = (_MEMBER.fullmatch(member) for member in tracestate.split(",") if member.strip(" \t"))
    return TraceState([(match[1], match[2]) for match in matches if match is not None])


def wire_context(span: Span) -> tuple[str, str]:
    """``span``'s context as (traceparent, tracestate) for the wire; ("", "") for an invalid span
    (a no-op tracer's), and a tracestate too long to pass on is left out."""
    context = span.get_span_context()
    if not context.is_valid:
        return "", ""
    traceparent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    tracestate = context.trace_state.to_header() if context.trace_state else ""
    return traceparent, tracestate if len(tracestate) <= MAX_TRACESTATE else ""


def meta(span: Span) -> dict[str, str]:
    """``span``'s context as the entries of an MCP request's ``_meta`` (as the SDK injects it)."""
    traceparent, tracestate = wire_context(span)
    meta = {"traceparent": traceparent} if traceparent else {}
    if traceparent and tracestate:
        meta["tracestate"] = tracestate
    return meta
