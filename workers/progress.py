"""Coalesces one call's progress notifications before they go to the supervisor.

Above: a call (``workers.calls``), which sends what ``ProgressRelay`` hands it as
``InvokeProgress``. Below: the worker's stdio transport, which hands each
``notifications/progress`` to ``hold`` as it reads it (and starts ``pace`` when
told to); or the SDK, which calls the relay (its ``ProgressFnT``) once per
notification, each in a task of its own.

A server may send progress as fast as it likes; the caller gets at most one
notification per ``interval``: the first at once, then the latest one of each
interval (the others are replaced), and the latest one still held is sent
before the call's result. A notification whose progress does not exceed the
last one accepted is dropped: the spec says progress increases, and the SDK's
per-notification tasks may run out of order. Nothing is sent once the relay is
closed (the call has its result).
"""

from __future__ import annotations

from typing import Final

import trio

from supervisor.protocol import ProgressCallback

__all__ = ["PROGRESS_INTERVAL", "ProgressRelay"]

PROGRESS_INTERVAL: Final = 0.1  # seconds between two notifications to the caller: at most 10 a second a call


class ProgressRelay:
    """Hands ``send`` at most one notification per ``interval``, the latest."""

    def __init__(self, send: ProgressCallback, interval: float = PROGRESS_INTERVAL) -> None:
        self._send = send
        self.interval = interval
        self._held: tuple[float, float | None, str | None] | None = None
        self._last = -float("inf")  # the last progress value accepted
        self._next = -float("inf")  # the trio time from which the next one may be sent
        self._pacing = False  # a callback's task is waiting to send what is held
        self._closed = False

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        """The SDK's progress callback (one task each): hold the notification; send it when allowed."""
        if self.hold(progress, total, message):
            await self.pace()

    def hold(self, progress: float, total: float | None, message: str | None) -> bool:
        """Hold a notification, replacing what is held; True when the caller must run ``pace()``
        (the first to hold something while no ``pace()`` runs)."""
        if self._closed or progress <= self._last:
            return False
        self._last = progress
        self._held = (progress, total, message)
        if self._pacing:
            return False
        self._pacing = True
        return True

    async def pace(self) -> None:
        """Wait for the end of the interval, then send the latest held."""
        try:
            await trio.sleep_until(self._next)
            self.flush()
        finally:
            self._pacing = False

    def flush(self) -> None:
        """Send the notification held, if any."""
        if self._held is not None and not self._closed:
            held, self._held = self._held, None
            self._next = trio.current_time() + self.interval
            self._send(*held)

    def close(self) -> None:
        """Send what is held, then nothing more (the call's result goes next)."""
        self.flush()
        self._closed = True
