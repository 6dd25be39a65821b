"""workers.progress.ProgressRelay: a token bucket (a burst at once, then one per interval at most, the
latest), the last at the end.

As in the SDK, each notification calls the relay in a task of its own; the worker's stdio transport
instead holds each one as it reads it and starts ``pace`` only when told to.
"""

from __future__ import annotations

import itertools

import trio
import trio.testing

from workers.progress import ProgressRelay

INTERVAL = 0.1
BURST = 10

Note = tuple[float, float | None, str | None]


def _relay() -> tuple[ProgressRelay, list[tuple[float, Note]]]:
    sent: list[tuple[float, Note]] = []

    def send(progress: float, total: float | None, message: str | None) -> None:
        sent.append((trio.current_time(), (progress, total, message)))

    return ProgressRelay(send, INTERVAL, BURST), sent


async def test_a_short_burst_goes_through_whole(autojump_clock: trio.testing.MockClock) -> None:
    """A server's three quick steps reach the caller as three (not one)."""
    relay, sent = _relay()
    for i in (1, 2, 3):
        await relay(i, 3, f"step {i}")  # each read as it comes (the worker's stdio transport)
    assert sent == [(0.0, (i, 3, f"step {i}")) for i in (1, 2, 3)]


async def test_a_long_burst_is_the_bucket_then_the_latest_of_the_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relay, sent = _relay()
    for i in range(1, BURST + 1):
        await relay(i, 1000, f"step {i}")
    async with trio.open_nursery() as nursery:
        for i in range(BURST + 1, 1001):  # a task each, as the SDK calls it (in any order)
            nursery.start_soon(relay, i, 1000, f"step {i}")
    assert sent[:BURST] == [(0.0, (i, 1000, f"step {i}")) for i in range(1, BURST + 1)]
    assert sent[BURST:] == [(INTERVAL, (1000, 1000, "step 1000"))]


async def test_a_steady_flood_is_held_to_the_bucket_and_one_per_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relay, sent = _relay()
    async with trio.open_nursery() as nursery:
        for i in range(1, 301):  # one every 10 ms for three seconds
            nursery.start_soon(relay, i, None, None)
            await trio.sleep(0.01)
        paced = [at for at, _ in sent]
        relay.close()
    for start in paced:  # in any second: the burst and one an interval at most
        assert sum(start <= at < start + 1 for at in paced) <= BURST + 1 / INTERVAL + 1
    assert len(paced) <= BURST + 3 / INTERVAL + 1
    assert all(
        later - earlier >= INTERVAL - 1e-9 for earlier, later in itertools.pairwise(paced[BURST + 1 :])
    )
    assert sent[-1][1] == (300, None, None)  # the last one, flushed by close if still held


async def test_close_delivers_the_latest_held_and_nothing_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relay, sent = _relay()
    for i in range(1, BURST + 1):  # the bucket, at once
        await relay(i, 99, None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay, 11, 99, None)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(relay, 12, 99, "last")
        await trio.testing.wait_all_tasks_blocked()
        assert trio.current_time() < INTERVAL and len(sent) == BURST
        relay.close()
        nursery.start_soon(relay, 13, 99, "late")
    assert [note for _, note in sent][BURST:] == [(12, 99, "last")]


async def test_progress_that_does_not_increase_is_dropped(autojump_clock: trio.testing.MockClock) -> None:
    relay, sent = _relay()
    for value in (1, 1, 0.5, 2, 1.5):
        await relay(value, None, None)
        await trio.sleep(1)
    assert [note[0] for _, note in sent] == [1, 2]


async def test_holding_in_order_asks_for_one_pacing_task_at_a_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relay, sent = _relay()
    async with trio.open_nursery() as nursery:
        assert [relay.hold(i, 99, None) for i in range(1, BURST + 1)] == [False] * BURST  # sent at once
        assert relay.hold(11, 99, None)  # the bucket is empty: pace it
        nursery.start_soon(relay.pace)
        await trio.testing.wait_all_tasks_blocked()
        asks = [relay.hold(i, 99, None) for i in range(12, 16)]  # the task already paces these
        assert asks == [False, False, False, False]
        assert not relay.hold(15, 99, "not higher")
    assert [note for _, note in sent][BURST:] == [(15, 99, None)]
    assert [at for at, _ in sent][BURST:] == [INTERVAL]
