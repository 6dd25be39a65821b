"""The crew: one keeper per configured server, each running as a task, and what operators ask of them.

Above: the supervisor, which starts the crew in its nursery, relays ``restart`` / ``stop`` /
``start`` requests, and hands it reload plans. Below: the keepers (``supervisor.keeper``), each
reaching the supervisor through the ``KeeperOwner`` it was given.

A reload adds keepers (started at once), hands changed ones their new spec, and retires removed
ones: a retired server is stopped as ``stop`` stops it (its calls in flight fail, naming why), its
keeper's task cancelled (its shielded, bounded clean-up reaps worker and server) and forgotten.
While it retires, operator requests naming it are refused as for an unknown server.
"""

from __future__ import annotations

import logging
from typing import assert_never

import trio

from supervisor.config import Config
from supervisor.keeper import Keeper, KeeperOwner
from supervisor.protocol import Done, ErrorReply, FrontReply, Restart, Start, Stop
from supervisor.reload import ReloadPlan

__all__ = ["Crew"]

log = logging.getLogger("mcp_supervisor")


class Crew:
    """The keepers, in config order, and the tasks they run in."""

    def __init__(self, config: Config, owner: KeeperOwner) -> None:
        self._owner = owner
        self.keepers: dict[str, Keeper] = {
            name: Keeper(spec, owner, config.settings) for name, spec in config.servers.items()
        }
        self._tasks: dict[Keeper, tuple[trio.CancelScope, trio.Event]] = {}  # scope, ended
        self._retiring: set[str] = set()  # servers a reload removed whose worker is still stopping
        self._nursery: trio.Nursery | None = None

    async def start(self, nursery: trio.Nursery) -> None:
        """Start every keeper as a task of ``nursery`` (cancelling it stops them all, bounded)."""
        self._nursery = nursery
        for keeper in self.keepers.values():
            await nursery.start(self._keep, keeper, name=f"keeper {keeper.name}")

    async def _keep(self, keeper: Keeper, *, task_status: trio.TaskStatus[None]) -> None:
        """Run one keeper until the supervisor stops or a reload retires it (cancels its scope)."""
        ended = trio.Event()
        with trio.CancelScope() as scope:
            self._tasks[keeper] = (scope, ended)
            task_status.started()
            try:
                await keeper.run()
            finally:
                ended.set()
                del self._tasks[keeper]

    @property
    def spawning(self) -> bool:
        """A worker process is being forked (its pid is not known yet)."""
        return any(keeper.spawning for keeper in self.keepers.values())

    def worker_pids(self) -> set[int]:
        return {keeper.worker_pid for keeper in self.keepers.values() if keeper.worker_pid is not None}

    def operate(self, request: Restart | Stop | Start) -> FrontReply:
        """An operator's ``restart``, ``stop`` or ``start`` of one server: ``Done``, or why not."""
        server = request.server
        keeper = self.keepers.get(server)
        if keeper is None or server in self._retiring:
            known = ", ".join(name for name in self.keepers if name not in self._retiring) or "none"
            gone = " (removed from the config by a reload)" if server in self._retiring else ""
            message = f"no server named {server!r}{gone} (servers: {known})"
            return ErrorReply(id=request.id, code="BAD_REQUEST", message=message)
        match request:
            case Restart():
                acted = keeper.request_restart()
            case Stop():
                keeper.request_stop()
                acted = True
            case Start():
                acted = keeper.request_start()
            case _:
                assert_never(request)
        verb = type(request).__name__.lower()
        log.info("operator %s of server %r%s", verb, server, "" if acted else " (already under way)")
        return Done(id=request.id)

    async def apply(self, plan: ReloadPlan, new: Config) -> None:
        """Apply a reload plan; returns once removed servers have stopped, with changed and added
        ones starting."""
        assert self._nursery is not None, "the crew has not been started"
        for keeper in self.keepers.values():
            keeper.use_settings(new.settings)
        for name in plan.changed:
            self.keepers[name].reconfigure(new.servers[name])
        for name in plan.added:
            keeper = Keeper(new.servers[name], self._owner, new.settings)
            self.keepers[name] = keeper
            await self._nursery.start(self._keep, keeper, name=f"keeper {name}")
        async with trio.open_nursery() as stopping:
            for name in plan.removed:
                stopping.start_soon(self._retire, self.keepers[name])
        ordered = {name: self.keepers[name] for name in new.servers}  # in file order
        self.keepers.clear()  # the same dict: the router reads it too
        self.keepers.update(ordered)

    async def _retire(self, keeper: Keeper) -> None:
        self._retiring.add(keeper.name)
        try:
            keeper.request_stop("removed from the config (reload)")
            scope, ended = self._tasks[keeper]
            scope.cancel()  # the keeper's shielded, bounded clean-up reaps worker and server
            await ended.wait()
        finally:
            self._retiring.discard(keeper.name)
