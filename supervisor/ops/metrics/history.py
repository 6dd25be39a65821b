"""The recent past of one server's tool calls, in fixed buckets of wall-clock time: the console's sparklines.

Above: the call meter (``supervisor.ops.metrics.meter``), which adds every call it is told of, and the
console's ``/api/history`` (``supervisor.ops.web.site``), which reads ``series``. Below: nothing (pure
code: the wall clock is passed in).

Buckets are ``statusBucket`` seconds long (``BUCKET``, a minute, by default) and aligned on the epoch
(a one-minute bucket is a clock minute), ``SLOTS`` of them in a ring, each holding the latency
histogram of its calls (``BOUNDS``) and how many of them were errors. A slot a whole ring old (an hour,
by default) is started again when a call falls in it; one that no call has reached since is read as
empty. Memory per server is fixed, whatever the bucket: ``SLOTS`` lists of ``len(BOUNDS) + 2`` ints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from supervisor.ops.metrics.latency import BOUNDS, quantile

__all__ = ["BUCKET", "SLOTS", "CallHistory", "Series"]

BUCKET: Final = 60  # seconds of wall-clock time one bucket holds, by default (``statusBucket``)
SLOTS: Final = 60  # buckets kept: with the default BUCKET, an hour


@dataclass(frozen=True, slots=True)
class Series:
    """One server's buckets, oldest first, the last the one ``now`` is in (still filling)."""

    calls: list[int]  # calls that ended in the bucket, whatever their outcome
    errors: list[int]  # of which did not end ``ok`` (a result with isError, or an error code)
    p50: list[float | None]  # seconds; None for a bucket without calls
    p99: list[float | None]


class CallHistory:
    """One server's last ``slots`` buckets of ``bucket`` seconds."""

    __slots__ = ("_bucket", "_counts", "_current", "_errors", "_held", "_index")

    def __init__(self, bucket: int = BUCKET, slots: int = SLOTS) -> None:
        if bucket <= 0 or slots <= 0:
            raise ValueError(f"a history needs a positive bucket and slot count, not {bucket} and {slots}")
        self._bucket = bucket
        self._counts = [[0] * (len(BOUNDS) + 1) for _ in range(slots)]
        self._errors = [0] * slots
        self._held = [-1] * slots  # which bucket (wall time // bucket) each slot holds
        self._index = -1  # the bucket of the last ``add``
        self._current = 0  # its slot

    def add(self, latency_bucket: int, error: bool, wall: float) -> None:
        """One call that ended at ``wall`` (seconds since the epoch) in that latency bucket."""
        index = int(wall // self._bucket)
        if index != self._index:
            self._index = index
            slot = self._current = index % len(self._held)
            if self._held[slot] != index:  # a slot from an earlier round (or a clock set back)
                self._held[slot] = index
                self._counts[slot][:] = [0] * len(self._counts[slot])
                self._errors[slot] = 0
        self._counts[self._current][latency_bucket] += 1
        if error:
            self._errors[self._current] += 1

    def series(self, wall: float) -> Series:
        """The buckets up to the one ``wall`` is in, oldest first."""
        last = int(wall // self._bucket)
        slots = len(self._held)
        series = empty_series(slots)
        for position, index in enumerate(range(last - slots + 1, last + 1)):
            slot = index % slots
            if self._held[slot] != index:
                continue
            counts = self._counts[slot]
            series.calls[position] = sum(counts)
            series.errors[position] = self._errors[slot]
            series.p50[position] = quantile(0.5, counts)
            series.p99[position] = quantile(0.99, counts)
        return series


def empty_series(slots: int = SLOTS) -> Series:
    """A server's buckets before it has had a call."""
    return Series([0] * slots, [0] * slots, [None] * slots, [None] * slots)


def bucket_end(wall: float, bucket: int = BUCKET) -> int:
    """When the bucket ``wall`` is in ends (seconds since the epoch): the ``end`` of a history."""
    return (int(wall // bucket) + 1) * bucket
