"""Coalesces one call's progress notifications before they go to the supervisor.

Above: a call (``workers.calls``), which sends what ``ProgressRelay`` hands it as
``InvokeProgress``. Below: the worker's stdio transport, which hands each
``notifications/progress`` to ``hold`` as it reads it (and starts ``pace`` when
told to); or the SDK, which calls the relay (its ``ProgressFnT``) once per
notification, each in a task of its own.

A server may send progress as fast as it likes; the caller gets it through a token bucket: a burst
of up to ``burst`` notifications at once (a server's few quick steps all arrive), then at most one
per ``interval``, the latest of each (the others are replaced); the latest one still held is sent
before the call's result. A notification whose progress does not exceed the last one accepted is
dropped: the spec says progress increases, and the SDK's per-notification tasks may run out of
order. Nothing is sent once the relay is closed (the call has its result).
"""

from __future__ import annotations

from typing import Final

import trio

from supervisor.protocol import ProgressCallback

__all__ = ["PROGRESS_BURST", "PROGRESS_INTERVAL", "ProgressRelay"]

PROGRESS_INTERVAL: Final = 0.1  # seconds per notification to the caller past a burst: 10 a second a call
PROGRESS_BURST: Final = 10  # notifications a call may send at once before the interval paces them


class ProgressRelay:
    """Hands ``send`` the notifications a token bucket lets through (``burst``, one per ``interval``
    after), the latest of those it holds back."""

    def __init__(
        self, send: ProgressCallback, interval: float = PROGRESS_INTERVAL, burst: int = PROGRESS_BURST
    ) -> None:
        self._send = send
        self.interval = interval
        self._burst = burst
        self._tokens = float(burst)
        self._stamp = -float("inf")  # the trio time the tokens were counted at (none yet)
        self._held: tuple[float, float | None, str | None] | None = None
        self._last = -float("inf")  # the last progress value accepted
        self._pacing = False  # a task is waiting to send what is held
        self._closed = False

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        """The SDK's progress callback (one task each): send or hold the notification; send it when
        allowed."""
        if self.hold(progress, total, message):
            await self.pace()

    def hold(self, progress: float, total: float | None, message: str | None) -> bool:
        """Send the notification if the bucket allows and nothing waits, else hold it (replacing what
        is held); True when the caller must run ``pace()`` (the first to hold something while no
        ``pace()`` runs)."""
        if self._closed or progress <= self._last:
            return False
        self._last = progress
        if not self._pacing and self._refill() >= 1:
            self._tokens -= 1
            self._send(progress, total, message)
            return False
        self._held = (progress, total, message)
        if self._pacing:
            return False
        self._pacing = True
        return True

    async def pace(self) -> None:
        """Wait for the bucket's next token, then send the latest held."""
        try:
            await trio.sleep_until(self._stamp + (1 - self._refill()) * self.interval)
            self.flush()
        finally:
            self._pacing = False

    def _refill(self) -> float:
        now = trio.current_time()
        self._tokens = min(self._burst, self._tokens + (now - self._stamp) / self.interval)
        self._stamp = now
        return self._tokens

    def flush(self) -> None:
        """Send the notification held, if any."""
        if self._held is not None and not self._closed:
            held, self._held = self._held, None
            self._tokens = max(0.0, self._refill() - 1)
            self._send(*held)

    def close(self) -> None:
        """Send what is held, then nothing more (the call's result goes next)."""
        self.flush()
        self._closed = True
