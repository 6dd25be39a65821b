"""Whom the servers and their keepers answer to: ``ServerOwner`` and ``KeeperServer``.

``ServerOwner`` is what a server and its keepers ask of the supervisor that owns them. Above: the
``Supervisor`` (``supervisor.daemon.core``), which implements it; mypy checks that it does where the
supervisor hands itself to its crew. Below: the servers (``supervisor.daemon.servers.pool``:
replicas, per-client sessions) and their keepers (``supervisor.daemon.servers.keeper``), which reach
the supervisor only through it.

``KeeperServer`` is what a keeper tells its own server, the ``Server`` it is a worker of, which adds
to each what its workers share: its state, its tools, its worker's end. A keeper asks the server's
``owner`` directly for everything else (a worker process, the worker link, the registry's count).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from supervisor.config.load import ServerSpec
from supervisor.daemon.servers.spawn import SpawnMode, WorkerProcess
from supervisor.daemon.servers.worker_log import LogRing
from supervisor.protocol import ErrorCode, WorkerState, WorkerTool

if TYPE_CHECKING:
    from supervisor.daemon.servers.keeper import Keeper
    from supervisor.daemon.servers.pool import Server

__all__ = ["KeeperServer", "ServerOwner"]


class ServerOwner(Protocol):
    """What a server and its keepers need of the supervisor that owns them."""

    # ------------------------------------------------------- worker processes

    @property
    def worker_endpoint(self) -> str:
        """Where workers connect (the supervisor's worker ROUTER)."""
        ...

    async def spawn(self, name: str, mode: SpawnMode) -> WorkerProcess:
        """A new worker process for server ``name``."""
        ...

    def own_children(self) -> set[int]:
        """Every live worker's pid, and the zygote's."""
        ...

    def log_ring(self, server: str) -> LogRing:
        """Where the lines of ``server``'s stderr and its workers' warnings are kept (``logs``)."""
        ...

    # ------------------------------------------------------------ the link

    def attach(self, identity: bytes, keeper: Keeper) -> None:
        """Messages from the worker with this routing id go to ``keeper`` from now on."""
        ...

    def send_to_worker(self, identity: bytes, payload: bytes) -> bool:
        """Send if that worker is connected (one still starting may not be yet); say if it was."""
        ...

    async def caught_up(self) -> None:
        """Return once every message that reached the supervisor before this call has been handled."""
        ...

    def worker_gone(self, identity: bytes, reason: str, code: ErrorCode) -> None:
        """A worker incarnation ended: forget it, fail its requests in flight with ``code``."""
        ...

    # ----------------------------------------------------------- the calls

    def in_flight(self, worker: bytes) -> int:
        """Requests sent to that worker incarnation and not answered yet."""
        ...

    def pending(self, call: int) -> bool:
        """The call is still waiting for its answer (not expired, cancelled or failed)."""
        ...

    async def idle(self, worker: bytes) -> None:
        """Return once that worker incarnation has no request pending."""
        ...

    # ------------------------------------------------ the registry, events

    def register_tools(self, spec: ServerSpec, tools: list[WorkerTool]) -> int:
        """Register the server's tools (all of them); the count registered."""
        ...

    def drop_tools(self, server: str) -> None:
        """The server's tools leave the registry."""
        ...

    def tool_count(self, server: str) -> int:
        """How many of ``server``'s tools the registry has."""
        ...

    def state_changed(self, server: Server, previous: WorkerState) -> None:
        """``server``'s state changed from ``previous``: publish it, and tell who waits on it."""
        ...


class KeeperServer(Protocol):
    """What a keeper tells the server it is a worker of (``supervisor.daemon.servers.pool.Server``),
    which adds to each what its workers share; and that server's owner, for the rest."""

    @property
    def owner(self) -> ServerOwner:
        """The supervisor: what a keeper asks of it directly."""
        ...

    def detach(self, keeper: Keeper, reason: str, code: ErrorCode) -> None:
        """``keeper``'s live incarnation ended: forget it, drop its tools, fail its calls with ``code``."""
        ...

    def state_changed(self, keeper: Keeper, previous: WorkerState) -> None: ...

    def tools_changed(self, keeper: Keeper, tools: list[WorkerTool]) -> int:
        """Register the server's tools (all of them); the count registered."""
        ...
