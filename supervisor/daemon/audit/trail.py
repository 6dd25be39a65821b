"""The supervisor's audit trail: a line for every call, read and prompt, written without slowing the loop.

Above: the front door (``supervisor.daemon.front_door``), which tells the trail of each ``CallTool``,
``ReadResource`` and ``GetPrompt`` it decoded (``opened``), of every reply it sends (``replied``: a
request's terminal reply closes its record) and of a client whose requests were dropped because it
does not read its replies (``forgotten``); the dispatch table, which hands it ``GetAudit``; the
supervisor, which runs its writer (``run``), closes it last (``close``: the requests still open are
recorded ``dropped`` and every line is written), shows its figures in ``status`` (``stats``) and
exposes it as ``supervisor.audit`` (``query``, ``identities``) for the status page. Below: the records
(``supervisor.daemon.audit.record``), the files (``supervisor.daemon.audit.files``), the identities
table, and a worker thread (``trio.to_thread``) for every write and read of the files.

A request's record is opened when it arrives, keyed by its caller and id, and closed by the first
terminal reply (``CallResult``, ``ErrorReply``) sent to that caller with that id: whichever part sent
it (router, call table, deadline timer, front door), whatever the outcome. Its identity is its
``principal``, else its ``client``, else its connection's name (``peer_name``: the CURVE public key,
z85, of a CURVE client; ``local`` otherwise); its session its ``session``, else its ``client``.

Lines wait in a buffer of at most ``MAX_WAITING_BYTES``; a writer task hands what has gathered in
``GATHER`` seconds to a worker thread, one batch at a time (so the cost of the hand-off is shared by
the calls of that time, and a line is on disk within a fraction of a second). A write that fails
keeps its lines (they are written again every ``RETRY_INTERVAL`` seconds, before any newer ones); a
line that finds the buffer full is dropped and counted. Failures and drops are logged (the first
failure at once, then at most once every ``LOG_PERIOD`` seconds, with their counts) and shown in
``status`` and the metrics (``AuditStats``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec
import trio

from supervisor.config.audit_entry import AuditSpec
from supervisor.config.load import Config
from supervisor.daemon.audit.files import Filters, TrailFile, read_trail
from supervisor.daemon.audit.identities import Identities
from supervisor.daemon.audit.record import (
    AUDITED,
    DROPPED,
    Opened,
    arguments_json,
    digest,
    is_terminal,
    line,
    outcome_of,
)
from supervisor.daemon.registry import Registry
from supervisor.protocol import (
    AUDIT_LIMIT,
    AuditRecords,
    AuditStats,
    CallResult,
    CallTool,
    ErrorReply,
    FrontReply,
    GetAudit,
    GetPrompt,
    ReadResource,
)
from supervisor.shared.names import server_of

__all__ = [
    "GATHER",
    "LOG_PERIOD",
    "MAX_NAME",
    "MAX_REPLY_BYTES",
    "MAX_WAITING_BYTES",
    "RETRY_INTERVAL",
    "Trail",
]

log = logging.getLogger("mcp_supervisor")

MAX_WAITING_BYTES: Final = 16 * 1024 * 1024  # lines not yet written; past it, a new line is dropped
MAX_NAME: Final = 1024  # characters of an identity, session or tool kept (a refused request's may be longer)
RETRY_INTERVAL: Final = 1.0  # seconds between writes while writing fails
GATHER: Final = 0.2  # seconds lines gather before a batch is written (a thread hand-off costs 0.1-0.5 ms)
LOG_PERIOD: Final = 10.0  # seconds: at most one line about failed writes and drops per period
MAX_REPLY_BYTES: Final = (
    16 * 1024 * 1024
)  # records one AuditRecords carries, at most (under a frame's 64 MiB)

Audited = CallTool | ReadResource | GetPrompt


class Trail:
    """The trail of one supervisor; ``spec`` None: off (nothing is recorded, ``on`` is False)."""

    def __init__(
        self,
        spec: AuditSpec | None,
        registry: Registry,
        servers: Mapping[str, object],
        config: Callable[[], Config],
        reply: Callable[[bytes, FrontReply], None],
    ) -> None:
        """``servers``: the configured servers by name (a request is routed by their prefixes);
        ``config()``: the config in force (``auditArguments``); ``reply``: for ``GetAudit``."""
        self.spec = spec
        self.on = spec is not None
        self._file = None if spec is None else TrailFile(spec.path, spec.max_bytes, spec.keep)
        self._registry = registry
        self._servers = servers
        self._config = config
        self._reply = reply
        self.peer_name: Callable[[bytes], str] = lambda caller: "local"  # the front door's, once bound
        self.identities_seen = Identities()
        self._open: dict[tuple[bytes, int], Opened] = {}
        self._more: dict[tuple[bytes, int], list[Opened]] = {}  # a second request with an id still open
        self._waiting: list[bytes] = []  # lines not written yet, oldest first
        self._held = 0  # bytes of lines waiting, or being written
        self._wake = trio.Event()
        self._writing = trio.Lock()  # held while a batch is written: a query reads between batches
        self.lines = 0  # written
        self.failures = 0  # writes that failed
        self.dropped = 0  # lines dropped: the buffer was full
        self._trouble: str | None = None  # why the last write failed, while failing
        self._logged_at = -LOG_PERIOD  # when a line about trouble was last logged (monotonic)

    # ------------------------------------------------------------ records

    def opened(self, caller: bytes, request: Audited) -> None:
        """A call, read or prompt arrived: its record is open until its terminal reply."""
        kind = AUDITED[type(request)]
        server: str | None
        payload: msgspec.Raw | None = None
        if type(request) is CallTool:
            route = self._registry.lookup(request.name)
            server = route.server if route is not None else server_of(request.name, self._servers)
            tool, payload = request.name, request.arguments
        elif type(request) is GetPrompt:
            server = request.server if request.server is not None else server_of(request.name, self._servers)
            tool, payload = request.name, request.arguments
        else:
            assert type(request) is ReadResource
            server, tool = request.server, request.uri
        server = server if server is not None and server in self._servers else ""
        record = Opened(
            arrived=time.time(),
            started=time.monotonic(),
            identity=(request.principal or request.client or self.peer_name(caller))[:MAX_NAME],
            session=(request.session or request.client)[:MAX_NAME],
            kind=kind,
            tool=tool[:MAX_NAME],
            server=server,
        )
        if payload is not None:
            record.arg_bytes, record.arg_digest = len(payload), digest(payload)
            spec = self._config().servers.get(server) if server else None
            if spec is not None and spec.audit_arguments:
                record.arguments = arguments_json(payload)
        key = (caller, request.id)
        if key in self._open:  # a reused id: the first reply closes the first request
            self._more.setdefault(key, []).append(record)
        else:
            self._open[key] = record

    def replied(self, caller: bytes, reply: FrontReply) -> None:
        """A reply goes out (or would, had its caller not gone): a terminal one closes its record."""
        if not is_terminal(reply):
            return
        key = (caller, reply.id)
        record = self._open.pop(key, None)
        if record is None:
            return
        if self._more:
            self._next_of(key)
        assert type(reply) is CallResult or type(reply) is ErrorReply
        outcome, size = outcome_of(reply, record.kind)
        self._close(record, outcome, size)

    def forgotten(self, caller: bytes) -> None:
        """``caller``'s requests in flight were forgotten (it does not read its replies): recorded."""
        for key in [key for key in self._open if key[0] == caller]:
            self._drop(key)

    def _drop(self, key: tuple[bytes, int]) -> None:
        while key in self._open:
            self._close(self._open.pop(key), DROPPED, 0)
            self._next_of(key)

    def _next_of(self, key: tuple[bytes, int]) -> None:
        more = self._more.get(key)
        if more:
            self._open[key] = more.pop(0)
            if not more:
                del self._more[key]

    def _close(self, record: Opened, outcome: str, result_bytes: int) -> None:
        now = time.monotonic()
        if outcome == "UNKNOWN_TOOL":
            record.server = ""  # routed nowhere (the server its prefix names has no such tool)
        self.identities_seen.seen(record.identity, record.session, outcome == "ok", time.time())
        data = line(record, outcome, now - record.started, result_bytes)
        if self._held + len(data) > MAX_WAITING_BYTES:
            self.dropped += 1
            self._say_trouble()
            return
        self._waiting.append(data)
        self._held += len(data)
        self._wake.set()

    # ------------------------------------------------------------ writing

    async def run(self) -> None:
        """Write the lines as they gather, a batch at a time in a worker thread, until cancelled."""
        if self._file is None:
            return
        while True:
            if not self._waiting:
                await self._wake.wait()
                self._wake = trio.Event()
            await trio.sleep(GATHER)  # the lines of many calls, one hand-off to the thread
            async with self._writing:  # taken under the lock: a query sees every line, written or not
                batch, self._waiting = self._waiting, []
                if not batch:
                    continue
                written, error = await trio.to_thread.run_sync(self._file.append, batch)
                self._wrote(batch, written, error)
            if error is not None:
                await trio.sleep(RETRY_INTERVAL)

    def _wrote(self, batch: list[bytes], written: int, error: OSError | None) -> None:
        self.lines += written
        self._held -= sum(len(data) for data in batch[:written])
        if error is None:
            if self._trouble is not None:
                log.warning("audit trail: writing to %s again", self._where())
                self._trouble = None
            return
        self.failures += 1
        self._waiting[:0] = batch[written:]  # before any newer line: written again first
        first = self._trouble is None
        self._trouble = f"{error.strerror or error}" + (f": {error.filename}" if error.filename else "")
        self._say_trouble(now=first)

    def _say_trouble(self, now: bool = False) -> None:
        """A line about failed writes and drops: at most once every ``LOG_PERIOD`` seconds, but at once
        (``now``) for the first failure after writes that worked."""
        at = time.monotonic()
        if at - self._logged_at < LOG_PERIOD and not now:
            return
        self._logged_at = at
        log.error(
            "audit trail: cannot write to %s (%s): %d writes failed, %d lines waiting, %d lines dropped "
            "since the start; writing again every %g s",
            self._where(),
            self._trouble or "the lines waiting fill the buffer",
            self.failures,
            len(self._waiting),
            self.dropped,
            RETRY_INTERVAL,
        )

    def _where(self) -> str:
        return "" if self.spec is None else str(self.spec.path)

    def close(self) -> None:
        """The supervisor stops: every request still open is recorded ``dropped`` and every line waiting
        is written now (blocking: the loop is over), or said lost."""
        for key in list(self._open):
            self._drop(key)
        if self._file is None or not self._waiting:
            return
        batch, self._waiting = self._waiting, []
        written, error = self._file.append(batch)
        self.lines += written
        if error is not None:
            self.failures += 1
            log.error(
                "audit trail: %d lines could not be written to %s as the supervisor stopped: %s",
                len(batch) - written,
                self._where(),
                error,
            )

    # ------------------------------------------------------------ reading

    def stats(self) -> AuditStats:
        return AuditStats(
            path=self._where(),
            lines=self.lines,
            failures=self.failures,
            dropped=self.dropped,
            waiting=len(self._waiting),
        )

    def identities(self) -> list[dict[str, Any]]:
        """Every identity seen since the start (at most 1000, the latest), the one seen last first:
        ``identity``, ``sessions``, ``calls``, ``errors``, ``firstSeen``, ``lastSeen``, ``active``."""
        return self.identities_seen.rows(time.time())

    async def query(
        self,
        since: float | None = None,
        identity: str | None = None,
        tool: str | None = None,
        limit: int = 100,
        server: str | None = None,
    ) -> list[dict[str, Any]]:
        """The newest ``limit`` records matching every filter given (``since``: seconds since the epoch;
        ``tool``: a glob), newest first, from the lines not written yet and the files (read in a
        worker thread). ``OSError`` when a file cannot be read."""
        lines = await self.query_lines(Filters(since, identity, tool, server), limit)
        return [json.loads(text) for text in lines]

    async def query_lines(self, filters: Filters, limit: int) -> list[str]:
        if self.spec is None:
            return []
        spec = self.spec
        async with self._writing:  # no batch half written while the files are read
            newer = list(self._waiting)
            return await trio.to_thread.run_sync(read_trail, spec.path, filters, limit, spec.keep, newer)

    def answer(self, caller: bytes, request: GetAudit, tasks: trio.Nursery) -> None:
        """Answer a ``GetAudit`` once the files are read (in ``tasks``)."""
        tasks.start_soon(self._answer, caller, request)

    async def _answer(self, caller: bytes, request: GetAudit) -> None:
        filters = Filters(request.since, request.identity, request.tool, request.server)
        try:
            lines = await self.query_lines(filters, min(request.limit, AUDIT_LIMIT))
        except OSError as exc:
            why = f"cannot read the audit trail {self._where()}: {exc.strerror or exc}"
            self._reply(caller, ErrorReply(id=request.id, code="UNAVAILABLE", message=why))
            return
        total, kept = 0, 0
        for kept, text in enumerate(lines):  # noqa: B007 (kept: how many fit)
            total += len(text)
            if total > MAX_REPLY_BYTES:
                break
        else:
            kept = len(lines)
        self._reply(caller, AuditRecords(id=request.id, records=lines[:kept], stats=self.stats()))
