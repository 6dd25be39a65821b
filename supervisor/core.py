"""The supervisor process: its sockets, and the one task that receives on them.

Above: agents and the CLI on the front ROUTER (``FrontRequest`` in, exactly one ``FrontReply`` out
per request). Below: the worker ROUTER, on which every worker incarnation connects with its own
routing id, and the events PUB socket. Each socket has one receiving task; replies are sent from
whichever task has them (sends never block).

The ``Supervisor`` puts together the parts that own each concern and is the ``KeeperOwner`` every
keeper talks to: the crew (``supervisor.crew``: the keepers and operator requests), the router
(``supervisor.router``: requests that go to workers), the call table (``supervisor.calls``: calls in
flight, deadlines, admission, answers), the registry, reloads (``supervisor.reloading``) and event
publishing. A worker's answer settles its call in the call table; a call its worker does not answer
in time is answered ``TIMEOUT`` by the deadline timer a margin later; when a worker dies, every call
it had gets ``WORKER_CRASHED`` (``SERVER_ERROR`` when a remote server's connection was lost). Replies
from an incarnation that is no longer attached are dropped.
"""

from __future__ import annotations

import dataclasses
import logging
from contextlib import suppress
from typing import Final, assert_never

import msgspec
import trio
import zmq

from supervisor._process import become_subreaper, reap_on_sigchld
from supervisor._zmq import Poller, QueueFull, TrioSocket, Unroutable, bind_publisher, bind_router
from supervisor.calls import CallTable, peer
from supervisor.config import Config, SupervisorSettings
from supervisor.crew import Crew
from supervisor.curve import Gate
from supervisor.keeper import Keeper
from supervisor.keys import ServerKeys
from supervisor.paths import default_events_endpoint, ipc_path
from supervisor.protocol import (
    EVENT_TOPICS,
    CallTool,
    Done,
    ErrorCode,
    ErrorReply,
    Event,
    FrontReply,
    FrontRequest,
    FrontStats,
    GetPrompt,
    GetStatus,
    Heartbeat,
    InvokeFailed,
    InvokeProgress,
    InvokeResult,
    ListPrompts,
    ListResources,
    ListResourceTemplates,
    ListTools,
    Ping,
    ReadResource,
    Ready,
    RegistryChanged,
    RegistryVersion,
    Reload,
    Restart,
    Start,
    Started,
    StateChanged,
    StatusReply,
    Stop,
    ToolList,
    ToolsChanged,
    WorkerEvent,
    WorkerState,
    WorkerTool,
    decode_front_request,
    decode_worker_event,
    encode,
    is_error_code,
    total_decoder,
)
from supervisor.registry import Diff, Registry
from supervisor.reloading import Reloads
from supervisor.repeats import Repeats
from supervisor.router import Router
from supervisor.spawn import Spawner, SpawnMode, WorkerProcess

__all__ = ["Supervisor"]

