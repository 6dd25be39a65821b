"""Coalesces one call's progress notifications before they go to the supervisor.

Above: the worker's ``_call``, which sends what ``ProgressRelay`` hands it as
``InvokeProgress``. Below: the SDK, which calls the relay (its ``ProgressFnT``)
once per ``notifications/progress`` from the server, each in a task of its own.

A server may send progress as fast as it likes; the caller gets at most one
notification per ``interval`` (the latest, the others are replaced), and the
latest one still held is sent before the call's result. A notification whose
progress does not exceed the last one accepted is dropped: the spec says
progress increases, and the SDK's per-notification tasks may run out of order.
Nothing is sent once the relay is closed (the call has its result).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import trio

__all__ = ["PROGRESS_INTERVAL", "ProgressRelay"]

PROGRESS_INTERVAL: Final = 0.1  # seconds between two notifications to the caller: at most 10 a second a call

Send = Callable[[float, float | None, str | None], None]


class ProgressRelay:
    """Hands ``send`` at most one notification per ``interval``, the latest; ``run`` paces it."""

    def __init__(self, send: Send, interval: float = PROGRESS_INTERVAL) -> None:
        self._send = send
        self.interval = interval
        self._held: tuple[float, float | None, str | None] | None = None
        self._last = -float("inf")  # the last progress value accepted
        self._wake = trio.Event()
        self._closed = False

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        """The SDK's progress callback: hold the notification until ``run`` may send it."""
        if not self._closed and progress > self._last:
            self._last = progress
            self._held = (progress, total, message)
            self._wake.set()
        await trio.lowlevel.checkpoint()

    async def run(self) -> None:
        """Send held notifications, one per interval at most, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            self.flush()
            await trio.sleep(self.interval)

    def flush(self) -> None:
        """Send the notification held, if any."""
        if self._held is not None and not self._closed:
            held, self._held = self._held, None
            self._send(*held)

    def close(self) -> None:
        """Send what is held, then nothing more (the call's result goes next)."""
        self.flush()
        self._closed = True
