"""A worker's stderr, read by its keeper: log lines and its server's stderr, into our log.

Above: the keeper, which pumps its worker's stderr here and reads ``last_word`` and ``report()``
when the worker ends. Below: the worker's stderr pipe. The line format is ``supervisor.boot``'s:
the worker writes one line per record, ``<levelno> <text>`` for its own log, ``S <text>`` for a
line its MCP server wrote to stderr (``workers.logs``). Server lines, and the worker's errors, are
kept in a short tail for crash reports. A ``LAST_WORD`` (CRITICAL) line is the worker's last word:
why it is ending (``start-up failed: tools/list: ...``, ``worker failed: KeyError: ...``); it is
kept as ``last_word`` for the keeper's ``last_error``, not in the tail.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Final

import trio

from supervisor.boot import LAST_WORD, read_log_line

__all__ = ["WorkerLog"]

log = logging.getLogger("mcp_supervisor.keeper")
server_log = logging.getLogger("mcp_supervisor.server")

TAIL_LINES: Final = 20  # lines kept for crash reports
REPORT_LINES: Final = 5  # of which this many go into a WORKER_CRASHED message
READ_CHUNK: Final = 65536
MAX_LINE: Final = 8192  # characters of one line kept; the worker already cuts server lines shorter


class WorkerLog:
    def __init__(self, server: str) -> None:
        self.server = server
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.last_word: str | None = None

    def reset(self) -> None:
        """Forget the last incarnation's lines."""
        self.tail.clear()
        self.last_word = None

    def report(self) -> str:
        """The last lines, for an error message ('' when there are none)."""
        return " | ".join(list(self.tail)[-REPORT_LINES:])

    async def pump(self, stream: trio.abc.ReceiveStream) -> None:
        """Read ``stream`` to its end, logging each line."""
        pending = b""
        while True:
            try:
                chunk = await stream.receive_some(READ_CHUNK)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                chunk = b""
            if not chunk:
                if pending:
                    self.line(pending.decode(errors="replace"))
                return
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()[-MAX_LINE:]
            for line in lines:
                self.line(line[:MAX_LINE].decode(errors="replace"))

    def line(self, line: str) -> None:
        read = read_log_line(line)
        if read is None:  # neither form (a traceback printed before logging was set up, say)
            if line:
                log.info("[%s] %s", self.server, line)
            return
        level, text = read
        if level is None:  # the server's stderr
            self.tail.append(text)
            server_log.info("[%s] %s", self.server, text)
            return
        if level >= LAST_WORD:
            self.last_word = text
            level = logging.ERROR  # the keeper logs why, at ERROR: one failed worker is no emergency
        elif level >= logging.ERROR:
            self.tail.append(text)
        log.log(level, "[%s] %s", self.server, text)
