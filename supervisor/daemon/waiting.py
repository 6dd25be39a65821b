"""Tool calls that wait for their server to come back, instead of failing while it (re)starts.

Above: the router, which puts a call here when its server is ``starting`` or ``restarting`` (or is
still ``ready`` while its only worker is ending), and tells it of every server's state change
(``server_changed``): ``ready`` sends the calls on their way (with what is left of their budgets),
``failed``, ``needs-login`` and ``stopped`` fail them at once. Beside it: the call table, which has
every waiting call as a pending entry of a worker that does not exist (``worker_of``), so a waiting
call's deadline, its caller's ``Cancel`` and a client that does not read are handled there as for
any call; a call that leaves the table meanwhile is simply skipped when its room is emptied. The call
table also hands back the calls in flight on a worker that died which may run once more
(``requeue``: ``retryIdempotent`` servers, tools annotated ``readOnlyHint`` or ``idempotentHint``):
they wait here like new calls. Below: the registry (a tool's name on the server that came back),
the servers (which worker takes a call), and the router's ``send`` and ``invoke``, with which a call
goes to its worker.

A room holds at most ``MAX_WAITING`` calls: past it, ``OVERLOADED``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from supervisor.daemon.call_table import CallTable
from supervisor.daemon.pending import Pending
from supervisor.daemon.registry import Registry
from supervisor.daemon.servers.pool import Refusal, Server
from supervisor.protocol import CallTool
from supervisor.shared.sockets import Unroutable

__all__ = ["COMING_BACK", "MAX_WAITING", "WaitingCall", "WaitingRoom"]

log = logging.getLogger("mcp_supervisor")

MAX_WAITING: Final = 1000  # calls held for one server while it (re)starts; past it, OVERLOADED
COMING_BACK: Final = ("starting", "restarting")  # a tool call for a server in these states waits for it


@dataclass(frozen=True, slots=True)
class WaitingCall:
    call: int  # its call id in the call table
    request: CallTool
    client: str  # the identity it is made for
    budget: float  # seconds it was given, from ``arrived``
    arrived: float  # the supervisor's clock when it arrived


class WaitingRoom:
    """Calls waiting for their server, by server."""

    def __init__(
        self,
        registry: Registry,
        servers: Mapping[str, Server],
        calls: CallTable,
        send: Callable[[bytes, bytes], None],
        invoke: Callable[[WaitingCall, str, str, float, Pending], bytes],
        clock: Callable[[], float],
    ) -> None:
        """``send(worker, payload)`` raises ``Unroutable`` when that worker is not connected (the
        router's own ``send``); ``invoke(call, server, tool, budget, pending)``: the encoded ``Invoke``
        of a waiting call."""
        self._registry = registry
        self._servers = servers
        self._calls = calls
        self._send = send
        self._invoke = invoke
        self._clock = clock
        self._rooms: dict[str, list[WaitingCall]] = {}

    @staticmethod
    def worker_of(server: str) -> bytes:
        """The routing id a waiting call is pending at in the call table: no worker ever has it."""
        return b"\x00waiting/" + server.encode()

    @staticmethod
    def holds(worker: bytes) -> bool:
        """Whether a call pending at ``worker`` is one waiting for its server (``worker_of``)."""
        return worker.startswith(b"\x00waiting/")

    def full(self, server: str) -> bool:
        return len(self._rooms.get(server, ())) >= MAX_WAITING

    def add(self, server: str, waiting: WaitingCall) -> None:
        self._rooms.setdefault(server, []).append(waiting)

    def take(self, server: str) -> list[WaitingCall]:
        """Every call waiting for ``server``, in arrival order; the room is left empty."""
        return self._rooms.pop(server, [])

    def __len__(self) -> int:
        return sum(len(room) for room in self._rooms.values())

    def server_changed(self, server: Server) -> None:
        """``server``'s state changed: the calls waiting for it go on (``ready``), or fail at once when
        it is not coming back by itself (``failed``, ``needs-login``, ``stopped``)."""
        if server.state in COMING_BACK or not (waiting := self.take(server.name)):
            return
        if server.state != "ready":
            self._calls.worker_gone(self.worker_of(server.name), "UNAVAILABLE", server.why_unavailable())
            return
        self._send_all(server, waiting)

    def requeue(self, pending: Pending) -> bool:
        """A call in flight whose worker died, to run once more (``retryIdempotent``, a tool whose
        annotations say running it twice is harmless) or to run at all (its worker never sent it:
        ``CallTable.not_run``): it waits for its server as a new call would. False (it fails as the
        others) when it was requeued before or its server is not coming back."""
        entry, pending.retry = pending.retry, None
        server = self._servers.get(pending.server)
        if (
            not isinstance(entry, WaitingCall)
            or server is None
            or server.state not in (*COMING_BACK, "ready")
            or self.full(server.name)
        ):
            return False
        log.info("server %r: call %d (%s) goes to its new worker", server.name, entry.call, pending.tool)
        self._calls.move(entry.call, self.worker_of(server.name))
        self.add(server.name, entry)
        if server.state == "ready" and not isinstance(server.route(entry.client), Refusal):
            self._send_all(server, self.take(server.name))  # another replica serves it
        return True

    def _send_all(self, server: Server, waiting: list[WaitingCall]) -> None:
        """Send calls that waited for ``server`` (now ready) on their way, each with what is left of
        its budget."""
        now = self._clock()
        for entry in waiting:
            if not self._calls.is_pending(entry.call):  # expired or cancelled while it waited
                continue
            route = self._registry.lookup(entry.request.name)
            if route is None or route.server != server.name:
                why = f"server {server.name!r} came back without a tool named {entry.request.name!r}"
                self._calls.end(entry.call, "UNKNOWN_TOOL", why)
                continue
            target = server.route(entry.client)
            if isinstance(target, Refusal):
                self._calls.end(entry.call, target.code, target.message)
                continue
            pending = self._calls.move(entry.call, target.target)
            assert pending is not None
            pending.tool = route.tool
            pending.again = entry
            budget = max(entry.budget - (now - entry.arrived), 0.001)
            payload = self._invoke(entry, server.name, route.tool, budget, pending)
            if not target.serving:
                server.hold(target, entry.call, payload)
                continue
            try:
                self._send(target.target, payload)
            except Unroutable:
                self._calls.end(entry.call, "UNAVAILABLE", server.why_unavailable())
