"""One worker incarnation's heartbeats: numbered as sent, answered in order, and the probe built on them.

Above: the keeper of that worker, which sends one every ``heartbeatInterval`` and judges a worker
that leaves one unanswered for ``heartbeatTimeout`` hung, and which probes a worker before judging it
(a supervisor starved of CPU may not have read an answer that came). Below: the worker link, through
``send`` (the same ``HEARTBEAT`` bytes every time; the worker echoes each one).

One connection keeps its order, so by the time a heartbeat's answer is read, everything the worker
sent before it has been read too.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from supervisor.protocol import HEARTBEAT

__all__ = ["Heartbeats"]


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
