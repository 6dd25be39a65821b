"""A worker's stderr, read by its keeper: log lines and its server's stderr, into our log and the
server's ring buffer.

Above: the keeper, which pumps its worker's stderr here and reads ``last_word`` and ``report()``
when the worker ends; the supervisor, which keeps a ``LogBook`` of every server's ``LogRing`` and
answers ``GetLogs`` (``mcp-supervisor logs``) from it. Below: the worker's stderr pipe. The line
format is ``supervisor.shared.boot``'s: the worker writes one line per record, ``<levelno> <text>`` for
its own log, ``S <text>`` for a line its MCP server wrote to stderr (``workers.logs``). Server
lines, and the worker's errors, are kept in a short tail for crash reports. A ``LAST_WORD``
(CRITICAL) line is the worker's last word: why it is ending (``start-up failed: tools/list: ...``,
``worker failed: KeyError: ...``); it is kept as ``last_word`` for the keeper's ``last_error``, not
in the tail.

The ring buffer is per server, not per worker: every worker of the server (its replicas
``name#2``, its client sessions ``name@client``) writes into it under its own label, and it
outlives them, so the lines a server wrote just before it crashed are still there after the
restart. It holds the server's stderr lines and its workers' warnings and errors, each with a
sequence number, bounded in lines and in characters (the oldest go first).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Collection
from typing import Final

import trio

from supervisor.protocol import LOG_LIMIT, ErrorReply, GetLogs, LogLine, LogLines, LogStream, ServerLog
from supervisor.shared.boot import LAST_WORD, read_log_line
from supervisor.shared.terminal import printable

__all__ = ["LogBook", "LogRing", "WorkerLog"]

log = logging.getLogger("mcp_supervisor.keeper")
server_log = logging.getLogger("mcp_supervisor.server")

TAIL_LINES: Final = 20  # lines kept for crash reports
REPORT_LINES: Final = 5  # of which this many go into a WORKER_CRASHED message
READ_CHUNK: Final = 65536
MAX_LINE: Final = 8192  # characters of one line kept; the worker already cuts server lines shorter
RING_LINES: Final = LOG_LIMIT  # lines of a server's log kept for `mcp-supervisor logs` (all its workers)
RING_CHARS: Final = 256 * 1024  # characters of them at most (32 lines of MAX_LINE): the oldest go first


class LogRing:
    """A server's recent log lines, oldest first, bounded in lines and in characters."""

    def __init__(self, lines: int = RING_LINES, chars: int = RING_CHARS) -> None:
        self.max_lines, self.max_chars = lines, chars
        self._lines: deque[LogLine] = deque()
        self._chars = 0
        self.last = 0  # the newest line's sequence number (0: none yet)

    def __len__(self) -> int:
        return len(self._lines)

    def add(self, worker: str, stream: LogStream, text: str, level: str = "") -> None:
        self.last += 1
        line = LogLine(seq=self.last, time=time.time(), worker=worker, stream=stream, text=text, level=level)
        self._lines.append(line)
        self._chars += len(text)
        while len(self._lines) > 1 and (len(self._lines) > self.max_lines or self._chars > self.max_chars):
            self._chars -= len(self._lines.popleft().text)

    def tail(self, after: int = 0, limit: int = RING_LINES) -> list[LogLine]:
        """The newest ``limit`` lines whose sequence number is above ``after``, oldest first."""
        found: list[LogLine] = []
        for line in reversed(self._lines):
            if line.seq <= after or len(found) >= limit:
                break
            found.append(line)
        found.reverse()
        return found


class LogBook:
    """Every server's ``LogRing``, by server name: made on a server's first line, kept for good (a
    server's workers come and go, and so may the server itself, reshaped by a reload)."""

    def __init__(self) -> None:
        self._rings: dict[str, LogRing] = {}

    def ring(self, server: str) -> LogRing:
        ring = self._rings.get(server)
        if ring is None:
            ring = self._rings[server] = LogRing()
        return ring

    def answer(self, request: GetLogs, servers: Collection[str]) -> LogLines | ErrorReply:
        """The reply to ``GetLogs``; ``servers``: the names of the servers configured now."""
        if request.server not in servers:
            known = ", ".join(servers) or "none"
            message = f"no server named {request.server!r} (servers: {known})"
            return ErrorReply(id=request.id, code="UNKNOWN_TOOL", message=message)
        ring = self._rings.get(request.server) or LogRing()
        lines = ring.tail(request.after, min(request.limit, LOG_LIMIT))
        return LogLines(id=request.id, log=ServerLog(server=request.server, lines=lines, last=ring.last))


class WorkerLog:
    def __init__(self, server: str, ring: LogRing | None = None) -> None:
        """``server``: how the lines are labelled (the worker's label); ``ring``: its server's."""
        self.server = server
        self.ring = LogRing() if ring is None else ring
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
                log.info("[%s] %s", self.server, printable(line))
                self.ring.add(self.server, "worker", line)
            return
        level, text = read
        if level is None:  # the server's stderr
            self.tail.append(text)
            self.ring.add(self.server, "server", text)
            server_log.info("[%s] %s", self.server, printable(text))  # it may reach a terminal
            return
        if level >= LAST_WORD:
            self.last_word = text
            level = logging.ERROR  # the keeper logs why, at ERROR: one failed worker is no emergency
        elif level >= logging.ERROR:
            self.tail.append(text)
        if level >= logging.WARNING:
            self.ring.add(self.server, "worker", text, logging.getLevelName(level))
        log.log(level, "[%s] %s", self.server, printable(text))
