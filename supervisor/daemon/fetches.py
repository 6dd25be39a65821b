"""Resources, prompts and completions: the front requests that go to a worker as a ``Fetch``.

Above: the dispatch table (``supervisor.daemon.dispatch``), which hands it each listing,
``ReadResource``, ``GetPrompt`` and ``Complete``. Beside it: the router (``supervisor.daemon.router``),
whose checks and sending (``Routes``) these requests share with tool calls, the servers, and the
call table (admission, gathers, answers). Below: the worker link, through the router's sending.

A read names its server; a prompt's prefixed name, and a completion's ``ref/prompt``, are routed by
the server prefix they carry; a listing without a server is sent to every ready worker and gathered
into one ``Listing`` (a server that fails is named in it, not fatal to it). Each is answered as calls
are: by the call table, with the worker's answer, or its deadline or its worker's end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final, Protocol

import msgspec

from supervisor.daemon.call_table import CallTable
from supervisor.daemon.pending import Gather, Pending
from supervisor.daemon.servers.keeper import Keeper
from supervisor.daemon.servers.pool import Server
from supervisor.protocol import (
    Complete,
    ErrorCode,
    Fetch,
    FetchMethod,
    FrontReply,
    GetPrompt,
    Listing,
    ListPrompts,
    ListResources,
    ListResourceTemplates,
    ReadResource,
    encode,
)
from supervisor.shared.names import server_of

__all__ = ["Fetches", "Routes"]


class Routes(Protocol):
    """What fetches share with tool calls: the router's checks, and its sending
    (``supervisor.daemon.router.Router`` implements it)."""

    def client_of(
        self, caller: bytes, id: int, client: str, principal: str = "", session: str = ""
    ) -> str | None: ...

    def accepting(self, caller: bytes, id: int, timeout: float | None) -> bool: ...

    def ready_server(self, caller: bytes, id: int, name: str) -> Server | None: ...

    def error(self, caller: bytes, id: int, code: ErrorCode, message: str) -> None: ...

    def dispatch(
        self,
        server: Server,
        client: str,
        call: int,
        payload: bytes,
        pending: Pending,
        budget: float,
        to: Keeper | None = None,
    ) -> None: ...


_LIST_METHODS: Final[dict[type, FetchMethod]] = {
    ListResources: "resources/list",
    ListResourceTemplates: "resources/templates/list",
    ListPrompts: "prompts/list",
}


class _Named(msgspec.Struct):
    type: str = ""
    name: str = ""


def _prompt_named(ref: msgspec.Raw) -> str | None:
    """The name of a ``ref/prompt`` (None for anything else, or a ref that does not decode)."""
    try:
        named = msgspec.msgpack.decode(ref, type=_Named)
    except msgspec.DecodeError:
        return None
    return named.name if named.type == "ref/prompt" and named.name else None


class Fetches:
    """Sends resources, prompts and completions requests, each answered exactly once."""

    def __init__(
        self,
        *,
        servers: Mapping[str, Server],
        calls: CallTable,
        reply: Callable[[bytes, FrontReply], None],
        routes: Routes,
    ) -> None:
        self._servers = servers
        self._calls = calls
        self._reply = reply
        self._routes = routes

    def list(self, caller: bytes, request: ListResources | ListResourceTemplates | ListPrompts) -> None:
        """One server's listing, or every ready server's, gathered into one ``Listing``. A gathered
        listing asks each server's least busy replica, and on ``scope: client`` servers the caller's
        own session if it has one (none is started for it); a listing naming the server is routed as
        a call is."""
        client = self._routes.client_of(caller, request.id, request.client)
        if client is None or not self._routes.accepting(caller, request.id, request.timeout):
            return
        method = _LIST_METHODS[type(request)]
        if request.server is not None:
            server = self._routes.ready_server(caller, request.id, request.server)
            if server is not None:
                self._fetch(caller, request.id, server, client, request.timeout, method, named=True)
            return
        targets = [
            (server, keeper)
            for server in self._servers.values()
            if server.state == "ready" and (keeper := server.listing_target(client)) is not None
        ]
        if not targets:
            self._reply(caller, Listing(id=request.id))
            return
        if not self._calls.admit(caller, request.id, client):
            return
        gather = Gather(caller, request.id, named=False, waiting=len(targets), identity=client)
        for server, keeper in targets:
            self._fetch(caller, request.id, server, client, request.timeout, method, gather=gather, to=keeper)

    def read(self, caller: bytes, request: ReadResource) -> None:
        client = self._routes.client_of(
            caller, request.id, request.client, request.principal, request.session
        )
        if client is not None and self._routes.accepting(caller, request.id, request.timeout):
            server = self._routes.ready_server(caller, request.id, request.server)
            if server is not None:
                uri = request.uri
                self._fetch(caller, request.id, server, client, request.timeout, "resources/read", target=uri)

    def get_prompt(self, caller: bytes, request: GetPrompt) -> None:
        """By the server's own prompt name when the caller names the server, else by the prefixed name."""
        client = self._routes.client_of(
            caller, request.id, request.client, request.principal, request.session
        )
        if client is None or not self._routes.accepting(caller, request.id, request.timeout):
            return
        unknown = f"no prompt named {request.name!r} (prompts are named mcp_{{server}}_{{prompt}})"
        server = self._prompt_server(caller, request.id, request.server, request.name, unknown)
        if server is not None:
            self._fetch(
                caller,
                request.id,
                server,
                client,
                request.timeout,
                "prompts/get",
                target=request.name,
                prefixed=request.server is None,
                arguments=request.arguments,
            )

    def complete(self, caller: bytes, request: Complete) -> None:
        """To the server named, else to the one whose prefix a ``ref/prompt``'s name carries."""
        client = self._routes.client_of(caller, request.id, request.client)
        if client is None or not self._routes.accepting(caller, request.id, request.timeout):
            return
        unknown = "completion/complete needs the server, or a ref/prompt by its prefixed name"
        prompt = _prompt_named(request.ref)
        server = self._prompt_server(
            caller, request.id, request.server, prompt, f"{unknown} (mcp_{{server}}_{{prompt}})"
        )
        if server is not None:
            params = {"ref": request.ref, "argument": request.argument, "context": request.context}
            self._fetch(
                caller,
                request.id,
                server,
                client,
                request.timeout,
                "completion/complete",
                prefixed=request.server is None,
                arguments=msgspec.Raw(encode(params)),
            )

    def _prompt_server(
        self, caller: bytes, id: int, named: str | None, prompt: str | None, unknown: str
    ) -> Server | None:
        """The ready server a request names, else the one whose prefix the ``prompt`` name carries;
        None, and the caller answered (``unknown`` when no server is found), when there is none."""
        name = named
        if name is None:
            name = None if prompt is None else server_of(prompt, self._servers)
            if name is None:
                self._routes.error(caller, id, "UNKNOWN_TOOL", unknown)
                return None
        return self._routes.ready_server(caller, id, name)

    def _fetch(
        self,
        caller: bytes,
        id: int,
        server: Server,
        client: str,
        timeout: float | None,
        method: FetchMethod,
        *,
        target: str = "",
        prefixed: bool = False,
        arguments: msgspec.Raw | None = None,
        gather: Gather | None = None,
        to: Keeper | None = None,
        named: bool = False,
    ) -> None:
        """Send one ``Fetch`` to a worker of ``server`` (``to``, or the one it routes ``client`` to);
        answered as calls are. One that is not part of a gathered listing is admitted here (a gather
        was, as a whole); ``named``: a listing of the one server the caller named."""
        if gather is None and not self._calls.admit(caller, id, client):
            return
        if named:
            gather = Gather(caller, id, named=True, waiting=1, identity=client)
        budget = server.spec.tool_timeout if timeout is None else timeout
        call = self._calls.new_call()
        what = f"{method} {target}".rstrip()
        pending = Pending(caller, id, b"", server.name, method, what, gather, identity=client)
        fetch = Fetch(call=call, method=method, budget=budget, target=target, prefixed=prefixed)
        fetch.client = client
        if arguments is not None:
            fetch.arguments = arguments
        self._routes.dispatch(server, client, call, encode(fetch), pending, budget, to)
