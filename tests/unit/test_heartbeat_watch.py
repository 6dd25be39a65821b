"""The heartbeat watch's judgement of a silent worker, on trio's mock clock: a worker asleep or
stopped is killed at the timeout; a runnable one (starved of CPU on a busy machine) is given up to
``STARVED_GRACE`` timeouts in all, and one that answers meanwhile is not killed at all."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from supervisor.config.model import SupervisorSettings
from supervisor.daemon.servers.heartbeats import STARVED_GRACE, Heartbeats

SETTINGS = SupervisorSettings(heartbeat_interval=1.0, heartbeat_timeout=3.0)


async def judge(state: str, answer_at: float | None = None) -> tuple[str | None, float]:
    """Watch a worker that stops answering at 0 (in ``state``), and answers again at ``answer_at``;
    the kill's reason (None: not killed within 30 s) and when."""
    killed: list[tuple[str, float]] = []
    heard = [0.0]
    ready = trio.Event()
    ready.set()
    beats = Heartbeats(b"w", lambda identity, payload: True)

    async def caught_up() -> None:
        pass

    async def answers() -> None:
        if answer_at is not None:
            await trio.sleep_until(answer_at)
            heard[0] = trio.current_time()
            beats.answered()

    with trio.move_on_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answers)

            def kill(why: str) -> None:
                killed.append((why, trio.current_time()))
                nursery.cancel_scope.cancel()

            await beats.watch(ready, lambda: heard[0], lambda: SETTINGS, caught_up, kill, lambda: state)
    return (killed[0][0], killed[0][1]) if killed else (None, trio.current_time())


@pytest.mark.parametrize("state", ["S pipe_write", "D", "", "T"])
def test_a_worker_asleep_or_stopped_is_killed_at_the_timeout(state: str) -> None:
    why, when = trio.run(judge, state, clock=trio.testing.MockClock(autojump_threshold=0))
    assert why is not None and why.startswith("worker stopped answering heartbeats for 3 s")
    assert 3.0 <= when < 5.0
    if state:
        assert why.endswith(f"(state {state})")


def test_a_runnable_worker_is_given_grace_and_then_killed() -> None:
    why, when = trio.run(judge, "R", clock=trio.testing.MockClock(autojump_threshold=0))
    assert why == f"worker stopped answering heartbeats for {3 * STARVED_GRACE} s (state R)"
    assert 3.0 * STARVED_GRACE <= when < 3.0 * STARVED_GRACE + 2.0


def test_a_runnable_worker_that_answers_within_the_grace_is_kept() -> None:
    why, _ = trio.run(judge, "R", 5.5, clock=trio.testing.MockClock(autojump_threshold=0))
    # it answered at 5.5 s, then fell silent again: judged anew from then, with its grace again
    assert why is None or why.endswith("(state R)")
    why_asleep, when = trio.run(judge, "S", 5.5, clock=trio.testing.MockClock(autojump_threshold=0))
    assert why_asleep is not None and when < 5.5  # asleep: killed before it could answer
