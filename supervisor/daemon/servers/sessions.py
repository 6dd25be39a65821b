"""Per-client sessions (``"scope": "client"``): a worker per client identity, started on its first
request, reaped when idle, at most ``maxSessions`` at once.

Above: the router, which asks ``route`` where a client's request goes (its session, started if need
be, or ``OVERLOADED``); the crew, which makes it for a server with ``"scope": "client"``. Beside it:
the other kind of server, ``supervisor.daemon.servers.replicas.Replicas``, and the abstract ``Server``
base both share (held requests, the keepers' server). Below: one keeper per session (``once``: a
session that ends is not restarted) and the *lister*, a keeper that lists the tools when the server
starts and then stops, so the registry stays one list while no session runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import trio

from supervisor.config.load import ServerSpec, SupervisorSettings
from supervisor.daemon.servers.keeper import Keeper
from supervisor.daemon.servers.owner import ServerOwner
from supervisor.daemon.servers.pool import Refusal, Server
from supervisor.daemon.servers.restarts import RestartTracker
from supervisor.daemon.servers.rows import pooled_row, worker_row
from supervisor.protocol import ServerStatus, WorkerState, WorkerTool

__all__ = ["Sessions"]

log = logging.getLogger("mcp_supervisor.keeper")

REAP_CHECK: Final = 1.0  # seconds between looks at idle sessions, at most


@dataclass(eq=False, slots=True)
class _Session:
    client: str
    keeper: Keeper
    last_used: float


class Sessions(Server):
    """A worker per client (``scope: client``), started on its first request, reaped when idle."""

    def __init__(self, spec: ServerSpec, owner: ServerOwner, settings: SupervisorSettings) -> None:
        super().__init__(spec, owner, settings)
        self.lister = Keeper(spec, self, settings)  # learns the tools, then stops
        self.sessions: dict[str, _Session] = {}
        self._ending: set[Keeper] = set()  # sessions stopped (reaped, restarted) and not gone yet
        self._listed = False  # the lister has registered the tools
        self._want_running = not spec.disabled
        self._gave_up = False  # too many sessions failed: ``failed`` until an operator's start
        self.tracker = RestartTracker(spec.policy)

    def keepers(self) -> Iterator[Keeper]:
        yield self.lister
        for session in self.sessions.values():
            yield session.keeper
        yield from self._ending

    @property
    def restarts(self) -> int:
        return self.lister.tracker.restarts + self.tracker.restarts

    def _aggregate(self) -> WorkerState:
        if not self._want_running:
            return "stopped"
        if self._gave_up:
            return "failed"
        if self._listed:
            return "ready"
        state = self.lister.state
        return "starting" if state == "stopped" else state  # stopped: between its start and ours

    # ------------------------------------------------------------ requests

    def route(self, client: str, avoid: Sequence[Keeper] = ()) -> Keeper | Refusal:
        if self._state != "ready":
            return Refusal("UNAVAILABLE", self.why_unavailable())
        now = trio.current_time()
        session = self.sessions.get(client)
        if session is not None and session.keeper.ending:  # its worker died: a fresh one
            self._retire(session)
            session = None
        if session is None:
            if len(self.sessions) >= self.spec.max_sessions:
                why = (
                    f"server {self.name!r} has {len(self.sessions)} client sessions (maxSessions); "
                    f"one is reaped after {self.spec.idle_timeout:g} s without a request"
                )
                return Refusal("OVERLOADED", why)
            session = self._open(client, now)
        session.last_used = now
        keeper = session.keeper
        if keeper in avoid:  # found unreachable: it is ending, and its calls fail with it
            return Refusal("UNAVAILABLE", f"server {keeper.label!r}: its worker is gone")
        return keeper

    def listing_target(self, client: str) -> Keeper | None:
        session = self.sessions.get(client)
        return session.keeper if session is not None and session.keeper.serving else None

    def _open(self, client: str, now: float) -> _Session:
        assert self._nursery is not None, "the server is not running"
        keeper = Keeper(self.spec, self, self.settings, label=f"{self.name}@{client}", once=True)
        session = self.sessions[client] = _Session(client, keeper, now)
        log.info("server %r: starting a session for client %r", self.name, client)
        self._nursery.start_soon(self._run_session, session, name=f"session {keeper.label}")
        return session

    async def _run_session(self, session: _Session) -> None:
        keeper = session.keeper
        try:
            await keeper.run()
        finally:
            if self.sessions.get(session.client) is session:
                del self.sessions[session.client]
            self._ending.discard(keeper)
            if self._held.pop(keeper.target, None):  # ended before its worker started: they fail now
                why = f"server {keeper.label!r}: the session ended before it started"
                self.owner.worker_gone(keeper.target, why, "UNAVAILABLE")
        if keeper.outcome in ("abnormal", "needs-login") and self._want_running:
            self._session_failed(keeper)

    def _session_failed(self, keeper: Keeper) -> None:
        self._last_error = keeper.last_error
        if self.tracker.failed(trio.current_time()) is None and not self._gave_up:
            log.error(
                "server %r failed: more than %d sessions failed in %g s; last error: %s "
                "(run 'mcp-supervisor restart %s' to try again)",
                *(self.name, self.spec.policy.max_restarts, self.spec.policy.window, self._last_error),
                self.name,
            )
            self._gave_up = True
            self._end_sessions("the server failed")
            self.owner.drop_tools(self.name)
            self._update()

    def _end_sessions(self, why: str) -> None:
        for session in list(self.sessions.values()):
            self._end(session, why)

    def _end(self, session: _Session, why: str) -> None:
        self._retire(session)
        session.keeper.request_stop(why)

    def _retire(self, session: _Session) -> None:
        """Forget a session for its client (its worker goes on ending on its own)."""
        del self.sessions[session.client]
        self._ending.add(session.keeper)

    async def _reap_idle(self) -> None:
        """Stop every session that had no request in flight for ``idleTimeout`` seconds."""
        while True:
            now = trio.current_time()
            idle = self.spec.idle_timeout
            wake = now + min(REAP_CHECK, idle)
            for session in list(self.sessions.values()):
                keeper = session.keeper
                if keeper.identity is not None and self.owner.in_flight(keeper.identity):
                    session.last_used = now  # busy: idle time counts from its last request's end
                elif now - session.last_used >= idle:
                    client = session.client
                    log.info("server %r: session of client %r idle for %g s: reaped", self.name, client, idle)
                    self._end(session, f"its session was idle for {idle:g} s (reaped)")
                else:
                    wake = min(wake, session.last_used + idle)
            await trio.sleep_until(wake)

    # ------------------------------------------------- the keepers' server

    def _drops_tools(self, keeper: Keeper) -> bool:
        return False  # the tools stay while the server is ready; a stop or a failure drops them

    def tools_changed(self, keeper: Keeper, tools: list[WorkerTool]) -> int:
        count = self.owner.register_tools(self.spec, tools)
        if keeper is self.lister:
            self._listed = True
        return count

    def state_changed(self, keeper: Keeper, previous: WorkerState) -> None:
        if keeper is self.lister and keeper.state == "ready":
            keeper.request_stop("it listed the tools; each client gets a worker of its own")
        elif keeper is self.lister and keeper.state in ("failed", "needs-login"):
            self._last_error = keeper.last_error
        super().state_changed(keeper, previous)

    # ------------------------------------------------------------ operators

    def request_restart(self, why: str = "restarted by an operator") -> bool:
        """End every session and list the tools again (they stay registered meanwhile)."""
        self._want_running, self._gave_up = True, False
        self.tracker.reset()
        self._end_sessions(why)
        self.lister.request_restart(why)
        self._update()
        return True

    def request_stop(self, why: str = "stopped by an operator") -> None:
        self._want_running = False
        self._listed = False
        self._end_sessions(why)
        self.lister.request_stop(why)
        self.owner.drop_tools(self.name)
        self._update()

    def request_start(self) -> bool:
        if self._want_running and self._state not in ("failed", "needs-login"):
            return False
        self._want_running, self._gave_up = True, False
        self.tracker.reset()
        self.lister.request_start()
        self._update()
        return True

    def reconfigure(self, spec: ServerSpec) -> None:
        """A reloaded spec: every session ends (its calls fail, naming the reload); the lister lists
        again with it, or everything stops if it is now disabled."""
        was_disabled = self.spec.disabled
        self.spec = spec
        self.tracker.policy = spec.policy
        self.lister.adopt(spec)
        if spec.disabled:
            self.request_stop("disabled in the config (reload)")
            self._last_error = "disabled in config"
            self._update()
        elif self._want_running or was_disabled:
            self._last_error = None if was_disabled else self._last_error
            self.request_restart("restarted with its new config (reload)")

    def status(self) -> ServerStatus:
        now = trio.current_time()
        workers = [
            worker_row(
                session.keeper,
                self._in_flight(session.keeper),
                client=session.client,
                idle=now - session.last_used,
            )
            for session in self.sessions.values()
        ]
        return pooled_row(self, self.lister, workers, scope="client")

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self.lister.run, name=f"keeper {self.name}")
            nursery.start_soon(self._reap_idle, name=f"reaper {self.name}")
