"""One request's replies, as the async stub's reader hands them to the task that waits for them.

Above: ``AsyncSupervisorClient`` (``supervisor.client.aio``): one ``Replies`` per request in flight,
fed by its reader and awaited by the request's task. Below: anyio's events, or on asyncio the loop's
futures and timers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from supervisor.protocol import FrontReply

__all__ = ["Replies"]


class Replies:
    """One request's replies as the reader hands them out (its terminal reply, and the progress and
    server requests before it), unbounded: the supervisor sends one terminal reply and a few progress
    notifications a second. Lighter than a memory object stream, whose every ``receive`` is a
    checkpoint and notes the waiting task; ``close`` ends the wait (``EndOfStream``: a failed
    handshake). ``future``: on asyncio, the loop's ``create_future``, awaited as it is (no event
    around it); else an anyio event is waited on."""

    __slots__ = ("_closed", "_future", "_queue", "_ready")

    def __init__(self, future: Callable[[], Awaitable[None]] | None = None) -> None:
        self._queue: deque[FrontReply] = deque()
        self._future = future
        self._ready: Any = None  # set when a reply comes, while one is awaited: an event or a future
        self._closed = False

    @property
    def pending(self) -> bool:
        return bool(self._queue)

    def send_nowait(self, reply: FrontReply) -> None:
        self._queue.append(reply)
        self._wake()

    def close(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        ready = self._ready
        if ready is None:
            return
        if self._future is None:
            ready.set()
        elif not ready.done():
            ready.set_result(None)

    def receive_nowait(self) -> FrontReply:
        return self._queue.popleft()

    async def receive_before(self, loop: Any, when: float) -> FrontReply | None:
        """The next reply, or None once the clock reaches ``when`` first: on asyncio (``loop``), with
        a timer of the loop's that wakes the wait; else in a cancel scope."""
        if loop is None:
            with anyio.CancelScope(deadline=when):
                return await self.receive()
            return None
        if not self._queue and not self._closed:
            ready = self._ready = self._future()  # type: ignore[misc]  # given with a loop
            timer = loop.call_at(when, self._wake)
            try:
                await ready
            finally:
                self._ready = None
                timer.cancel()
        return await self.receive() if self._queue or self._closed else None

    async def receive(self) -> FrontReply:
        while not self._queue:
            if self._closed:
                raise anyio.EndOfStream
            try:
                if self._future is None:
                    self._ready = anyio.Event()
                    await self._ready.wait()
                else:
                    self._ready = self._future()
                    await self._ready
            finally:
                self._ready = None
        return self._queue.popleft()
