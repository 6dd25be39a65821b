"""The router: front requests that go to a worker (tool calls, resources, prompts), sent on their way.

Above: the supervisor's dispatch, which hands it each ``CallTool``, listing, ``ReadResource`` and
``GetPrompt``. Beside it: the registry (prefixed name -> server and tool), the servers
(``supervisor.daemon.servers.pool``: is the server ready, which of its workers takes the request) and the call
table (admission, pending calls, answers). Below: the worker link, through ``send``.

A call's life: look the prefixed name up in the registry (unknown -> ``UNKNOWN_TOOL``, server not
ready -> ``UNAVAILABLE`` at once), admit it (``OVERLOADED`` past a bound), ask the server which
worker takes it (the least busy replica, or the caller's own session: ``client``, else its
connection), give it a call id, send ``Invoke`` to that worker with the budget (or have the server
hold it while the caller's session starts), and remember it in the call table. Resources
and prompts travel the same way as ``Fetch``: a read names its server, a prompt's prefixed name is
routed by the server prefix it carries, and a listing without a server is sent to every ready
worker and gathered into one ``Listing`` (a server that fails is named in it, not fatal to it).

While tracing (``supervisor.shared.tracing.on``), each tool call gets a span ``route NAME`` from its arrival
here: ended here when the call is answered at once (refused), else carried by its pending entry to
the call table, which ends it with the terminal reply; its context goes to the worker in ``Invoke``.

A caller's ``Cancel`` of its own request in flight is answered by the call table (``CANCELLED``, to
the cancelled request) and passed on to the worker as ``Abort``, which sends the server the MCP
cancellation; the worker's late answer, if any, is dropped as late answers are.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

import msgspec

from supervisor.daemon.call_table import CallTable, peer
from supervisor.daemon.pending import Gather, Pending
from supervisor.daemon.registry import Registry
from supervisor.daemon.servers.keeper import Keeper
from supervisor.daemon.servers.pool import Refusal, Server
from supervisor.daemon.waiting import COMING_BACK, MAX_WAITING, WaitingCall, WaitingRoom
from supervisor.protocol import (
    MAX_IDENTITY,
    Abort,
    Answer,
    CallTool,
    Cancel,
    Complete,
    ErrorCode,
    ErrorReply,
    Fetch,
    FetchMethod,
    FrontReply,
    GetPrompt,
    Invoke,
    Listing,
    ListPrompts,
    ListResources,
    ListResourceTemplates,
    ReadResource,
    encode,
)
from supervisor.shared import tracing
from supervisor.shared.names import server_of
from supervisor.shared.sockets import Unroutable

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["Router"]

log = logging.getLogger("mcp_supervisor")

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


class Router:
    """Sends the requests that go to workers, each answered exactly once (here, or by the call table)."""

    def __init__(
        self,
        *,
        registry: Registry,
        servers: Mapping[str, Server],
        calls: CallTable,
        send: Callable[[bytes, bytes], None],
        reply: Callable[[bytes, FrontReply], None],
        draining: Callable[[], bool],
        clock: Callable[[], float],
        deadline_added: Callable[[float], None],
    ) -> None:
        """``send(identity, payload)`` to a worker raises ``Unroutable`` when it is not connected;
        ``deadline_added`` hears of every call's deadline (the timer's next wake-up may be sooner)."""
        self._registry = registry
        self._servers = servers
        self._calls = calls
        self._send = send
        self._reply = reply
        self._draining = draining
        self._clock = clock
        self._deadline_added = deadline_added
        self._routing: Span | None = None  # while tracing: the span of the call being routed, until sent
        # Tool calls waiting for their server to (re)start, and calls in flight to run once more.
        self._waiting = WaitingRoom(registry, servers, calls, send, self._invoke, clock)

    def call(self, caller: bytes, request: CallTool) -> None:
        if not tracing.on:
            self._call(caller, request)
            return
        self._routing = tracing.route_span(request.name, request.traceparent, request.tracestate)
        try:
            self._call(caller, request)
        finally:
            if self._routing is not None:  # neither sent nor answered: a bug, said by the span too
                self._refused("INTERNAL", "the call was neither sent nor answered")

    def _call(self, caller: bytes, request: CallTool) -> None:
        if self._draining():
            self._error(caller, request.id, "UNAVAILABLE", "the supervisor is shutting down")
            return
        route = self._registry.lookup(request.name)
        server = self._owner_if_not_ready(request.name) if route is None else self._servers[route.server]
        if server is None:
            self._error(caller, request.id, "UNKNOWN_TOOL", f"no tool named {request.name!r}")
            return
        client = self._client(caller, request.id, request.client)
        if client is None or not self._accepting(caller, request.id, request.timeout):
            return
        budget = server.spec.tool_timeout if request.timeout is None else request.timeout
        if route is None or server.state != "ready":
            if server.state in COMING_BACK:
                self._wait(caller, request, server, client, budget)
            else:
                self._error(caller, request.id, "UNAVAILABLE", server.why_unavailable())
            return
        admitted = self._admit(caller, request, server, client, budget)
        if admitted is None:
            return
        pending, waiting = admitted
        pending.tool = route.tool
        if route.repeatable and server.spec.retry_idempotent:
            pending.retry = waiting  # its worker's death sends it to the new one (``requeue``)
        payload = self._invoke(waiting, server.name, route.tool, budget, pending)
        self._dispatch(server, client, waiting.call, payload, pending, budget, waiting=waiting)

    def _admit(
        self, caller: bytes, request: CallTool, server: Server, client: str, budget: float
    ) -> tuple[Pending, WaitingCall] | None:
        """A tool call admitted (None, and the caller answered OVERLOADED, past a bound): its pending
        entry (with the span being routed, while tracing) and what it takes to send it later."""
        if not self._calls.admit(caller, request.id, client):
            self._refused("OVERLOADED", "refused by admission")
            return None
        call = self._calls.new_call()
        pending = Pending(
            caller, request.id, b"", server.name, request.name, progress=request.progress, identity=client
        )
        if self._routing is not None:  # traced: the span goes with the call
            pending.span, self._routing = self._routing, None
        return pending, WaitingCall(call, request, client, budget, self._clock())

    def _invoke(self, entry: WaitingCall, server: str, tool: str, budget: float, pending: Pending) -> bytes:
        """The encoded ``Invoke`` of a call to ``server``'s ``tool``; while tracing, its span's
        context goes with it."""
        request = entry.request
        invoke = Invoke(
            call=entry.call,
            tool=tool,
            arguments=request.arguments,
            budget=budget,
            progress=request.progress,
            client=entry.client,
            answers=request.answers,
        )
        if pending.span is not None:
            tracing.routed(pending.span, server, tool)
            invoke.traceparent, invoke.tracestate = tracing.wire_context(pending.span)
        return encode(invoke)

    def _wait(self, caller: bytes, request: CallTool, server: Server, client: str, budget: float) -> None:
        """Hold a call for a server that is (re)starting, within the call's own deadline."""
        if self._waiting.full(server.name):
            why = f"{MAX_WAITING} calls already wait for server {server.name!r} ({server.why_unavailable()})"
            self._error(caller, request.id, "OVERLOADED", why)
            return
        admitted = self._admit(caller, request, server, client, budget)
        if admitted is not None:
            self._hold_waiting(server, *admitted)

    def _hold_waiting(self, server: Server, pending: Pending, waiting: WaitingCall) -> None:
        pending.worker = WaitingRoom.worker_of(server.name)
        self._waiting.add(server.name, waiting)
        self._deadline_added(self._calls.remember(waiting.call, pending, waiting.budget, waiting.arrived))

    def server_changed(self, server: Server) -> None:
        """``server``'s state changed: the calls waiting for it go on, or fail (``WaitingRoom``)."""
        self._waiting.server_changed(server)

    def requeue(self, pending: Pending) -> bool:
        """A call in flight whose worker died: run it once more, if it may be (``WaitingRoom``)."""
        return self._waiting.requeue(pending)

    def list(self, caller: bytes, request: ListResources | ListResourceTemplates | ListPrompts) -> None:
        """One server's listing, or every ready server's, gathered into one ``Listing``. A gathered
        listing asks each server's least busy replica, and on ``scope: client`` servers the caller's
        own session if it has one (none is started for it); a listing naming the server is routed as
        a call is."""
        client = self._client(caller, request.id, request.client)
        if client is None or not self._accepting(caller, request.id, request.timeout):
            return
        method = _LIST_METHODS[type(request)]
        if request.server is not None:
            server = self._ready_server(caller, request.id, request.server)
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
        client = self._client(caller, request.id, request.client)
        if client is not None and self._accepting(caller, request.id, request.timeout):
            server = self._ready_server(caller, request.id, request.server)
            if server is not None:
                uri = request.uri
                self._fetch(caller, request.id, server, client, request.timeout, "resources/read", target=uri)

    def get_prompt(self, caller: bytes, request: GetPrompt) -> None:
        """By the server's own prompt name when the caller names the server, else by the prefixed name."""
        client = self._client(caller, request.id, request.client)
        if client is None or not self._accepting(caller, request.id, request.timeout):
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
        client = self._client(caller, request.id, request.client)
        if client is None or not self._accepting(caller, request.id, request.timeout):
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
                self._error(caller, id, "UNKNOWN_TOOL", unknown)
                return None
        return self._ready_server(caller, id, name)

    def answer(self, caller: bytes, request: Answer) -> None:
        """``caller`` answers its server's request of its own call in flight: to that call's worker.
        Nothing (no reply) for a call not in flight."""
        answered = self._calls.answered(caller, request)
        if answered is None:
            log.debug("client %s: Answer for request %d, not in flight: dropped", peer(caller), request.id)
            return
        with contextlib.suppress(Unroutable):  # that incarnation is gone: the call fails with it
            self._send(answered[0], encode(answered[1]))

    def cancel(self, caller: bytes, request: Cancel) -> None:
        """``caller`` cancels its own request ``request.id``: answered ``CANCELLED`` by the call table,
        and its worker, if still connected, told to ``Abort``. Nothing at all (no reply) for a request
        not in flight or not cancellable."""
        pending = self._calls.cancel(caller, request.id)
        if pending is None:
            log.debug("client %s: Cancel of request %d, not in flight: ignored", peer(caller), request.id)
            return
        log.debug(
            "client %s cancelled request %d (call %d on server %r)",
            peer(caller),
            request.id,
            pending.call,
            pending.server,
        )
        with contextlib.suppress(Unroutable):  # that incarnation is gone, its server too: nobody to tell
            self._send(pending.worker, encode(Abort(call=pending.call)))

    def _client(self, caller: bytes, id: int, client: str) -> str | None:
        """The identity a request is made for: the one it names, else its connection's; None (and the
        caller answered ``BAD_REQUEST``) for one that is too long or not printable."""
        if not client:
            return caller.hex()
        if len(client) <= MAX_IDENTITY and client.isprintable():
            return client
        shown = client[:40] + "..." if len(client) > 40 else client
        why = f"client identity must be 1 to {MAX_IDENTITY} printable characters, not {shown!r}"
        self._error(caller, id, "BAD_REQUEST", why)
        return None

    def _accepting(self, caller: bytes, id: int, timeout: float | None) -> bool:
        """False (and the caller answered) while draining, or for a timeout that is not a positive number."""
        if self._draining():
            self._error(caller, id, "UNAVAILABLE", "the supervisor is shutting down")
            return False
        if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
            self._error(caller, id, "BAD_REQUEST", f"timeout must be a positive number, not {timeout}")
            return False
        return True

    def _ready_server(self, caller: bytes, id: int, name: str) -> Server | None:
        """A ready server, or None with the caller answered (unknown, or not ready)."""
        server = self._servers.get(name)
        if server is None:
            known = ", ".join(self._servers) or "none"
            self._error(caller, id, "UNKNOWN_TOOL", f"no server named {name!r} (servers: {known})")
        elif server.state != "ready":
            self._error(caller, id, "UNAVAILABLE", server.why_unavailable())
        else:
            return server
        return None

    def _owner_if_not_ready(self, name: str) -> Server | None:
        """The not-ready server whose prefix ``name`` carries, for a better error than UNKNOWN_TOOL."""
        found = server_of(name, self._servers)
        server = None if found is None else self._servers[found]
        return server if server is not None and server.state != "ready" else None

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
        self._dispatch(server, client, call, encode(fetch), pending, budget, to)

    def _dispatch(
        self,
        server: Server,
        client: str,
        call: int,
        payload: bytes,
        pending: Pending,
        budget: float,
        to: Keeper | None = None,
        waiting: WaitingCall | None = None,
    ) -> None:
        """Send an admitted request to the worker ``server`` routes it to (``to``, if given), or have the
        server hold it for a session that is starting, and remember it until it is answered. A worker
        found unreachable is avoided, and the next one tried; with none left, a tool call (``waiting``)
        waits for the server when it is coming back, and anything else is ``UNAVAILABLE``."""
        avoid: list[Keeper] = []
        while True:
            target: Keeper | Refusal = server.route(client, avoid) if to is None else to
            if avoid and to is not None:
                target = Refusal("UNAVAILABLE", server.why_unavailable())
            if isinstance(target, Refusal):
                if (
                    waiting is not None
                    and target.code == "UNAVAILABLE"
                    and server.state in (*COMING_BACK, "ready")
                    and not self._waiting.full(server.name)
                ):
                    self._hold_waiting(server, pending, waiting)  # its only worker is ending: it restarts
                else:
                    self._calls.fail(pending, target.code, target.message)
                return
            pending.worker = target.target
            if not target.serving:
                server.hold(target, call, payload)
                break
            try:
                self._send(pending.worker, payload)
                break
            except Unroutable:
                avoid.append(target)
        self._deadline_added(self._calls.remember(call, pending, budget, self._clock()))

    def _error(self, caller: bytes, id: int, code: ErrorCode, message: str) -> None:
        self._refused(code, message)
        self._reply(caller, ErrorReply(id=id, code=code, message=message))

    def _refused(self, code: ErrorCode, message: str) -> None:
        """The call being routed is answered at once: its span, if any, ends with the error."""
        if self._routing is not None:
            tracing.end_route(self._routing, code, message)
            self._routing = None
