"""Reloads: re-reading the config file, one reload at a time, and the config in force.

Above: the supervisor (SIGHUP, and the front's ``Reload`` requests, admitted through the call table
and answered here when their reload is done). Below: ``supervisor.daemon.reload_plan`` (the pure plan of what
changed) and the crew, which applies it.

Requests that come while a reload waits for the one under way join it: each is answered by a reload
that read the file after it came, and a flood of them costs one reload, not one each. A file that
cannot be used as a whole changes nothing (``ReloadRejected``, logged, and ``BAD_REQUEST`` to the
requests waiting for it). Watchers (``supervisor.ops.service``) hear when each reload begins and ends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import trio

from supervisor.config.load import Config, ConfigError, load_config
from supervisor.daemon.call_table import CallTable
from supervisor.daemon.registry import Registry
from supervisor.daemon.reload_plan import ReloadRejected, plan_reload
from supervisor.daemon.servers.crew import Crew
from supervisor.protocol import ErrorReply, FrontReply, Reloaded, ReloadSummary

__all__ = ["ReloadWatcher", "Reloads"]

log = logging.getLogger("mcp_supervisor")


class ReloadWatcher(Protocol):
    def reloading(self) -> None:
        """A reload begins."""
        ...

    def reloaded(self, rejected: str | None) -> None:
        """The reload is over: applied (``rejected`` None), or not, and why."""
        ...


class Reloads:
    """The config in force, and every reload of it."""

    def __init__(
        self,
        config: Config,
        *,
        crew: Crew,
        registry: Registry,
        calls: CallTable,
        reply: Callable[[bytes, FrontReply], None],
        draining: Callable[[], bool],
    ) -> None:
        self.config = config
        self._crew = crew
        self._registry = registry
        self._calls = calls
        self._reply = reply
        self._draining = draining
        self._lock = trio.Lock()  # one reload at a time
        self._next: list[tuple[bytes, int]] | None = None  # who waits for the reload not yet begun
        self.watchers: list[ReloadWatcher] = []

    def start_soon(self, nursery: trio.Nursery, caller: bytes | None = None, id: int = 0) -> None:
        """Start a reload in ``nursery`` (SIGHUP, or a front request from ``caller``, answered when it
        is done), or join the one waiting to begin."""
        if caller is not None and not self._calls.admit(caller, id):
            return
        if self._next is None:
            self._next = []
            nursery.start_soon(self._reload_for, self._next)
        if caller is not None:
            self._next.append((caller, id))

    async def _reload_for(self, waiters: list[tuple[bytes, int]]) -> None:
        async with self._lock:
            self._next = None  # requests from now on wait for the next reload
            for watcher in self.watchers:
                watcher.reloading()
            try:
                outcome: ReloadSummary | ErrorReply = await self._reload()
            except ReloadRejected as exc:  # logged
                outcome = ErrorReply(id=0, code="BAD_REQUEST", message=str(exc))
            except Exception as exc:  # boundary: a bug in a reload must not end the supervisor
                log.exception("reload failed")
                message = f"reload failed: {type(exc).__name__}: {exc}"
                outcome = ErrorReply(id=0, code="INTERNAL", message=message)
            for watcher in self.watchers:
                watcher.reloaded(None if isinstance(outcome, ReloadSummary) else outcome.message)
        for caller, id in waiters:
            reply: FrontReply = (
                Reloaded(id=id, summary=outcome)
                if isinstance(outcome, ReloadSummary)
                else ErrorReply(id=id, code=outcome.code, message=outcome.message)
            )
            self._reply(caller, reply)
            self._calls.release(caller)

    async def _reload(self) -> ReloadSummary:
        """Re-read the config file and apply what changed (with the lock held); returns once removed
        servers have stopped, with changed and added ones starting. Raises :class:`ReloadRejected`,
        having changed nothing, when the file cannot be used as a whole."""
        path = self.config.path
        try:
            if self._draining():
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
        await self._crew.apply(plan, new)
        for name in plan.removed:
            self._registry.remove(name)
        log.info(
            "reload of %s: added %s; removed %s; changed %s; %d unchanged%s",
            *(path, _names(plan.added), _names(plan.removed), _names(plan.changed), len(plan.unchanged)),
            f"; settings changed: {', '.join(plan.settings)}" if plan.settings else "",
        )
        return plan.summary(str(path))


def _names(names: list[str]) -> str:
    return ", ".join(names) or "none"
