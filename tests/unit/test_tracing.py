"""``supervisor.shared.tracing``: the W3C trace context on the wire, the client stub's spans, and starting and
stopping a provider from the ``OTEL_*`` environment.

The application's provider is an SDK one exporting to memory (``tests.otel.sdk_provider``); what a
process with tracing off loads is checked in a fresh interpreter.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from logging.handlers import BufferingHandler

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.span import TraceState
from opentelemetry.util._once import Once

from supervisor.client.exchanges import Requests
from supervisor.daemon import lifecycle as daemon
from supervisor.protocol import CallResult, CallTool, ErrorReply, ToolResult, decode_front_request, encode
from supervisor.shared import trace_context, tracing
from tests.otel import sdk_provider

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
HEX = "0123456789abcdef"


def oracle(value: str) -> bool:
    """The W3C rules, written out differently from the module's: four dash-separated fields of
    2, 32, 16 and 2 lowercase hex digits, version not ff, neither id all zeros."""
    fields = value.split("-")
    if [len(field) for field in fields] != [2, 32, 16, 2]:
        return False
    if any(char not in HEX for field in fields for char in field):
        return False
    return fields[0] != "ff" and int(fields[1], 16) != 0 and int(fields[2], 16) != 0


# ---------------------------------------------------------------- traceparent and tracestate


@pytest.mark.parametrize(
    "value",
    [
        TRACEPARENT,
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",  # not sampled: still joined
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",  # a later version, same fields
    ],
)
def test_a_w3c_traceparent_is_valid(value: str) -> None:
    assert trace_context.valid_traceparent(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "garbage",
        TRACEPARENT.upper(),
        TRACEPARENT + "-extra",
        " " + TRACEPARENT,
        TRACEPARENT + "\n",
        TRACEPARENT[:-1],
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff is forbidden
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero span id
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",  # not hex
        "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\u0661",  # an Arabic-Indic digit
        "x" * 10_000,
    ],
)
def test_anything_else_is_not_a_valid_traceparent(value: str) -> None:
    assert not trace_context.valid_traceparent(value)


near_traceparents = st.builds(
    "-".join,
    st.lists(st.text(alphabet=HEX + "AF-g ", min_size=0, max_size=34), min_size=1, max_size=5),
)
valid_traceparents = st.builds(
    lambda version, trace_id, span_id, flags: f"{version:02x}-{trace_id:032x}-{span_id:016x}-{flags:02x}",
    st.integers(0, 0xFE),
    st.integers(1, 2**128 - 1),
    st.integers(1, 2**64 - 1),
    st.integers(0, 0xFF),
)


@given(st.one_of(st.text(), near_traceparents, valid_traceparents))
def test_traceparent_validation_never_raises_and_accepts_exactly_the_w3c_ones(value: str) -> None:
    assert trace_context.valid_traceparent(value) is oracle(value)


@given(valid_traceparents.filter(lambda value: value.startswith("00-")))
def test_a_valid_traceparent_comes_back_out_as_it_went_in(value: str) -> None:
    context = trace_context.parent(value)
    assert context is not None
    assert trace_context.wire_context(trace.get_current_span(context)) == (value, "")


@pytest.mark.parametrize(
    "value",
    [
        "",
        "congo=t61rcWkgMzE",
        "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
        "t1@vendor=x",
        "a=1,,b=2",
        "a=1 , b=2",
    ],
)
def test_a_w3c_tracestate_is_valid(value: str) -> None:
    assert trace_context.valid_tracestate(value)


@pytest.mark.parametrize(
    "value",
    [
        "novalue",
        "=nokey",
        "UPPER=1",
        "a=1=2,b",
        "a=tab\there",
        "a=1,a=2",  # a key twice
        "a=" + "x" * 600,  # past MAX_TRACESTATE
        ",".join(f"k{i}=v" for i in range(33)),  # 33 members
    ],
)
def test_a_malformed_or_too_long_tracestate_is_not_valid(value: str) -> None:
    assert not trace_context.valid_tracestate(value)


@given(st.text(max_size=700))
def test_tracestate_validation_never_raises(value: str) -> None:
    assert trace_context.valid_tracestate(value) in (True, False)


near_tracestates = st.builds(
    ",".join,
    st.lists(
        st.builds(
            "{}={}".format, st.sampled_from(["a", "b", "k@v", "K", ""]), st.text("xyz= \t", max_size=3)
        ),
        max_size=40,
    ),
)


@given(st.one_of(st.text(max_size=600), near_tracestates))
def test_any_tracestate_is_taken_or_dropped_without_a_word_from_opentelemetry(value: str) -> None:
    recorded = BufferingHandler(capacity=1000)  # keeps every record (of up to 1000) in .buffer
    logger = logging.getLogger("opentelemetry")
    logger.addHandler(recorded)
    try:
        context = trace_context.parent(TRACEPARENT, value)
    finally:
        logger.removeHandler(recorded)
    assert recorded.buffer == []  # a client cannot fill the supervisor's log with OpenTelemetry's warnings
    assert context is not None
    state = trace_context.wire_context(trace.get_current_span(context))[1]
    assert state == ("" if not trace_context.valid_tracestate(value) else state)
    assert trace_context.valid_tracestate(state)


def test_a_tracestate_goes_with_a_valid_traceparent_and_a_bad_one_is_dropped_alone() -> None:
    good = trace_context.parent(TRACEPARENT, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
    assert good is not None
    assert trace_context.wire_context(trace.get_current_span(good)) == (
        TRACEPARENT,
        "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
    )
    bad_state = trace_context.parent(TRACEPARENT, "not a tracestate")
    assert bad_state is not None
    assert trace_context.wire_context(trace.get_current_span(bad_state)) == (TRACEPARENT, "")
    assert trace_context.parent("garbage", "rojo=1") is None


def test_our_wire_context_is_what_the_w3c_propagator_writes_and_reads() -> None:
    propagator = TraceContextTextMapPropagator()
    context = SpanContext(
        trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736,
        span_id=0x00F067AA0BA902B7,
        is_remote=False,
        trace_flags=TraceFlags(1),
        trace_state=TraceState([("rojo", "00f067aa0ba902b7")]),
    )
    span = NonRecordingSpan(context)
    carrier: dict[str, str] = {}
    propagator.inject(carrier, trace.set_span_in_context(span))
    assert trace_context.wire_context(span) == (carrier["traceparent"], carrier["tracestate"])
    ours = trace_context.parent(carrier["traceparent"], carrier["tracestate"])
    assert ours is not None
    theirs = trace.get_current_span(propagator.extract(carrier)).get_span_context()
    assert trace.get_current_span(ours).get_span_context() == theirs


def test_an_invalid_span_has_no_wire_context() -> None:
    assert trace_context.wire_context(trace.INVALID_SPAN) == ("", "")


# ---------------------------------------------------------------- the client stub


def test_a_stub_in_an_application_without_opentelemetry_loads_none_and_sends_no_trace_context() -> None:
    script = (
        "import sys; from supervisor.client.exchanges import Requests; "
        "from supervisor.protocol import encode; "
        "exchange = Requests().call_tool('mcp_x_y', {}, None, True, None); "
        "assert exchange.span is None and b'trace' not in encode(exchange.request); "
        "print(sorted(name for name in sys.modules if name.startswith('opentelemetry')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "module",
    [
        "supervisor.client.blocking",
        "supervisor.client.aio",
        "supervisor.daemon.core",
        "supervisor.daemon.lifecycle",
    ],
)
def test_the_stubs_and_the_supervisor_load_no_opentelemetry_while_tracing_is_off(module: str) -> None:
    script = f"import sys, {module}; print([n for n in sys.modules if n.startswith('opentelemetry')])"
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"


def test_with_the_no_op_provider_a_call_carries_no_trace_context() -> None:
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)  # the API's own: no SDK here
    exchange = Requests().call_tool("mcp_x_y", {}, None, True, None)
    assert exchange.span is None
    assert isinstance(exchange.request, CallTool)
    assert exchange.request.traceparent == exchange.request.tracestate == ""
    assert b"trace" not in encode(exchange.request)


def test_with_the_no_op_provider_a_call_inside_a_propagated_context_carries_that_context() -> None:
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)  # the API's own: no SDK here
    ids = trace.SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=trace.TraceFlags(1))
    with trace.use_span(trace.NonRecordingSpan(ids)):  # as a server that read a traceparent makes it current
        exchange = Requests().call_tool("mcp_x_y", {}, None, True, None)
    assert isinstance(exchange.request, CallTool)
    assert exchange.request.traceparent == f"00-{0x1234:032x}-{0x5678:016x}-01"


def test_with_an_sdk_provider_a_call_is_a_client_span_whose_context_goes_on_the_wire() -> None:
    with sdk_provider() as spans:
        tracer = trace.get_tracer("the application")
        with tracer.start_as_current_span("agent step") as step:
            exchange = Requests().call_tool("mcp_x_y", {}, None, True, None)
        with exchange.traced():
            assert trace.get_current_span() is exchange.span  # the call's own span while it waits
            exchange.parse(CallResult(id=1, result=msgspec.Raw(encode(ToolResult(content=[])))))
    [_, call] = spans.get_finished_spans()  # the step ended first
    assert call.name == "tools/call mcp_x_y" and call.kind is SpanKind.CLIENT
    assert call.parent is not None and call.parent.span_id == step.get_span_context().span_id
    assert call.attributes is not None and call.attributes["gen_ai.tool.name"] == "mcp_x_y"
    assert call.status.status_code is StatusCode.UNSET
    request = decode_front_request(encode(exchange.request))
    assert isinstance(request, CallTool)
    ids = call.context
    assert request.traceparent == f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{ids.trace_flags:02x}"
    assert trace_context.valid_traceparent(request.traceparent)


def test_a_call_that_fails_ends_its_client_span_with_the_error_code() -> None:
    with sdk_provider() as spans:
        exchange = Requests().call_tool("mcp_x_nope", {}, None, True, None)
        with pytest.raises(Exception, match="no tool"), exchange.traced():
            exchange.parse(ErrorReply(id=1, code="UNKNOWN_TOOL", message="no tool named 'mcp_x_nope'"))
    [call] = spans.get_finished_spans()
    assert call.status.status_code is StatusCode.ERROR
    assert call.status.description == "no tool named 'mcp_x_nope'"
    assert call.attributes is not None and call.attributes["error.type"] == "UNKNOWN_TOOL"


def test_a_tool_error_result_ends_its_client_span_as_a_tool_error() -> None:
    with sdk_provider() as spans:
        exchange = Requests().call_tool("mcp_x_y", {}, None, True, None)
        result = ToolResult(content=[], is_error=True)
        with pytest.raises(Exception, match="reported an error"), exchange.traced():
            exchange.parse(CallResult(id=1, result=msgspec.Raw(encode(result))))
    [call] = spans.get_finished_spans()
    assert call.attributes is not None and call.attributes["error.type"] == "TOOL_ERROR"


# ---------------------------------------------------------------- starting and stopping


@pytest.fixture
def fresh_globals() -> Iterator[None]:
    """The global tracer provider and this module's state, put back after a test that starts tracing."""
    previous = trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, Once()
    try:
        yield
    finally:
        tracing.stop(1.0)
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = previous


