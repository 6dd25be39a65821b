"""Behaviour of supervisor.daemon.servers.restarts.RestartTracker: backoff, jitter, giving up, reset."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.config.restart_policy import RestartPolicy
from supervisor.daemon.servers.restarts import RestartTracker


def no_jitter() -> float:
    return 0.5


def tracker(**policy: Any) -> RestartTracker:
    return RestartTracker(RestartPolicy(**policy), rng=no_jitter)


def delays(t: RestartTracker, times: list[float]) -> list[float | None]:
    return [t.failed(now) for now in times]


def test_default_policy_values() -> None:
    policy = RestartPolicy()
    assert policy.initial_delay == 0.5
    assert policy.max_delay == 30.0
    assert policy.jitter == 0.1
    assert policy.reset_after == 60.0
    assert policy.max_restarts == 5
    assert policy.window == 60.0


def test_first_restart_is_immediate() -> None:
    assert tracker().failed(100.0) == 0.0


def test_later_restarts_back_off_doubling_from_initial_delay() -> None:
    t = tracker(max_restarts=100)
    assert delays(t, [float(i) for i in range(6)]) == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0]


def test_backoff_is_capped_at_max_delay() -> None:
    t = tracker(max_restarts=1000, window=1.0)
    got = delays(t, [i * 100.0 for i in range(12)])
    assert got[:8] == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    assert got[8:] == [30.0] * 4


def test_custom_initial_and_max_delay_are_honoured() -> None:
    t = tracker(initial_delay=2.0, max_delay=5.0, max_restarts=100)
    assert delays(t, [0.0, 1.0, 2.0, 3.0, 4.0]) == [0.0, 2.0, 4.0, 5.0, 5.0]


def test_jitter_lower_bound_when_rng_returns_zero() -> None:
    t = RestartTracker(RestartPolicy(max_restarts=100), rng=lambda: 0.0)
    assert delays(t, [0.0, 1.0, 2.0]) == [0.0, pytest.approx(0.45), pytest.approx(0.9)]


def test_jitter_upper_bound_when_rng_returns_one() -> None:
    t = RestartTracker(RestartPolicy(max_restarts=100), rng=lambda: 1.0)
    assert delays(t, [0.0, 1.0, 2.0]) == [0.0, pytest.approx(0.55), pytest.approx(1.1)]


def test_jitter_applies_around_the_capped_delay() -> None:
    low = RestartTracker(RestartPolicy(max_restarts=1000, window=1.0), rng=lambda: 0.0)
    high = RestartTracker(RestartPolicy(max_restarts=1000, window=1.0), rng=lambda: 1.0)
    times = [i * 100.0 for i in range(10)]
    assert delays(low, times)[-1] == pytest.approx(27.0)
    assert delays(high, times)[-1] == pytest.approx(33.0)


def test_first_restart_is_immediate_whatever_the_jitter() -> None:
    t = RestartTracker(RestartPolicy(), rng=lambda: 1.0)
    assert t.failed(0.0) == 0.0


def test_jitter_fraction_is_taken_from_the_policy() -> None:
    t = RestartTracker(RestartPolicy(jitter=0.5, max_restarts=100), rng=lambda: 1.0)
    assert delays(t, [0.0, 1.0]) == [0.0, pytest.approx(0.75)]


def test_gives_up_on_the_sixth_failure_within_sixty_seconds() -> None:
    t = RestartTracker(rng=no_jitter)
    got = delays(t, [0.0, 10.0, 20.0, 30.0, 40.0, 50.0])
    assert got[:5] == [0.0, 0.5, 1.0, 2.0, 4.0]
    assert got[5] is None


def test_five_failures_within_the_window_do_not_give_up() -> None:
    t = RestartTracker(rng=no_jitter)
    assert None not in delays(t, [0.0, 1.0, 2.0, 3.0, 4.0])


def test_failure_exactly_window_seconds_after_the_first_still_counts() -> None:
    t = RestartTracker(rng=no_jitter)
    assert delays(t, [0.0, 12.0, 24.0, 36.0, 48.0, 60.0])[-1] is None


def test_failures_spread_out_beyond_the_window_do_not_give_up() -> None:
    t = RestartTracker(rng=no_jitter)
    got = delays(t, [i * 13.0 for i in range(30)])  # never 6 failures within 60 s
    assert None not in got


def test_failures_sixty_one_seconds_apart_in_groups_do_not_give_up() -> None:
    t = RestartTracker(rng=no_jitter)
    first = delays(t, [0.0, 1.0, 2.0, 3.0, 4.0])
    later = delays(t, [65.0, 66.0, 67.0, 68.0])
    assert None not in first + later


def test_custom_max_restarts_and_window() -> None:
    t = tracker(max_restarts=2, window=10.0)
    assert delays(t, [0.0, 1.0, 2.0]) == [0.0, 0.5, None]
    t = tracker(max_restarts=2, window=10.0)
    assert None not in delays(t, [0.0, 6.0, 12.0, 18.0])


def test_ready_for_reset_after_seconds_resets_backoff() -> None:
    t = RestartTracker(rng=no_jitter)
    assert delays(t, [0.0, 1.0, 2.0]) == [0.0, 0.5, 1.0]
    t.ready(3.0)
    assert t.failed(63.0) == 0.0
    assert t.failed(64.0) == 0.5


def test_ready_for_reset_after_seconds_also_forgets_failures_in_the_window() -> None:
    t = tracker(reset_after=10.0)
    delays(t, [0.0, 1.0, 2.0, 3.0, 4.0])
    t.ready(5.0)
    # ten failures within 60 s in all, but the first five were forgiven by 10 s of ready
    assert delays(t, [15.0, 16.0, 17.0, 18.0, 19.0]) == [0.0, 0.5, 1.0, 2.0, 4.0]
    assert t.failed(20.0) is None


def test_ready_for_less_than_reset_after_keeps_backoff() -> None:
    t = RestartTracker(rng=no_jitter)
    delays(t, [0.0, 1.0])
    t.ready(2.0)
    assert t.failed(61.9) == 1.0


def test_short_ready_period_does_not_forgive_failures_within_the_window() -> None:
    t = RestartTracker(rng=no_jitter)
    delays(t, [0.0, 1.0, 2.0, 3.0, 4.0])
    t.ready(5.0)
    assert t.failed(10.0) is None


def test_readiness_only_counts_until_the_next_failure() -> None:
    t = RestartTracker(rng=no_jitter)
    delays(t, [0.0, 1.0])
    t.ready(2.0)
    t.failed(3.0)  # ready for only one second
    # no ready() since: a later failure is not forgiven however late it comes
    assert t.failed(500.0) == 2.0


def test_reset_forgets_backoff_and_window() -> None:
    t = RestartTracker(rng=no_jitter)
    assert delays(t, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])[-1] is None
    t.reset()
    assert delays(t, [6.0, 7.0, 8.0, 9.0, 10.0]) == [0.0, 0.5, 1.0, 2.0, 4.0]


def test_reset_forgets_readiness() -> None:
    t = RestartTracker(rng=no_jitter)
    t.ready(0.0)
    t.reset()
    delays(t, [100.0, 101.0])
    t.ready(102.0)
    assert t.failed(103.0) == 1.0


def test_restarts_counts_restarts_but_not_giving_up() -> None:
    t = RestartTracker(rng=no_jitter)
    assert t.restarts == 0
    delays(t, [0.0, 1.0, 2.0])
    assert t.restarts == 3
    delays(t, [3.0, 4.0, 5.0])  # the last of these gives up
    assert t.restarts == 5


def test_restarts_keep_counting_across_forgiven_failures() -> None:
    t = RestartTracker(rng=no_jitter)
    delays(t, [0.0, 1.0])
    t.ready(2.0)
    t.failed(100.0)
    assert t.restarts == 3


def test_restarts_count_starts_again_after_an_operator_reset() -> None:
    t = RestartTracker(rng=no_jitter)
    delays(t, [0.0, 1.0, 2.0])
    t.reset()
    assert t.restarts == 0


def test_default_rng_keeps_delays_within_jitter_bounds() -> None:
    t = RestartTracker(RestartPolicy(max_restarts=100))
    got = delays(t, [float(i) for i in range(8)])
    assert got[0] == 0.0
    for delay, base in zip(got[1:], [0.5, 1, 2, 4, 8, 16, 30], strict=True):
        assert delay is not None
        assert base * 0.9 <= delay <= base * 1.1
