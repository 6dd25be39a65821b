"""A configured server and its workers: one, a pool of replicas, or one per client session.

Above: the crew, which runs each server as a task and relays operator requests; the router, which
asks a server where a request goes (``route``); the supervisor, the ``ServerOwner``
(``supervisor.daemon.servers.owner``) every server reports to. Below: the keepers
(``supervisor.daemon.servers.keeper``), one per worker, each telling its server of its state, its
tools and its worker's end (``KeeperServer``, which a server implements) and asking the supervisor
directly for the rest.

``Server`` is an abstract base: the two kinds below implement its abstract methods.

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

import abc
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import trio

from supervisor.config.load import ServerSpec, SupervisorSettings
from supervisor.daemon.servers.keeper import Keeper
from supervisor.daemon.servers.owner import ServerOwner
from supervisor.protocol import ErrorCode, ServerStatus, WorkerState, WorkerTool

__all__ = ["Refusal", "Server"]

log = logging.getLogger("mcp_supervisor.keeper")


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request cannot go to any of a server's workers now."""

    code: ErrorCode
    message: str


class Server(abc.ABC):
    """One configured server: its keepers' server, and where its requests go."""

    def __init__(self, spec: ServerSpec, owner: ServerOwner, settings: SupervisorSettings) -> None:
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

    @abc.abstractmethod
    def keepers(self) -> Iterator[Keeper]:
        """Every keeper with a worker, or about to have one."""

    @abc.abstractmethod
    def _aggregate(self) -> WorkerState:
        """The server's state, from its workers'."""

    def _update(self) -> None:
        """Recompute the server's state from its workers'; publish a change."""
        state = self._aggregate()
        previous, self._state = self._state, state
        if state != previous:
            self.owner.state_changed(self, previous)

    async def _until_changed(self) -> None:
        await self._changed.wait()

    # ------------------------------------------------------------ requests

    @abc.abstractmethod
    def route(self, client: str, avoid: Sequence[Keeper] = ()) -> Keeper | Refusal:
        """The worker for a request of ``client``: a serving one, or a session still starting (hold the
        request there); or why there is none. ``avoid``: workers found unreachable just now."""

    @abc.abstractmethod
    def listing_target(self, client: str) -> Keeper | None:
        """The serving worker that answers ``client``'s part of a listing of every server, if any."""

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

    # ------------------------------------------------- the keepers' server

    def detach(self, keeper: Keeper, reason: str, code: ErrorCode) -> None:
        if self._drops_tools(keeper):
            self.owner.drop_tools(self.name)
        if keeper.identity is not None:
            self._held.pop(keeper.identity, None)  # the call table fails them with the rest
            self.owner.worker_gone(keeper.identity, reason, code)

    @abc.abstractmethod
    def _drops_tools(self, keeper: Keeper) -> bool:
        """Whether ``keeper``'s worker ending takes the server's tools out of the registry."""

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

    # ------------------------------------------------------------ operators

    @abc.abstractmethod
    def request_restart(self, why: str = "restarted by an operator") -> bool:
        """Restart the server's workers, the counters reset; False when a restart is already under way."""

    @abc.abstractmethod
    def request_stop(self, why: str = "stopped by an operator") -> None:
        """Stop every worker and keep the server stopped until ``start`` or ``restart``."""

    @abc.abstractmethod
    def request_start(self) -> bool:
        """Start a stopped or failed server; False when it is already running or starting."""

    @abc.abstractmethod
    def reconfigure(self, spec: ServerSpec) -> None:
        """Take a reloaded spec of the same shape (the crew replaces a server whose shape changed)."""

    def use_settings(self, settings: SupervisorSettings) -> None:
        self.settings = settings
        for keeper in self.keepers():
            keeper.use_settings(settings)

    @abc.abstractmethod
    def status(self) -> ServerStatus:
        """The server's row in ``status``."""

    def _in_flight(self, keeper: Keeper) -> int:
        return 0 if keeper.identity is None else self.owner.in_flight(keeper.identity)

    @abc.abstractmethod
    async def run(self) -> None:
        """Run the server's workers until cancelled (the shutdown, or a reload retiring it)."""
