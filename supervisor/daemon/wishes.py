"""What callers want of the servers besides calls: log levels and resource subscriptions.

Above: the supervisor's dispatch, which hands it ``SetLogLevel``, ``Subscribe`` and ``Unsubscribe``,
and the worker link, which hands it each worker's ``Ready``, ``Logged`` and ``Updated``. Below: the
workers (an ``Interest`` sent to each serving worker of a server) and the events socket
(``ServerMessage``, ``ResourceUpdated``).

Each connection's wishes are kept apart: a server's log level is the most verbose any connection
asks of it (``SetLogLevel`` with ``""`` withdraws a wish), and a resource stays subscribed while any
connection wants it. A worker is told everything wanted of its server whenever that changes and
whenever it becomes ready, so a restarted server is set and subscribed again. Wishes outlive a
connection that goes away without withdrawing them (a ROUTER does not hear of it); they are bounded
(``MAX_WISHES``, the oldest dropped; ``MAX_SUBSCRIPTIONS``, the next refused).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Final

from supervisor.daemon.servers.pool import Server
from supervisor.protocol import (
    LOG_LEVELS,
    Done,
    ErrorReply,
    Event,
    FrontReply,
    Interest,
    Logged,
    ResourceUpdated,
    ServerMessage,
    SetLogLevel,
    Subscribe,
    Unsubscribe,
    encode,
)

__all__ = ["MAX_SUBSCRIPTIONS", "MAX_URI", "MAX_WISHES", "Interests"]

log = logging.getLogger("mcp_supervisor")

MAX_WISHES: Final = 4096  # (connection, server) log level wishes kept; past it the oldest is dropped
MAX_SUBSCRIPTIONS: Final = 10_000  # (server, URI) pairs subscribed to at once; past it OVERLOADED
MAX_URI: Final = 8192  # characters of a subscribed URI


class Interests:
    """Log level wishes and subscriptions, each server's sent to its workers."""

    def __init__(
        self,
        servers: Mapping[str, Server],
        send: Callable[[bytes, bytes], bool],
        publish: Callable[[Event], None],
    ) -> None:
        """``send(worker, payload)`` sends if that worker is connected; ``publish`` an event."""
        self._servers = servers
        self._send = send
        self._publish = publish
        self._levels: dict[tuple[bytes, str | None], int] = {}  # (caller, server or all) -> level index
        self._subscribed: dict[tuple[str, str], set[bytes]] = {}  # (server, uri) -> callers

    # ------------------------------------------------------------ callers' requests

    def set_level(self, caller: bytes, request: SetLogLevel) -> FrontReply:
        level, server = request.level, request.server
        if level and level not in LOG_LEVELS:
            return _bad(request.id, f"log level must be one of {', '.join(LOG_LEVELS)}, not {level[:40]!r}")
        if server is not None and server not in self._servers:
            return self._unknown(request.id, server)
        key = (caller, server)
        self._levels.pop(key, None)
        if level:
            self._levels[key] = LOG_LEVELS.index(level)
            while len(self._levels) > MAX_WISHES:
                del self._levels[next(iter(self._levels))]
        for name in self._servers if server is None else (server,):
            self._tell(name)
        return Done(id=request.id)

    def subscribe(self, caller: bytes, request: Subscribe) -> FrontReply:
        checked = self._checked(request)
        if checked is not None:
            return checked
        key = (request.server, request.uri)
        callers = self._subscribed.get(key)
        if callers is None:
            if len(self._subscribed) >= MAX_SUBSCRIPTIONS:
                why = f"{MAX_SUBSCRIPTIONS} resources are subscribed to already"
                return ErrorReply(id=request.id, code="OVERLOADED", message=why)
            callers = self._subscribed[key] = set()
        callers.add(caller)
        if len(callers) == 1:
            self._tell(request.server)
        return Done(id=request.id)

    def unsubscribe(self, caller: bytes, request: Unsubscribe) -> FrontReply:
        checked = self._checked(request)
        if checked is not None:
            return checked
        key = (request.server, request.uri)
        callers = self._subscribed.get(key)
        if callers is not None and caller in callers:
            callers.discard(caller)
            if not callers:
                del self._subscribed[key]
                self._tell(request.server)
        return Done(id=request.id)

    def _checked(self, request: Subscribe | Unsubscribe) -> FrontReply | None:
        if request.server not in self._servers:
            return self._unknown(request.id, request.server)
        if not request.uri or len(request.uri) > MAX_URI:
            return _bad(request.id, f"a resource URI must be 1 to {MAX_URI} characters")
        return None

    def _unknown(self, id: int, server: str) -> ErrorReply:
        known = ", ".join(self._servers) or "none"
        return ErrorReply(
            id=id, code="UNKNOWN_TOOL", message=f"no server named {server!r} (servers: {known})"
        )

    # ------------------------------------------------------------ the workers

    def wanted(self, server: str) -> Interest:
        """Everything wanted of ``server`` now."""
        levels = [index for (_, name), index in self._levels.items() if name is None or name == server]
        uris = sorted(uri for name, uri in self._subscribed if name == server)
        return Interest(level=LOG_LEVELS[min(levels)] if levels else "", uris=uris)

    def worker_ready(self, server: str, worker: bytes) -> None:
        """A worker of ``server`` became ready: it hears what is wanted, if anything."""
        interest = self.wanted(server)
        if interest.level or interest.uris:
            self._send(worker, encode(interest))

    def _tell(self, server: str) -> None:
        pool = self._servers.get(server)
        if pool is None:
            return
        payload = encode(self.wanted(server))
        for keeper in pool.keepers():
            if keeper.serving and keeper.identity is not None:
                self._send(keeper.identity, payload)

    def logged(self, server: str, event: Logged) -> None:
        self._publish(ServerMessage(server=server, level=event.level, logger=event.logger, data=event.data))

    def updated(self, server: str, uri: str) -> None:
        self._publish(ResourceUpdated(server=server, uri=uri))


def _bad(id: int, message: str) -> ErrorReply:
    return ErrorReply(id=id, code="BAD_REQUEST", message=message)
