"""A configured server and its workers: one, a pool of replicas, or one per client session.

Above: the crew, which runs each server as a task and relays operator requests; the router, which
asks a server where a request goes (``route``); the supervisor, the ``PoolOwner`` every server
reports to. Below: the keepers (``supervisor.daemon.servers.keeper``), one per worker, each reaching its
server through the ``KeeperOwner`` protocol, which a server implements.

- ``Replicas`` (``"replicas": N``, 1 by default, in ``supervisor.daemon.servers.replicas``): N keepers
  behind one set of tool names, each supervised and restarted on its own. A request goes to the ready replica
  with the fewest requests in flight; the server is ``ready`` while any replica is, and its tools
  stay registered until the last ready one goes. An operator's ``restart`` restarts them one after
  another, each once the one before is ready again, so the tools never go away.
- ``Sessions`` (``"scope": "client"``, in ``supervisor.daemon.servers.sessions``): a worker per client
  identity, started on the client's first request (which waits for it, within its own deadline), kept while
  the client uses it and reaped after ``idleTimeout`` seconds without a request; at most
  ``maxSessions`` at once (past it, ``OVERLOADED``). The tools are learnt once by a *lister* worker
  that starts with the server and stops when it has listed them; they stay registered while the
  server is ``ready``. A session that fails is not restarted (its client's next request starts a
  fresh one), but more than ``maxRestarts`` failures within ``restartWindow`` make the server
  ``failed``, as restarts do.

Requests for a session that is still starting are *held* here and sent when it is ready; the call
table already has them (with their deadlines), so one that expires or is cancelled meanwhile is
answered there and not sent at all, and all of them fail with the session's start-up error if it
never becomes ready.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import msgspec
import trio

from supervisor.config.load import ServerSpec, SupervisorSettings
from supervisor.daemon.servers.keeper import Keeper
from supervisor.daemon.servers.spawn import SpawnMode, WorkerProcess
from supervisor.daemon.servers.worker_log import LogRing
from supervisor.protocol import ErrorCode, ServerStatus, WorkerState, WorkerStatus, WorkerTool

__all__ = ["PoolOwner", "Refusal", "Server"]

log = logging.getLogger("mcp_supervisor.keeper")


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request cannot go to any of a server's workers now."""

    code: ErrorCode
    message: str


class PoolOwner(Protocol):
    """What a server needs of the supervisor that owns it."""

    @property
    def worker_endpoint(self) -> str: ...

    async def spawn(self, name: str, mode: SpawnMode) -> WorkerProcess: ...

    def attach(self, identity: bytes, keeper: Keeper) -> None:
        """Messages from the worker with this routing id go to ``keeper`` from now on."""
        ...

    def worker_gone(self, identity: bytes, reason: str, code: ErrorCode) -> None:
        """A worker incarnation ended: forget it, fail its requests in flight with ``code``."""
        ...

    def drop_tools(self, server: str) -> None:
        """The server's tools leave the registry."""
        ...

    def register_tools(self, spec: ServerSpec, tools: list[WorkerTool]) -> int:
        """Register the server's tools (all of them); the count registered."""
        ...

    def state_changed(self, server: Server, previous: WorkerState) -> None: ...

    def tool_count(self, server: str) -> int: ...

    def send_to_worker(self, identity: bytes, payload: bytes) -> bool: ...

    async def caught_up(self) -> None: ...

    def own_children(self) -> set[int]: ...

    def in_flight(self, worker: bytes) -> int:
        """Requests sent to that worker incarnation and not answered yet."""
        ...

    def pending(self, call: int) -> bool:
        """The call is still waiting for its answer (not expired, cancelled or failed)."""
        ...

    async def idle(self, worker: bytes) -> None:
        """Return once that worker incarnation has no request pending."""
        ...

    def log_ring(self, server: str) -> LogRing: ...


