"""OpenTelemetry traces of routed calls: the switch, the provider, the spans, and the trace context
on the wire.

Above: the client stubs (``supervisor.client.exchanges``: a CLIENT span ``tools/call NAME`` per
``call_tool``, with the application's own tracer provider, its context sent as
``CallTool.traceparent``); the supervisor (``supervisor.daemon.lifecycle`` starts and stops tracing,
``supervisor.daemon.servers.keeper`` tells each worker through its boot line,
``supervisor.daemon.router`` opens a span ``route NAME`` per tool call (``route``) and sends its
context to the worker in ``Invoke``, ``supervisor.daemon.call_table`` ends it with the call's
terminal reply); the worker (``workers.worker`` starts and stops tracing, ``workers.calls`` opens one
span ``tools/call TOOL`` per ``Invoke`` (``serve``), whose context goes to the server in the request's
``_meta``: written by the worker itself on the stdio hot path, by the MCP SDK, whose own CLIENT span
nests in it, on a remote server). Below: ``supervisor.shared.spans`` (sampling, and spans made
cheaply), the OpenTelemetry API (the MCP SDK depends on it) and, only once tracing is started, its
SDK and span exporters (the ``tracing`` extra), configured by the standard ``OTEL_*`` environment
variables.

Off costs nothing: ``on`` is a module flag that the supervisor and the workers read before anything
else, and no OpenTelemetry module is even imported by the supervisor or by the client stub for it (the
stub traces only when the application has imported OpenTelemetry itself). On, a trace is sampled once,
where it starts (by ``OTEL_TRACES_SAMPLER``; by default every trace a caller did not send unsampled),
and a call whose trace is not sampled makes no span object in the supervisor or the worker: only its
context travels on, so the server sees the same trace.

Trace context crosses ZeroMQ as W3C ``traceparent`` and ``tracestate`` strings, read and written by
``supervisor.shared.trace_context``. One that is not valid, or too long, is ignored: never an error,
never passed on.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Final, Protocol, cast

from supervisor.shared.trace_context import ERROR_TYPE, MAX_STATUS, METHOD, OPERATION, TOOL_NAME, parent

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span as OtelSpan
    from opentelemetry.trace import Tracer, TracerProvider

    from supervisor.shared.spans import Recorder, Span

__all__ = [
    "EXTRA",
    "SUPERVISOR_FLUSH_TIMEOUT",
    "SUPERVISOR_SERVICE",
    "WORKER_FLUSH_TIMEOUT",
    "WORKER_SERVICE",
    "TracingUnavailable",
    "calling",
    "client_span",
    "end",
    "end_route",
    "joined",
    "on",
    "outcome",
    "route",
    "routed",
    "serve",
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

_UNTRACED: Final[AbstractContextManager[None]] = nullcontext()

_provider: SdkTracerProvider | None = None
_recorder: Recorder | None = None  # this process's own spans (supervisor, worker), while ``on``
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
    global on, _provider, _recorder
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        from supervisor.shared.spans import Recorder, Sampling
    except ImportError as exc:
        why = f"tracing needs the OpenTelemetry SDK ({exc.name} is missing): {EXTRA}"
        raise TracingUnavailable(why) from None
    exporters = _exporters()
    attributes: dict[str, str | int] = {"service.name": service, "process.pid": os.getpid()}
    if server is not None:
        attributes["mcp_supervisor.server"] = server
    resource = Resource.create(attributes).merge(OTELResourceDetector().detect())
    # Not at exit: ``stop`` flushes with a bound, where the SDK's own hook could wait 30 s per processor.
    sampling = Sampling.from_environ(os.environ)
    provider = TracerProvider(resource=resource, sampler=sampling.sdk_sampler(), shutdown_on_exit=False)
    processors = [BatchSpanProcessor(exporter) for exporter in exporters]
    for processor in processors:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    scope = InstrumentationScope(TRACER)
    _provider = provider
    _recorder = Recorder(sampling, processors, provider.resource, scope, provider.id_generator)
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
    global on, _provider, _recorder
    provider = _provider
    on, _provider, _recorder = False, None, None
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


# ---------------------------------------------------------------- the supervisor's and the worker's spans


def route(name: str, traceparent: str, tracestate: str) -> tuple[Span | None, str, str]:
    """A tool call arrives, with the caller's context (none, or one that is not valid: a trace begins
    here): its span ``route NAME`` if the trace is sampled, else None (and nothing made); and the
    context to send the worker, as (traceparent, tracestate). Ended by ``end_route``."""
    assert _recorder is not None, "tracing is not started"
    return _recorder.begin(True, name, traceparent, tracestate)


def routed(span: Span, server: str, tool: str) -> None:
    """The call goes to ``server``'s tool ``tool`` (its own name there)."""
    span.server, span.tool = server, tool


