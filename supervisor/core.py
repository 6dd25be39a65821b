"""The supervisor process: front socket, worker link, registry, pending calls, keepers.

Above: agents and the CLI on the front ROUTER (``FrontRequest`` in, exactly
one ``FrontReply`` out per request). Below: one ``Keeper`` per server, and
the worker ROUTER on which every worker incarnation connects with its own
routing id. Each socket has one receiving task; replies are sent from
whichever task has them (sends never block).

A call's life: look the prefixed name up in the registry (unknown ->
``UNKNOWN_TOOL``, server not ready -> ``UNAVAILABLE`` at once), give it a
supervisor-wide call id, send ``Invoke`` to the server's live worker with the
budget, and remember (caller, id, deadline). The worker answers by the budget (a call that asked for
progress first gets the worker's ``InvokeProgress`` relayed as ``CallProgress``);
if it does not (a wedged worker), the deadline timer answers ``TIMEOUT`` a
margin later. When a worker dies, every call it had gets ``WORKER_CRASHED`` (``SERVER_ERROR``
when a remote server's connection was lost).
Replies from an incarnation that is no longer attached are dropped.

Resources and prompts travel the same way as ``Fetch`` (same budget, deadline timer and
crash rules): a read names its server, a prompt's prefixed name is routed by the server prefix
it carries, and a listing without a server is sent to every ready worker and gathered into one
``Listing`` (a server that fails is named in it, not fatal to it).
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import math
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Final, assert_never

import msgspec
import trio
import zmq

from supervisor._process import become_subreaper, reap_on_sigchld
from supervisor._zmq import Poller, QueueFull, TrioSocket, Unroutable, bind_publisher, bind_router
from supervisor.config import Config, ConfigError, load_config
from supervisor.curve import Gate
from supervisor.keeper import Keeper
from supervisor.keys import ServerKeys
from supervisor.paths import default_events_endpoint, ipc_path
from supervisor.protocol import (
    EVENT_TOPICS,
    CallProgress,
    CallResult,
    CallTool,
    Done,
    ErrorCode,
    ErrorReply,
    Event,
    Fetch,
    FetchMethod,
    FrontReply,
    FrontRequest,
    FrontStats,
    GetPrompt,
    GetStatus,
    Heartbeat,
    Invoke,
    InvokeFailed,
    InvokeProgress,
    InvokeResult,
    Listing,
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
    Reloaded,
    ReloadSummary,
    Restart,
    ServerFailure,
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
    total_decoder,
)
from supervisor.registry import Diff, Registry, sanitize, server_of
from supervisor.reload import ReloadPlan, ReloadRejected, plan_reload
from supervisor.repeats import Repeats
from supervisor.spawn import Spawner

__all__ = ["Supervisor"]

BEACON_INTERVAL: Final = 1.0  # seconds between RegistryVersion events
log = logging.getLogger("mcp_supervisor")

DEADLINE_MARGIN: Final = 0.5  # seconds past a call's budget before the supervisor answers TIMEOUT itself
FRONT_RCVHWM: Final = 1000  # requests taken from one client and not yet read; then its sends wait


@dataclass(slots=True)
class Gather:
    """A listing sent to several workers: one reply once every one has answered (or failed)."""

    caller: bytes
    id: int
    named: bool  # the caller named one server: its failure is the reply
    waiting: int
    parts: dict[str, msgspec.Raw] = field(default_factory=dict)  # server -> its encoded entries
    failures: list[ServerFailure] = field(default_factory=list)


@dataclass(slots=True)
class Pending:
    caller: bytes  # the front routing id
    id: int  # the caller's request id
    keeper: Keeper
    tool: str
    what: str = ""  # for resources and prompts requests: what was asked
    gather: Gather | None = None  # for listings: where the answer goes
    progress: bool = False  # the caller asked for CallProgress replies


@dataclass(slots=True)
class Client:
    """A front peer with requests in flight (forgotten when it has none)."""

    held: int = 0  # requests in flight, toward maxCallsPerClient (a listing sent to many servers is one)
    calls: set[int] = field(default_factory=set)  # their supervisor call ids (pending entries)


_LIST_METHODS: Final[dict[type, FetchMethod]] = {
    ListResources: "resources/list",
    ListResourceTemplates: "resources/templates/list",
    ListPrompts: "prompts/list",
}


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
        self.config = config
        self.curve = curve
        self.endpoint = endpoint
        self.worker_endpoint = worker_endpoint
        self.events_endpoint = events_endpoint or default_events_endpoint(endpoint)
        self.registry = Registry()
        self.spawner = Spawner()
        self._poller: Poller | None = None
        self._served: trio.Event | None = None  # set after the receiving task's next pass, if anyone waits
        self.keepers = {name: Keeper(spec, self, config.settings) for name, spec in config.servers.items()}
        self._by_identity: dict[bytes, Keeper] = {}
        self._pending: dict[int, Pending] = {}
        self._deadlines: list[tuple[float, int]] = []
        self._timer: trio.CancelScope | None = None
        self._next_call = 0
        self._draining = False
        self._idle = trio.Event()  # set when draining and no call is in flight
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._front: TrioSocket | None = None
        self._link: TrioSocket | None = None
        self._events: zmq.Socket[bytes] | None = None
        self._gate: Gate | None = None
        self._tasks: trio.Nursery | None = None  # where keepers and reloads run
        self._keeper_tasks: dict[Keeper, tuple[trio.CancelScope, trio.Event]] = {}  # scope, ended
        self._retiring: set[str] = set()  # servers a reload removed whose worker is still stopping
        self._reload_lock = trio.Lock()  # one reload at a time
        self._next_reload: list[tuple[bytes, int]] | None = None  # who waits for the reload not yet begun
        self._clients: dict[bytes, Client] = {}  # front peers with requests in flight
        self._held = 0  # requests in flight from every client, toward maxCallsInFlight
        self.stats = FrontStats()  # what the front door refused or dropped since the start (counts only)
        self._repeats = Repeats(log)  # timeouts, overloads, malformed frames: a few lines a second

    # ------------------------------------------------------------- running

    def bind(self) -> None:
        """Bind both sockets (raises ``zmq.ZMQError`` naming the problem); ``run`` binds if not done yet."""
        if self.curve is not None and self._gate is None:
            self._gate = Gate(self._ctx, self.curve)  # first: with no gate, libzmq lets every key in
        if self._front is None:
            settings = self.config.settings
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
                for keeper in self.keepers.values():
                    await nursery.start(self._keep, keeper, name=f"keeper {keeper.name}")
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
        if self._pending:
            log.warning("%d calls still in flight after %g s; stopping anyway", len(self._pending), grace)

    def _check_idle(self) -> None:
        if self._draining and not self._pending:
            self._idle.set()

    def _worker_pids(self) -> set[int] | None:
        """Our own children (their keepers reap them), or None while one is being forked."""
        if any(keeper.spawning for keeper in self.keepers.values()):
            return None
        return self.own_children()

    def own_children(self) -> set[int]:
        """Every live worker's pid, and the zygote's: never mistaken for an escaped server process."""
        pids = {keeper.worker_pid for keeper in self.keepers.values() if keeper.worker_pid is not None}
        if (zygote := self.spawner.zygote_pid) is not None:
            pids.add(zygote)
        return pids

    # ------------------------------------------------------------ keepers

    async def _keep(self, keeper: Keeper, *, task_status: trio.TaskStatus[None]) -> None:
        """Run one keeper until the supervisor stops or a reload retires it (cancels its scope)."""
        ended = trio.Event()
        with trio.CancelScope() as scope:
            self._keeper_tasks[keeper] = (scope, ended)
            task_status.started()
            try:
                await keeper.run()
            finally:
                ended.set()
                del self._keeper_tasks[keeper]

    def attach(self, identity: bytes, keeper: Keeper) -> None:
        self._by_identity[identity] = keeper

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

    def detach(self, keeper: Keeper, reason: str, code: ErrorCode = "WORKER_CRASHED") -> None:
        """A worker incarnation ended: forget it, drop its tools, fail its calls with ``code``."""
        if keeper.identity is not None:
            self._by_identity.pop(keeper.identity, None)
        keeper.identity = None
        self._publish_diff(keeper.name, self.registry.remove(keeper.name))
        for call in list(keeper.inflight):
            pending = self._pending.get(call)
            if pending is not None:
                self._forget(call, pending)
                self._answer_error(pending, code, reason)
        keeper.inflight.clear()
        self._check_idle()

    # ---------------------------------------------------------- front link

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

    def _on_front(self, batch: list[list[bytes]]) -> None:
        for frames in batch:
            if len(frames) != 2:
                self.stats.malformed += 1
                self._repeats.log(
                    "malformed front messages",
                    logging.WARNING,
                    "client %s: dropped a message of %d frames (expected 2)",
                    _peer(frames[0]),
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
                log.exception("handling %s from client %s failed", type(request).__name__, _peer(caller))
                self._error(caller, request.id, "INTERNAL", f"{type(request).__name__}: {type(exc).__name__}")

    def _malformed(self, caller: bytes, payload: bytes, why: str) -> None:
        """A front message that is not a request: BAD_REQUEST to its sender, a warning, nothing else."""
        self.stats.malformed += 1
        self._repeats.log(
            "malformed requests",
            logging.WARNING,
            "client %s: malformed request (%d bytes): %s",
            _peer(caller),
            len(payload),
            why,
        )
        self._reply(caller, ErrorReply(id=_salvage_id(payload), code="BAD_REQUEST", message=why))

    def _dispatch(self, caller: bytes, request: FrontRequest) -> None:
        match request:
            case CallTool():
                self._call(caller, request)
            case ListTools(id=id):
                tools = self.registry.tools()
                self._reply(caller, ToolList(id=id, tools=tools, version=self.registry.version))
            case GetStatus(id=id):
                rows = [keeper.status() for keeper in self.keepers.values()]
                front = msgspec.structs.replace(self.stats, clients=len(self._clients), in_flight=self._held)
                reply = StatusReply(id=id, servers=rows, events=self.events_endpoint, front=front)
                self._reply(caller, reply)
            case Restart(id=id, server=server) | Stop(id=id, server=server) | Start(id=id, server=server):
                self._operate(caller, request, id, server)
            case Ping(id=id):
                self._reply(caller, Done(id=id))
            case ListResources() | ListResourceTemplates() | ListPrompts():
                self._list(caller, request)
            case ReadResource():
                self._read(caller, request)
            case GetPrompt():
                self._get_prompt(caller, request)
            case Reload(id=id):
                self.reload_nowait(caller, id)
            case _:
                assert_never(request)

    def _call(self, caller: bytes, request: CallTool) -> None:
        if self._draining:
            self._error(caller, request.id, "UNAVAILABLE", "the supervisor is shutting down")
            return
        route = self.registry.lookup(request.name)
        if route is None:
            keeper = self._owner_if_not_ready(request.name)
            if keeper is None:
                self._error(caller, request.id, "UNKNOWN_TOOL", f"no tool named {request.name!r}")
            else:
                self._unavailable(caller, request.id, keeper)
            return
        keeper = self.keepers[route.server]
        if keeper.state != "ready" or keeper.identity is None:
            self._unavailable(caller, request.id, keeper)
            return
        budget = keeper.spec.tool_timeout if request.timeout is None else request.timeout
        if not (budget > 0 and math.isfinite(budget)):
            self._error(caller, request.id, "BAD_REQUEST", f"timeout must be a positive number, not {budget}")
            return
        if not self._admit(caller, request.id):
            return
        self._next_call += 1
        call = self._next_call
        invoke = Invoke(
            call=call, tool=route.tool, arguments=request.arguments, budget=budget, progress=request.progress
        )
        pending = Pending(caller, request.id, keeper, route.tool, progress=request.progress)
        try:
            self._worker_send(keeper.identity, encode(invoke))
        except Unroutable:
            self._release(caller)
            self._unavailable(caller, request.id, keeper)
            return
        self._remember(call, pending, budget)

    # ------------------------------------------------- resources and prompts

    def _list(self, caller: bytes, request: ListResources | ListResourceTemplates | ListPrompts) -> None:
        """One server's listing, or every ready server's, gathered into one ``Listing``."""
        if not self._accepting(caller, request.id, request.timeout):
            return
        if request.server is None:
            keepers = [k for k in self.keepers.values() if k.state == "ready" and k.identity is not None]
        else:
            keeper = self._ready_keeper(caller, request.id, request.server)
            if keeper is None:
                return
            keepers = [keeper]
        if not keepers:
            self._reply(caller, Listing(id=request.id))
            return
        if not self._admit(caller, request.id):
            return
        gather = Gather(caller, request.id, named=request.server is not None, waiting=len(keepers))
        method = _LIST_METHODS[type(request)]
        for keeper in keepers:
            self._fetch(caller, request.id, keeper, request.timeout, method, gather=gather)

    def _read(self, caller: bytes, request: ReadResource) -> None:
        if self._accepting(caller, request.id, request.timeout):
            keeper = self._ready_keeper(caller, request.id, request.server)
            if keeper is not None:
                self._fetch(caller, request.id, keeper, request.timeout, "resources/read", target=request.uri)

    def _get_prompt(self, caller: bytes, request: GetPrompt) -> None:
        """By the server's own prompt name when the caller names the server, else by the prefixed name."""
        if not self._accepting(caller, request.id, request.timeout):
            return
        server = request.server
        if server is None:
            server = server_of(request.name, self.keepers)
            if server is None:
                message = f"no prompt named {request.name!r} (prompts are named mcp_{{server}}_{{prompt}})"
                self._error(caller, request.id, "UNKNOWN_TOOL", message)
                return
        keeper = self._ready_keeper(caller, request.id, server)
        if keeper is not None:
            self._fetch(
                caller,
                request.id,
                keeper,
                request.timeout,
                "prompts/get",
                target=request.name,
                prefixed=request.server is None,
                arguments=request.arguments,
            )

    def _accepting(self, caller: bytes, id: int, timeout: float | None) -> bool:
        """False (and the caller answered) while draining, or for a timeout that is not a positive number."""
        if self._draining:
            self._error(caller, id, "UNAVAILABLE", "the supervisor is shutting down")
            return False
        if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
            self._error(caller, id, "BAD_REQUEST", f"timeout must be a positive number, not {timeout}")
            return False
        return True

    def _ready_keeper(self, caller: bytes, id: int, server: str) -> Keeper | None:
        """The keeper of a ready server, or None with the caller answered (unknown, or not ready)."""
        keeper = self.keepers.get(server)
        if keeper is None:
            known = ", ".join(self.keepers) or "none"
            self._error(caller, id, "UNKNOWN_TOOL", f"no server named {server!r} (servers: {known})")
        elif keeper.state != "ready" or keeper.identity is None:
            self._unavailable(caller, id, keeper)
        else:
            return keeper
        return None

    def _fetch(
        self,
        caller: bytes,
        id: int,
        keeper: Keeper,
        timeout: float | None,
        method: FetchMethod,
        *,
        target: str = "",
        prefixed: bool = False,
        arguments: msgspec.Raw | None = None,
        gather: Gather | None = None,
    ) -> None:
        """Send one ``Fetch`` to a ready keeper's worker; answered as calls are (``_answer``). One that is
        not part of a gathered listing is admitted here (a gather was, as a whole)."""
        assert keeper.identity is not None
        if gather is None and not self._admit(caller, id):
            return
        budget = keeper.spec.tool_timeout if timeout is None else timeout
        self._next_call += 1
        call = self._next_call
        what = f"{method} {target}".rstrip()
        pending = Pending(caller, id, keeper, method, what, gather)
        fetch = Fetch(call=call, method=method, budget=budget, target=target, prefixed=prefixed)
        if arguments is not None:
            fetch.arguments = arguments
        try:
            self._worker_send(keeper.identity, encode(fetch))
        except Unroutable:
            self._answer_error(pending, "UNAVAILABLE", f"server {keeper.name!r} is {keeper.state}")
            return
        self._remember(call, pending, budget)

    # ------------------------------------------------------ requests in flight

    def _admit(self, caller: bytes, id: int) -> bool:
        """Take a place for a request that goes to a worker; past a bound, answer OVERLOADED (False)."""
        settings = self.config.settings
        client = self._clients.get(caller)
        if client is not None and client.held >= settings.max_calls_per_client:
            why = f"this client has {client.held} requests in flight (maxCallsPerClient)"
        elif self._held >= settings.max_calls_in_flight:
            why = f"{self._held} requests in flight from every client (maxCallsInFlight)"
        else:
            if client is None:
                client = self._clients[caller] = Client()
            client.held += 1
            self._held += 1
            return True
        self.stats.overloaded += 1
        self._repeats.log(
            "requests refused as OVERLOADED", logging.WARNING, "client %s: %s", _peer(caller), why
        )
        self._error(caller, id, "OVERLOADED", f"{why}; try again later")
        return False

    def _release(self, caller: bytes) -> None:
        """A request admitted by ``_admit`` got its terminal reply (or was dropped)."""
        client = self._clients[caller]
        client.held -= 1
        self._held -= 1
        if client.held == 0:
            del self._clients[caller]

    def _remember(self, call: int, pending: Pending, budget: float) -> None:
        """A request sent to a worker: pending until its answer, its worker's end or its deadline."""
        self._pending[call] = pending
        pending.keeper.inflight.add(call)
        self._clients[pending.caller].calls.add(call)
        deadline = trio.current_time() + budget + DEADLINE_MARGIN
        heapq.heappush(self._deadlines, (deadline, call))
        if self._timer is not None and deadline < self._timer.deadline:
            self._timer.deadline = deadline

    def _forget(self, call: int, pending: Pending) -> None:
        """A pending request is over (answered, timed out, its worker gone, or its caller's dropped)."""
        del self._pending[call]
        pending.keeper.inflight.discard(call)
        client = self._clients.get(pending.caller)
        if client is not None:
            client.calls.discard(call)

    def _answer(self, pending: Pending, result: msgspec.Raw) -> None:
        gather = pending.gather
        if gather is None:
            self._reply(pending.caller, CallResult(id=pending.id, result=result))
            self._release(pending.caller)
        else:
            gather.parts[pending.keeper.name] = result
            self._gathered(gather)

    def _answer_error(self, pending: Pending, code: str, message: str) -> None:
        gather = pending.gather
        if gather is None or gather.named:
            self._error(pending.caller, pending.id, code, message)
            self._release(pending.caller)
        else:
            gather.failures.append(ServerFailure(server=pending.keeper.name, code=code, message=message))
            self._gathered(gather)

    def _gathered(self, gather: Gather) -> None:
        gather.waiting -= 1
        if gather.waiting == 0:
            parts = [gather.parts[name] for name in self.keepers if name in gather.parts]  # config order
            self._reply(gather.caller, Listing(id=gather.id, parts=parts, failures=gather.failures))
            self._release(gather.caller)

    def _drop_calls_of(self, caller: bytes) -> int:
        """Forget every request in flight of a client that does not read its replies; how many there were.
        Their answers, when they come, are dropped as late answers are."""
        client = self._clients.get(caller)
        if client is None:
            return 0
        dropped = 0
        gathers: list[Gather] = []  # a listing sent to several servers is one request
        for call in list(client.calls):
            pending = self._pending[call]
            self._forget(call, pending)
            if pending.gather is not None:
                if any(gather is pending.gather for gather in gathers):
                    continue
                gathers.append(pending.gather)
            dropped += 1
            self._release(caller)
        self._check_idle()
        return dropped

    def _owner_if_not_ready(self, name: str) -> Keeper | None:
        """The not-ready server whose prefix ``name`` carries, for a better error than UNKNOWN_TOOL."""
        for keeper in self.keepers.values():
            if keeper.state != "ready" and name.startswith(sanitize(f"mcp_{keeper.name}") + "_"):
                return keeper
        return None

    def _unavailable(self, caller: bytes, id: int, keeper: Keeper) -> None:
        why = f"server {keeper.name!r} is {keeper.state}"
        if keeper.last_error:
            why += f" (last error: {keeper.last_error})"
        self._error(caller, id, "UNAVAILABLE", why)

    def _operate(self, caller: bytes, request: Restart | Stop | Start, id: int, server: str) -> None:
        keeper = self.keepers.get(server)
        if keeper is None or server in self._retiring:
            known = ", ".join(name for name in self.keepers if name not in self._retiring) or "none"
            gone = " (removed from the config by a reload)" if server in self._retiring else ""
            self._error(caller, id, "BAD_REQUEST", f"no server named {server!r}{gone} (servers: {known})")
            return
        match request:
            case Restart():
                acted = keeper.request_restart()
            case Stop():
                keeper.request_stop()
                acted = True
            case Start():
                acted = keeper.request_start()
        verb = type(request).__name__.lower()
        log.info("operator %s of server %r%s", verb, server, "" if acted else " (already under way)")
        self._reply(caller, Done(id=id))

    # ---------------------------------------------------------------- reload

    def reload_nowait(self, caller: bytes | None = None, id: int = 0) -> None:
        """Start a reload (SIGHUP, or a front request from ``caller``, answered when it is done).

        Requests that come while a reload waits for the one under way join it: each is answered by a
        reload that read the file after it came, and a flood of them costs one reload, not one each."""
        assert self._tasks is not None
        if caller is not None and not self._admit(caller, id):
            return
        if self._next_reload is None:
            self._next_reload = []
            self._tasks.start_soon(self._reload_for, self._next_reload)
        if caller is not None:
            self._next_reload.append((caller, id))

    async def _reload_for(self, waiters: list[tuple[bytes, int]]) -> None:
        async with self._reload_lock:
            self._next_reload = None  # requests from now on wait for the next reload
            try:
                outcome: ReloadSummary | ErrorReply = await self._reload()
            except ReloadRejected as exc:  # logged
                outcome = ErrorReply(id=0, code="BAD_REQUEST", message=str(exc))
            except Exception as exc:  # boundary: a bug in a reload must not end the supervisor
                log.exception("reload failed")
                message = f"reload failed: {type(exc).__name__}: {exc}"
                outcome = ErrorReply(id=0, code="INTERNAL", message=message)
        for caller, id in waiters:
            reply: FrontReply = (
                Reloaded(id=id, summary=outcome)
                if isinstance(outcome, ReloadSummary)
                else ErrorReply(id=id, code=outcome.code, message=outcome.message)
            )
            self._reply(caller, reply)
            self._release(caller)

    async def reload(self) -> ReloadSummary:
        """Re-read the config file and apply what changed (one reload at a time); returns once
        removed servers have stopped, with changed and added ones starting. Raises
        :class:`ReloadRejected`, having changed nothing, when the file cannot be used as a whole."""
        async with self._reload_lock:
            return await self._reload()

    async def _reload(self) -> ReloadSummary:
        """``reload``, with its lock held."""
        path = self.config.path
        try:
            if self._draining:
                raise ReloadRejected("the supervisor is shutting down")
            if path is None:
                raise ReloadRejected("the supervisor was not started from a config file")
            try:
                new = load_config(path)
            except ConfigError as exc:
                raise ReloadRejected(f"config rejected, nothing changed: {exc}") from None
            plan = plan_reload(self.config, new)
            if plan.problems:
                lines = "".join(f"\n  {problem}" for problem in plan.problems)
                raise ReloadRejected(f"config {path} rejected, nothing changed:{lines}")
        except ReloadRejected as exc:
            log.error("reload: %s", str(exc).replace("\n  ", "; "))
            raise
        self.config = new
        await self._apply(plan, new)
        log.info(
            "reload of %s: added %s; removed %s; changed %s; %d unchanged%s",
            *(path, _names(plan.added), _names(plan.removed), _names(plan.changed), len(plan.unchanged)),
            f"; settings changed: {', '.join(plan.settings)}" if plan.settings else "",
        )
        return plan.summary(str(path))

    async def _apply(self, plan: ReloadPlan, new: Config) -> None:
        assert self._tasks is not None
        for keeper in self.keepers.values():
            keeper.settings = new.settings  # heartbeats follow at once; nothing restarts for them
        for name in plan.changed:
            self.keepers[name].reconfigure(new.servers[name])
        for name in plan.added:
            keeper = Keeper(new.servers[name], self, new.settings)
            self.keepers[name] = keeper
            await self._tasks.start(self._keep, keeper, name=f"keeper {name}")
        async with trio.open_nursery() as stopping:
            for name in plan.removed:
                stopping.start_soon(self._retire, self.keepers[name])
        self.keepers = {name: self.keepers[name] for name in new.servers}  # in file order

    async def _retire(self, keeper: Keeper) -> None:
        """Stop a removed server as ``stop`` does (its calls in flight fail, naming why) and forget it."""
        self._retiring.add(keeper.name)
        try:
            keeper.request_stop("removed from the config (reload)")
            scope, ended = self._keeper_tasks[keeper]
            scope.cancel()  # the keeper's shielded, bounded clean-up reaps worker and server
            await ended.wait()
        finally:
            self._retiring.discard(keeper.name)
        self.registry.remove(keeper.name)

    # ---------------------------------------------------------- worker link

    def _on_link(self, batch: list[list[bytes]]) -> None:
        now = trio.current_time()
        for frames in batch:
            keeper = self._by_identity.get(frames[0])
            if keeper is None or len(frames) != 2:
                continue  # a replaced incarnation, or noise: never delivered to anyone
            keeper.last_heard = now
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
                self._on_event(keeper, event)
            except Exception:  # boundary: one message's failure must not end the supervisor
                log.exception("handling %s from the worker of %r failed", type(event).__name__, keeper.name)

    def _on_event(self, keeper: Keeper, event: WorkerEvent) -> None:
        match event:
            case InvokeResult(call=call, result=result):
                pending = self._settle(call, keeper)
                if pending is not None:
                    self._answer(pending, result)
            case InvokeFailed(call=call, code=code, message=message):
                pending = self._settle(call, keeper)
                if pending is not None:
                    if code not in ("UNKNOWN_TOOL", "INVALID_ARGUMENTS"):  # the caller's mistakes
                        what = f"{code} answers from server {keeper.name!r}"
                        self._repeats.log(
                            what, logging.ERROR, "server %r: %s: %s", keeper.name, code, message
                        )
                    self._answer_error(pending, code, f"server {keeper.name!r}: {message}")
            case InvokeProgress():
                self._relay_progress(event, keeper)
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

    def _relay_progress(self, event: InvokeProgress, keeper: Keeper) -> None:
        """To a caller that asked for progress, while its call is pending (after its answer, dropped)."""
        pending = self._pending.get(event.call)
        if pending is not None and pending.keeper is keeper and pending.progress:
            progress = CallProgress(
                id=pending.id, progress=event.progress, total=event.total, message=event.message
            )
            self._reply(pending.caller, progress)

    def _settle(self, call: int, keeper: Keeper) -> Pending | None:
        pending = self._pending.get(call)
        if pending is None or pending.keeper is not keeper:
            return None
        self._forget(call, pending)
        self._check_idle()
        return pending

    def _worker_send(self, identity: bytes, payload: bytes) -> None:
        assert self._link is not None
        self._link.send_nowait([identity, payload])

    def send_to_worker(self, identity: bytes, payload: bytes) -> bool:
        """Send if that worker is connected (a worker still starting up may not be yet); say if it was."""
        try:
            self._worker_send(identity, payload)
        except Unroutable:
            return False
        return True

    # ------------------------------------------------------------ deadlines

    async def _expire_deadlines(self) -> None:
        while True:
            with trio.CancelScope(deadline=self._deadlines[0][0] if self._deadlines else math.inf) as timer:
                self._timer = timer
                await trio.sleep_forever()
            self._timer = None
            now = trio.current_time()
            while self._deadlines and self._deadlines[0][0] <= now:
                _, call = heapq.heappop(self._deadlines)
                pending = self._pending.get(call)
                if pending is None:  # answered in time (call ids are never reused)
                    continue
                self._settle(call, pending.keeper)
                what = pending.what or f"tool {pending.tool!r}"
                self._repeats.log(
                    f"calls to server {pending.keeper.name!r} its worker did not answer by the deadline",
                    logging.ERROR,
                    "server %r %s: worker gave no answer by the deadline",
                    pending.keeper.name,
                    what,
                )
                self._answer_error(
                    pending, "TIMEOUT", f"server {pending.keeper.name!r} did not answer {what} in time"
                )

    # --------------------------------------------------------------- replies

    def _error(self, caller: bytes, id: int, code: str, message: str) -> None:
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
        dropped = self._drop_calls_of(caller)
        self.stats.dropped_replies += 1
        self.stats.dropped_calls += dropped
        self._repeats.log(
            "replies dropped",
            logging.WARNING,
            "client %s does not read its replies (%d queued): a reply dropped, and %d requests in flight",
            _peer(caller),
            self.config.settings.max_queued_replies,
            dropped,
        )


def _names(names: list[str]) -> str:
    return ", ".join(names) or "none"


def _peer(routing_id: bytes) -> str:
    """A front peer, as the log names it (its routing id, in hex; at most 16 bytes of it)."""
    return routing_id[:16].hex() or "-"


class _Id(msgspec.Struct):
    id: int = 0


_decode_id = total_decoder(msgspec.msgpack.Decoder(_Id).decode)


def _salvage_id(payload: bytes) -> int:
    """The request id from a message that did not decode as a request, or 0."""
    try:
        return _decode_id(payload).id
    except msgspec.DecodeError:
        return 0
