"""The router: tool calls sent on their way to a worker, and the checks and sending every request
that goes to a worker shares.

Above: the dispatch table (``supervisor.daemon.dispatch``), which hands it each ``CallTool``, and a
caller's ``Answer`` and ``Cancel``; the fetches (``supervisor.daemon.fetches``: resources, prompts,
completions), which use its checks and sending (``Routes``). Beside it: the registry (prefixed name
-> server and tool), the servers (``supervisor.daemon.servers.pool``: is the server ready, which of
its workers takes the request), the waiting room (``supervisor.daemon.waiting``) and the call table
(admission, pending calls, answers). Below: the worker link, through ``send``.

A call's life: look the prefixed name up in the registry (unknown -> ``UNKNOWN_TOOL``, server not
ready -> ``UNAVAILABLE`` at once), admit it (``OVERLOADED`` past a bound), ask the server which
worker takes it (the least busy replica, or the caller's own session: ``client``, else its
connection), give it a call id, send ``Invoke`` to that worker with the budget (or have the server
hold it while the caller's session starts), and remember it in the call table.

While tracing (``supervisor.shared.tracing.on``), each tool call whose trace is sampled gets a span
``route NAME`` from its arrival here: ended here when the call is answered at once (refused), else
carried by its pending entry to the call table, which ends it with the terminal reply. Sampled or not,
the call's trace context goes to the worker in ``Invoke`` (the span's, or the caller's as it came).

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

from supervisor.daemon.call_table import CallTable, peer
from supervisor.daemon.pending import Pending
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
    ErrorCode,
    ErrorReply,
    FrontReply,
    Invoke,
    encode,
)
from supervisor.shared import tracing
from supervisor.shared.names import server_of
from supervisor.shared.sockets import Unroutable

if TYPE_CHECKING:
    from supervisor.shared.spans import Span

__all__ = ["Router"]

log = logging.getLogger("mcp_supervisor")

_NO_CONTEXT: Final = ("", "")  # (traceparent, tracestate) of a call not traced


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
        self._context = _NO_CONTEXT  # while tracing: the trace context of the call being routed
        # Tool calls waiting for their server to (re)start, and calls in flight to run once more.
        self._waiting = WaitingRoom(registry, servers, calls, send, self._invoke, clock)

    def call(self, caller: bytes, request: CallTool) -> None:
        if not tracing.on:
            self._call(caller, request)
            return
        span, traceparent, tracestate = tracing.route(request.name, request.traceparent, request.tracestate)
        self._routing, self._context = span, (traceparent, tracestate)
        try:
            self._call(caller, request)
        finally:
            self._context = _NO_CONTEXT
            if self._routing is not None:  # neither sent nor answered: a bug, said by the span too
                self._refused("INTERNAL", "the call was neither sent nor answered")

    def _call(self, caller: bytes, request: CallTool) -> None:
        if self._draining():
            self.error(caller, request.id, "UNAVAILABLE", "the supervisor is shutting down")
            return
        route = self._registry.lookup(request.name)
        server = self._owner_if_not_ready(request.name) if route is None else self._servers[route.server]
        if server is None:
            self.error(caller, request.id, "UNKNOWN_TOOL", f"no tool named {request.name!r}")
            return
        client = self.client_of(caller, request.id, request.client, request.principal, request.session)
        if client is None or not self.accepting(caller, request.id, request.timeout):
            return
        budget = server.spec.tool_timeout if request.timeout is None else request.timeout
        if route is None or server.state != "ready":
            if server.state in COMING_BACK:
                self._wait(caller, request, server, client, budget)
            else:
                self.error(caller, request.id, "UNAVAILABLE", server.why_unavailable())
            return
        admitted = self._admit(caller, request, server, client, budget)
        if admitted is None:
            return
        pending, waiting = admitted
        pending.tool = route.tool
        pending.again = waiting  # should its worker never send it (its server gone): ``not_run``
        if route.repeatable and server.spec.retry_idempotent:
            pending.retry = waiting  # its worker's death sends it to the new one (``requeue``)
        payload = self._invoke(waiting, server.name, route.tool, budget, pending)
        self.dispatch(server, client, waiting.call, payload, pending, budget, waiting=waiting)

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
        pending.traceparent, pending.tracestate = self._context
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
            traceparent=pending.traceparent,
            tracestate=pending.tracestate,
        )
        if pending.span is not None:
            tracing.routed(pending.span, server, tool)
        return encode(invoke)

    def _wait(self, caller: bytes, request: CallTool, server: Server, client: str, budget: float) -> None:
        """Hold a call for a server that is (re)starting, within the call's own deadline."""
        if self._waiting.full(server.name):
            why = f"{MAX_WAITING} calls already wait for server {server.name!r} ({server.why_unavailable()})"
            self.error(caller, request.id, "OVERLOADED", why)
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

    def client_of(
        self, caller: bytes, id: int, client: str, principal: str = "", session: str = ""
    ) -> str | None:
        """The identity a request is made for: the one it names, else its connection's; None (and the
        caller answered ``BAD_REQUEST``) for one that is too long or not printable, or such a
        ``principal`` or ``session`` (which only the audit trail reads)."""
        for what, name in (("client identity", client), ("principal", principal), ("session", session)):
            if name and not (len(name) <= MAX_IDENTITY and name.isprintable()):
                shown = name[:40] + "..." if len(name) > 40 else name
                why = f"{what} must be 1 to {MAX_IDENTITY} printable characters, not {shown!r}"
                self.error(caller, id, "BAD_REQUEST", why)
                return None
        return client or caller.hex()

    def accepting(self, caller: bytes, id: int, timeout: float | None) -> bool:
        """False (and the caller answered) while draining, or for a timeout that is not a positive number."""
        if self._draining():
            self.error(caller, id, "UNAVAILABLE", "the supervisor is shutting down")
            return False
        if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
            self.error(caller, id, "BAD_REQUEST", f"timeout must be a positive number, not {timeout}")
            return False
        return True

    def ready_server(self, caller: bytes, id: int, name: str) -> Server | None:
        """A ready server, or None with the caller answered (unknown, or not ready)."""
        server = self._servers.get(name)
        if server is None:
            known = ", ".join(self._servers) or "none"
            self.error(caller, id, "UNKNOWN_TOOL", f"no server named {name!r} (servers: {known})")
        elif server.state != "ready":
            self.error(caller, id, "UNAVAILABLE", server.why_unavailable())
        else:
            return server
        return None

    def _owner_if_not_ready(self, name: str) -> Server | None:
        """The not-ready server whose prefix ``name`` carries, for a better error than UNKNOWN_TOOL."""
        found = server_of(name, self._servers)
        server = None if found is None else self._servers[found]
        return server if server is not None and server.state != "ready" else None

    def dispatch(
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

    def error(self, caller: bytes, id: int, code: ErrorCode, message: str) -> None:
        self._refused(code, message)
        self._reply(caller, ErrorReply(id=id, code=code, message=message))

    def _refused(self, code: ErrorCode, message: str) -> None:
        """The call being routed is answered at once: its span, if any, ends with the error."""
        if self._routing is not None:
            tracing.end_route(self._routing, code, message)
            self._routing = None
