"""The Prometheus collector: one supervisor's figures, computed when scraped.

Above: the HTTP listener's ``/metrics`` (``supervisor.ops.web.app``), which registers a collector in the
supervisor's own ``CollectorRegistry`` (never the library's global one) and serves
``generate_latest`` of it. Below: a ``Sample`` of the supervisor taken at scrape time (the site
takes it: ``supervisor.ops.web.site``), the call meter (``supervisor.ops.metrics.meter``) and ``/proc``
(``supervisor.ops.metrics.procs``).

Labels are server names, states and outcome codes only: never tool names, arguments or clients, so
the series are bounded by the config. Only the servers of the sample appear: one a reload removed
is gone from the next scrape (and its call figures forgotten).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from supervisor.ops.metrics.meter import BOUNDS, OUTCOMES, CallMeter
from supervisor.ops.metrics.procs import descendants, rss_bytes
from supervisor.protocol import AuditStats, FrontStats, WorkerState

__all__ = ["PREFIX", "STATES", "Sample", "ServerSample", "SupervisorCollector"]

PREFIX: Final = "mcp_supervisor_"
STATES: Final[tuple[WorkerState, ...]] = WorkerState.__args__  # type: ignore[attr-defined]
_LE: Final = (*(repr(bound) for bound in BOUNDS), "+Inf")  # as Prometheus writes them: 0.001, 1.0


@dataclass(frozen=True, slots=True)
class ServerSample:
    """One configured server, as its row in ``status`` says, at scrape time."""

    name: str
    state: str  # one of STATES (a status row's state is a plain string on the wire)
    restarts: int
    tools: int
    in_flight: int  # tool calls pending
    worker_pids: tuple[int, ...]  # its live workers (replicas, sessions)


@dataclass(frozen=True, slots=True)
class Sample:
    """The supervisor at scrape time."""

    servers: Sequence[ServerSample]
    front: FrontStats  # as ``status`` has it (with clients and in_flight now)
    received: int  # front messages received since the start
    tools: int  # registry size
    version: int  # registry version


class SupervisorCollector(Collector):
    """Every figure of one supervisor, from ``sample()`` and the call meter, computed when scraped."""

    def __init__(
        self,
        sample: Callable[[], Sample],
        meter: CallMeter,
        *,
        rss: Callable[[int], int] = rss_bytes,
        below: Callable[[int], list[int]] = descendants,
    ) -> None:
        """``rss(pid)`` and ``below(pid)``: a process's resident bytes and its descendants (``/proc``)."""
        self._sample = sample
        self._meter = meter
        self._rss = rss
        self._below = below

    def describe(self) -> list[Metric]:
        return []  # nothing to check for clashes: this is the registry's only collector

    def collect(self) -> Iterator[Metric]:
        sample = self._sample()
        self._meter.keep([server.name for server in sample.servers])
        yield from self._servers(sample.servers)
        yield from self._calls(sample.servers)
        yield from self._supervisor(sample)

    def _servers(self, servers: Sequence[ServerSample]) -> Iterator[Metric]:
        state = _gauge("server_state", "1 for the server's current state, 0 for the others", "state")
        restarts = _gauge("server_restarts", "restarts since the start or an operator's last restart")
        tools = _gauge("server_tools", "tools the server has in the registry")
        worker = _gauge("worker_rss_bytes", "resident memory of the server's worker processes")
        server = _gauge("server_rss_bytes", "resident memory of the server's processes (stdio)")
        for row in servers:
            for name in STATES:
                state.add_metric([row.name, name], 1.0 if name == row.state else 0.0)
            restarts.add_metric([row.name], row.restarts)
            tools.add_metric([row.name], row.tools)
            worker.add_metric([row.name], sum(self._rss(pid) for pid in row.worker_pids))
            below = [pid for worker_pid in row.worker_pids for pid in self._below(worker_pid)]
            server.add_metric([row.name], sum(self._rss(pid) for pid in below))
        yield from (state, restarts, tools, worker, server)

    def _calls(self, servers: Sequence[ServerSample]) -> Iterator[Metric]:
        calls = CounterMetricFamily(
            PREFIX + "calls", "tool calls sent to the server's workers, by outcome", labels=["server", "code"]
        )
        seconds = HistogramMetricFamily(
            PREFIX + "call_duration_seconds",
            "time from a tool call's sending to its worker to its answer",
            labels=["server"],
        )
        in_flight = _gauge("calls_in_flight", "tool calls sent to the server and not answered yet")
        for row in servers:
            measured = self._meter.servers.get(row.name)
            if measured is None:
                for outcome in OUTCOMES:
                    calls.add_metric([row.name, outcome], 0)
                seconds.add_metric([row.name], [(le, 0) for le in _LE], 0.0)
            else:
                for outcome, count in measured.outcomes.items():
                    calls.add_metric([row.name, outcome], count)
                cumulative, buckets = 0, []
                for le, count in zip(_LE, measured.buckets, strict=True):
                    cumulative += count
                    buckets.append((le, cumulative))
                seconds.add_metric([row.name], buckets, measured.sum)
            in_flight.add_metric([row.name], row.in_flight)
        yield from (calls, seconds, in_flight)

    def _supervisor(self, sample: Sample) -> Iterator[Metric]:
        front = sample.front
        yield _counter("front_messages_received", "messages received on the front socket", sample.received)
        yield _counter(
            "overloaded",
            "requests answered OVERLOADED (maxCallsPerClient, maxCallsInFlight)",
            front.overloaded,
        )
        yield _counter("front_malformed", "front messages that were not requests", front.malformed)
        yield _counter(
            "front_dropped_replies", "replies dropped for clients that do not read", front.dropped_replies
        )
        yield _counter("front_dropped_calls", "requests forgotten with those clients", front.dropped_calls)
        yield _gauge_value("front_clients", "clients with requests in flight", front.clients)
        yield _gauge_value("front_in_flight", "requests in flight from every client", front.in_flight)
        audit = front.audit or AuditStats()  # the audit trail's figures (all 0 while it is off)
        yield _counter("audit_lines", "lines written to the audit trail", audit.lines)
        yield _counter("audit_failures", "writes of the audit trail that failed (retried)", audit.failures)
        yield _counter("audit_dropped", "audit trail lines lost: the buffer was full", audit.dropped)
        yield _gauge_value("registry_tools", "tools in the registry", sample.tools)
        yield _gauge_value(
            "registry_version", "the registry's version (one more with each change)", sample.version
        )


def _gauge(name: str, documentation: str, *labels: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, documentation, labels=["server", *labels])


def _gauge_value(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, documentation, value=value)


def _counter(name: str, documentation: str, value: float = 0) -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name, documentation, value=value)
