"""The call meter, its sliding window and quantiles, the call table's use of it, and the Prometheus
collector against a fake supervisor (parsed back with the library's own parser)."""

from __future__ import annotations

import logging

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from supervisor.config.load import SupervisorSettings
from supervisor.daemon.call_table import CallTable
from supervisor.daemon.pending import Gather, Pending
from supervisor.ops.metrics.collector import STATES, Sample, ServerSample, SupervisorCollector
from supervisor.ops.metrics.meter import (
    BOUNDS,
    OUTCOMES,
    WINDOW,
    CallMeter,
    LatencyWindow,
    ServerCalls,
    is_error,
    quantile,
)
from supervisor.ops.metrics.procs import descendants, rss_bytes
from supervisor.protocol import ErrorCode, FrontReply, FrontStats, ToolResult, encode
from supervisor.shared.repeats import Repeats

OK = msgspec.Raw(encode(ToolResult(content=[{"type": "text", "text": "hi"}], text="hi")))
IS_ERROR = msgspec.Raw(encode(ToolResult(content=[{"type": "text", "text": "no"}], is_error=True)))


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --- the window and quantiles ------------------------------------------------------------------


def test_quantile_interpolates_within_its_bucket_as_prometheus_does() -> None:
    counts = [0] * (len(BOUNDS) + 1)
    counts[BOUNDS.index(0.01)] = 10  # ten calls in (0.005, 0.01]
    assert quantile(0.5, counts) == pytest.approx(0.0075)
    assert quantile(1.0, counts) == pytest.approx(0.01)


def test_quantile_of_no_calls_is_none_and_past_the_last_bound_is_the_last_bound() -> None:
    assert quantile(0.5, [0] * (len(BOUNDS) + 1)) is None
    counts = [0] * len(BOUNDS) + [3]  # all in +Inf
    assert quantile(0.99, counts) == BOUNDS[-1]


def test_p99_sits_in_the_slow_tail() -> None:
    counts = [0] * (len(BOUNDS) + 1)
    counts[BOUNDS.index(0.002)] = 98
    counts[BOUNDS.index(1.0)] = 2
    p50, p99 = quantile(0.5, counts), quantile(0.99, counts)
    assert p50 is not None and 0.001 < p50 <= 0.002
    assert p99 is not None and 0.5 < p99 <= 1.0


def test_window_counts_the_last_minute_only() -> None:
    window = LatencyWindow()
    window.add(0, 100.2)
    window.add(0, 100.9)
    window.add(3, 130.0)
    assert window.totals(130.5)[0] == 2 and window.totals(130.5)[3] == 1
    assert window.totals(100.0 + WINDOW - 0.01)[0] == 2  # second 100 is still within the minute
    assert window.totals(100.0 + WINDOW)[0] == 0  # and now it is not
    assert window.totals(100.0 + WINDOW)[3] == 1


def test_window_reuses_its_slots_a_minute_later() -> None:
    window = LatencyWindow()
    window.add(1, 5.0)
    window.add(2, 5.0 + WINDOW)  # the same slot, a minute on: the old count is gone
    totals = window.totals(5.0 + WINDOW)
    assert totals[1] == 0 and totals[2] == 1


@given(st.lists(st.tuples(st.integers(0, len(BOUNDS)), st.floats(0, 10_000)), max_size=300))
def test_window_memory_is_bounded_whatever_the_calls(calls: list[tuple[int, float]]) -> None:
    window = LatencyWindow()
    for bucket, now in sorted(calls, key=lambda c: c[1]):
        window.add(bucket, now)
    assert len(window._counts) == WINDOW
    assert all(len(counts) == len(BOUNDS) + 1 for counts in window._counts)
    if calls:
        latest = max(now for _, now in calls)
        recent = sum(1 for _, now in calls if int(now) > int(latest) - WINDOW)
        assert sum(window.totals(latest)) == recent


def test_rate_over_less_than_a_minute_divides_by_the_time_measured() -> None:
    calls = ServerCalls(since=100.0)
    for i in range(20):
        calls.observe("ok", 0.003, 100.0 + i / 2, 1e9 + i / 2)  # 20 calls over 10 s
    per_second, p50, p99 = calls.recent(110.0)
    assert per_second == pytest.approx(2.0)
    assert p50 is not None and 0.002 < p50 <= 0.005
    assert p99 is not None and p99 <= 0.005
    assert calls.recent(100.0 + 3 * WINDOW) == (0.0, None, None)  # a quiet minute later


# --- the meter ----------------------------------------------------------------------------------


def test_meter_counts_results_with_is_error_as_tool_error_and_failures_by_code() -> None:
    clock = Clock()
    meter = CallMeter(clock)
    meter.answered("a", clock.now - 0.004, OK)
    meter.answered("a", clock.now - 0.5, IS_ERROR)
    meter.failed("a", clock.now - 2.0, "TIMEOUT")
    calls = meter.servers["a"]
    assert {k: v for k, v in calls.outcomes.items() if v} == {"ok": 1, "TOOL_ERROR": 1, "TIMEOUT": 1}
    assert calls.buckets[BOUNDS.index(0.005)] == 1
    assert calls.buckets[BOUNDS.index(0.5)] == 1
    assert calls.buckets[BOUNDS.index(2.0)] == 1
    assert calls.sum == pytest.approx(2.504)


