"""Sampling, decided once per trace where it starts (``supervisor.shared.spans``): the rule read from
``OTEL_TRACES_SAMPLER`` as the SDK reads it and deciding as the SDK's sampler does; a call whose trace
is not sampled makes no span object along its path in the supervisor and the worker (the router,
the call table and ``Calls`` over fakes, ``tests.call_fakes``) and still carries one trace context
to the server; a sampled one makes exactly the supervisor's span and the worker's; and 1 % sampling
records 1 % of the traces.

Which span objects are made is counted by wrapping the constructors of every kind there is: ours
(``Span``), the SDK's (``ReadableSpan``, which its recording spans are) and the API's
``NonRecordingSpan``, and ``SpanContext``.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Iterator
from typing import Any
from unittest import mock

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import _get_from_env_or_default

from supervisor.protocol import CallResult, Invoke, InvokeResult
from supervisor.shared import spans, trace_context, tracing
from supervisor.shared.spans import ALWAYS, Sampling
from tests.call_fakes import TRACE_ID, WORKER, FakeStdio, Supervisor, serve
from tests.otel import recording

UNSAMPLED = f"00-{TRACE_ID}-00f067aa0ba902b7-00"
SAMPLED = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
STATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
ONE_PERCENT = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"}


class SeededIds(RandomIdGenerator):
    """The SDK's random ids, from a generator of our own with a fixed seed."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) or 1


@pytest.fixture(autouse=True)
def _no_tracing_left_on() -> Iterator[None]:
    assert not tracing.on
    yield
    assert not tracing.on


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every span object (and span context) made from now on, counted by its class's name."""
    counted: Counter[str] = Counter()

    def counting_init(cls: type) -> None:
        original = cls.__init__

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            counted[type(self).__name__] += 1
            original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", init)

    for cls in (spans.Span, ReadableSpan, trace.NonRecordingSpan):
        counting_init(cls)
    original_new = trace.SpanContext.__new__

    def new(cls: type[trace.SpanContext], *args: Any, **kwargs: Any) -> trace.SpanContext:
        counted["SpanContext"] += 1
        return original_new(cls, *args, **kwargs)

    monkeypatch.setattr(trace.SpanContext, "__new__", staticmethod(new))
    return counted


async def a_call(traceparent: str, tracestate: str = "") -> tuple[Invoke, dict[str, Any]]:
    """A tool call through the supervisor's router to a worker's ``Calls``, and answered: the ``Invoke``
    the worker got, and the ``_meta`` of the request the server got."""
    sup = Supervisor()
    sup.call(traceparent=traceparent, tracestate=tracestate)
    [invoke] = sup.invokes()
    server = FakeStdio()
    link = await serve(server, invoke)
    assert isinstance(link.sent[-1], InvokeResult)
    pending = sup.calls.settle(invoke.call, WORKER)
    assert pending is not None
    sup.calls.answer(pending, msgspec.Raw(b"\x80"))
    assert isinstance(sup.replies[-1][1], CallResult)
    return invoke, server.lines[0]["params"].get("_meta", {})


# ---------------------------------------------------------------- a call not sampled


async def test_a_call_the_caller_did_not_sample_makes_no_span_object_and_passes_its_context_on(
    made: Counter[str],
) -> None:
    with recording() as exported:
        invoke, meta = await a_call(UNSAMPLED, STATE)
    assert (invoke.traceparent, invoke.tracestate) == (UNSAMPLED, STATE)
    assert meta == {"traceparent": UNSAMPLED, "tracestate": STATE}
    assert made == Counter() and exported.get_finished_spans() == ()


async def test_a_root_not_sampled_makes_no_span_object_and_one_trace_context_reaches_the_server(
    made: Counter[str],
) -> None:
    with recording(Sampling(parent_based=True, bound=0)) as exported:  # parentbased_always_off
        invoke, meta = await a_call("")
    assert trace_context.valid_traceparent(invoke.traceparent)
    assert invoke.traceparent.endswith("-02")  # random trace id, not sampled
    assert meta == {"traceparent": invoke.traceparent}  # the worker passed on what it got
    assert made == Counter() and exported.get_finished_spans() == ()


async def test_a_bad_tracestate_is_not_passed_on_and_a_later_version_goes_on_as_version_00(
    made: Counter[str],
) -> None:
    with recording():
        invoke, meta = await a_call("cc" + UNSAMPLED[2:], "not a tracestate")
    assert meta == {"traceparent": UNSAMPLED} and invoke.tracestate == ""
    assert made == Counter()


async def test_a_sampler_that_is_not_parent_based_may_overrule_a_sampled_caller_and_says_so_downstream(
    made: Counter[str],
) -> None:
    with recording(Sampling(parent_based=False, bound=0)) as exported:  # traceidratio, ratio 0
        invoke, meta = await a_call(SAMPLED)
    assert invoke.traceparent == meta["traceparent"] == UNSAMPLED  # the sampled flag cleared
    assert made == Counter() and exported.get_finished_spans() == ()


# ---------------------------------------------------------------- a sampled call


