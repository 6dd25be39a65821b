"""Restarts of one worker by its policy (``supervisor.config.restart_policy``), as pure code.

The first restart after a failure is immediate; later ones back off from ``initial_delay``
doubling to ``max_delay`` with +/- ``jitter``. Staying ready for ``reset_after`` seconds forgets
past failures. More than ``max_restarts`` failures within ``window`` seconds means the server is
given up on (``failed``) until an operator restarts it.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from supervisor.config.restart_policy import RestartPolicy

__all__ = ["RestartTracker"]


@dataclass
class RestartTracker:
    """Counts one worker's failures and says how long to wait before the next start."""

    policy: RestartPolicy = field(default_factory=RestartPolicy)
    rng: Callable[[], float] = random.random
    restarts: int = 0  # total restarts since start or the last operator reset, for status
    _recent: deque[float] = field(default_factory=deque)
    _streak: int = 0
    _ready_since: float | None = None

    def ready(self, now: float) -> None:
        self._ready_since = now

    def failed(self, now: float) -> float | None:
        """Record a failure at ``now``; return the delay before restarting, or None to give up."""
        policy = self.policy
        if self._ready_since is not None and now - self._ready_since >= policy.reset_after:
            self._streak = 0
            self._recent.clear()
        self._ready_since = None
        self._recent.append(now)
        while self._recent and now - self._recent[0] > policy.window:
            self._recent.popleft()
        if len(self._recent) > policy.max_restarts:
            return None
        delay = 0.0
        if self._streak > 0:
            base = min(policy.initial_delay * 2 ** (self._streak - 1), policy.max_delay)
            delay = base * (1 + policy.jitter * (2 * self.rng() - 1))
        self._streak += 1
        self.restarts += 1
        return delay

    def reset(self) -> None:
        """An operator's restart: forget every failure."""
        self.restarts = 0
        self._recent.clear()
        self._streak = 0
        self._ready_since = None
