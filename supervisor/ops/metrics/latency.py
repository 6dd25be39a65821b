"""Latency buckets and their quantiles, shared by the call meter and its hour of history.

Above: ``supervisor.ops.metrics.meter`` (the last minute, and every call since the start) and
``supervisor.ops.metrics.history`` (the last hour, bucket by bucket). Below: nothing (pure code).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

__all__ = ["BOUNDS", "quantile"]

BOUNDS: Final = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 60.0)
"""Upper bounds of the latency buckets, in seconds (a last bucket, +Inf, takes the rest)."""


def quantile(q: float, counts: Sequence[int], bounds: Sequence[float] = BOUNDS) -> float | None:
    """The ``q`` quantile of bucket ``counts`` (one more than ``bounds``: the last is +Inf), linearly
    interpolated within its bucket as Prometheus's ``histogram_quantile`` does; None for no counts.
    A quantile in the +Inf bucket is the last bound."""
    total = sum(counts)
    if not total:
        return None
    rank = q * total
    below = 0
    for bucket, count in enumerate(counts):
        if count and below + count >= rank:
            if bucket == len(bounds):
                return bounds[-1]
            lower = bounds[bucket - 1] if bucket else 0.0
            return lower + (bounds[bucket] - lower) * (rank - below) / count
        below += count
    return bounds[-1]