def end_route(span: Span, code: str | None, message: str = "") -> None:
    """The call's terminal reply went out: a result (``code`` None), or an error with that code."""
    outcome(span, code, message)
    end(span)


def serve(tool: str, traceparent: str, tracestate: str) -> tuple[Span | None, dict[str, str]]:
    """A worker serves an ``Invoke``, sent with the supervisor's context: its span ``tools/call TOOL``
    if the trace is sampled (else None, and nothing made), and the ``_meta`` entries that carry the
    context on to the server: the span's own, or the one the ``Invoke`` came with. Ended by ``end``."""
    assert _recorder is not None, "tracing is not started"
    span, traceparent, tracestate = _recorder.begin(False, tool, traceparent, tracestate)
    if tracestate:
        return span, {"traceparent": traceparent, "tracestate": tracestate}
    return span, {"traceparent": traceparent}


def outcome(span: Span, code: str | None, message: str = "") -> None:
    """How the span's call ended: answered (``code`` None), or failed with ``code``."""
    span.outcome, span.message = ("ok", "") if code is None else (code, message)


def end(span: Span) -> None:
    """The span's call is over: its span goes to the exporters (unless tracing has stopped since)."""
    if _recorder is not None:
        _recorder.end(span)


def joined(trace: Mapping[str, str] | None) -> AbstractContextManager[object]:
    """While the MCP SDK sends a request of a call whose context is ``trace`` (``serve``'s ``_meta``
    entries; None: not tracing): that context current, so that the SDK's own span of the request
    is its child, sampled as it is, and carries it on to the server."""
    if trace is None:
        return _UNTRACED
    context = parent(trace["traceparent"], trace.get("tracestate", ""))
    return _UNTRACED if context is None else _attached(context)


@contextmanager
def _attached(context: Context) -> Iterator[None]:
    from opentelemetry.context import attach, detach

    token = attach(context)
    try:
        yield
    finally:
        detach(token)


# ---------------------------------------------------------------- the client stub's spans


def client_span(name: str) -> OtelSpan | None:
    """A ``call_tool`` of the stub: a CLIENT span ``tools/call NAME`` from the application's own tracer
    provider, child of its current span. None, and nothing more done, when there is no trace to join:
    the application has not imported OpenTelemetry, or its provider is the API's no-op one and no span
    is current. End it with ``calling``."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry.trace import ProxyTracerProvider, SpanKind, get_current_span, get_tracer_provider

    global _client_tracer
    provider = get_tracer_provider()
    if type(provider) is ProxyTracerProvider and not get_current_span().get_span_context().is_valid:
        return None  # no provider set and no span current: the no-op tracer's span would be invalid
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
def calling(span: OtelSpan, coded: type[BaseException]) -> Iterator[None]:
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


def traced(span: OtelSpan | None, coded: type[BaseException]) -> AbstractContextManager[None]:
    """``calling(span, coded)``, or nothing for no span."""
    return _UNTRACED if span is None else calling(span, coded)
