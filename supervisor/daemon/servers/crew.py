"""The crew: one ``Server`` per configured server, each running as a task, and what operators ask of them.

Above: the supervisor, which starts the crew in its nursery, relays ``restart`` / ``stop`` /
``start`` requests, and hands it reload plans. Below: the servers (``supervisor.daemon.servers.pool``: one
worker,
replicas, or per-client sessions), each with its keepers (``supervisor.daemon.servers.keeper``), reaching the
supervisor through the ``ServerOwner`` it was given.

A reload adds servers (started at once), hands changed ones their new spec, and retires removed
ones: a retired server is stopped as ``stop`` stops it (its calls in flight fail, naming why), its
task cancelled (its keepers' shielded, bounded clean-up reaps workers and servers) and forgotten.
A changed server whose shape changed (its ``replicas`` or ``scope``) is retired and added anew.
While it retires, operator requests naming it are refused as for an unknown server.
"""

from __future__ import annotations

import logging
from typing import assert_never

import trio

from supervisor.config.load import Config, ServerSpec, SupervisorSettings
from supervisor.daemon.reload_plan import ReloadPlan
from supervisor.daemon.servers.owner import ServerOwner
from supervisor.daemon.servers.pool import Server
from supervisor.daemon.servers.replicas import Replicas
from supervisor.daemon.servers.sessions import Sessions
from supervisor.protocol import Done, ErrorReply, FrontReply, Restart, Start, Stop

__all__ = ["Crew"]

log = logging.getLogger("mcp_supervisor")


class Crew:
    """The servers, in config order, and the tasks they run in."""

    def __init__(self, config: Config, owner: ServerOwner) -> None:
        self._owner = owner
        self.servers: dict[str, Server] = {
            name: new_server(spec, owner, config.settings) for name, spec in config.servers.items()
        }
        self._tasks: dict[Server, tuple[trio.CancelScope, trio.Event]] = {}  # scope, ended
        self._retiring: set[str] = set()  # servers a reload removed whose worker is still stopping
        self._nursery: trio.Nursery | None = None

    async def start(self, nursery: trio.Nursery) -> None:
        """Start every server as a task of ``nursery`` (cancelling it stops them all, bounded)."""
        self._nursery = nursery
        for server in self.servers.values():
            await nursery.start(self._keep, server, name=f"server {server.name}")

    async def _keep(self, server: Server, *, task_status: trio.TaskStatus[None]) -> None:
        """Run one server until the supervisor stops or a reload retires it (cancels its scope)."""
        ended = trio.Event()
        with trio.CancelScope() as scope:
            self._tasks[server] = (scope, ended)
            task_status.started()
            try:
                await server.run()
            finally:
                ended.set()
                del self._tasks[server]

    @property
    def spawning(self) -> bool:
        """A worker process is being forked (its pid is not known yet)."""
        return any(server.spawning for server in self.servers.values())

    def worker_pids(self) -> set[int]:
        return {pid for server in self.servers.values() for pid in server.worker_pids()}

    def operate(self, request: Restart | Stop | Start) -> FrontReply:
        """An operator's ``restart``, ``stop`` or ``start`` of one server: ``Done``, or why not."""
        name = request.server
        server = self.servers.get(name)
        if server is None or name in self._retiring:
            known = ", ".join(other for other in self.servers if other not in self._retiring) or "none"
            gone = " (removed from the config by a reload)" if name in self._retiring else ""
            message = f"no server named {name!r}{gone} (servers: {known})"
            return ErrorReply(id=request.id, code="UNKNOWN_TOOL", message=message)  # as the router's
        match request:
            case Restart():
                acted = server.request_restart()
            case Stop():
                server.request_stop()
                acted = True
            case Start():
                acted = server.request_start()
            case _:
                assert_never(request)
        verb = type(request).__name__.lower()
        log.info("operator %s of server %r%s", verb, name, "" if acted else " (already under way)")
        return Done(id=request.id)

    async def apply(self, plan: ReloadPlan, new: Config) -> None:
        """Apply a reload plan; returns once removed servers have stopped, with changed and added
        ones starting."""
        assert self._nursery is not None, "the crew has not been started"
        for server in self.servers.values():
            server.use_settings(new.settings)
        reshaped = [
            name for name in plan.changed if _shape(self.servers[name].spec) != _shape(new.servers[name])
        ]
        for name in plan.changed:
            if name not in reshaped:
                self.servers[name].reconfigure(new.servers[name])
        async with trio.open_nursery() as stopping:
            for name in plan.removed:
                stopping.start_soon(self._retire, self.servers[name], "removed from the config (reload)")
            for name in reshaped:
                why = "restarted with its new config (reload)"
                stopping.start_soon(self._retire, self.servers[name], why)
        for name in (*reshaped, *plan.added):
            server = new_server(new.servers[name], self._owner, new.settings)
            self.servers[name] = server
            await self._nursery.start(self._keep, server, name=f"server {name}")
        ordered = {name: self.servers[name] for name in new.servers}  # in file order
        self.servers.clear()  # the same dict: the router reads it too
        self.servers.update(ordered)

    async def _retire(self, server: Server, why: str) -> None:
        self._retiring.add(server.name)
        try:
            server.request_stop(why)
            scope, ended = self._tasks[server]
            scope.cancel()  # the keepers' shielded, bounded clean-up reaps workers and servers
            await ended.wait()
        finally:
            self._retiring.discard(server.name)


def new_server(spec: ServerSpec, owner: ServerOwner, settings: SupervisorSettings) -> Server:
    """The server a spec describes: per-client sessions, or replicas (one by default)."""
    if spec.scope == "client":
        return Sessions(spec, owner, settings)
    return Replicas(spec, owner, settings)


def _shape(spec: ServerSpec) -> tuple[str, int]:
    """What a reload cannot change in place: how many workers, and for whom."""
    return spec.scope, spec.replicas
