"""The supervisor process: the parts that own each concern, put together and run.

Above: agents and the CLI on the front ROUTER (``FrontRequest`` in, exactly one ``FrontReply`` out
per request; none for a ``Cancel``, whose cancelled request is answered ``CANCELLED``). Below: the
worker ROUTER, on which every worker incarnation connects with its own routing id, and the events
PUB socket. One task receives on both ROUTERs; replies are sent from whichever task has them (sends
never block).

Who owns what: the front door (``supervisor.daemon.front_door``: decoding requests, sending replies,
clients that do not read), the dispatch table (``supervisor.daemon.dispatch``), the receiving task
(``supervisor.daemon.receiving``), the worker link (``supervisor.daemon.worker_link``), the router
(``supervisor.daemon.router``: tool calls) and the fetches (``supervisor.daemon.fetches``: resources,
prompts, completions), the call table (``supervisor.daemon.call_table``) and its deadline timer
(``supervisor.daemon.deadlines``), the crew (``supervisor.daemon.servers.crew``: the servers, their
workers, operator requests), reloads (``supervisor.daemon.reloader``), the registry, the publisher
(``supervisor.daemon.publisher``: events) and the audit trail (``supervisor.daemon.audit.trail``:
``audit``). The ``Supervisor`` itself binds the sockets, runs the tasks (receiving, the deadline
timer, the beacon, reaping, the trail's writer), answers ``status`` and ``shutdown``, drains on
shutdown, and is the ``ServerOwner`` (``supervisor.daemon.servers.owner``) every server and keeper
asks. It keeps every server's log lines (``supervisor.daemon.servers.worker_log``: ``GetLogs``); a
``Shutdown`` sets ``shutdown_requested``, which ``supervisor.daemon.lifecycle`` waits for. The HTTP
listener (``supervisor.ops.web.site``) gives it the call table's meter (``meter``), hears every event
(``watch_events``), and reads ``status``, ``received``, ``phase``, ``first_starts`` and ``audit``
(``query``, ``identities``). Under systemd, ``supervisor.ops.service`` hears every event and reload.

A call its worker does not answer in time is answered ``TIMEOUT`` by the deadline timer a margin
later; when a worker dies, every call it had gets ``WORKER_CRASHED`` (``SERVER_ERROR`` when a remote
server's connection was lost).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, Literal

import msgspec
import trio
import zmq

from supervisor.config.audit_entry import AuditSpec
from supervisor.config.load import Config, ServerSpec, SupervisorSettings
from supervisor.daemon.audit.trail import Trail
from supervisor.daemon.call_table import CallTable
from supervisor.daemon.deadlines import DeadlineTimer
from supervisor.daemon.dispatch import Dispatch
from supervisor.daemon.fetches import Fetches
from supervisor.daemon.first_starts import FirstStarts
from supervisor.daemon.front_door import FrontDoor
from supervisor.daemon.pending import CallMeter
from supervisor.daemon.publisher import Publisher
from supervisor.daemon.receiving import Receiver
from supervisor.daemon.registry import Registry
from supervisor.daemon.reloader import Reloads, ReloadWatcher
from supervisor.daemon.router import Router
from supervisor.daemon.servers.crew import Crew
from supervisor.daemon.servers.keeper import Keeper
from supervisor.daemon.servers.owner import ServerOwner
from supervisor.daemon.servers.pool import Server
from supervisor.daemon.servers.spawn import Spawner, SpawnMode, WorkerProcess
from supervisor.daemon.servers.worker_log import LogBook, LogRing
from supervisor.daemon.wishes import Interests
from supervisor.daemon.worker_link import WorkerLink
from supervisor.protocol import (
    Done,
    ErrorCode,
    Event,
    FrontRequest,
    FrontStats,
    Ready,
    Shutdown,
    StatusReply,
    WorkerState,
    WorkerTool,
)
from supervisor.security.curve import Gate
from supervisor.security.keys import ServerKeys
from supervisor.shared.paths import default_events_endpoint, ipc_path
from supervisor.shared.processes import become_subreaper, reap_on_sigchld
from supervisor.shared.repeats import Repeats
from supervisor.shared.sockets import bind_publisher, bind_router

__all__ = ["Supervisor"]

FRONT_RCVHWM: Final = 1000  # requests taken from one client and not yet read; then its sends wait

log = logging.getLogger("mcp_supervisor")


class Supervisor:
    def __init__(
        self,
        config: Config,
        *,
        endpoint: str,
        worker_endpoint: str,
        events_endpoint: str | None = None,
        curve: ServerKeys | None = None,
        meter: CallMeter | None = None,
        audit: AuditSpec | None = None,
    ) -> None:
        """``curve``: the front and events sockets are CURVE servers letting in only allowed keys;
        ``meter``: what measures tool calls (``supervisor.ops.metrics``), when the HTTP listener is on;
        ``audit``: where the audit trail goes (None: off)."""
        self.curve = curve
        self.endpoint = endpoint
        self.worker_endpoint = worker_endpoint
        self.events_endpoint = events_endpoint or default_events_endpoint(endpoint)
        self.registry = Registry()
        self.spawner = Spawner()
        self.stats = FrontStats()  # what the front door refused or dropped since the start (counts only)
        self._repeats = Repeats(log)  # timeouts, overloads, malformed frames: a few lines a second
        self.logs = LogBook()  # every server's recent stderr lines and its workers' warnings (first)
        owner: ServerOwner = self  # what every server and keeper asks of us (mypy checks it here)
        self.crew = Crew(config, owner)
        self.servers = self.crew.servers  # the same dict, in config order
        self._front = FrontDoor(
            stats=self.stats,
            repeats=self._repeats,
            handle=self._dispatch,
            not_reading=self._not_reading,
            queued_replies=lambda: self._settings().max_queued_replies,
        )
        self._idle_workers: dict[bytes, trio.Event] = {}  # workers someone waits to see idle
        self.calls = CallTable(
            self._front.reply,
            self._settings,
            self.stats,
            self._repeats,
            lambda: self.servers,
            self._worker_idle,
            meter,
        )
        self._events = Publisher(self.registry, self._repeats)
        self.interests = Interests(self.servers, self.send_to_worker, self._events.publish)
        self._link = WorkerLink(
            calls=self.calls,
            reply=self._front.reply,
            repeats=self._repeats,
            settled=self._check_idle,
            ready=self._worker_ready,
            interests=self.interests,
        )
        self._deadlines = DeadlineTimer(self.calls, self.servers, self._repeats, self._check_idle)
        self._reloads = Reloads(
            config,
            crew=self.crew,
            registry=self.registry,
            calls=self.calls,
            reply=self._front.reply,
            draining=self._is_draining,
        )
        self._router = Router(
            registry=self.registry,
            servers=self.servers,
            calls=self.calls,
            send=self._link.send,
            reply=self._front.reply,
            draining=self._is_draining,
            clock=trio.current_time,
            deadline_added=self._deadlines.added,
        )
        self.calls.requeue = self._router.requeue
        self.audit = Trail(audit, self.registry, self.servers, lambda: self.config, self._front.reply)
        self._front.audit(self.audit)  # the trail hears of every call, read, prompt and reply
        self._receiver = Receiver(link=self._link.receive, front=self._front.receive)
        self._draining = False
        self._idle = trio.Event()  # set when draining and no call is in flight
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._gate: Gate | None = None
        self._tasks: trio.Nursery | None = None  # where servers and reloads run
        self.shutdown_requested = trio.Event()  # a front ``Shutdown`` asked us to stop
        self.first_starts = FirstStarts(self.registry, self.servers, self._front.reply)
        fetches = Fetches(
            servers=self.servers, calls=self.calls, reply=self._front.reply, routes=self._router
        )
        self._requests = Dispatch(
            router=self._router,
            fetches=fetches,
            first_starts=self.first_starts,
            crew=self.crew,
            interests=self.interests,
            logs=self.logs,
            audit=self.audit,
            servers=self.servers,
            reply=self._front.reply,
            status=self.status,
            reload=self.reload_nowait,
            shutdown=self._shutdown,
            settled=self._check_idle,
            tasks=lambda: self._tasks,
        )
        self.shutdown_grace: float | None = None  # its grace (None: the config's shutdownGrace)

    @property
    def config(self) -> Config:
        """The config in force (as the last reload left it)."""
        return self._reloads.config

    @property
    def received(self) -> int:
        """Front messages received since the start (for the metrics)."""
        return self._receiver.received

    def _settings(self) -> SupervisorSettings:
        return self._reloads.config.settings

    def _is_draining(self) -> bool:
        return self._draining

    @property
    def phase(self) -> Literal["starting", "serving", "draining"]:
        """Whether the front door is served yet (``run`` has started its tasks), or draining."""
        return "draining" if self._draining else "serving" if self._tasks is not None else "starting"

    # ------------------------------------------------------------- running

    def bind(self) -> None:
        """Bind the sockets (raises ``zmq.ZMQError`` or ``OSError`` naming the problem); ``run`` binds if
        not done yet."""
        if self.curve is not None and self._gate is None:
            self._gate = Gate(self._ctx, self.curve)  # first: with no gate, libzmq lets every key in
        if self._front.socket is None:
            hwm = self._settings().max_queued_replies
            self._front.socket = bind_router(
                self._ctx, self.endpoint, send_hwm=hwm, recv_hwm=FRONT_RCVHWM, curve=self.curve
            )
        if self._link.socket is None:
            self._link.socket = bind_router(self._ctx, self.worker_endpoint)
        if self._events.socket is None:
            self._events.socket = bind_publisher(self._ctx, self.events_endpoint, curve=self.curve)
            self.events_endpoint = self._events.socket.getsockopt_string(zmq.LAST_ENDPOINT)  # "*" resolved

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start every worker, serve until cancelled, then stop every worker (bounded)."""
        self.bind()
        front, link, events = self._front.socket, self._link.socket, self._events.socket
        assert front is not None and link is not None and events is not None
        # A dead worker's escaped descendants come to us, to be killed and reaped; so do forked workers.
        self.spawner.can_fork &= become_subreaper()
        try:
            # Cancelling this nursery is the shutdown: each keeper's shielded, bounded
            # clean-up closes its worker's lifeline and reaps worker and server.
            async with trio.open_nursery() as nursery:
                self._tasks = nursery
                await self.crew.start(nursery)
                nursery.start_soon(self._receiver.serve, front, link)
                nursery.start_soon(self._deadlines.run)
                nursery.start_soon(self._events.beacon)
                nursery.start_soon(reap_on_sigchld, self._worker_pids)
                nursery.start_soon(self.audit.run)
                log.info("listening on %s with %d servers", self.endpoint, len(self.servers))
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):  # bounded: the zygote gets a few seconds to go
                await self.spawner.aclose()
            front.close()
            link.close()
            events.close(linger=0)
            if self._gate is not None:
                self._gate.stop()
            self._ctx.term()
            self.audit.close()  # the requests never answered recorded, every line written
            for endpoint in (self.endpoint, self.worker_endpoint, self.events_endpoint):
                path = ipc_path(endpoint)
                if path is not None:
                    path.unlink(missing_ok=True)

    async def drain(self, grace: float) -> None:
        """Refuse new calls and wait up to ``grace`` seconds for the calls in flight."""
        self._draining = True
        self._check_idle()
        with trio.move_on_after(grace):
            await self._idle.wait()
        if self.calls:
            log.warning("%d calls still in flight after %g s; stopping anyway", len(self.calls), grace)

    def reload_nowait(self, caller: bytes | None = None, id: int = 0) -> None:
        """Start a reload (SIGHUP, or a front request from ``caller``, answered when it is done)."""
        assert self._tasks is not None
        self._reloads.start_soon(self._tasks, caller, id)

    def watch_reloads(self, watcher: ReloadWatcher) -> None:
        """From now on ``watcher`` hears when each reload begins and ends (``supervisor.ops.service``)."""
        self._reloads.watchers.append(watcher)

    def _check_idle(self) -> None:
        if self._draining and not self.calls:
            self._idle.set()

    def _worker_pids(self) -> set[int] | None:
        """Our own children (their keepers reap them), or None while one is being forked."""
        return None if self.crew.spawning else self.own_children()

    # ------------------------------------------------- the servers' owner

    def own_children(self) -> set[int]:
        """Every live worker's pid, and the zygote's: never mistaken for an escaped server process."""
        return self.crew.worker_pids() | self.spawner.zygote_pids

    async def spawn(self, name: str, mode: SpawnMode) -> WorkerProcess:
        return await self.spawner.spawn(name, mode)

    def log_ring(self, server: str) -> LogRing:
        return self.logs.ring(server)

    def attach(self, identity: bytes, keeper: Keeper) -> None:
        self._link.attach(identity, keeper)

    def worker_gone(self, identity: bytes, reason: str, code: ErrorCode) -> None:
        """A worker incarnation ended: forget it, fail its calls with ``code``."""
        self._link.detach(identity)
        self.calls.worker_gone(identity, code, reason)
        self._check_idle()

    def watch_events(self, listener: Callable[[Event], None]) -> None:
        """Hear every event published, in-process (the status page's live feed); ``listener`` must
        not block or raise."""
        self._events.listeners.append(listener)

    def drop_tools(self, server: str) -> None:
        self._events.registry_changed(server, self.registry.remove(server))

    def state_changed(self, server: Server, previous: WorkerState) -> None:
        self._events.state_changed(server.name, server.state, previous, server.restarts, server.last_error)
        self._router.server_changed(server)
        self.first_starts.state_changed(server.name, server.state)

    def register_tools(self, spec: ServerSpec, tools: list[WorkerTool]) -> int:
        """Register a server's tools (those its config's tool view lets through), publish what
        changed; the count registered."""
        infos, diff = self.registry.replace(
            spec.name, tools, enabled=spec.enabled_tools, disabled=spec.disabled_tools
        )
        self._events.registry_changed(spec.name, diff)
        self.first_starts.tools_changed(spec.name)
        return len(infos)

    def _worker_ready(self, keeper: Keeper, worker: bytes, event: Ready) -> None:
        """A worker's ``Ready``: to its keeper; then it hears what callers want of its server, and a
        first start may wait for the tools its server announces next."""
        first = self.first_starts.first_start(keeper.name)
        keeper.ready(event)
        if keeper.serving:
            self.interests.worker_ready(keeper.name, worker)
            self.first_starts.ready(keeper.name, event.tools_change, first)

    def tool_count(self, server: str) -> int:
        return self.registry.count(server)

    def in_flight(self, worker: bytes) -> int:
        return self.calls.load(worker)

    def pending(self, call: int) -> bool:
        return self.calls.is_pending(call)

    async def idle(self, worker: bytes) -> None:
        """Return once that worker incarnation has no request pending."""
        if self.calls.load(worker):
            await self._idle_workers.setdefault(worker, trio.Event()).wait()

    def _worker_idle(self, worker: bytes) -> None:
        event = self._idle_workers.pop(worker, None)
        if event is not None:
            event.set()

    def send_to_worker(self, identity: bytes, payload: bytes) -> bool:
        """Send if that worker is connected (a worker still starting up may not be yet); say if it was."""
        return self._link.send_if_connected(identity, payload)

    async def caught_up(self) -> None:
        """Return once every message that reached the sockets before this call has been handled."""
        await self._receiver.caught_up()

    # ------------------------------------------------------------ requests

    def _dispatch(self, caller: bytes, request: FrontRequest) -> None:
        self._requests.handle(caller, request)  # made after the front door, which needs this

    def _shutdown(self, request: Shutdown) -> Done:
        """Answered before the drain starts: ``supervisor.daemon.lifecycle`` then stops as for SIGTERM."""
        if not self.shutdown_requested.is_set():
            self.shutdown_grace = request.grace
            self.shutdown_requested.set()
        return Done(id=request.id)

    def status(self, id: int = 0) -> StatusReply:
        """Every server's row and the front door's figures (``status``; the HTTP listener's too)."""
        rows = [server.status() for server in self.servers.values()]
        front = msgspec.structs.replace(
            self.stats, clients=self.calls.clients, in_flight=self.calls.held, audit=self.audit.stats()
        )
        return StatusReply(id=id, servers=rows, events=self.events_endpoint, front=front)

    def _not_reading(self, caller: bytes) -> int:
        """A client does not read its replies: forget its requests in flight; how many there were."""
        dropped = self.calls.drop_calls_of(caller)
        self._check_idle()
        return dropped
