"""A worker's stderr: its own log records and its server's stderr, as lines its keeper reads.

Above: the rest of the worker, which logs as usual (``logging``), and ``workers.stdio``, which hands
each line its server writes to stderr to a ``StderrRelay``. Below: this process's stderr, a pipe to
the keeper's ``supervisor.daemon.servers.worker_log``. The line format is ``supervisor.shared.boot``'s
(``log_lines``, ``server_line``), so both ends read it alike; a ``LAST_WORD`` line is the worker's last word.
"""

from __future__ import annotations

import logging
import sys

import trio

from supervisor.shared.boot import log_lines, server_line
from workers.ratelimit import RateLimit

__all__ = ["LineHandler", "StderrRelay", "log_to_stderr", "one_line"]


class LineHandler(logging.Handler):
    """Writes each record as ``<levelno> <line>`` lines the keeper can parse.

    A record with an exception (the SDK logs transport failures that way) is one line at its
    level, ending in ``Type: message``; the traceback follows as debug lines, when debug is on.
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text, trace = record.getMessage(), ""
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                text = f"{text}: {type(exc).__name__}: {exc}"
                if logging.getLogger().isEnabledFor(logging.DEBUG):
                    trace = logging.Formatter().formatException(record.exc_info)
            lines = log_lines(record.levelno, text)
            if trace:
                lines += log_lines(logging.DEBUG, trace)
            sys.stderr.write(lines)
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def log_to_stderr(level: int = logging.INFO) -> None:
    """Send every record to stderr as lines (``LineHandler``), from ``level`` up."""
    logging.basicConfig(level=level, handlers=[LineHandler()], force=True)


def set_level(level: int) -> None:
    """The keeper's log level (from the boot line); an HTTP request per line is debug detail even so."""
    logging.getLogger().setLevel(level)
    # One line per HTTP request is debug detail: errors are logged with their status anyway.
    logging.getLogger("httpx2").setLevel(max(level, logging.WARNING))


def one_line(text: str) -> str:
    """A last word is one log line (a pydantic error, say, has several)."""
    return " ".join(text.split())


class StderrRelay:
    """Relays the server's stderr lines as ``S <line>``, at most ``rate`` lines a second (bursts of 5x).

    A server flooding stderr costs the pipe nothing beyond that: the rest is
    counted, and the count is reported once a second while lines are being dropped.
    """

    def __init__(self, rate: float) -> None:
        self.limit = RateLimit(rate, 5 * rate)
        self._dropping = trio.Event()  # set when a line is dropped: the reporter's second begins

    def __call__(self, line: str) -> None:
        if self.limit.allow():
            self.report_dropped()
            sys.stderr.write(server_line(line))
            sys.stderr.flush()
        else:
            self._dropping.set()

    def report_dropped(self) -> None:
        if dropped := self.limit.take_dropped():
            text = f"{dropped} server stderr lines not logged (rate limit)"
            sys.stderr.write(log_lines(logging.WARNING, text))
            sys.stderr.flush()

    async def report_forever(self) -> None:
        """Report a flood's dropped lines a second after the first drop, and every second while it
        lasts, even when the server falls silent after it. With nothing dropped it sleeps without a
        timer: an idle worker does nothing every second (what it runs, it writes to, and that is
        memory copied back out of the pages it shares)."""
        while True:
            await self._dropping.wait()
            await trio.sleep(1)
            self._dropping = trio.Event()
            self.report_dropped()