async def test_a_sampled_call_is_the_supervisors_span_and_one_worker_span_whose_context_reaches_the_server(
    made: Counter[str],
) -> None:
    with recording() as exported:
        invoke, meta = await a_call(SAMPLED, STATE)
    serving, route = exported.get_finished_spans()  # the worker's ends first
    assert (route.name, serving.name) == ("route mcp_test_echo", "tools/call echo")
    assert route.parent is not None and route.parent.span_id == 0x00F067AA0BA902B7
    assert serving.parent is not None and serving.parent.span_id == route.context.span_id
    assert {route.context.trace_id, serving.context.trace_id} == {int(TRACE_ID, 16)}
    assert invoke.traceparent == f"00-{TRACE_ID}-{route.context.span_id:016x}-01"
    assert meta == {"traceparent": f"00-{TRACE_ID}-{serving.context.span_id:016x}-01", "tracestate": STATE}
    assert route.context.trace_state.to_header() == STATE
    assert made["Span"] == made["ReadableSpan"] == 2 and made["NonRecordingSpan"] == 0


async def test_without_a_parent_the_ratio_decides_at_the_root_and_the_worker_follows(
    made: Counter[str],
) -> None:
    ids = SeededIds(7)
    with recording(Sampling.from_environ(ONE_PERCENT), ids) as exported:
        seen = [await a_call("") for _ in range(300)]
    sampled = [invoke for invoke, _ in seen if invoke.traceparent.endswith("-03")]
    assert 0 < len(sampled) < 15  # this seed's ids: a few of 300, at 1 %
    assert len(exported.get_finished_spans()) == 2 * len(sampled)  # each: the route and the worker's
    assert made["Span"] == 2 * len(sampled) and made["NonRecordingSpan"] == 0
    for invoke, meta in seen:  # one trace id from the supervisor to the server, sampled or not
        assert meta["traceparent"][3:35] == invoke.traceparent[3:35]
        assert meta["traceparent"][-2:] == invoke.traceparent[-2:]


# ---------------------------------------------------------------- 1 % is 1 %


def test_one_percent_samples_exactly_one_trace_in_a_hundred_of_evenly_spread_trace_ids() -> None:
    sampling = Sampling.from_environ(ONE_PERCENT)
    high = random.Random(1).getrandbits(64) << 64  # the high bits do not count
    spread = [high | ((2 * i + 1) * ALWAYS // 20_000) for i in range(10_000)]  # mid-points of 1/10000ths
    assert sum(sampling.sampled(trace_id, None) for trace_id in spread) == 100


def test_one_percent_of_random_roots_are_recorded_with_a_fixed_seed() -> None:
    with recording(Sampling.from_environ(ONE_PERCENT), SeededIds(2024)) as exported:
        for _ in range(20_000):
            span, _, _ = tracing.route("mcp_x_y", "", "")
            if span is not None:
                tracing.end_route(span, None)
        recorded = len(exported.get_finished_spans())
    assert 200 - 4 * 14 <= recorded <= 200 + 4 * 14  # 1 % of 20000, within 4 standard deviations


def test_a_parent_based_sampler_follows_the_parent_and_does_not_sample_again() -> None:
    sampling = Sampling.from_environ(ONE_PERCENT)
    assert all(sampling.sampled(trace_id, 0x01) for trace_id in range(1, 1000))
    assert not any(sampling.sampled(trace_id, 0x00) for trace_id in range(1, 1000))
    assert not any(sampling.sampled(trace_id, 0x02) for trace_id in range(1, 1000))


# ---------------------------------------------------------------- as the SDK reads and decides


SAMPLER_NAMES = [
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
    "ParentBased_TraceIdRatio",
    "no_such_sampler",
]
RATIOS = ["0", "0.01", "0.5", "1", "1.5", "-1", "nan", "", "x"]


@given(
    name=st.sampled_from(SAMPLER_NAMES),
    ratio=st.sampled_from(RATIOS),
    trace_id=st.integers(1, 2**128 - 1),
    parent=st.sampled_from([None, 0x00, 0x01, 0x02, 0x03]),
)
def test_the_rule_decides_as_the_sdks_sampler_from_the_same_environment(
    name: str, ratio: str, trace_id: int, parent: int | None
) -> None:
    environ = {"OTEL_TRACES_SAMPLER": name, "OTEL_TRACES_SAMPLER_ARG": ratio}
    with mock.patch.dict(os.environ, environ), mock.patch("opentelemetry.sdk.trace.sampling._logger"):
        theirs = _get_from_env_or_default()
    with mock.patch("supervisor.shared.spans.log"):
        ours = Sampling.from_environ(environ)
    context = None
    if parent is not None:
        context = trace_context.parent(f"00-{trace_id:032x}-00f067aa0ba902b7-{parent:02x}")
    expected = theirs.should_sample(context, trace_id, "route x").decision.is_sampled()
    assert ours.sampled(trace_id, parent) is expected
    assert ours.sdk_sampler().should_sample(context, trace_id, "route x").decision.is_sampled() is expected


def test_a_disabled_sdk_samples_nothing() -> None:
    sampling = Sampling.from_environ({"OTEL_SDK_DISABLED": "true"})
    assert not sampling.sampled(2**64 - 1, 0x01) and not sampling.sampled(1, None)


def test_the_default_is_parent_based_always_on() -> None:
    assert Sampling.from_environ({}) == Sampling(parent_based=True, bound=ALWAYS)
