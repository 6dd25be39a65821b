"""``ListTools`` with ``wait``: the registry once every server's first start is over.

Above: the supervisor's dispatch, which hands it each ``ListTools``, and tells it of every server's
state change (``state_changed``). Beside it: the registry it answers from, and the servers (their
states). Below: the ``reply`` function through which it answers.

A server's first start is over once it has left ``starting`` (ready, failed, needs-login, stopped,
or restarting after a failed first start); one added by a reload has its own first start. A listing
that asks to ``wait`` while some are not over is answered when they all are, or when its wait (at
most ``MAX_LIST_WAIT``) has passed, by a task of its own in the supervisor's nursery; at most
``MAX_LISTINGS`` wait at once, and the rest are answered at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Final, Protocol

import trio

from supervisor.protocol import MAX_LIST_WAIT, ErrorReply, FrontReply, ListTools, ToolList, WorkerState
from supervisor.registry import Registry

__all__ = ["MAX_LISTINGS", "FirstStarts"]

MAX_LISTINGS: Final = 1000  # ListTools waiting for the servers' first starts at once; more answer now


class _Server(Protocol):
    @property
    def state(self) -> WorkerState: ...


class FirstStarts:
    """Which servers' first start is not over, and the listings that wait for them."""

    def __init__(
        self,
        registry: Registry,
        servers: Mapping[str, _Server],
        reply: Callable[[bytes, FrontReply], None],
    ) -> None:
        self._registry = registry
        self._servers = servers
        self._reply = reply
        self._started_once: set[str] = set()  # servers that have left ``starting`` at least once
        self._over: trio.Event | None = None  # set when every first start is over, if anyone waits
        self._listings = 0  # listings waiting now

    def pending(self) -> list[str]:
        """The servers whose first start is not over, in config order."""
        return [
            name
            for name, server in self._servers.items()
            if server.state == "starting" and name not in self._started_once
        ]

    def state_changed(self, name: str, state: WorkerState) -> None:
        if state == "starting":
            return
        self._started_once.add(name)
        if self._over is not None and not self.pending():
            self._over.set()
            self._over = None

    def list_tools(self, caller: bytes, request: ListTools, tasks: trio.Nursery | None) -> None:
        """Answer ``request`` now, or (``wait``) from a task in ``tasks`` once the first starts are over."""
        wait = request.wait
        if not (wait >= 0 and math.isfinite(wait)):
            message = f"wait must be a number of seconds, 0 or more, not {wait}"
            self._reply(caller, ErrorReply(id=request.id, code="BAD_REQUEST", message=message))
        elif wait > 0 and tasks is not None and self._listings < MAX_LISTINGS and self.pending():
            self._listings += 1
            tasks.start_soon(self._answer_when_over, caller, request.id, min(wait, MAX_LIST_WAIT))
        else:
            self._reply(caller, self.tool_list(request.id))

    def tool_list(self, id: int) -> ToolList:
        registry = self._registry
        return ToolList(id=id, tools=registry.tools(), version=registry.version, starting=self.pending())

    async def _answer_when_over(self, caller: bytes, id: int, wait: float) -> None:
        try:
            with trio.move_on_after(wait):
                while self.pending():
                    if self._over is None:
                        self._over = trio.Event()
                    await self._over.wait()
            self._reply(caller, self.tool_list(id))
        finally:
            self._listings -= 1
