"""``ListTools`` with ``wait``: the registry once every server's first start is over.

Above: the supervisor's dispatch, which hands it each ``ListTools``, and tells it of every server's
state change (``state_changed``). Beside it: the registry it answers from, and the servers (their
states). Below: the ``reply`` function through which it answers.

A server's first start is over once it has left ``starting`` (ready, failed, needs-login, stopped,
or restarting after a failed first start); one added by a reload has its own first start. A server
that says its tools change (``tools.listChanged``) and became ready is given ``SETTLE`` seconds more,
or until its tools change, whichever comes first: servers that add tools as soon as a client is
initialized (server-everything adds those that depend on what the client offers) announce them just
after the first listing, and a host that lists once should see them. A listing
that asks to ``wait`` while some are not over is answered when they all are, or when its wait (at
most ``MAX_LIST_WAIT``) has passed, by a task of its own in the supervisor's nursery; at most
``MAX_LISTINGS`` wait at once, and the rest are answered at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Final, Protocol

import trio

from supervisor.daemon.registry import Registry
from supervisor.protocol import MAX_LIST_WAIT, ErrorReply, FrontReply, ListTools, ToolList, WorkerState

__all__ = ["MAX_LISTINGS", "FirstStarts"]

MAX_LISTINGS: Final = 1000  # ListTools waiting for the servers' first starts at once; more answer now
SETTLE: Final = 0.25  # seconds a ready server that says its tools change may take to announce more


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
        self._settling: dict[str, float] = {}  # ready servers whose tools may still come: until when
        self._changed: trio.Event | None = None  # set when a first start moves on, if anyone waits
        self._listings = 0  # listings waiting now

    def pending(self) -> list[str]:
        """The servers whose first start is not over, in config order."""
        now = trio.current_time() if self._settling else 0.0
        for name, until in list(self._settling.items()):
            if until <= now:
                del self._settling[name]
        return [
            name
            for name, server in self._servers.items()
            if (server.state == "starting" and name not in self._started_once) or name in self._settling
        ]

    def state_changed(self, name: str, state: WorkerState) -> None:
        if state == "starting":
            return
        self._started_once.add(name)
        if state != "ready":
            self._settling.pop(name, None)
        self._wake()

    def ready(self, name: str, tools_change: bool, first: bool) -> None:
        """``name`` became ready (``first``: its first start); ``tools_change``: it says they may change."""
        if first and tools_change:
            self._settling[name] = trio.current_time() + SETTLE
            self._wake()  # the listings waiting look again when it is over

    def tools_changed(self, name: str) -> None:
        """``name``'s tools changed: the tools it announces once ready have come."""
        if self._settling.pop(name, None) is not None:
            self._wake()

    def first_start(self, name: str) -> bool:
        """Whether ``name`` has not left ``starting`` before now."""
        return name not in self._started_once

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

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
                    if self._changed is None:
                        self._changed = trio.Event()
                    changed = self._changed
                    settled = min(self._settling.values(), default=math.inf)
                    with trio.move_on_at(settled):  # a settling server's time is up then
                        await changed.wait()
            self._reply(caller, self.tool_list(id))
        finally:
            self._listings -= 1