def test_meter_forgets_servers_that_are_gone() -> None:
    clock = Clock()
    meter = CallMeter(clock)
    meter.answered("a", clock.now, OK)
    meter.answered("b", clock.now, OK)
    meter.keep(["b"])
    assert list(meter.servers) == ["b"]
    assert meter.recent("a") == (0.0, None, None)


@given(st.binary(max_size=64))
def test_is_error_of_any_bytes_is_a_bool(data: bytes) -> None:
    assert is_error(msgspec.Raw(data)) in (True, False)


def test_outcomes_are_ok_and_every_error_code() -> None:
    assert OUTCOMES[0] == "ok"
    assert {"TIMEOUT", "TOOL_ERROR", "WORKER_CRASHED", "CANCELLED"} <= set(OUTCOMES)


# --- the call table tells the meter -------------------------------------------------------------


class FakeMeter:
    def __init__(self) -> None:
        self.told: list[tuple[str, float, str]] = []

    def answered(self, server: str, started: float, result: msgspec.Raw) -> None:
        self.told.append((server, started, "ok"))

    def failed(self, server: str, started: float, code: ErrorCode) -> None:
        self.told.append((server, started, code))


def _table(meter: FakeMeter) -> tuple[CallTable, list[tuple[bytes, FrontReply]]]:
    sent: list[tuple[bytes, FrontReply]] = []
    repeats = Repeats(logging.getLogger("test_metrics"), clock=lambda: 0.0)
    table = CallTable(
        lambda c, r: sent.append((c, r)),
        SupervisorSettings,
        FrontStats(),
        repeats,
        lambda: ["s"],
        meter=meter,
    )
    return table, sent


def _send(table: CallTable, id: int, now: float, *, what: str = "", gather: Gather | None = None) -> int:
    assert table.admit(b"c", id)
    call = table.new_call()
    table.remember(call, Pending(b"c", id, b"w/1", "s", "echo", what, gather), 10.0, now)
    return call


def test_the_call_table_tells_the_meter_each_tool_call_once_with_when_it_was_sent() -> None:
    meter = FakeMeter()
    table, _ = _table(meter)
    answered = _send(table, 1, now=5.0)
    failed = _send(table, 2, now=6.0)
    _send(table, 3, now=7.0)  # cancelled below
    _send(table, 4, now=8.0)  # expires below
    pending = table.settle(answered, b"w/1")
    assert pending is not None
    table.answer(pending, OK)
    assert table.settle(answered, b"w/1") is None  # a late duplicate is not counted again
    pending = table.settle(failed, b"w/1")
    assert pending is not None
    table.fail(pending, "SERVER_ERROR", "x")
    assert table.cancel(b"c", 3) is not None
    assert table.tool_calls_by_server() == {"s": 1}
    for expiring in table.expire(1000.0):
        table.fail(expiring, "TIMEOUT", "late")
    assert sorted(meter.told) == [
        ("s", 5.0, "ok"),
        ("s", 6.0, "SERVER_ERROR"),
        ("s", 7.0, "CANCELLED"),
        ("s", 8.0, "TIMEOUT"),
    ]


def test_resources_requests_listings_and_dropped_calls_are_not_metered() -> None:
    meter = FakeMeter()
    table, _ = _table(meter)
    fetch = _send(table, 1, now=1.0, what="resources/read x")
    pending = table.settle(fetch, b"w/1")
    assert pending is not None
    table.answer(pending, OK)
    gather = Gather(b"c", 2, named=False, waiting=1)
    assert table.admit(b"c", 2)
    listing = table.new_call()
    table.remember(listing, Pending(b"c", 2, b"w/1", "s", "resources/list", "", gather), 10.0, 1.0)
    table.worker_gone(b"w/1", "WORKER_CRASHED", "gone")
    _send(table, 3, now=2.0)
    assert table.drop_calls_of(b"c") == 1
    assert meter.told == []
    assert table.tool_calls_by_server() == {}


def test_without_a_meter_calls_carry_no_start_time() -> None:
    repeats = Repeats(logging.getLogger("test_metrics"), clock=lambda: 0.0)
    table = CallTable(lambda c, r: None, SupervisorSettings, FrontStats(), repeats, lambda: ["s"])
    assert table.admit(b"c", 1)
    call = table.new_call()
    pending = Pending(b"c", 1, b"w/1", "s", "echo")
    table.remember(call, pending, 10.0, 3.0)
    assert pending.started is None


# --- the collector ------------------------------------------------------------------------------


