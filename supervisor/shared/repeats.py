"""Log lines of one kind, at most one a second: a storm of 5,000 timeouts writes a few lines, not 5,000.

Above: the supervisor, which logs each timeout, overload, malformed frame and dropped reply through a
``Repeats``. The first line of a kind in a window is written at once, as it is; the others in that
window are only counted, and once the window is over one line says how many there were and what the
last of them said. ``flush`` (called every second by the supervisor) closes windows that are over,
so a storm's count is written even when nothing follows it.

Pure code: the clock is passed in (``time.monotonic`` by default; a fake one in tests).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = ["WINDOW", "Repeats"]

WINDOW: Final = 1.0  # seconds: at most one line of each kind, plus one summary, per window


@dataclass(slots=True)
class _Window:
    ends: float
    level: int
    counted: int = 0  # lines of this kind held back since the window began
    last: str = ""  # the last of them, formatted


class Repeats:
    """Logs lines of each kind through ``logger``, aggregated per ``WINDOW`` seconds with a count."""

    def __init__(
        self, logger: logging.Logger, clock: Callable[[], float] = time.monotonic, window: float = WINDOW
    ) -> None:
        self.logger = logger
        self.clock = clock
        self.window = window
        self._open: dict[str, _Window] = {}  # kind -> its window, while one is open

    def log(self, kind: str, level: int, message: str, *args: object) -> None:
        """Write ``message % args`` now, or count it if a line of ``kind`` was written this window."""
        now = self.clock()
        current = self._open.get(kind)
        if current is not None and now >= current.ends:
            self._close(kind, current)
            current = None
        if current is None:
            self._open[kind] = _Window(ends=now + self.window, level=level)
            self.logger.log(level, message, *args)
        elif self.logger.isEnabledFor(level):
            current.counted += 1
            current.last = message % args if args else message
            current.level = max(current.level, level)

    def flush(self) -> None:
        """Close every window that is over, writing its count."""
        now = self.clock()
        for kind, current in list(self._open.items()):
            if now >= current.ends:
                self._close(kind, current)

    def _close(self, kind: str, current: _Window) -> None:
        del self._open[kind]
        if current.counted:
            self.logger.log(
                current.level,
                "%d more %s in the last %g s (the last: %s)",
                current.counted,
                kind,
                self.window,
                current.last,
            )
