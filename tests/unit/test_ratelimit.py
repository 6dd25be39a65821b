"""The token bucket that keeps a flooding server out of the log."""

from __future__ import annotations

import pytest

from workers import ratelimit
from workers.ratelimit import RateLimit


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [100.0]
    monkeypatch.setattr(ratelimit.time, "monotonic", lambda: now[0])
    return now


def test_a_burst_is_allowed_then_the_rest_is_counted(clock: list[float]) -> None:
    limit = RateLimit(rate=10, burst=5)
    assert [limit.allow() for _ in range(8)] == [True] * 5 + [False] * 3
    assert limit.take_dropped() == 3
    assert limit.take_dropped() == 0


def test_tokens_come_back_at_the_rate_up_to_the_burst(clock: list[float]) -> None:
    limit = RateLimit(rate=10, burst=5)
    for _ in range(5):
        limit.allow()
    clock[0] += 0.2  # two tokens
    assert [limit.allow() for _ in range(3)] == [True, True, False]
    clock[0] += 60  # never more than the burst
    assert sum(limit.allow() for _ in range(10)) == 5