def _scrape(
    sample: Sample, meter: CallMeter, rss: dict[int, int], tree: dict[int, list[int]]
) -> dict[str, list]:
    registry = CollectorRegistry()
    collector = SupervisorCollector(
        lambda: sample, meter, rss=lambda pid: rss.get(pid, 0), below=lambda pid: tree.get(pid, [])
    )
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def _value(samples: list, name: str, **labels: str) -> float:
    found = [
        s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return float(found[0])


def _sample(*servers: ServerSample) -> Sample:
    front = FrontStats(clients=2, in_flight=3, overloaded=4, malformed=5, dropped_replies=6, dropped_calls=7)
    return Sample(list(servers), front, received=99, tools=12, version=8)


def test_collector_gives_every_figure_of_the_supervisor_and_its_servers() -> None:
    clock = Clock()
    meter = CallMeter(clock)
    for _ in range(3):
        meter.answered("a", clock.now - 0.003, OK)
    meter.failed("a", clock.now - 30.0, "TIMEOUT")
    sample = _sample(
        ServerSample("a", "ready", restarts=2, tools=5, in_flight=1, worker_pids=(10, 11)),
        ServerSample("b", "failed", restarts=6, tools=0, in_flight=0, worker_pids=()),
    )
    rss = {10: 1000, 11: 2000, 20: 300, 21: 400, 22: 500}
    families = _scrape(sample, meter, rss, {10: [20, 21], 11: [22]})
    state = families["mcp_supervisor_server_state"]
    assert _value(state, "mcp_supervisor_server_state", server="a", state="ready") == 1
    assert sum(s.value for s in state if s.labels["server"] == "a") == 1
    assert {s.labels["state"] for s in state} == set(STATES)
    assert _value(state, "mcp_supervisor_server_state", server="b", state="failed") == 1
    assert (
        _value(families["mcp_supervisor_server_restarts"], "mcp_supervisor_server_restarts", server="b") == 6
    )
    assert _value(families["mcp_supervisor_server_tools"], "mcp_supervisor_server_tools", server="a") == 5
    assert (
        _value(families["mcp_supervisor_worker_rss_bytes"], "mcp_supervisor_worker_rss_bytes", server="a")
        == 3000
    )
    assert (
        _value(families["mcp_supervisor_server_rss_bytes"], "mcp_supervisor_server_rss_bytes", server="a")
        == 1200
    )
    calls = families["mcp_supervisor_calls"]
    assert _value(calls, "mcp_supervisor_calls_total", server="a", code="ok") == 3
    assert _value(calls, "mcp_supervisor_calls_total", server="a", code="TIMEOUT") == 1
    assert _value(calls, "mcp_supervisor_calls_total", server="b", code="ok") == 0
    seconds = families["mcp_supervisor_call_duration_seconds"]
    name = "mcp_supervisor_call_duration_seconds"
    assert _value(seconds, name + "_count", server="a") == 4
    assert _value(seconds, name + "_sum", server="a") == pytest.approx(30.009)
    assert _value(seconds, name + "_bucket", server="a", le="0.005") == 3
    assert _value(seconds, name + "_bucket", server="a", le="20.0") == 3
    assert _value(seconds, name + "_bucket", server="a", le="60.0") == 4
    assert _value(seconds, name + "_bucket", server="a", le="+Inf") == 4
    assert (
        _value(families["mcp_supervisor_calls_in_flight"], "mcp_supervisor_calls_in_flight", server="a") == 1
    )
    wide = {
        "mcp_supervisor_front_messages_received_total": 99,
        "mcp_supervisor_overloaded_total": 4,
        "mcp_supervisor_front_malformed_total": 5,
        "mcp_supervisor_front_dropped_replies_total": 6,
        "mcp_supervisor_front_dropped_calls_total": 7,
        "mcp_supervisor_front_clients": 2,
        "mcp_supervisor_front_in_flight": 3,
        "mcp_supervisor_registry_tools": 12,
        "mcp_supervisor_registry_version": 8,
    }
    flat = {s.name: s.value for samples in families.values() for s in samples if not s.labels}
    assert {name: flat[name] for name in wide} == wide


def test_collector_labels_are_servers_states_and_codes_only() -> None:
    clock = Clock()
    meter = CallMeter(clock)
    meter.answered("a", clock.now, OK)
    families = _scrape(_sample(ServerSample("a", "ready", 0, 1, 0, (1,))), meter, {}, {})
    labels = {key for samples in families.values() for s in samples for key in s.labels}
    assert labels == {"server", "state", "code", "le"}


def test_a_server_gone_from_the_sample_is_gone_from_the_scrape_and_the_meter() -> None:
    clock = Clock()
    meter = CallMeter(clock)
    meter.answered("gone", clock.now, OK)
    families = _scrape(_sample(ServerSample("kept", "ready", 0, 1, 0, ())), meter, {}, {})
    servers = {s.labels.get("server") for samples in families.values() for s in samples} - {None}
    assert servers == {"kept"}
    assert "gone" not in meter.servers


def test_rss_of_this_process_is_positive_and_of_a_process_that_is_gone_zero() -> None:
    import os

    assert rss_bytes(os.getpid()) > 1_000_000
    assert rss_bytes(2**22 + 12345) == 0
    assert descendants(2**22 + 12345) == []
