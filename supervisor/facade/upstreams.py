"""The supervisors a facade serves from: one, or several federated into one registry.

Above: the MCP facade, which reads the tools, calls through ``calling(server)`` and is told by
``changed`` what moved. Below: one ``Upstream`` (``supervisor.facade.upstream``) per supervisor, each
with its own link, events and reconnection. With one supervisor everything is its ``Upstream``'s.

With several (``supervisor.shared.federation``): the registries are merged, a server belonging to
the first supervisor (in the order given) that lists it, and a clash is logged by name; a call, a
read, a prompt goes to the supervisor that owns its server; listings of resources and prompts ask
every supervisor. A supervisor that goes silent takes only its own tools out of the listing (the
host is told ``list_changed``): a call to one of them is answered ``UNAVAILABLE`` naming it, and they
return, with another ``list_changed``, when it answers again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio
import anyio.abc

from supervisor.client.aio import AsyncSupervisorClient
from supervisor.facade.launch import Launcher
from supervisor.facade.upstream import Calling, Change, SupervisorGone, Upstream
from supervisor.protocol import ResourceUpdated, ServerMessage, ToolInfo
from supervisor.security.keys import Keys
from supervisor.shared.federation import Member, Merged, Owned, merge

__all__ = ["Upstreams"]

T = TypeVar("T", bound=Owned)

log = logging.getLogger("mcp_supervisor.facade")


class Upstreams:
    """One ``Upstream`` per supervisor, seen as one registry."""

    def __init__(
        self,
        members: Sequence[Member],
        *,
        keys: Keys = None,
        changed: Callable[[Change], Awaitable[None]],
        launcher: Launcher | None = None,
        list_wait: float,
        heard: Callable[[ServerMessage | ResourceUpdated], None] = lambda _: None,
    ) -> None:
        """``launcher`` only with one supervisor (it starts that one when none answers)."""
        if not members:
            raise ValueError("a facade needs a supervisor")
        self._changed = changed
        self.names = [member.name for member in members]
        self.members = [
            Upstream(
                member.endpoint,
                keys=member.keys or keys,
                changed=changed if len(members) == 1 else self._member_changed,
                lost=None if len(members) == 1 else self._member_lost,
                launcher=launcher if len(members) == 1 else None,
                list_wait=list_wait,
                heard=heard,
            )
            for member in members
        ]
        self.one = self.members[0] if len(members) == 1 else None
        self._key: tuple[tuple[bool, int], ...] = ()  # what the merge was made of
        self._merged: Merged[ToolInfo] = Merged()
        self._tools: dict[str, ToolInfo] = {}
        self._version = 0
        self._owner: dict[str, int] = {}  # server -> member, as last merged (kept while it is away)
        self._clashes: set[tuple[str, int, int]] = set()  # reported

    # ------------------------------------------------------------ the registry

    def _merge(self) -> Merged[ToolInfo]:
        """The merged registry, made again when a member's tools or link changed."""
        key = tuple((member.connected, member.version) for member in self.members)
        if key != self._key:
            self._key = key
            self._merged = merge([m.listed() if m.connected else None for m in self.members])
            self._tools = {tool.name: tool for tool in self._merged.entries}
            self._owner.update(self._merged.owners)
            self._version += 1
            for clash in self._merged.clashes:
                if clash not in self._clashes:
                    self._clashes.add(clash)
                    server, kept, left = clash
                    log.warning(
                        "server %r is on %s and %s: the one on %s is left out (server names must be "
                        "unique across supervisors)",
                        server,
                        self.names[kept],
                        self.names[left],
                        self.names[left],
                    )
        return self._merged

    async def _member_changed(self, change: Change) -> None:
        self._merge()
        await self._changed(change)

    async def _member_lost(self) -> None:
        """A member went silent: its tools leave the listing (they return when it answers)."""
        self._merge()
        await self._changed(Change(tools=True, catalog=True))

    @property
    def connected(self) -> bool:
        """Some supervisor answers."""
        return any(member.connected for member in self.members)

    @property
    def settled(self) -> bool:
        """Every supervisor was listed or given up on, and one answers: a listing need not wait."""
        if self.one is not None:
            return self.one.settled
        return self.connected and all(member.first_done for member in self.members)

    @property
    def why(self) -> str:
        """Why some supervisor does not answer (or, with all answering, that they do)."""
        if self.one is not None:
            return self.one.why
        away = [
            f"{name}: {m.why}" for name, m in zip(self.names, self.members, strict=True) if not m.connected
        ]
        return "; ".join(away) or "connected"

    async def wait_first(self, wait: float) -> None:
        """Up to ``wait`` seconds, until every supervisor was listed (or given up on)."""
        with anyio.move_on_after(wait):
            for member in self.members:
                await member.wait_first(wait)

    async def wait_reached(self, wait: float) -> None:
        with anyio.move_on_after(wait):
            for member in self.members:
                await member.wait_reached(wait)

    async def tools(self, wait: float) -> list[ToolInfo]:
        if self.one is not None:
            return await self.one.tools(wait)
        await self.wait_first(wait)
        return list(self._merge().entries)

    def listed(self) -> list[ToolInfo]:
        if self.one is not None:
            return self.one.listed()
        return list(self._merge().entries)

    def find(self, name: str) -> ToolInfo | None:
        if self.one is not None:
            return self.one.find(name)
        self._merge()
        return self._tools.get(name)

    @property
    def version(self) -> int:
        """Grows with every change of the tools listed."""
        if self.one is not None:
            return self.one.version
        self._merge()
        return self._version

    def server_of(self, name: str, tool: ToolInfo | None) -> str | None:
        """The server of the tool the registry names ``name`` (``tool``, its entry if listed); for one
        not listed now (its supervisor away), the server its name begins with."""
        if tool is not None:
            return tool.server
        if self.one is not None:
            return None
        self._merge()
        matches = [server for server in self._owner if name.startswith(f"mcp_{server}_")]
        return max(matches, key=len, default=None)

    # ------------------------------------------------------------ requests

    def calling(self, server: str | None = None) -> Calling:
        """The client of the supervisor that owns ``server`` (None: the first that answers), to make
        one request with (``async with upstreams.calling(server) as client``); see ``Upstream.calling``."""
        if self.one is not None:
            return self.one.calling()
        return self._owner_of(server).calling()

    def _owner_of(self, server: str | None) -> Upstream:
        if server is not None:
            self._merge()
            index = self._owner.get(server)
            if index is not None:
                return self.members[index]
        return next((member for member in self.members if member.connected), self.members[0])

    async def listing(self, ask: Callable[[AsyncSupervisorClient], Awaitable[Sequence[T]]]) -> list[T]:
        """Every supervisor's entries (resources, templates, prompts), each server's from its owner; one
        that is away adds none. ``SupervisorGone`` when none answers."""
        if self.one is not None:
            async with self.one.calling() as client:
                return list(await ask(client))
        listings: list[Sequence[T] | None] = []
        for member in self.members:
            try:
                async with member.calling() as client:
                    listings.append(await ask(client))
            except SupervisorGone:
                listings.append(None)
        if all(listing is None for listing in listings):
            raise SupervisorGone(self.why)
        return merge(listings).entries

    async def want_level(self, level: str, server: str | None) -> None:
        """``server``'s log messages (every server's: of every supervisor) from ``level`` up."""
        if self.one is not None or server is not None:
            return await self._owner_of(server).want_level(level, server)
        for member in self.members:  # each remembers it, and asks it again of a supervisor it reaches
            try:
                await member.want_level(level, None)
            except SupervisorGone:
                continue

    async def subscribe(self, server: str, uri: str) -> None:
        await self._owner_of(server).subscribe(server, uri)

    async def unsubscribe(self, server: str, uri: str) -> None:
        await self._owner_of(server).unsubscribe(server, uri)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Every member's link, for ever; started at once."""
        async with anyio.create_task_group() as tasks:
            for member in self.members:
                await tasks.start(member.run)
            task_status.started()
