"""The router: front requests that go to a worker (tool calls, resources, prompts), sent on their way.

Above: the supervisor's dispatch, which hands it each ``CallTool``, listing, ``ReadResource`` and
``GetPrompt``. Beside it: the registry (prefixed name -> server and tool), the keepers (is the
server ready, which incarnation is live) and the call table (admission, pending calls, answers).
Below: the worker link, through ``send``.

A call's life: look the prefixed name up in the registry (unknown -> ``UNKNOWN_TOOL``, server not
ready -> ``UNAVAILABLE`` at once), admit it (``OVERLOADED`` past a bound), give it a call id, send
``Invoke`` to the server's live worker with the budget, and remember it in the call table. Resources
and prompts travel the same way as ``Fetch``: a read names its server, a prompt's prefixed name is
routed by the server prefix it carries, and a listing without a server is sent to every ready
worker and gathered into one ``Listing`` (a server that fails is named in it, not fatal to it).

A caller's ``Cancel`` of its own request in flight is answered by the call table (``CANCELLED``, to
the cancelled request) and passed on to the worker as ``Abort``, which sends the server the MCP
cancellation; the worker's late answer, if any, is dropped as late answers are.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Mapping
from typing import Final

import msgspec

from supervisor._zmq import Unroutable
from supervisor.calls import CallTable, Gather, Pending, peer
from supervisor.keeper import Keeper
from supervisor.protocol import (
    Abort,
    CallTool,
    Cancel,
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
from supervisor.registry import Registry, server_of

__all__ = ["Router"]

log = logging.getLogger("mcp_supervisor")

_LIST_METHODS: Final[dict[type, FetchMethod]] = {
    ListResources: "resources/list",
    ListResourceTemplates: "resources/templates/list",
    ListPrompts: "prompts/list",
}


class Router:
    """Sends the requests that go to workers, each answered exactly once (here, or by the call table)."""

    def __init__(
        self,
        *,
        registry: Registry,
        keepers: Mapping[str, Keeper],
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
        self._keepers = keepers
        self._calls = calls
        self._send = send
        self._reply = reply
        self._draining = draining
        self._clock = clock
        self._deadline_added = deadline_added

    def call(self, caller: bytes, request: CallTool) -> None:
        if self._draining():
            self._error(caller, request.id, "UNAVAILABLE", "the supervisor is shutting down")
            return
        route = self._registry.lookup(request.name)
        if route is None:
            keeper = self._owner_if_not_ready(request.name)
            if keeper is None:
                self._error(caller, request.id, "UNKNOWN_TOOL", f"no tool named {request.name!r}")
            else:
                self._unavailable(caller, request.id, keeper)
            return
        keeper = self._keepers[route.server]
        if keeper.state != "ready" or keeper.identity is None:
            self._unavailable(caller, request.id, keeper)
            return
        if not self._accepting(caller, request.id, request.timeout):
            return
        budget = keeper.spec.tool_timeout if request.timeout is None else request.timeout
        if not self._calls.admit(caller, request.id):
            return
        call = self._calls.new_call()
        invoke = Invoke(
            call=call, tool=route.tool, arguments=request.arguments, budget=budget, progress=request.progress
        )
        pending = Pending(
            caller, request.id, keeper.identity, keeper.name, route.tool, progress=request.progress
        )
        self._dispatch(call, encode(invoke), pending, budget, self._why_unavailable(keeper))

    def list(self, caller: bytes, request: ListResources | ListResourceTemplates | ListPrompts) -> None:
        """One server's listing, or every ready server's, gathered into one ``Listing``."""
        if not self._accepting(caller, request.id, request.timeout):
            return
        if request.server is None:
            keepers = [k for k in self._keepers.values() if k.state == "ready" and k.identity is not None]
        else:
            keeper = self._ready_keeper(caller, request.id, request.server)
            if keeper is None:
                return
            keepers = [keeper]
        if not keepers:
            self._reply(caller, Listing(id=request.id))
            return
        if not self._calls.admit(caller, request.id):
            return
        gather = Gather(caller, request.id, named=request.server is not None, waiting=len(keepers))
        method = _LIST_METHODS[type(request)]
        for keeper in keepers:
            self._fetch(caller, request.id, keeper, request.timeout, method, gather=gather)

    def read(self, caller: bytes, request: ReadResource) -> None:
        if self._accepting(caller, request.id, request.timeout):
            keeper = self._ready_keeper(caller, request.id, request.server)
            if keeper is not None:
                self._fetch(caller, request.id, keeper, request.timeout, "resources/read", target=request.uri)

    def get_prompt(self, caller: bytes, request: GetPrompt) -> None:
        """By the server's own prompt name when the caller names the server, else by the prefixed name."""
        if not self._accepting(caller, request.id, request.timeout):
            return
        server = request.server
        if server is None:
            server = server_of(request.name, self._keepers)
            if server is None:
                message = f"no prompt named {request.name!r} (prompts are named mcp_{{server}}_{{prompt}})"
                self._error(caller, request.id, "UNKNOWN_TOOL", message)
                return
        keeper = self._ready_keeper(caller, request.id, server)
        if keeper is not None:
            self._fetch(
                caller,
                request.id,
                keeper,
                request.timeout,
                "prompts/get",
                target=request.name,
                prefixed=request.server is None,
                arguments=request.arguments,
            )

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

    def _accepting(self, caller: bytes, id: int, timeout: float | None) -> bool:
        """False (and the caller answered) while draining, or for a timeout that is not a positive number."""
        if self._draining():
            self._error(caller, id, "UNAVAILABLE", "the supervisor is shutting down")
            return False
        if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
            self._error(caller, id, "BAD_REQUEST", f"timeout must be a positive number, not {timeout}")
            return False
        return True

    def _ready_keeper(self, caller: bytes, id: int, server: str) -> Keeper | None:
        """The keeper of a ready server, or None with the caller answered (unknown, or not ready)."""
        keeper = self._keepers.get(server)
        if keeper is None:
            known = ", ".join(self._keepers) or "none"
            self._error(caller, id, "UNKNOWN_TOOL", f"no server named {server!r} (servers: {known})")
        elif keeper.state != "ready" or keeper.identity is None:
            self._unavailable(caller, id, keeper)
        else:
            return keeper
        return None

    def _owner_if_not_ready(self, name: str) -> Keeper | None:
        """The not-ready server whose prefix ``name`` carries, for a better error than UNKNOWN_TOOL."""
        server = server_of(name, self._keepers)
        keeper = None if server is None else self._keepers[server]
        return keeper if keeper is not None and keeper.state != "ready" else None

    def _fetch(
        self,
        caller: bytes,
        id: int,
        keeper: Keeper,
        timeout: float | None,
        method: FetchMethod,
        *,
        target: str = "",
        prefixed: bool = False,
        arguments: msgspec.Raw | None = None,
        gather: Gather | None = None,
    ) -> None:
        """Send one ``Fetch`` to a ready keeper's worker; answered as calls are. One that is not part of
        a gathered listing is admitted here (a gather was, as a whole)."""
        assert keeper.identity is not None
        if gather is None and not self._calls.admit(caller, id):
            return
        budget = keeper.spec.tool_timeout if timeout is None else timeout
        call = self._calls.new_call()
        what = f"{method} {target}".rstrip()
        pending = Pending(caller, id, keeper.identity, keeper.name, method, what, gather)
        fetch = Fetch(call=call, method=method, budget=budget, target=target, prefixed=prefixed)
        if arguments is not None:
            fetch.arguments = arguments
        self._dispatch(call, encode(fetch), pending, budget, f"server {keeper.name!r} is {keeper.state}")

    def _dispatch(self, call: int, payload: bytes, pending: Pending, budget: float, unavailable: str) -> None:
        """Send an admitted request to its worker and remember it until it is answered; ``UNAVAILABLE``
        with ``unavailable`` when that worker is not connected."""
        try:
            self._send(pending.worker, payload)
        except Unroutable:
            self._calls.fail(pending, "UNAVAILABLE", unavailable)
            return
        self._deadline_added(self._calls.remember(call, pending, budget, self._clock()))

    def _unavailable(self, caller: bytes, id: int, keeper: Keeper) -> None:
        self._error(caller, id, "UNAVAILABLE", self._why_unavailable(keeper))

    @staticmethod
    def _why_unavailable(keeper: Keeper) -> str:
        if keeper.state == "needs-login":  # its last error says why, and what to run
            return f"server {keeper.name!r} {keeper.last_error or 'needs login'}"
        why = f"server {keeper.name!r} is {keeper.state}"
        if keeper.last_error:
            why += f" (last error: {keeper.last_error})"
        return why

    def _error(self, caller: bytes, id: int, code: ErrorCode, message: str) -> None:
        self._reply(caller, ErrorReply(id=id, code=code, message=message))
