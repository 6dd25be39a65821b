"""workers.progress.ProgressRelay: one notification per interval at most, the latest, the last at the end.

As in the SDK, each notification calls the relay in a task of its own; the worker's stdio transport
instead holds each one as it reads it and starts ``pace`` only when told to.
"""

from __future__ import annotations

import itertools

import trio
import trio.testing

from workers.progress import ProgressRelay

INTERVAL = 0.1

Note = tuple[float, float | None, str | None]


def _relay() -> tuple[ProgressRelay, list[tuple[float, Note]]]:
    sent: list[tuple[float, Note]] = []

    def send(progress: float, total: float | None, message: str | None) -> None:
        sent.append((trio.current_time(), (progress, total, message)))

    return ProgressRelay(send, INTERVAL), sent


async def test_a_burst_is_coalesced_to_the_first_then_the_latest_of_the_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relay, sent = _relay()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay, 1, 1000, "step 1")
        await trio.testing.wait_all_tasks_blocked()
        for i in range(2, 1001):
            nursery.start_soon(relay, i, 1000, f"step {i}")
    assert sent == [(0.0, (1, 1000, "step 1")), (INTERVAL, (1000, 1000, "step 1000"))]


async def test_a_steady_flood_is_held_to_one_per_interval(autojump_clock: trio.testing.MockClock) -> None:
    relay, sent = _relay()
    async with trio.open_nursery() as nursery:
        for i in range(1, 101):  # one every 10 ms for a second
            nursery.start_soon(relay, i, None, None)
            await trio.sleep(0.01)
        paced = [at for at, _ in sent]
        relay.close()
    assert all(later - earlier >= INTERVAL - 1e-9 for earlier, later in itertools.pairwise(paced))
    assert len(paced) <= 1 + 1 / INTERVAL + 1
    assert sent[-1][1] == (100, None, None)  # the last one, flushed by close if still held


async def test_close_delivers_the_latest_held_and_nothing_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    relay, sent = _relay()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(relay, 1, 3, None)
        await trio.testing.wait_all_tasks_blocked()  # the first goes out at once
        nursery.start_soon(relay, 2, 3, None)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(relay, 3, 3, "last")
        await trio.testing.wait_all_tasks_blocked()
        assert trio.current_time() < INTERVAL and len(sent) == 1
        relay.close()
        nursery.start_soon(relay, 4, 3, "late")
    assert [note for _, note in sent] == [(1, 3, None), (3, 3, "last")]


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
        assert relay.hold(1, 10, None)  # the first: pace it
        nursery.start_soon(relay.pace)
        await trio.testing.wait_all_tasks_blocked()
        asks = [relay.hold(i, 10, None) for i in range(2, 6)]  # one task already paces these
        assert asks == [True, False, False, False]
        nursery.start_soon(relay.pace)
        assert not relay.hold(5, 10, "not higher")
    assert [note for _, note in sent] == [(1, 10, None), (5, 10, None)]
    assert [at for at, _ in sent] == [0.0, INTERVAL]
