"""A token bucket that counts what it refuses, for logs a misbehaving server could flood."""

from __future__ import annotations

import time

__all__ = ["RateLimit"]


class RateLimit:
    """Allows ``rate`` events a second on average, in bursts of up to ``burst``."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.last = time.monotonic()
        self.dropped = 0

    def allow(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens < 1:
            self.dropped += 1
            return False
        self.tokens -= 1
        return True

    def take_dropped(self) -> int:
        """How many were refused since the last call."""
        dropped, self.dropped = self.dropped, 0
        return dropped