def test_starting_with_no_exporter_traces_under_the_default_service_name(
    fresh_globals: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    tracing.start(tracing.WORKER_SERVICE, server="files")
    assert tracing.on
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    assert provider.resource.attributes["service.name"] == "mcp-supervisor-worker"
    assert provider.resource.attributes["mcp_supervisor.server"] == "files"
    tracing.stop(1.0)
    assert not tracing.on


def test_otel_service_name_takes_precedence(fresh_globals: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "my-agents-tools")
    tracing.start(tracing.SUPERVISOR_SERVICE)
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    assert provider.resource.attributes["service.name"] == "my-agents-tools"


def test_an_exporter_that_is_not_installed_is_named(
    fresh_globals: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin_json")
    with pytest.raises(
        tracing.TracingUnavailable, match=r"'zipkin_json'.*installed: console, otlp_proto_http"
    ):
        tracing.start(tracing.SUPERVISOR_SERVICE)
    assert not tracing.on


def test_an_unsupported_otlp_protocol_is_named(fresh_globals: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(tracing.TracingUnavailable, match="'http/json' is not supported"):
        tracing.start(tracing.SUPERVISOR_SERVICE)


def test_without_the_sdk_the_supervisor_does_not_start_and_says_what_to_install(
    fresh_globals: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # import fails, as if not installed
    with pytest.raises(daemon.StartError, match=r"pip install 'mcp-supervisor\[tracing\]'"):
        daemon._start_tracing()
    assert not tracing.on


class StuckExporter(SpanExporter):
    """A collector that never answers."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(30)
        return SpanExportResult.FAILURE


def test_stopping_is_bounded_when_the_collector_never_answers(
    fresh_globals: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    exporter = StuckExporter()
    monkeypatch.setattr(tracing, "_exporters", lambda: [exporter])
    tracing.start(tracing.SUPERVISOR_SERVICE)
    span = tracing.route("mcp_x_y", "", "")[0]
    assert span is not None
    tracing.end_route(span, None)  # queued: exported at the latest when tracing stops
    started = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, "mcp_supervisor"):
            tracing.stop(0.3)
        assert time.monotonic() - started < 2.0
        assert "spans still unexported after 0.3 s were dropped" in caplog.text
        assert not tracing.on
    finally:
        exporter.release.set()
