"""One worker incarnation's heartbeats: numbered as sent, answered in order, the probe built on them,
and the two watches that judge the worker by them.

Above: the keeper of that worker, which runs the watches while the worker lives: ``watch_start``
(ready within ``startTimeout``) and ``watch`` (once ready, a heartbeat every ``heartbeatInterval``;
one left unanswered for ``heartbeatTimeout`` is a hung worker); each probes the worker before judging
it (a supervisor starved of CPU may not have read an answer that came), and calls ``kill`` with why.
Below: the worker link, through ``send`` (the same ``HEARTBEAT`` bytes every time; the worker
echoes each one).

One connection keeps its order, so by the time a heartbeat's answer is read, everything the worker
sent before it has been read too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import trio

from supervisor.config.load import SupervisorSettings
from supervisor.protocol import HEARTBEAT

__all__ = ["STARVED_GRACE", "Heartbeats"]

STARVED_GRACE: Final = 3  # heartbeat timeouts a runnable (CPU-starved) worker is given, in all


class Heartbeats:
    def __init__(self, identity: bytes, send: Callable[[bytes, bytes], bool]) -> None:
        """``send(identity, payload)`` says whether the worker was connected to send to."""
        self._identity = identity
        self._send = send
        self._sent = self._answered = 0
        self._answer_came: trio.Event | None = None  # set at the next answer, while a probe waits

    def send(self) -> int | None:
        """Send one; its number, or None when the worker is not connected (yet)."""
        if not self._send(self._identity, HEARTBEAT):
            return None
        self._sent += 1
        return self._sent

    def answered(self) -> None:
        self._answered += 1
        if self._answer_came is not None:
            self._answer_came.set()
            self._answer_came = None

    async def probe(self, timeout: float) -> bool:
        """A round trip within ``timeout``: did the worker answer?"""
        number = self.send()
        if number is None:
            return False
        with trio.move_on_after(timeout):
            while self._answered < number:
                if self._answer_came is None:
                    self._answer_came = trio.Event()
                await self._answer_came.wait()
        return self._answered >= number

    async def watch_start(
        self,
        ready: trio.Event,
        start_timeout: float,
        settings: SupervisorSettings,
        kill: Callable[[str], None],
    ) -> None:
        """The worker must be ready within ``start_timeout``; else ``kill`` it."""
        with trio.move_on_after(start_timeout):
            await ready.wait()
            return
        # Its Ready may have been sent and still be queued, unread (a supervisor starved of CPU).
        if await self.probe(settings.heartbeat_interval) and ready.is_set():
            return
        kill(f"did not finish starting (initialize and tools/list) within {start_timeout:g} s")

    async def watch(
        self,
        ready: trio.Event,
        last_heard: Callable[[], float | None],
        settings: Callable[[], SupervisorSettings],
        caught_up: Callable[[], Awaitable[None]],
        kill: Callable[[str], None],
        state: Callable[[], str] = lambda: "",
    ) -> None:
        """Once the worker is ready, it must keep answering heartbeats: one left unanswered for the
        timeout ends it (``kill``). While it starts, the start timeout watches it instead: among many
        workers starting at once, one starved of CPU is slow to answer, not hung. Silence counts from
        the oldest unanswered heartbeat, not from the worker's last message (``last_heard``), so a
        supervisor that was itself starved of CPU (and asked nothing) blames no worker.

        ``state`` is the worker process's run state (``supervisor.shared.processes.run_state``). A
        worker that is runnable (``R``: on a CPU, or waiting for one on a machine busy with other
        work) gets up to ``STARVED_GRACE`` timeouts in all before it is judged; a stopped one (``T``)
        or one asleep is judged at the timeout. The kill says which state it was in."""
        asked: float | None = None  # when the oldest heartbeat not answered since was sent
        while True:  # settings are read each time: a reload may change them
            interval, timeout = settings().heartbeat_interval, settings().heartbeat_timeout
            now = trio.current_time()
            self.send()
            heard = last_heard()
            if heard is None or not ready.is_set():  # the start timeout covers that
                await trio.sleep(interval)
                continue
            if asked is None or heard >= asked:
                asked = now
            if now - asked >= timeout:
                with trio.move_on_after(interval):  # its answer may still be queued, unread
                    await caught_up()
                if (last_heard() or 0.0) >= asked:
                    continue
                run = state()
                if run.startswith("R") and trio.current_time() - asked < timeout * STARVED_GRACE:
                    await trio.sleep(interval)  # runnable: starved of CPU, or busy; a while longer
                    continue
                silent = max(timeout, round(trio.current_time() - asked, 1))
                kill(
                    f"worker stopped answering heartbeats for {silent:g} s"
                    + (f" (state {run})" if run else "")
                )
                return
            await trio.sleep(min(interval, asked + timeout - now))
