"""Front requests of an operator that are neither calls nor listings: a server's log, shutdown, and
the audit trail.

Above: the client stubs (``supervisor.client.exchanges`` builds these requests) and the CLI's ``logs``,
``shutdown`` and ``audit``. Below: ``supervisor.protocol.front``, whose request and reply unions include
them, and the supervisor's dispatch (``supervisor.daemon.dispatch``), which answers them. Each request
gets exactly one terminal reply, as every front request does.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from supervisor.protocol.codec import _Message
from supervisor.protocol.payloads import AuditStats

__all__ = ["AUDIT_LIMIT", "LOG_LIMIT", "MAX_GRACE", "AuditRecords", "GetAudit", "GetLogs", "LogLine"]
__all__ += ["LogLines", "LogStream", "ServerLog", "Shutdown"]

AUDIT_LIMIT: Final = 10_000
"""The most records one ``GetAudit`` answers with (a larger ``limit`` is cut to it)."""

LOG_LIMIT: Final = 1000
"""The most lines one ``GetLogs`` answers with (a larger ``limit`` is cut to it): a server's whole
ring buffer (``supervisor.daemon.servers.worker_log.RING_LINES``)."""

MAX_GRACE: Final = 86400.0  # seconds: a ``Shutdown`` grace beyond a day is a mistake (or infinite)

_Count = Annotated[int, msgspec.Meta(ge=0)]
_Grace = Annotated[float, msgspec.Meta(ge=0, le=MAX_GRACE)]

LogStream = Literal["server", "worker"]
"""Who wrote a log line: the MCP server on its stderr, or its worker (its warnings and errors)."""


class LogLine(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a server's log, as the supervisor's ring buffer keeps it.

    ``text`` is as written (invalid UTF-8 replaced, cut to a bounded length): it may hold control
    characters, which whoever shows it must escape (the CLI does)."""

    seq: int  # 1, 2, ... per server since the supervisor started; never reused, not even after a crash
    time: float  # when the supervisor read it, in seconds since the epoch
    worker: str  # the worker's label: the server's name, a replica "files#2", a session "files@CLIENT"
    stream: LogStream
    text: str
    level: str = ""  # a worker line's level name ("WARNING", "ERROR"); "" for the server's own lines


class ServerLog(msgspec.Struct, frozen=True, kw_only=True):
    """What a ``GetLogs`` asked for: the newest ``limit`` lines after ``after``, oldest first.

    ``last`` is the newest line's ``seq`` the supervisor holds (0: none yet), so a caller that
    follows the log asks next with ``after=last``. Lines are missing between two answers when the
    first line's ``seq`` is more than ``after + 1`` (the ring buffer dropped the oldest)."""

    server: str
    lines: list[LogLine] = []
    last: int = 0


class GetLogs(_Message):
    """The newest ``limit`` lines of ``server``'s log whose ``seq`` is above ``after``.

    Answered ``LogLines``; an unknown server ``UNKNOWN_TOOL`` (a negative ``after`` or ``limit`` does
    not decode: ``BAD_REQUEST``). ``limit`` 0 answers no lines but ``last``, where following starts."""

    id: int
    server: str
    after: _Count = 0
    limit: _Count = 100


class LogLines(_Message):
    id: int
    log: ServerLog


class Shutdown(_Message):
    """Stop the supervisor as SIGTERM does: refuse new calls, let the calls in flight finish (up to
    ``grace`` seconds; None: the config's ``shutdownGrace``), stop every worker and server, exit 0.

    Answered ``Done`` before the drain starts (a ``grace`` below 0 or above ``MAX_GRACE`` does not
    decode: ``BAD_REQUEST``); the supervisor stops answering once it is gone."""

    id: int
    grace: _Grace | None = None


class GetAudit(_Message):
    """The newest ``limit`` records of the audit trail that match every filter given (None: any).

    ``since`` is a time in seconds since the epoch (records of requests that arrived then or later);
    ``identity`` and ``server`` are matched exactly, ``tool`` as an ``fnmatch`` glob of the tool or
    prompt name (or a read's URI). Answered ``AuditRecords`` (a negative ``limit`` does not decode:
    ``BAD_REQUEST``)."""

    id: int
    since: float | None = None
    identity: str | None = None
    tool: str | None = None
    server: str | None = None
    limit: _Count = 100


class AuditRecords(_Message):
    """The records a ``GetAudit`` asked for, newest first, each one line of the trail (a JSON object);
    ``stats`` says where the trail is and how its writing goes."""

    id: int
    records: list[str] = []
    stats: AuditStats | None = None  # always sent; None only from a peer that sent none