class Server:
    """One configured server: its keepers' owner, and where its requests go."""

    def __init__(self, spec: ServerSpec, owner: PoolOwner, settings: SupervisorSettings) -> None:
        self.spec = spec
        self.name = spec.name
        self.owner = owner
        self.settings = settings
        self._state: WorkerState = "stopped" if spec.disabled else "starting"
        self._last_error: str | None = "disabled in config" if spec.disabled else None
        self._held: dict[bytes, list[tuple[int, bytes]]] = {}  # requests waiting for a worker to start
        self._changed = trio.Event()  # set (and replaced) whenever a worker's state changes
        self._nursery: trio.Nursery | None = None
        self._turn = 0  # where the next look for the least busy worker starts

    # ------------------------------------------------------------ the whole

    @property
    def state(self) -> WorkerState:
        return self._state

    @property
    def last_error(self) -> str | None:
        return self._last_error

    @property
    def restarts(self) -> int:
        return sum(keeper.tracker.restarts for keeper in self.keepers())

    @property
    def spawning(self) -> bool:
        return any(keeper.spawning for keeper in self.keepers())

    def worker_pids(self) -> set[int]:
        return {keeper.worker_pid for keeper in self.keepers() if keeper.worker_pid is not None}

    def keepers(self) -> Iterator[Keeper]:
        """Every keeper with a worker, or about to have one."""
        raise NotImplementedError

    def _aggregate(self) -> WorkerState:
        raise NotImplementedError

    def _update(self) -> None:
        """Recompute the server's state from its workers'; publish a change."""
        state = self._aggregate()
        previous, self._state = self._state, state
        if state != previous:
            self.owner.state_changed(self, previous)

    async def _until_changed(self) -> None:
        await self._changed.wait()

    # ------------------------------------------------------------ requests

    def route(self, client: str, avoid: Sequence[Keeper] = ()) -> Keeper | Refusal:
        """The worker for a request of ``client``: a serving one, or a session still starting (hold the
        request there); or why there is none. ``avoid``: workers found unreachable just now."""
        raise NotImplementedError

    def listing_target(self, client: str) -> Keeper | None:
        """The serving worker that answers ``client``'s part of a listing of every server, if any."""
        raise NotImplementedError

    def hold(self, keeper: Keeper, call: int, payload: bytes) -> None:
        """Send ``payload`` (the request ``call``) to ``keeper``'s worker once it is ready."""
        self._held.setdefault(keeper.target, []).append((call, payload))

    def _flush(self, keeper: Keeper) -> None:
        assert keeper.identity is not None
        for call, payload in self._held.pop(keeper.identity, ()):
            if self.owner.pending(call):  # not expired or cancelled while the worker started
                self.owner.send_to_worker(keeper.identity, payload)

    def why_unavailable(self) -> str:
        if self._state == "needs-login":  # its last error says why, and what to run
            return f"server {self.name!r} {self._last_error or 'needs login'}"
        why = f"server {self.name!r} is {self._state}"
        if self._last_error:
            why += f" (last error: {self._last_error})"
        return why

    def _least_busy(self, keepers: Sequence[Keeper], avoid: Sequence[Keeper] = ()) -> Keeper | None:
        """The serving worker with the fewest requests in flight; ties taken in turn."""
        best, load = None, math.inf
        count = len(keepers)
        self._turn = (self._turn + 1) % count if count else 0
        for i in range(count):
            keeper = keepers[(self._turn + i) % count]
            if keeper.serving and keeper not in avoid:
                assert keeper.identity is not None
                busy = self.owner.in_flight(keeper.identity)
                if busy < load:
                    best, load = keeper, busy
        return best

    # ------------------------------------------------- the keepers' owner

    @property
    def worker_endpoint(self) -> str:
        return self.owner.worker_endpoint

    async def spawn(self, name: str, mode: SpawnMode) -> WorkerProcess:
        return await self.owner.spawn(name, mode)

    def attach(self, identity: bytes, keeper: Keeper) -> None:
        self.owner.attach(identity, keeper)

    def detach(self, keeper: Keeper, reason: str, code: ErrorCode) -> None:
        if self._drops_tools(keeper):
            self.owner.drop_tools(self.name)
        if keeper.identity is not None:
            self._held.pop(keeper.identity, None)  # the call table fails them with the rest
            self.owner.worker_gone(keeper.identity, reason, code)

    def _drops_tools(self, keeper: Keeper) -> bool:
        """Whether ``keeper``'s worker ending takes the server's tools out of the registry."""
        raise NotImplementedError

    def state_changed(self, keeper: Keeper, previous: WorkerState) -> None:
        if keeper.state == "ready" and keeper.identity is not None:
            self._flush(keeper)
        if keeper.last_error is not None and keeper.state != "ready":
            self._last_error = keeper.last_error
        self._update()
        self._changed.set()
        self._changed = trio.Event()

    def tools_changed(self, keeper: Keeper, tools: list[WorkerTool]) -> int:
        return self.owner.register_tools(self.spec, tools)

    def tool_count(self, server: str) -> int:
        return self.owner.tool_count(server)

    def send_to_worker(self, identity: bytes, payload: bytes) -> bool:
        return self.owner.send_to_worker(identity, payload)

    async def caught_up(self) -> None:
        await self.owner.caught_up()

    def own_children(self) -> set[int]:
        return self.owner.own_children()

    def log_ring(self, server: str) -> LogRing:
        return self.owner.log_ring(server)

    # ------------------------------------------------------------ operators

    def request_restart(self, why: str = "restarted by an operator") -> bool:
        raise NotImplementedError

    def request_stop(self, why: str = "stopped by an operator") -> None:
        raise NotImplementedError

    def request_start(self) -> bool:
        raise NotImplementedError

    def reconfigure(self, spec: ServerSpec) -> None:
        raise NotImplementedError

    def use_settings(self, settings: SupervisorSettings) -> None:
        self.settings = settings
        for keeper in self.keepers():
            keeper.use_settings(settings)

    def status(self) -> ServerStatus:
        raise NotImplementedError

    def _row(self, first: Keeper, workers: list[WorkerStatus], **fields: object) -> ServerStatus:
        """The row of a server with several workers: ``first``'s tools, transport and token, with
        the state, restarts and last error of the whole, and a row per worker."""
        return msgspec.structs.replace(
            first.status(),
            state=self.state,
            worker_pid=None,
            server_pid=None,
            restarts=self.restarts,
            last_error=self.last_error,
            workers=workers,
            **fields,
        )

    def _in_flight(self, keeper: Keeper) -> int:
        return 0 if keeper.identity is None else self.owner.in_flight(keeper.identity)

    async def run(self) -> None:
        raise NotImplementedError
