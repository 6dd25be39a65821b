"""The call meter: each server's tool calls by outcome, their latency, the last minute and the history.

Above: the call table (``supervisor.daemon.call_table``), which tells the meter of every tool call it settles
(``answered`` or ``failed``) with the time it was sent, while a meter is attached (the HTTP listener
is on); the Prometheus collector and the status page, which read the figures. Below: the hour of
history (``supervisor.ops.metrics.history``) and the latency buckets (``supervisor.ops.metrics.latency``);
pure code: the clocks are passed in, ``trio.current_time`` and ``time.time`` in the supervisor.

Cost on the hot path, per call: one dict lookup, a ``bisect`` over the bucket bounds, a read of the
wall clock, a few int additions; a result's ``is_error`` flag is read by a decoder that skips every
other field. Memory is bounded whatever the call rate: per server, one histogram, a ring of 60
one-second histograms and one of 60 histograms of the history's buckets (a minute each by default:
``statusBucket``).
Figures of servers that are gone are dropped by ``keep``.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Collection
from typing import Final

import msgspec

from supervisor.ops.metrics.history import BUCKET, CallHistory, Series, bucket_end, empty_series
from supervisor.ops.metrics.latency import BOUNDS, quantile
from supervisor.protocol import ERROR_CODES, ErrorCode

__all__ = ["BOUNDS", "OUTCOMES", "WINDOW", "CallMeter", "History", "LatencyWindow", "ServerCalls", "quantile"]

OUTCOMES: Final = ("ok", *sorted(ERROR_CODES))
"""How a call ended: ``ok``, ``TOOL_ERROR`` (a result with ``isError``), or its error code."""
WINDOW: Final = 60  # seconds the status page's rates and percentiles look back


class _Flag(msgspec.Struct):
    is_error: bool = False  # a ToolResult's flag (omitted when false); every other field is skipped


_decode_flag = msgspec.msgpack.Decoder(_Flag).decode


def is_error(result: msgspec.Raw) -> bool:
    """Whether an encoded ``ToolResult`` says ``is_error`` (anything that does not decode: no)."""
    try:
        return _decode_flag(result).is_error
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return False


class LatencyWindow:
    """Latency bucket counts of the last ``WINDOW`` seconds: a ring of one-second histograms."""

    __slots__ = ("_counts", "_current", "_second", "_seconds")

    def __init__(self, buckets: int = len(BOUNDS) + 1) -> None:
        self._counts = [[0] * buckets for _ in range(WINDOW)]
        self._seconds = [-1] * WINDOW  # which second each slot holds
        self._second = -1  # the second of the last ``add``
        self._current = self._counts[0]

    def add(self, bucket: int, now: float) -> None:
        second = int(now)
        if second != self._second:
            self._second = second
            slot = second % WINDOW
            counts = self._counts[slot]
            if self._seconds[slot] != second:  # a slot a minute old: start it again
                self._seconds[slot] = second
                counts[:] = [0] * len(counts)
            self._current = counts
        self._current[bucket] += 1

    def totals(self, now: float) -> list[int]:
        """Each bucket's count over the last ``WINDOW`` seconds, the current one included."""
        second = int(now)
        sums = [0] * len(self._current)
        for held, counts in zip(self._seconds, self._counts, strict=True):
            if second - WINDOW < held <= second:
                for bucket, count in enumerate(counts):
                    sums[bucket] += count
        return sums


class ServerCalls:
    """One server's tool calls since it was first measured: counts by outcome, and latency."""

    __slots__ = ("buckets", "history", "outcomes", "since", "sum", "window")

    def __init__(self, since: float, bucket: int = BUCKET) -> None:
        self.since = since  # when it was first measured (the rate's span is at most WINDOW from here)
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.buckets = [0] * (len(BOUNDS) + 1)  # per bucket, not cumulative; the last is +Inf
        self.sum = 0.0  # seconds, over every call
        self.window = LatencyWindow()
        self.history = CallHistory(bucket)

    def observe(self, outcome: str, seconds: float, now: float, wall: float) -> None:
        """A call that ended ``outcome`` after ``seconds``, at ``now`` (the meter's clock) and ``wall``
        (seconds since the epoch)."""
        bucket = bisect_left(BOUNDS, seconds)  # the first bound >= seconds (Prometheus's ``le``)
        self.outcomes[outcome] += 1
        self.buckets[bucket] += 1
        self.sum += seconds
        self.window.add(bucket, now)
        self.history.add(bucket, outcome != "ok", wall)

    def recent(self, now: float) -> tuple[float, float | None, float | None]:
        """Calls per second, p50 and p99 (seconds; None without calls) over the last minute."""
        counts = self.window.totals(now)
        span = min(float(WINDOW), max(1.0, now - self.since))
        return sum(counts) / span, quantile(0.5, counts), quantile(0.99, counts)


class CallMeter:
    """Every server's ``ServerCalls``; the call table's ``CallMeter``."""

    def __init__(
        self, clock: Callable[[], float], wall: Callable[[], float] = time.time, bucket: int = BUCKET
    ) -> None:
        """``clock``: the clock the call table stamps calls with (``trio.current_time``); ``wall``: the
        time of day, which the history's buckets follow; ``bucket``: seconds per bucket of the history
        (``statusBucket``)."""
        if bucket <= 0:
            raise ValueError(f"a history bucket must be a positive number of seconds, not {bucket}")
        self._clock = clock
        self._wall = wall
        self.bucket = bucket
        self.servers: dict[str, ServerCalls] = {}

    def answered(self, server: str, started: float, result: msgspec.Raw) -> None:
        self._observe(server, "TOOL_ERROR" if is_error(result) else "ok", started)

    def failed(self, server: str, started: float, code: ErrorCode) -> None:
        self._observe(server, code, started)

    def _observe(self, server: str, outcome: str, started: float) -> None:
        now = self._clock()
        calls = self.servers.get(server)
        if calls is None:
            calls = self.servers[server] = ServerCalls(now, self.bucket)
        calls.observe(outcome, now - started, now, self._wall())

    def keep(self, servers: Collection[str]) -> None:
        """Forget the figures of servers not among ``servers`` (removed by a reload)."""
        for name in [name for name in self.servers if name not in servers]:
            del self.servers[name]

    def recent(self, server: str) -> tuple[float, float | None, float | None]:
        """``server``'s calls per second, p50 and p99 over the last minute (no calls: 0, None, None)."""
        calls = self.servers.get(server)
        return (0.0, None, None) if calls is None else calls.recent(self._clock())

    def history(self, servers: Collection[str]) -> History:
        """The last ``SLOTS`` buckets of each of ``servers`` (one without calls: empty buckets)."""
        wall = self._wall()
        series = {}
        for name in servers:
            calls = self.servers.get(name)
            series[name] = empty_series() if calls is None else calls.history.series(wall)
        return History(bucket=self.bucket, end=bucket_end(wall, self.bucket), servers=series)


class History(msgspec.Struct, frozen=True, kw_only=True):
    """``/api/history``: every server's buckets, oldest first, the last ending at ``end``."""

    bucket: int  # seconds per bucket
    end: int  # when the last bucket (the current one, still filling) ends, in seconds since the epoch
    servers: dict[str, Series]