BEACON_INTERVAL: Final = 1.0  # seconds between RegistryVersion events
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
    ) -> None:
        """``curve``: the front and events sockets are CURVE servers letting in only allowed keys."""
        self.curve = curve
        self.endpoint = endpoint
        self.worker_endpoint = worker_endpoint
        self.events_endpoint = events_endpoint or default_events_endpoint(endpoint)
        self.registry = Registry()
        self.spawner = Spawner()
        self.stats = FrontStats()  # what the front door refused or dropped since the start (counts only)
        self._repeats = Repeats(log)  # timeouts, overloads, malformed frames: a few lines a second
        self.crew = Crew(config, self)
        self.keepers = self.crew.keepers  # the same dict, in config order
        self._by_identity: dict[bytes, Keeper] = {}
        self.calls = CallTable(self._reply, self._settings, self.stats, self._repeats, lambda: self.keepers)
        self._reloads = Reloads(
            config,
            crew=self.crew,
            registry=self.registry,
            calls=self.calls,
            reply=self._reply,
            draining=self._is_draining,
        )
        self._router = Router(
            registry=self.registry,
            keepers=self.keepers,
            calls=self.calls,
            send=self._worker_send,
            reply=self._reply,
            draining=self._is_draining,
            clock=trio.current_time,
            deadline_added=self._deadline_added,
        )
        self._poller: Poller | None = None
        self._served: trio.Event | None = None  # set after the receiving task's next pass, if anyone waits
        self._timer: trio.CancelScope | None = None
        self._draining = False
        self._idle = trio.Event()  # set when draining and no call is in flight
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._front: TrioSocket | None = None
        self._link: TrioSocket | None = None
        self._events: zmq.Socket[bytes] | None = None
        self._gate: Gate | None = None
        self._tasks: trio.Nursery | None = None  # where keepers and reloads run

    @property
    def config(self) -> Config:
        """The config in force (as the last reload left it)."""
        return self._reloads.config

    def _settings(self) -> SupervisorSettings:
        return self._reloads.config.settings

    def _is_draining(self) -> bool:
        return self._draining

    # ------------------------------------------------------------- running

    def bind(self) -> None:
        """Bind the sockets (raises ``zmq.ZMQError`` naming the problem); ``run`` binds if not done yet."""
        if self.curve is not None and self._gate is None:
            self._gate = Gate(self._ctx, self.curve)  # first: with no gate, libzmq lets every key in
        if self._front is None:
            settings = self._settings()
            self._front = bind_router(
                self._ctx,
                self.endpoint,
                send_hwm=settings.max_queued_replies,
                recv_hwm=FRONT_RCVHWM,
                curve=self.curve,
            )
        if self._link is None:
            self._link = bind_router(self._ctx, self.worker_endpoint)
        if self._events is None:
            self._events = bind_publisher(self._ctx, self.events_endpoint, curve=self.curve)
            self.events_endpoint = self._events.getsockopt_string(zmq.LAST_ENDPOINT)  # a port "*" resolved

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start every worker, serve until cancelled, then stop every worker (bounded)."""
        self.bind()
        assert self._front is not None and self._link is not None and self._events is not None
        # A dead worker's escaped descendants come to us, to be killed and reaped; so do forked workers.
        self.spawner.can_fork &= become_subreaper()
        try:
            # Cancelling this nursery is the shutdown: each keeper's shielded, bounded
            # clean-up closes its worker's lifeline and reaps worker and server.
            async with trio.open_nursery() as nursery:
                self._tasks = nursery
                await self.crew.start(nursery)
                nursery.start_soon(self._serve, self._front, self._link)
                nursery.start_soon(self._expire_deadlines)
                nursery.start_soon(self._beacon)
                nursery.start_soon(reap_on_sigchld, self._worker_pids)
                log.info("listening on %s with %d servers", self.endpoint, len(self.keepers))
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):  # bounded: the zygote gets a few seconds to go
                await self.spawner.aclose()
            self._front.close()
            self._link.close()
            self._events.close(linger=0)
            if self._gate is not None:
                self._gate.stop()
            self._ctx.term()
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

    def _check_idle(self) -> None:
        if self._draining and not self.calls:
            self._idle.set()

    def _worker_pids(self) -> set[int] | None:
        """Our own children (their keepers reap them), or None while one is being forked."""
        return None if self.crew.spawning else self.own_children()

    # ------------------------------------------------- the keepers' owner

    def own_children(self) -> set[int]:
        """Every live worker's pid, and the zygote's: never mistaken for an escaped server process."""
        pids = self.crew.worker_pids()
        if (zygote := self.spawner.zygote_pid) is not None:
            pids.add(zygote)
        return pids

    async def spawn(self, name: str, mode: SpawnMode) -> WorkerProcess:
        return await self.spawner.spawn(name, mode)

    def attach(self, identity: bytes, keeper: Keeper) -> None:
        self._by_identity[identity] = keeper

    def detach(self, keeper: Keeper, reason: str, code: ErrorCode = "WORKER_CRASHED") -> None:
        """A worker incarnation ended: forget it, drop its tools, fail its calls with ``code``."""
        self._publish_diff(keeper.name, self.registry.remove(keeper.name))
        if keeper.identity is not None:
            self._by_identity.pop(keeper.identity, None)
            self.calls.worker_gone(keeper.identity, code, reason)
        self._check_idle()

    def state_changed(self, keeper: Keeper, previous: WorkerState) -> None:
        self._publish(
            StateChanged(
                server=keeper.name,
                state=keeper.state,
                previous=previous,
                restarts=keeper.tracker.restarts,
                last_error=keeper.last_error,
            )
        )

    def tools_changed(self, keeper: Keeper, tools: list[WorkerTool]) -> int:
        """Register ``keeper``'s server's tools (all of them), publish what changed; the count registered."""
        infos, diff = self.registry.replace(keeper.name, tools)
        self._publish_diff(keeper.name, diff)
        return len(infos)

    def tool_count(self, server: str) -> int:
        return self.registry.count(server)

    def send_to_worker(self, identity: bytes, payload: bytes) -> bool:
        """Send if that worker is connected (a worker still starting up may not be yet); say if it was."""
        try:
            self._worker_send(identity, payload)
        except Unroutable:
            return False
        return True

    async def caught_up(self) -> None:
        """Return once every message that reached the sockets before this call has been handled.

        A supervisor starved of CPU (many servers starting on few cores) may wake to find a timer
        expired and the worker's answers still queued: a keeper asks this before judging a worker
        silent. Two full passes of the receiving task: the first may finish a batch taken earlier."""
        for _ in range(2):
            if self._served is None:
                self._served = trio.Event()
            served = self._served
            if self._poller is not None:
                self._poller.wake()
            await served.wait()

    # --------------------------------------------------------------- events

    def _publish_diff(self, server: str, diff: Diff | None) -> None:
        if diff is not None:
            version = self.registry.version
            self._publish(RegistryChanged(version=version, server=server, **dataclasses.asdict(diff)))

    async def _beacon(self) -> None:
        """The registry's version every second: a subscriber that missed a change notices."""
        while True:
            self._publish(RegistryVersion(version=self.registry.version))
            self._repeats.flush()  # a storm's count is written once its second is over
            await trio.sleep(BEACON_INTERVAL)

    def _publish(self, event: Event) -> None:
        """Fire and forget: a subscriber too slow to keep up loses events (it sees a version gap)."""
        if self._events is not None:
            with suppress(zmq.Again):
                self._events.send_multipart([EVENT_TOPICS[type(event)], encode(event)], zmq.NOBLOCK)

    # ------------------------------------------------------------ receiving

    async def _serve(self, front: TrioSocket, link: TrioSocket) -> None:
        """The one task that receives: each wake-up drains the worker link, then the front."""
        self._poller = poller = Poller([front, link])
        while True:
            front_batch, link_batch = await poller.receive()
            if link_batch:
                self._on_link(link_batch)
            if front_batch:
                self._on_front(front_batch)
            if self._served is not None:
                self._served.set()
                self._served = None

    def _on_front(self, batch: list[list[bytes]]) -> None:
        for frames in batch:
            if len(frames) != 2:
                self.stats.malformed += 1
                self._repeats.log(
                    "malformed front messages",
                    logging.WARNING,
                    "client %s: dropped a message of %d frames (expected 2)",
                    peer(frames[0]),
                    len(frames),
                )
                continue
            caller, payload = frames
            try:
                request = decode_front_request(payload)
            except msgspec.DecodeError as exc:  # total: any bytes at all end here
                self._malformed(caller, payload, str(exc))
                continue
            try:
                self._dispatch(caller, request)
            except Exception as exc:  # boundary: one request's failure must not end the supervisor
                log.exception("handling %s from client %s failed", type(request).__name__, peer(caller))
                self._error(caller, request.id, "INTERNAL", f"{type(request).__name__}: {type(exc).__name__}")

    def _malformed(self, caller: bytes, payload: bytes, why: str) -> None:
        """A front message that is not a request: BAD_REQUEST to its sender, a warning, nothing else."""
        self.stats.malformed += 1
        self._repeats.log(
            "malformed requests",
            logging.WARNING,
            "client %s: malformed request (%d bytes): %s",
            peer(caller),
            len(payload),
            why,
        )
        self._reply(caller, ErrorReply(id=_salvage_id(payload), code="BAD_REQUEST", message=why))

    def _dispatch(self, caller: bytes, request: FrontRequest) -> None:
        match request:
            case CallTool():
                self._router.call(caller, request)
            case ListTools(id=id):
                tools = self.registry.tools()
                self._reply(caller, ToolList(id=id, tools=tools, version=self.registry.version))
            case GetStatus(id=id):
                self._reply(caller, self._status(id))
            case Restart() | Stop() | Start():
                self._reply(caller, self.crew.operate(request))
            case Ping(id=id):
                self._reply(caller, Done(id=id))
            case ListResources() | ListResourceTemplates() | ListPrompts():
                self._router.list(caller, request)
            case ReadResource():
                self._router.read(caller, request)
            case GetPrompt():
                self._router.get_prompt(caller, request)
            case Reload(id=id):
                self.reload_nowait(caller, id)
            case _:
                assert_never(request)

    def _status(self, id: int) -> StatusReply:
        rows = [keeper.status() for keeper in self.keepers.values()]
        front = msgspec.structs.replace(self.stats, clients=self.calls.clients, in_flight=self.calls.held)
        return StatusReply(id=id, servers=rows, events=self.events_endpoint, front=front)

    def _on_link(self, batch: list[list[bytes]]) -> None:
        now = trio.current_time()
        for frames in batch:
            keeper = self._by_identity.get(frames[0])
            if keeper is None or len(frames) != 2:
                continue  # a replaced incarnation, or noise: never delivered to anyone
            keeper.heard(now)
            try:
                event = decode_worker_event(frames[1])
            except msgspec.DecodeError as exc:  # total: any bytes at all end here
                self._repeats.log(
                    f"undecodable messages from the worker of {keeper.name!r}",
                    logging.ERROR,
                    "undecodable message from the worker of %r: %s",
                    keeper.name,
                    exc,
                )
                continue
            try:
                self._on_event(keeper, frames[0], event)
            except Exception:  # boundary: one message's failure must not end the supervisor
                log.exception("handling %s from the worker of %r failed", type(event).__name__, keeper.name)

    def _on_event(self, keeper: Keeper, worker: bytes, event: WorkerEvent) -> None:
        match event:
            case InvokeResult(call=call, result=result):
                pending = self.calls.settle(call, worker)
                if pending is not None:
                    self._check_idle()
                    self.calls.answer(pending, result)
            case InvokeFailed(call=call, code=code, message=message):
                pending = self.calls.settle(call, worker)
                if pending is not None:
                    self._check_idle()
                    if code not in ("UNKNOWN_TOOL", "INVALID_ARGUMENTS"):  # the caller's mistakes
                        what = f"{code} answers from server {keeper.name!r}"
                        self._repeats.log(
                            what, logging.ERROR, "server %r: %s: %s", keeper.name, code, message
                        )
                    known: ErrorCode = "INTERNAL"  # a worker is never newer than its supervisor
                    if is_error_code(code):
                        known = code
                    self.calls.fail(pending, known, f"server {keeper.name!r}: {message}")
            case InvokeProgress():
                relay = self.calls.progress(event, worker)
                if relay is not None:
                    self._reply(*relay)
            case Started(server_pid=pid):
                keeper.started(pid)
            case Ready():
                keeper.ready(event)
            case ToolsChanged():
                keeper.tools_changed(event)
            case Heartbeat():
                keeper.heartbeat_answered()
            case _:
                assert_never(event)

    def _worker_send(self, identity: bytes, payload: bytes) -> None:
        assert self._link is not None
        self._link.send_nowait([identity, payload])

    # ------------------------------------------------------------ deadlines

    def _deadline_added(self, deadline: float) -> None:
        if self._timer is not None and deadline < self._timer.deadline:
            self._timer.deadline = deadline

    async def _expire_deadlines(self) -> None:
        while True:
            with trio.CancelScope(deadline=self.calls.next_deadline()) as timer:
                self._timer = timer
                await trio.sleep_forever()
            self._timer = None
            for pending in self.calls.expire(trio.current_time()):
                self._check_idle()
                what = pending.what or f"tool {pending.tool!r}"
                self._repeats.log(
                    f"calls to server {pending.server!r} its worker did not answer by the deadline",
                    logging.ERROR,
                    "server %r %s: worker gave no answer by the deadline",
                    pending.server,
                    what,
                )
                self.calls.fail(
                    pending, "TIMEOUT", f"server {pending.server!r} did not answer {what} in time"
                )

    # --------------------------------------------------------------- replies

    def _error(self, caller: bytes, id: int, code: ErrorCode, message: str) -> None:
        self._reply(caller, ErrorReply(id=id, code=code, message=message))

    def _reply(self, caller: bytes, reply: FrontReply) -> None:
        assert self._front is not None
        try:
            self._front.send_nowait([caller, encode(reply)])
        except QueueFull:
            self._not_reading(caller)
        except Unroutable:
            log.debug("caller went away before its reply (id %d)", reply.id)

    def _not_reading(self, caller: bytes) -> None:
        """A client's reply queue is full: it does not read. Drop the reply and its requests in flight
        (their answers too, when they come), so that what it leaves unread cannot grow our memory."""
        dropped = self.calls.drop_calls_of(caller)
        self._check_idle()
        self.stats.dropped_replies += 1
        self.stats.dropped_calls += dropped
        self._repeats.log(
            "replies dropped",
            logging.WARNING,
            "client %s does not read its replies (%d queued): a reply dropped, and %d requests in flight",
            peer(caller),
            self._settings().max_queued_replies,
            dropped,
        )


class _Id(msgspec.Struct):
    id: int = 0


_decode_id = total_decoder(msgspec.msgpack.Decoder(_Id).decode)


def _salvage_id(payload: bytes) -> int:
    """The request id from a message that did not decode as a request, or 0."""
    try:
        return _decode_id(payload).id
    except msgspec.DecodeError:
        return 0
