"""A blocking client of several supervisors seen as one registry: ``FederatedClient``.

Above: the CLI's commands when they are given several supervisors (``--endpoint`` repeated or a comma
list, ``--federation FILE``, ``$MCP_SUPERVISOR_ENDPOINT``), and any program that federates. Below: one
``SupervisorClient`` per member (``supervisor.client.blocking``) and the members and merging rules of
``supervisor.shared.federation``.

A request for the whole registry (``list_tools``, ``status``, ``reload``, ``shutdown``, ...) goes to
every member at once (a thread each) and waits for them all: a member that does not answer (or fails
otherwise) contributes nothing and is reported as a ``Failure`` naming it, its endpoint and why; the
others' answers stand. Server names are unique across the federation: a server listed by several
members belongs to the first of them in the members' order, the others' copies are left out and
each clash is reported (``clashes``, each a ``Clash`` that says it in words).

A request about one server or tool goes to the member that owns it. Owners are learnt from the merged
tool list (tools) and from the merged status (servers), kept, and learnt again once when a name is
not among them: a server added since is found, and a name no reachable member has is an
``UnknownToolError`` naming the servers known, or, when some member did not answer, a
``SupervisorUnreachableError`` naming those members (the name may be theirs).

Example::

    with FederatedClient(members(["tcp://a:5555", "tcp://b:5555"])) as fed:
        listing = fed.list_tools()
        for warning in listing.clashes:
            print(warning)
        print(fed.call_tool("mcp_time_get_current_time", {"timezone": "UTC"}).text)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self, TypeVar

from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import SupervisorError, SupervisorUnreachableError, UnknownToolError
from supervisor.client.exchanges import REQUEST_TIMEOUT
from supervisor.client.federated_common import (
    Clash,
    Failure,
    Listing,
    Outcome,
    Owners,
    Row,
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

# The result types are federated_common's (shared with the async client), exported here too.
__all__ = [
    "Clash",
    "Failure",
    "FederatedClient",
    "Listing",
    "Outcome",
    "Row",
    "Status",
]

_R = TypeVar("_R")
_T = TypeVar("_T", bound=Owned)

Connect = Callable[[Member], SupervisorClient]


class FederatedClient:
    """Blocking client of several supervisors (``members``, in order: the first owns a clashing
    server). ``keys``: the key directory of the members that name none of their own; ``identity``:
    this client on every member's ``scope: client`` servers. ``connect`` makes a member's client
    (default: a ``SupervisorClient``). Use it as a context manager; ``close`` closes every member's."""

    def __init__(
        self,
        members: Sequence[Member],
        *,
        keys: Keys = None,
        request_timeout: float = REQUEST_TIMEOUT,
        identity: str | None = None,
        connect: Connect | None = None,
    ) -> None:
        if not members:
            raise ValueError("a federation needs at least one supervisor")

        def default(member: Member) -> SupervisorClient:
            member_keys: Keys = member.keys if member.keys is not None else keys
            return SupervisorClient(
                member.endpoint, keys=member_keys, request_timeout=request_timeout, identity=identity
            )

        self.members = list(members)
        self._clients: list[SupervisorClient] = []
        try:
            for member in self.members:
                self._clients.append((connect or default)(member))
        except BaseException:
            self.close()
            raise
        self._owners = Owners()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for client in self._clients:
            client.close()

    def client(self, member: Member) -> SupervisorClient:
        """The client of one member."""
        return self._clients[self.members.index(member)]

    # ---------------------------------------------------------- every member

    def each(self, ask: Callable[[SupervisorClient], _R]) -> list[Outcome[_R]]:
        """``ask`` of every member's client at once, in the members' order; a member's
        ``SupervisorError`` is its ``failure`` (any other exception is raised)."""
        if len(self._clients) == 1:
            return [self._attempt(self.members[0], self._clients[0], ask)]
        pool = ThreadPoolExecutor(max_workers=len(self._clients), thread_name_prefix="federation")
        try:
            futures = [
                pool.submit(self._attempt, member, client, ask)
                for member, client in zip(self.members, self._clients, strict=True)
            ]
            return [future.result() for future in futures]
        finally:  # Ctrl-C: do not wait here; close() ends the requests still waiting
            pool.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _attempt(
        member: Member, client: SupervisorClient, ask: Callable[[SupervisorClient], _R]
    ) -> Outcome[_R]:
        try:
            return Outcome(member, ask(client))
        except SupervisorError as exc:
            return Outcome(member, failure=Failure(member, exc))

    def _merged(self, outcomes: list[Outcome[list[_T]]]) -> Listing[_T]:
        return listing_of(self.members, outcomes)

    def list_tools(self, wait: float = 0.0) -> Listing[ToolInfo]:
        """Every reachable member's tools, merged; ``wait`` as ``SupervisorClient.list_tools``'s."""
        listing = self._merged(self.each(lambda client: client.list_tools(wait)))
        self._owners.learn_tools(listing)
        return listing

    def status(self) -> Status:
        """Every reachable member's status rows, each with its member."""
        status = status_of(self.members, self.each(lambda client: client.status()))
        self._owners.learn_status(status)
        return status

    def list_resources(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> Listing[ResourceInfo]:
        """Resources of ``server`` (from its owner), or of every reachable member's ready servers."""
        if server is not None:
            return self._one_server(server, lambda c: c.list_resources(server, timeout=timeout))
        return self._merged(self.each(lambda c: c.list_resources(timeout=timeout)))

    def list_resource_templates(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> Listing[ResourceTemplateInfo]:
        """Resource templates of ``server``, or of every reachable member's ready servers."""
        if server is not None:
            return self._one_server(server, lambda c: c.list_resource_templates(server, timeout=timeout))
        return self._merged(self.each(lambda c: c.list_resource_templates(timeout=timeout)))

    def list_prompts(self, server: str | None = None, *, timeout: float | None = None) -> Listing[PromptInfo]:
        """Prompts of ``server``, or of every reachable member's ready servers."""
        if server is not None:
            return self._one_server(server, lambda c: c.list_prompts(server, timeout=timeout))
        return self._merged(self.each(lambda c: c.list_prompts(timeout=timeout)))

    def _one_server(self, server: str, ask: Callable[[SupervisorClient], list[_T]]) -> Listing[_T]:
        member = self.server_owner(server)
        return Listing(ask(self.client(member)), {server: member})

    def reload(self) -> list[Outcome[ReloadSummary]]:
        """Every member re-reads its config file; each member's summary, or why it failed."""
        self._owners.forget()
        return self.each(lambda client: client.reload())

    def shutdown(self, *, grace: float | None = None) -> list[Outcome[None]]:
        """Ask every member to stop as SIGTERM does; each member's agreement, or why it failed."""
        return self.each(lambda client: client.shutdown(grace=grace))

    # ------------------------------------------------------ one member's

    def tool_owner(self, name: str) -> Member:
        """The member whose server has the tool ``name`` (the tools are listed again once when it is
        not among those known)."""
        member = self._owners.tool(name)
        if member is None:
            failures = self.list_tools().failures
            if (member := self._owners.tool(name)) is None:
                raise self._owners.missing("tool", name, failures)
        return member

    def server_owner(self, server: str) -> Member:
        """The member that owns ``server`` (the status is asked again once when it is not known)."""
        member = self._owners.server(server)
        if member is None:
            failures = self.status().failures
            if (member := self._owners.server(server)) is None:
                raise self._owners.missing("server", server, failures)
        return member

    def _on(self, member: Member, ask: Callable[[SupervisorClient], _R]) -> _R:
        """``ask`` of ``member``'s client; its not answering says which member it is."""
        try:
            return ask(self.client(member))
        except SupervisorUnreachableError as exc:
            raise named(member, exc) from exc

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        *,
        raise_on_error: bool = True,
        progress: ProgressCallback | None = None,
    ) -> ToolResult:
        """Call a tool on the member that has it (as ``SupervisorClient.call_tool``). A member that no
        longer has it (UNKNOWN_TOOL) makes the tools listed again, and the call goes once to the
        member that has it now, if another."""
        member = self.tool_owner(name)

        def call(client: SupervisorClient) -> ToolResult:
            return client.call_tool(
                name, arguments, timeout, raise_on_error=raise_on_error, progress=progress
            )

        try:
            return self._on(member, call)
        except UnknownToolError:
            self._owners.tools = None
            if self.tool_owner(name) == member:
                raise
            return self._on(self.tool_owner(name), call)

    def restart(self, server: str) -> Member:
        """Restart ``server`` on its owner; returns the owner."""
        return self._operate(server, lambda client: client.restart(server))

    def stop(self, server: str) -> Member:
        """Stop ``server`` on its owner; returns the owner."""
        return self._operate(server, lambda client: client.stop(server))

    def start(self, server: str) -> Member:
        """Start ``server`` on its owner; returns the owner."""
        return self._operate(server, lambda client: client.start(server))

    def _operate(self, server: str, act: Callable[[SupervisorClient], None]) -> Member:
        member = self.server_owner(server)
        self._on(member, act)
        return member

    def logs(self, server: str, *, after: int = 0, limit: int = 100) -> ServerLog:
        """``server``'s log lines, from its owner (as ``SupervisorClient.logs``)."""
        return self._on(self.server_owner(server), lambda c: c.logs(server, after=after, limit=limit))

    def read_resource(self, server: str, uri: str, *, timeout: float | None = None) -> ResourceResult:
        """Read ``uri`` from ``server``, on its owner."""
        return self._on(self.server_owner(server), lambda c: c.read_resource(server, uri, timeout=timeout))

    def get_prompt(
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
            member = self.server_owner(server)
        else:
            member = prompt_owner(self.list_prompts(timeout=timeout), name)
        return self._on(member, lambda c: c.get_prompt(name, arguments, server=server, timeout=timeout))
