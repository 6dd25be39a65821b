"""Spans along a call's path, with in-process fakes around the pure parts: the supervisor's router and
call table (a span ``route NAME`` from arrival to terminal reply, its context sent in ``Invoke``), and
a worker's ``Calls`` (a span ``tools/call TOOL`` around the request, whose context the stdio server
gets in ``_meta``). Tracing here records to memory; with it off, nothing is made and nothing sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, cast

import msgspec
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from supervisor.protocol import CallResult, ErrorReply, InvokeFailed, InvokeResult
from supervisor.shared import tracing
from tests.call_fakes import (
    CALLER,
    CLIENT_SPAN,
    TRACE_ID,
    TRACEPARENT,
    WORKER,
    FakeServer,
    FakeStdio,
    Supervisor,
    invoke,
    serve,
)
from tests.otel import recording


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process, every trace sampled, spans kept in memory."""
    with recording() as exporter:
        yield exporter


def only(finished: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    [span] = [span for span in finished if span.name == name]
    return span


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


# ---------------------------------------------------------------- the supervisor


def test_a_routed_call_is_a_span_child_of_the_callers_whose_context_goes_to_the_worker(
    spans: InMemorySpanExporter,
) -> None:
    sup = Supervisor()
    sup.call()
    assert spans.get_finished_spans() == ()  # open until the terminal reply
    [invoke] = sup.invokes()
    pending = sup.calls.settle(invoke.call, WORKER)
    assert pending is not None
    sup.calls.answer(pending, msgspec.Raw(b"\x80"))
    [route] = spans.get_finished_spans()
    assert route.name == "route mcp_test_echo" and route.kind is SpanKind.SERVER
    assert route.parent is not None and f"{route.parent.span_id:016x}" == CLIENT_SPAN
    assert f"{route.context.trace_id:032x}" == TRACE_ID
    assert invoke.traceparent == f"00-{TRACE_ID}-{route.context.span_id:016x}-01"
    assert attributes(route) | {"mcp.server": "test", "mcp.tool": "echo"} == attributes(route)
    assert attributes(route)["mcp_supervisor.outcome"] == "ok"
    assert route.status.status_code is StatusCode.UNSET
    assert isinstance(sup.replies[-1][1], CallResult)


@pytest.mark.parametrize(
    ("end", "code"),
    [
        ("worker failed", "SERVER_ERROR"),
        ("deadline", "TIMEOUT"),
        ("worker gone", "WORKER_CRASHED"),
        ("cancelled", "CANCELLED"),
    ],
)
def test_a_call_that_fails_after_it_was_sent_ends_its_span_with_the_code(
    spans: InMemorySpanExporter, end: str, code: str
) -> None:
    sup = Supervisor()
    sup.call()
    [invoke] = sup.invokes()
    if end == "worker failed":
        pending = sup.calls.settle(invoke.call, WORKER)
        assert pending is not None
        sup.calls.fail(pending, "SERVER_ERROR", "tool 'echo': boom (JSON-RPC error -32603)")
    elif end == "deadline":
        [pending] = sup.calls.expire(1e9)
        sup.calls.fail(pending, "TIMEOUT", "server 'test' did not answer tool 'echo' in time")
    elif end == "worker gone":
        sup.calls.worker_gone(WORKER, "WORKER_CRASHED", "worker exited with code 70")
    else:
        sup.calls.cancel(CALLER, 1)
    [route] = spans.get_finished_spans()
    assert attributes(route)["mcp_supervisor.outcome"] == attributes(route)["error.type"] == code
    assert route.status.status_code is StatusCode.ERROR
    [(_, reply)] = sup.replies
    assert isinstance(reply, ErrorReply) and reply.code == code
    assert route.status.description == reply.message


@pytest.mark.parametrize(
    ("name", "state", "code"),
    [("mcp_test_nope", "ready", "UNKNOWN_TOOL"), ("mcp_test_echo", "failed", "UNAVAILABLE")],
)
def test_a_call_answered_at_once_ends_its_span_with_the_code_and_sends_nothing(
    spans: InMemorySpanExporter, name: str, state: str, code: str
) -> None:
    sup = Supervisor(state=state)
    sup.call(name=name)
    [route] = spans.get_finished_spans()
    assert route.name == f"route {name}"
    assert attributes(route)["mcp_supervisor.outcome"] == code
    assert route.status.status_code is StatusCode.ERROR
    assert sup.to_workers == []


@pytest.mark.parametrize(
    ("then", "code"), [("ready", None), ("failed", "UNAVAILABLE"), ("stopped", "UNAVAILABLE")]
)
def test_a_call_for_a_restarting_server_waits_for_it_and_keeps_its_span(
    spans: InMemorySpanExporter, then: str, code: str | None
) -> None:
    sup = Supervisor(state="restarting")
    sup.call()
    assert sup.to_workers == [] and sup.replies == [] and len(sup.calls) == 1  # waiting, not refused
    server = sup.router._servers["test"]
    cast(FakeServer, server).state = then
    sup.router.server_changed(server)
    if code is None:  # sent on, with the span's context, and answered as any call
        [invoke] = sup.invokes()
        assert invoke.tool == "echo" and invoke.traceparent.startswith(f"00-{TRACE_ID}-")
        pending = sup.calls.settle(invoke.call, WORKER)
        assert pending is not None and pending.tool == "echo"
        sup.calls.answer(pending, msgspec.Raw(b"\x80"))
        assert isinstance(sup.replies[-1][1], CallResult)
    else:  # the server is not coming back by itself: the call fails now, saying why
        assert sup.to_workers == []
        [(_, reply)] = sup.replies
        assert isinstance(reply, ErrorReply) and reply.code == code and f"is {then}" in reply.message
    [route] = spans.get_finished_spans()
    assert attributes(route)["mcp_supervisor.outcome"] == (code or "ok")
    assert len(sup.calls) == 0


def test_a_call_refused_as_overloaded_ends_its_span_so(spans: InMemorySpanExporter) -> None:
    sup = Supervisor(max_calls_per_client=1)
    sup.call(id=1)
    sup.call(id=2)
    [refused] = spans.get_finished_spans()
    assert attributes(refused)["mcp_supervisor.outcome"] == "OVERLOADED"
    assert len(sup.invokes()) == 1


def test_calls_of_a_client_that_does_not_read_end_as_dropped(spans: InMemorySpanExporter) -> None:
    sup = Supervisor()
    sup.call()
    assert sup.calls.drop_calls_of(CALLER) == 1
    [route] = spans.get_finished_spans()
    assert attributes(route)["mcp_supervisor.outcome"] == "dropped"


@pytest.mark.parametrize(
    "traceparent",
    [
        "garbage",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        TRACEPARENT.upper(),
        TRACEPARENT + "0" * 5000,
    ],
)
def test_a_bad_traceparent_is_ignored_and_the_call_starts_its_own_trace(
    spans: InMemorySpanExporter, traceparent: str
) -> None:
    sup = Supervisor()
    sup.call(traceparent=traceparent, tracestate="x" * 10_000)
    [invoke] = sup.invokes()
    sup.calls.worker_gone(WORKER, "WORKER_CRASHED", "gone")
    [route] = spans.get_finished_spans()
    assert route.parent is None
    ids = route.context  # a root: the SDK also sets the W3C "random trace id" flag
    assert invoke.traceparent == f"00-{ids.trace_id:032x}-{ids.span_id:016x}-{ids.trace_flags:02x}"
    assert invoke.tracestate == ""


def test_with_tracing_off_no_span_is_made_and_the_worker_gets_no_trace_context() -> None:
    assert not tracing.on
    sup = Supervisor()
    sup.call(tracestate="rojo=1")
    [(_, payload)] = sup.to_workers
    assert b"trace" not in payload
    pending = sup.calls.settle(sup.invokes()[0].call, WORKER)
    assert pending is not None and pending.span is None


# ---------------------------------------------------------------- the worker


async def test_a_worker_serves_a_call_in_one_span_and_the_server_gets_its_context_in_meta(
    spans: InMemorySpanExporter,
) -> None:
    server = FakeStdio()
    parent = f"00-{TRACE_ID}-{'ab' * 8}-01"
    link = await serve(server, invoke(7, {"text": "hi"}, parent))
    assert isinstance(link.sent[-1], InvokeResult)
    [serving] = spans.get_finished_spans()
    assert serving.name == "tools/call echo" and serving.kind is SpanKind.SERVER
    assert serving.parent is not None and f"{serving.parent.span_id:016x}" == "ab" * 8
    assert attributes(serving)["mcp_supervisor.outcome"] == "ok"
    meta = server.lines[0]["params"]["_meta"]
    assert meta["traceparent"] == f"00-{TRACE_ID}-{serving.context.span_id:016x}-01"


async def test_a_call_the_worker_refuses_ends_its_span_with_the_code(spans: InMemorySpanExporter) -> None:
    server = FakeStdio()
    link = await serve(server, invoke(8, ["not", "an", "object"], TRACEPARENT))
    assert isinstance(link.sent[-1], InvokeFailed) and link.sent[-1].code == "INVALID_ARGUMENTS"
    serving = only(spans.get_finished_spans(), "tools/call echo")
    assert attributes(serving)["mcp_supervisor.outcome"] == "INVALID_ARGUMENTS"
    assert serving.status.status_code is StatusCode.ERROR
    assert server.lines == []


async def test_an_aborted_call_ends_its_span_as_cancelled(spans: InMemorySpanExporter) -> None:
    server = FakeStdio()
    link = await serve(server, invoke(9, {"text": "hi"}, TRACEPARENT), abort=True)
    assert link.sent == []
    serving = only(spans.get_finished_spans(), "tools/call echo")
    assert attributes(serving)["mcp_supervisor.outcome"] == "CANCELLED"


async def test_with_tracing_off_the_worker_sends_the_server_no_trace_context() -> None:
    assert not tracing.on
    server = FakeStdio()
    link = await serve(server, invoke(10, {"text": "hi"}, TRACEPARENT))
    assert isinstance(link.sent[-1], InvokeResult)
    assert "traceparent" not in json.dumps(server.lines[0])
