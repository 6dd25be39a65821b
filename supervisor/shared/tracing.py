"""OpenTelemetry traces of routed calls: the switch, the provider, the spans, and the trace context
on the wire.

Above: the client stubs (``supervisor.client.exchanges``: a CLIENT span ``tools/call NAME`` per ``call_tool``,
with the application's own tracer provider, its context sent as ``CallTool.traceparent``); the
supervisor (``supervisor.daemon.lifecycle`` starts and stops tracing, ``supervisor.daemon.servers.keeper``
tells each worker
through its boot line, ``supervisor.daemon.router`` opens a span ``route NAME`` per tool call and sends its
context to the worker in ``Invoke``, ``supervisor.daemon.call_table`` ends it with the call's terminal
reply); the
worker (``workers.worker`` starts and stops tracing, ``workers.calls`` opens a span ``tools/call TOOL``
per ``Invoke``, around the request to the server: the SDK's own CLIENT span nests in it and puts the
context in the request's ``_meta``, and on the hot path ``sending`` does the same). Below: the
OpenTelemetry API (the MCP SDK depends on it) and, only once tracing is started, its SDK and span
exporters (the ``tracing`` extra), configured by the standard ``OTEL_*`` environment variables.

Off costs nothing: ``on`` is a module flag that the supervisor and the workers read before anything
else, and no OpenTelemetry module is even imported by the supervisor or by the client stub for it (the
stub traces only when the application has imported OpenTelemetry itself).

Trace context crosses ZeroMQ as W3C ``traceparent`` and ``tracestate`` strings, read and written by
``supervisor.shared.trace_context``. One that is not valid, or too long, is ignored: never an error,
never passed on.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Final, Protocol, cast

from supervisor.shared.trace_context import meta, parent

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = [
    "EXTRA",
    "SUPERVISOR_FLUSH_TIMEOUT",
    "SUPERVISOR_SERVICE",
    "WORKER_FLUSH_TIMEOUT",
    "WORKER_SERVICE",
    "TracingUnavailable",
    "calling",
    "client_span",
    "end_route",
    "on",
    "outcome",
    "route_span",
    "routed",
    "sending",
    "serving",
    "start",
    "stop",
    "traced",
]

log = logging.getLogger("mcp_supervisor")

on = False
"""Whether this process traces its routed calls (``start`` turns it on, ``stop`` off). Read first on
every call, so that with tracing off the supervisor and the workers make no span at all."""

EXTRA: Final = "pip install 'mcp-supervisor[tracing]'"
SUPERVISOR_SERVICE: Final = "mcp-supervisor"  # service.name, unless OTEL_SERVICE_NAME says otherwise
WORKER_SERVICE: Final = "mcp-supervisor-worker"
TRACER: Final = "mcp_supervisor"  # the instrumentation scope of every span made here
SUPERVISOR_FLUSH_TIMEOUT: Final = 2.0  # seconds to export the last spans at shutdown (collector down?)
WORKER_FLUSH_TIMEOUT: Final = 1.0  # the same for a worker, well within its keeper's stop timeout
MAX_STATUS: Final = 500  # characters of an error message kept as a span's status description

# Attributes: the MCP and GenAI semantic conventions where they have a name, ours otherwise.
METHOD: Final = "mcp.method.name"
OPERATION: Final = "gen_ai.operation.name"
TOOL_NAME: Final = "gen_ai.tool.name"
SERVER: Final = "mcp.server"  # the server's name in the config
TOOL: Final = "mcp.tool"  # the tool's own name on its server
OUTCOME: Final = "mcp_supervisor.outcome"  # "ok", or the error code of the terminal reply
ERROR_TYPE: Final = "error.type"

_UNTRACED: Final[AbstractContextManager[None]] = nullcontext()

_provider: SdkTracerProvider | None = None
_tracer: Tracer | None = None  # this process's own spans (supervisor, worker), while ``on``
_client_tracer: tuple[TracerProvider, Tracer] | None = None  # the stub's, from the application's provider


class TracingUnavailable(Exception):
    """Tracing was asked for and cannot be started; the message says what to install or set."""


# ---------------------------------------------------------------- the provider


def start(service: str, *, server: str | None = None) -> None:
    """Trace this process: an SDK ``TracerProvider`` (made the global one, so the MCP SDK's spans join
    in) with a ``BatchSpanProcessor`` per exporter ``OTEL_TRACES_EXPORTER`` names (``otlp`` by default,
    over HTTP as ``OTEL_EXPORTER_OTLP_*`` say; ``console``; ``none``), resource ``service.name``
    ``service`` unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` say otherwise, and
    ``mcp_supervisor.server`` for a worker. Raises ``TracingUnavailable`` naming what is missing."""
    global on, _provider, _tracer
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        why = f"tracing needs the OpenTelemetry SDK ({exc.name} is missing): {EXTRA}"
        raise TracingUnavailable(why) from None
    exporters = _exporters()
    attributes: dict[str, str | int] = {"service.name": service, "process.pid": os.getpid()}
    if server is not None:
        attributes["mcp_supervisor.server"] = server
    resource = Resource.create(attributes).merge(OTELResourceDetector().detect())
    # Not at exit: ``stop`` flushes with a bound, where the SDK's own hook could wait 30 s per processor.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _provider, _tracer = provider, provider.get_tracer(TRACER)
    logging.getLogger("urllib3.connectionpool").setLevel(logging.INFO)  # no debug lines per export
    on = True


def _exporters() -> list[SpanExporter]:
    """The span exporters ``OTEL_TRACES_EXPORTER`` names (comma-separated; ``none``: none)."""
    from importlib.metadata import entry_points

    names = [name.strip() for name in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()]
    exporters: list[SpanExporter] = []
    for name in names or ["otlp"]:
        if name == "none":
            continue
        point = _entry_point_name(name)
        found = entry_points(group="opentelemetry_traces_exporter", name=point)
        if not found:
            installed = sorted(entry.name for entry in entry_points(group="opentelemetry_traces_exporter"))
            raise TracingUnavailable(
                f"OTEL_TRACES_EXPORTER names {name!r}, and no span exporter {point!r} is installed "
                f"(installed: {', '.join(installed) or 'none'}); for OTLP over HTTP: {EXTRA}"
            )
        try:
            exporters.append(next(iter(found)).load()())
        except Exception as exc:  # boundary: a third-party exporter's set-up, from the environment
            raise TracingUnavailable(f"the span exporter {name!r} could not be made: {exc}") from None
    return exporters


def _entry_point_name(name: str) -> str:
    """An exporter's entry point: ``otlp`` is OTLP over the protocol ``OTEL_EXPORTER_OTLP_*PROTOCOL``
    says (``http/protobuf`` by default)."""
    if name != "otlp":
        return name
    environ = os.environ
    given = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    protocol = (given or "").strip() or "http/protobuf"
    by_protocol = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}
    if protocol not in by_protocol:
        raise TracingUnavailable(f"OTLP protocol {protocol!r} is not supported (http/protobuf or grpc)")
    return by_protocol[protocol]


def stop(timeout: float) -> None:
    """Stop tracing: export the spans still queued, waiting at most ``timeout`` seconds (a collector
    that is down or slow costs that bound, never a hang); those not exported by then are dropped."""
    global on, _provider, _tracer
    provider = _provider
    on, _provider, _tracer = False, None, None
    if provider is None:
        return
    done = threading.Event()

    def shut_down() -> None:
        try:
            provider.shutdown()
        except Exception:  # boundary: an exporter's failure must not end the process's shutdown
            log.exception("tracing: the span exporters failed to shut down")
        finally:
            done.set()

    threading.Thread(target=shut_down, name="mcp-supervisor-spans", daemon=True).start()
    if not done.wait(timeout):
        log.warning("tracing: spans still unexported after %g s were dropped (is the collector up?)", timeout)


# ---------------------------------------------------------------- the supervisor's spans


def route_span(name: str, traceparent: str, tracestate: str) -> Span:
    """A tool call arrives: its span ``route NAME``, child of the caller's span when the request names
    a valid one (else the root of a new trace). Ended by ``end_route``."""
    from opentelemetry.trace import SpanKind

    assert _tracer is not None, "tracing is not started"
    attributes = {METHOD: "tools/call", OPERATION: "execute_tool", TOOL_NAME: name}
    context = parent(traceparent, tracestate)
    return _tracer.start_span(f"route {name}", context, SpanKind.SERVER, attributes)


def routed(span: Span, server: str, tool: str) -> None:
    """The call goes to ``server``'s tool ``tool`` (its own name there)."""
    span.set_attributes({SERVER: server, TOOL: tool})


def end_route(span: Span, code: str | None, message: str = "") -> None:
    """The call's terminal reply went out: a result (``code`` None), or an error with that code."""
    if code is None:
        span.set_attribute(OUTCOME, "ok")
    else:
        _failed(span, code, message)
    span.end()


def _failed(span: Span, code: str, message: str) -> None:
    from opentelemetry.trace import StatusCode

    span.set_attributes({OUTCOME: code, ERROR_TYPE: code})
    span.set_status(StatusCode.ERROR, message[:MAX_STATUS])


# ---------------------------------------------------------------- the worker's spans


@contextmanager
def serving(tool: str, traceparent: str, tracestate: str) -> Iterator[None]:
    """A worker serves an ``Invoke``: its span ``tools/call TOOL``, current while the call runs (so the
    SDK's own span for the request to the server is its child), child of the supervisor's span."""
    from opentelemetry.trace import SpanKind

    assert _tracer is not None, "tracing is not started"
    attributes = {METHOD: "tools/call", OPERATION: "execute_tool", TOOL_NAME: tool}
    with _tracer.start_as_current_span(
        f"tools/call {tool}",
        parent(traceparent, tracestate),
        SpanKind.SERVER,
        attributes,
        record_exception=False,
        set_status_on_exception=False,
    ):
        yield


def outcome(code: str | None, message: str = "") -> None:
    """How the current call ended (``serving``'s span): answered (``code`` None), or failed."""
    from opentelemetry.trace import get_current_span

    span = get_current_span()
    if code is None:
        span.set_attribute(OUTCOME, "ok")
    else:
        _failed(span, code, message)


def sending(method: str, target: str) -> AbstractContextManager[dict[str, str] | None]:
    """A request the worker writes to the server itself (the hot path, not through the SDK): while
    tracing, a CLIENT span ``MCP send METHOD TARGET`` as the SDK makes for its own requests, giving the
    ``_meta`` entries that carry its context to the server; else nothing (None)."""
    return _sending(method, target) if on else _UNTRACED


@contextmanager
def _sending(method: str, target: str) -> Iterator[dict[str, str]]:
    from opentelemetry.trace import SpanKind

    assert _tracer is not None, "tracing is not started"
    name, attributes = f"MCP send {method} {target}", {METHOD: method}
    with _tracer.start_as_current_span(name, None, SpanKind.CLIENT, attributes) as span:
        yield meta(span)


# ---------------------------------------------------------------- the client stub's spans


def client_span(name: str) -> Span | None:
    """A ``call_tool`` of the stub: a CLIENT span ``tools/call NAME`` from the application's own tracer
    provider, child of its current span. None, and nothing more done, when there is no trace to join:
    the application has not imported OpenTelemetry, or its provider is the API's no-op one and no span
    is current. End it with ``calling``."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry.trace import SpanKind, get_tracer_provider

    global _client_tracer
    provider = get_tracer_provider()
    if _client_tracer is None or _client_tracer[0] is not provider:
        _client_tracer = provider, provider.get_tracer(TRACER)
    attributes = {METHOD: "tools/call", OPERATION: "execute_tool", TOOL_NAME: name}
    span = _client_tracer[1].start_span(f"tools/call {name}", kind=SpanKind.CLIENT, attributes=attributes)
    return span if span.get_span_context().is_valid else None


class _Coded(Protocol):
    """An error that names itself with a code (the client stubs' ``SupervisorError``)."""

    code: str
    message: str


@contextmanager
def calling(span: Span, coded: type[BaseException]) -> Iterator[None]:
    """The stub waits for a call's reply with ``span`` current (what its handlers trace is its child),
    and ends it: an exception is an error, with the supervisor's error code as ``error.type`` for a
    ``coded`` one (the stub's ``SupervisorError``, whose ``code`` and ``message`` it reads)."""
    from opentelemetry.trace import StatusCode, use_span

    with use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
        try:
            yield
        except coded as exc:
            failure = cast(_Coded, exc)
            span.set_attribute(ERROR_TYPE, failure.code)
            span.set_status(StatusCode.ERROR, failure.message[:MAX_STATUS])
            raise
        except BaseException as exc:
            span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
            span.set_status(StatusCode.ERROR, str(exc)[:MAX_STATUS])
            raise


def traced(span: Span | None, coded: type[BaseException]) -> AbstractContextManager[None]:
    """``calling(span, coded)``, or nothing for no span."""
    return _UNTRACED if span is None else calling(span, coded)
