"""Replicas (``"replicas": N``, 1 by default): N keepers behind one set of tool names.

Above: the router, which asks ``route`` for the least busy ready replica; the crew, which relays
``restart``, ``stop`` and ``start``. Beside it: the ``Server`` base (``supervisor.daemon.servers.pool``) it
shares with per-client sessions. Below: one keeper per replica, each supervised and restarted on its own.
The server is ``ready`` while any replica is, and its tools leave the registry with the last ready
one. A restart is rolling: one replica after another, each drained first while another serves.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

import trio

from supervisor.config.load import ServerSpec, SupervisorSettings
from supervisor.daemon.servers.keeper import Keeper
from supervisor.daemon.servers.owner import ServerOwner
from supervisor.daemon.servers.pool import Refusal, Server
from supervisor.daemon.servers.rows import pooled_row, worker_row
from supervisor.protocol import STATE_PRECEDENCE, ServerStatus, WorkerState

__all__ = ["Replicas"]

ROLL_MARGIN: Final = 5.0  # seconds past a replica's startTimeout before a rolling restart moves on


class Replicas(Server):
    """``replicas`` keepers (one by default) behind one set of tool names."""

    def __init__(self, spec: ServerSpec, owner: ServerOwner, settings: SupervisorSettings) -> None:
        super().__init__(spec, owner, settings)
        many = spec.replicas > 1
        self.members = [
            Keeper(spec, self, settings, label=f"{spec.name}#{i}" if many else None)
            for i in range(1, spec.replicas + 1)
        ]
        self._rolling: trio.CancelScope | None = None  # a rolling restart under way

    def keepers(self) -> Iterator[Keeper]:
        return iter(self.members)

    @property
    def last_error(self) -> str | None:
        return self.members[0].last_error if len(self.members) == 1 else self._last_error

    def _aggregate(self) -> WorkerState:
        states = {keeper.state for keeper in self.members}
        return next(state for state in STATE_PRECEDENCE if state in states)

    def route(self, client: str, avoid: Sequence[Keeper] = ()) -> Keeper | Refusal:
        if len(self.members) == 1:  # the common case, on every call
            only = self.members[0]
            if only.serving and not avoid:
                return only
            return Refusal("UNAVAILABLE", self.why_unavailable())
        keeper = self._least_busy(self.members, avoid)
        return keeper if keeper is not None else Refusal("UNAVAILABLE", self.why_unavailable())

    def listing_target(self, client: str) -> Keeper | None:
        return self._least_busy(self.members)

    def _drops_tools(self, keeper: Keeper) -> bool:
        return not any(other.serving for other in self.members if other is not keeper)

    def request_restart(self, why: str = "restarted by an operator") -> bool:
        if len(self.members) == 1:
            return self.members[0].request_restart(why)
        if self._rolling is not None:
            return False
        assert self._nursery is not None, "the server is not running"
        self._rolling = trio.CancelScope()
        self._nursery.start_soon(self._roll, self._rolling, why)
        return True

    async def _roll(self, scope: trio.CancelScope, why: str) -> None:
        """Restart the replicas one after another, each once the one before is up again (or has
        had its start timeout), so that the tools never go away. While another replica serves, each
        first gets no new calls and up to ``shutdownGrace`` seconds to finish those it has."""
        try:
            with scope:
                for keeper in self.members:
                    await self._drain(keeper)
                    keeper.request_restart(why)
                    with trio.move_on_after(keeper.policy.start_timeout + ROLL_MARGIN):
                        while keeper.state in ("starting", "restarting"):
                            await self._until_changed()
        finally:
            if self._rolling is scope:
                self._rolling = None

    async def _drain(self, keeper: Keeper) -> None:
        identity = keeper.identity
        if identity is None or not any(other.serving for other in self.members if other is not keeper):
            return
        keeper.draining = True
        with trio.move_on_after(self.settings.shutdown_grace):
            await self.owner.idle(identity)

    def _stop_rolling(self) -> None:
        if self._rolling is not None:
            self._rolling.cancel()
            self._rolling = None

    def request_stop(self, why: str = "stopped by an operator") -> None:
        self._stop_rolling()
        for keeper in self.members:
            keeper.request_stop(why)

    def request_start(self) -> bool:
        started = [keeper.request_start() for keeper in self.members]
        return any(started)

    def reconfigure(self, spec: ServerSpec) -> None:
        """A reloaded spec with as many replicas (the crew replaces a server whose shape changed):
        one replica restarts at once, several one after another."""
        self.spec = spec
        running = any(keeper.state != "stopped" for keeper in self.members)
        if len(self.members) == 1 or spec.disabled or not running:
            self._stop_rolling()
            for keeper in self.members:
                keeper.reconfigure(spec)
            return
        for keeper in self.members:
            keeper.adopt(spec)
        self._stop_rolling()
        self.request_restart("restarted with its new config (reload)")

    def status(self) -> ServerStatus:
        if len(self.members) == 1:
            return self.members[0].status()
        workers = [worker_row(keeper, self._in_flight(keeper)) for keeper in self.members]
        waits = [w.next_restart_in for w in workers if w.next_restart_in is not None]
        return pooled_row(self, self.members[0], workers, next_restart_in=min(waits) if waits else None)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for keeper in self.members:
                nursery.start_soon(keeper.run, name=f"keeper {keeper.label}")
