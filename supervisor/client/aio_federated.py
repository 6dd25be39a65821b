"""An async client of several supervisors seen as one registry: ``AsyncFederatedClient``.

The twin of ``FederatedClient`` (``supervisor.client.federated``) for asyncio and trio (through
anyio): the same methods, awaited, the same rules and the same results (``Listing``, ``Status``,
``Outcome``, ``Failure``, ``Clash``, ``Row``: ``supervisor.client.federated_common``). Below: one
``AsyncSupervisorClient`` per member, all entered with the federated client (``async with``).

A request for the whole registry goes to every member at once (a task each, in one task group),
each bounded by its member's client's own timeouts; a member that does not answer (or fails
otherwise) contributes nothing and is reported as a ``Failure`` naming it. So is, on every request,
a member whose connection could not be made when the client was entered (on asyncio, an ``ipc://``
supervisor whose socket file is not there): it is tried again by a new client only. A request about
one server or tool goes to the member that owns it, learnt from the merged listings as the blocking
client does.

Example::

    async with AsyncFederatedClient(members(["tcp://a:5555", "tcp://b:5555"])) as fed:
        listing = await fed.list_tools()
        for warning in listing.clashes:
            print(warning)
        print((await fed.call_tool("mcp_time_get_current_time", {"timezone": "UTC"})).text)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio

from supervisor.client.aio import AsyncSupervisorClient
from supervisor.client.errors import SupervisorError, SupervisorUnreachableError, UnknownToolError
from supervisor.client.exchanges import REQUEST_TIMEOUT
from supervisor.client.federated_common import (
    Failure,
    Listing,
    Outcome,
    Owners,
    Status,
    listing_of,
    named,
    prompt_owner,
    status_of,
)
from supervisor.protocol import (
    ProgressCallback,
    PromptInfo,
    PromptResult,
    ReloadSummary,
    ResourceInfo,
    ResourceResult,
    ResourceTemplateInfo,
    ServerLog,
    ToolInfo,
    ToolResult,
)
from supervisor.security.keys import Keys
from supervisor.shared.federation import Member, Owned

__all__ = ["AsyncFederatedClient"]

_R = TypeVar("_R")
_T = TypeVar("_T", bound=Owned)

AsyncConnect = Callable[[Member], AbstractAsyncContextManager[AsyncSupervisorClient]]
Ask = Callable[[AsyncSupervisorClient], Awaitable[_R]]


class AsyncFederatedClient:
    """Async client of several supervisors (``members``, in order: the first owns a clashing server),
    for asyncio and trio. ``keys``: the key directory of the members that name none of their own;
    ``identity``: this client on every member's ``scope: client`` servers. ``connect`` makes a
    member's client, not yet entered (default: an ``AsyncSupervisorClient``). Use it as
    ``async with``; leaving it closes every member's client."""

    def __init__(
        self,
        members: Sequence[Member],
        *,
        keys: Keys = None,
        request_timeout: float = REQUEST_TIMEOUT,
        identity: str | None = None,
        connect: AsyncConnect | None = None,
    ) -> None:
        if not members:
            raise ValueError("a federation needs at least one supervisor")

        def default(member: Member) -> AsyncSupervisorClient:
            member_keys: Keys = member.keys if member.keys is not None else keys
            return AsyncSupervisorClient(
                member.endpoint, keys=member_keys, request_timeout=request_timeout, identity=identity
            )

        self.members = list(members)
        self._connect = connect or default
        self._clients: list[AsyncSupervisorClient | Failure] = []  # a member's, or why it has none
        self._open: AsyncExitStack | None = None
        self._owners = Owners()

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            clients: list[AsyncSupervisorClient | Failure] = []
            for member in self.members:
                try:
                    clients.append(await stack.enter_async_context(self._connect(member)))
                except SupervisorError as exc:  # not fatal: this member's failure on each request
                    clients.append(Failure(member, exc))
            self._clients, self._open = clients, stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._open is not None, "the client was not entered"
        self._clients = []
        await self._open.aclose()

    def client(self, member: Member) -> AsyncSupervisorClient:
        """The client of one member (``SupervisorError``: why it has none)."""
        if not self._clients:
            raise SupervisorError("use the client as 'async with AsyncFederatedClient(...) as fed'")
        client = self._clients[self.members.index(member)]
        if isinstance(client, Failure):
            raise client.error.with_traceback(None)
        return client

    # ---------------------------------------------------------- every member

    async def each(self, ask: Ask[_R]) -> list[Outcome[_R]]:
        """``ask`` of every member's client at once, in the members' order; a member's
        ``SupervisorError`` is its ``failure`` (any other exception is raised, in an exception group,
        once the others' are cancelled)."""
        if not self._clients:
            raise SupervisorError("use the client as 'async with AsyncFederatedClient(...) as fed'")
        outcomes: list[Outcome[_R]] = [Outcome(member) for member in self.members]

        async def attempt(index: int, client: AsyncSupervisorClient) -> None:
            member = self.members[index]
            try:
                outcomes[index] = Outcome(member, await ask(client))
            except SupervisorError as exc:
                outcomes[index] = Outcome(member, failure=Failure(member, exc))

        async with anyio.create_task_group() as tasks:
            for index, client in enumerate(self._clients):
                if isinstance(client, Failure):
                    outcomes[index] = Outcome(client.member, failure=client)
                else:
                    tasks.start_soon(attempt, index, client)
        return outcomes

    async def _merged(self, ask: Ask[list[_T]]) -> Listing[_T]:
        return listing_of(self.members, await self.each(ask))

    async def list_tools(self, wait: float = 0.0) -> Listing[ToolInfo]:
        """Every reachable member's tools, merged; ``wait`` as ``AsyncSupervisorClient.list_tools``'s."""
        listing = await self._merged(lambda client: client.list_tools(wait))
        self._owners.learn_tools(listing)
        return listing

    async def status(self) -> Status:
        """Every reachable member's status rows, each with its member."""
        status = status_of(self.members, await self.each(lambda client: client.status()))
        self._owners.learn_status(status)
        return status

    async def list_resources(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> Listing[ResourceInfo]:
        """Resources of ``server`` (from its owner), or of every reachable member's ready servers."""
        if server is not None:
            return await self._one_server(server, lambda c: c.list_resources(server, timeout=timeout))
        return await self._merged(lambda c: c.list_resources(timeout=timeout))

    async def list_resource_templates(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> Listing[ResourceTemplateInfo]:
        """Resource templates of ``server``, or of every reachable member's ready servers."""
        if server is not None:
            return await self._one_server(
                server, lambda c: c.list_resource_templates(server, timeout=timeout)
            )
        return await self._merged(lambda c: c.list_resource_templates(timeout=timeout))

    async def list_prompts(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> Listing[PromptInfo]:
        """Prompts of ``server``, or of every reachable member's ready servers."""
        if server is not None:
            return await self._one_server(server, lambda c: c.list_prompts(server, timeout=timeout))
        return await self._merged(lambda c: c.list_prompts(timeout=timeout))

    async def _one_server(self, server: str, ask: Ask[list[_T]]) -> Listing[_T]:
        member = await self.server_owner(server)
        return Listing(await self._on(member, ask), {server: member})

    async def reload(self) -> list[Outcome[ReloadSummary]]:
        """Every member re-reads its config file; each member's summary, or why it failed."""
        self._owners.forget()
        return await self.each(lambda client: client.reload())

    async def shutdown(self, *, grace: float | None = None) -> list[Outcome[None]]:
        """Ask every member to stop as SIGTERM does; each member's agreement, or why it failed."""
        return await self.each(lambda client: client.shutdown(grace=grace))

    # ------------------------------------------------------ one member's

    async def tool_owner(self, name: str) -> Member:
        """The member whose server has the tool ``name`` (the tools are listed again once when it is
        not among those known)."""
        member = self._owners.tool(name)
        if member is None:
            failures = (await self.list_tools()).failures
            if (member := self._owners.tool(name)) is None:
                raise self._owners.missing("tool", name, failures)
        return member

    async def server_owner(self, server: str) -> Member:
        """The member that owns ``server`` (the status is asked again once when it is not known)."""
        member = self._owners.server(server)
        if member is None:
            failures = (await self.status()).failures
            if (member := self._owners.server(server)) is None:
                raise self._owners.missing("server", server, failures)
        return member

    async def _on(self, member: Member, ask: Ask[_R]) -> _R:
        """``ask`` of ``member``'s client; its not answering says which member it is."""
        try:
            return await ask(self.client(member))
        except SupervisorUnreachableError as exc:
            raise named(member, exc) from exc

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        *,
        raise_on_error: bool = True,
        progress: ProgressCallback | None = None,
    ) -> ToolResult:
        """Call a tool on the member that has it (as ``AsyncSupervisorClient.call_tool``). A member
        that no longer has it (UNKNOWN_TOOL) makes the tools listed again, and the call goes once to
        the member that has it now, if another."""
        member = await self.tool_owner(name)

        def call(client: AsyncSupervisorClient) -> Awaitable[ToolResult]:
            return client.call_tool(
                name, arguments, timeout, raise_on_error=raise_on_error, progress=progress
            )

        try:
            return await self._on(member, call)
        except UnknownToolError:
            self._owners.tools = None
            if await self.tool_owner(name) == member:
                raise
            return await self._on(await self.tool_owner(name), call)

    async def restart(self, server: str) -> Member:
        """Restart ``server`` on its owner; returns the owner."""
        return await self._operate(server, lambda client: client.restart(server))

    async def stop(self, server: str) -> Member:
        """Stop ``server`` on its owner; returns the owner."""
        return await self._operate(server, lambda client: client.stop(server))

    async def start(self, server: str) -> Member:
        """Start ``server`` on its owner; returns the owner."""
        return await self._operate(server, lambda client: client.start(server))

    async def _operate(self, server: str, act: Ask[None]) -> Member:
        member = await self.server_owner(server)
        await self._on(member, act)
        return member

    async def logs(self, server: str, *, after: int = 0, limit: int = 100) -> ServerLog:
        """``server``'s log lines, from its owner (as ``AsyncSupervisorClient.logs``)."""
        member = await self.server_owner(server)
        return await self._on(member, lambda c: c.logs(server, after=after, limit=limit))

    async def read_resource(self, server: str, uri: str, *, timeout: float | None = None) -> ResourceResult:
        """Read ``uri`` from ``server``, on its owner."""
        member = await self.server_owner(server)
        return await self._on(member, lambda c: c.read_resource(server, uri, timeout=timeout))

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        server: str | None = None,
        timeout: float | None = None,
    ) -> PromptResult:
        """A prompt by its prefixed name (from the member whose prompts list it), or by the server's
        own name with ``server`` (from that server's owner)."""
        if server is not None:
            member = await self.server_owner(server)
        else:
            member = prompt_owner(await self.list_prompts(timeout=timeout), name)
        return await self._on(member, lambda c: c.get_prompt(name, arguments, server=server, timeout=timeout))
