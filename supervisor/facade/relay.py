"""The servers' log messages and resource updates, relayed to the hosts that asked for them.

Above: the MCP facade (``supervisor.facade.server``), whose ``logging/setLevel``,
``resources/subscribe``, ``resources/unsubscribe`` and ``subscriptions/listen`` handlers land here.
Below: the link to the supervisor (``supervisor.facade.upstream``), which hands ``heard`` every
``ServerMessage`` and ``ResourceUpdated`` and keeps asking each supervisor it reaches for what the
hosts want.

- **Log messages.** Each handshake-era host hears the messages from its own level up (``info`` until
  it sets one), under a logger naming the server (``server`` or ``server.logger``; a facade of one
  server keeps the server's own). The facade asks the supervisor for the most verbose level any of its
  hosts set. The 2026-07-28 protocol has no such messages.
- **Resource updates.** A handshake-era host's ``resources/subscribe`` (a 2026-07-28 host's
  ``subscriptions/listen`` with resource URIs) subscribes the facade through the supervisor to the
  server that lists the URI; the update reaches every host that subscribed to it, as
  ``notifications/resources/updated`` (or on its listen stream). The facade unsubscribes when the last
  host does.

What comes is queued (``QUEUE``; past it, dropped and counted) and sent by one task, to each host
within ``NOTIFY_TIMEOUT``: a host that does not read delays no other for long, and never the link.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import anyio.abc
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.subscriptions import ResourceUpdated as BusResourceUpdated

from supervisor.client.watch import message_data
from supervisor.protocol import LOG_LEVELS, ResourceUpdated, ServerMessage

__all__ = ["DEFAULT_LEVEL", "QUEUE", "Relay"]

log = logging.getLogger("mcp_supervisor.facade")

DEFAULT_LEVEL: Final = "info"  # what a host hears before it sets a level
QUEUE: Final = 1024  # messages and updates waiting to be sent to hosts; past it they are dropped
NOTIFY_TIMEOUT: Final = 2.0  # seconds one notification may take to one host


class Relay:
    """Hosts' log levels and subscriptions, and what the servers say, sent to the hosts that want it."""

    def __init__(
        self,
        sessions: Callable[[], dict[int, ServerSession]],
        forget: Callable[[int], None],
        bus: InMemorySubscriptionBus,
        *,
        single: str | None = None,
    ) -> None:
        """``sessions()``: the handshake-era host connections by key; ``forget(key)`` one that is gone;
        ``single``: the one server of a facade that keeps the server's own names."""
        self._sessions = sessions
        self._forget = forget
        self._bus = bus
        self._single = single
        self.asked = ""  # the level asked of the supervisor ("" while no host set one)
        self._levels: dict[int, int] = {}  # host key -> the index of its level in LOG_LEVELS
        self._subscribers: dict[tuple[str, str], set[int]] = {}  # (server, uri) -> host keys
        self._queue: deque[ServerMessage | ResourceUpdated] = deque()
        self._arrived: anyio.Event | None = None  # set when something is queued, while ``run`` waits
        self._closed = False
        self.dropped = 0

    # ------------------------------------------------------------ hosts' requests

    def set_level(self, key: int, level: str) -> str | None:
        """Host ``key`` wants messages from ``level`` up; the level to ask of the supervisor now, or
        None when it stays what it was."""
        self._levels[key] = LOG_LEVELS.index(level)
        return self._asked()

    def _asked(self) -> str | None:
        level = LOG_LEVELS[min(self._levels.values())] if self._levels else ""
        if level == self.asked:
            return None
        self.asked = level
        return level

    def subscribe(self, key: int, server: str, uri: str) -> bool:
        """Host ``key`` subscribes to ``uri`` of ``server``; True when the facade must subscribe."""
        hosts = self._subscribers.setdefault((server, uri), set())
        hosts.add(key)
        return len(hosts) == 1

    def unsubscribe(self, key: int, server: str, uri: str) -> bool:
        """Host ``key`` unsubscribes; True when the facade must unsubscribe (nobody else wants it)."""
        hosts = self._subscribers.get((server, uri))
        if hosts is None or key not in hosts:
            return False
        hosts.discard(key)
        if hosts:
            return False
        del self._subscribers[(server, uri)]
        return True

    def gone(self, key: int) -> tuple[str | None, list[tuple[str, str]]]:
        """Host ``key`` is gone: the level to ask now (None: unchanged) and what to unsubscribe from."""
        self._levels.pop(key, None)
        dropped = [pair for pair in list(self._subscribers) if self.unsubscribe(key, *pair)]
        return self._asked(), dropped

    # ------------------------------------------------------------ what the servers say

    def heard(self, event: ServerMessage | ResourceUpdated) -> None:
        """From the link's event loop: queued, never waited for."""
        if self._closed:
            return  # the facade is ending
        if len(self._queue) >= QUEUE:
            self.dropped += 1
            if self.dropped == 1 or math.log2(self.dropped).is_integer():
                log.warning("%d server messages dropped: hosts do not take them fast enough", self.dropped)
            return
        self._queue.append(event)
        if self._arrived is not None:
            self._arrived.set()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Send what was heard, one at a time, until cancelled (then nothing more is taken)."""
        task_status.started()
        try:
            while True:
                while self._queue:
                    await self.send(self._queue.popleft())
                self._arrived = anyio.Event()  # no checkpoint since the queue was seen empty
                await self._arrived.wait()
                self._arrived = None
        finally:
            self.close()

    def close(self) -> None:
        self._closed = True
        self._queue.clear()

    async def send(self, event: ServerMessage | ResourceUpdated) -> None:
        """Send one message or update to the hosts that want it."""
        if isinstance(event, ServerMessage):
            await self._log(event)
        else:
            await self._updated(event)

    async def _log(self, message: ServerMessage) -> None:
        if message.level not in LOG_LEVELS:
            return
        severity = LOG_LEVELS.index(message.level)
        default = LOG_LEVELS.index(DEFAULT_LEVEL)
        logger = message.logger if self._single else _logger(message)
        data = message_data(message)
        targets = [
            (key, session)
            for key, session in self._sessions().items()
            if severity >= self._levels.get(key, default)
        ]

        async def send(session: ServerSession) -> None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)  # logging: deprecated on 2026-07-28
                await session.send_log_message(message.level, data, logger or None)  # type: ignore[arg-type]

        await self._to_each(targets, send)

    async def _updated(self, update: ResourceUpdated) -> None:
        await self._bus.publish(BusResourceUpdated(uri=update.uri))  # 2026-07-28 listen streams
        keys = self._subscribers.get((update.server, update.uri), set())
        sessions = self._sessions()
        targets = [(key, sessions[key]) for key in keys if key in sessions]

        async def send(session: ServerSession) -> None:
            await session.send_resource_updated(update.uri)

        await self._to_each(targets, send)

    async def _to_each(
        self, targets: list[tuple[int, ServerSession]], send: Callable[[ServerSession], Awaitable[Any]]
    ) -> None:
        """``send`` to every target at once, each within ``NOTIFY_TIMEOUT``; a host that fails is gone."""
        if not targets:
            return

        async def one(key: int, session: ServerSession) -> None:
            try:
                with anyio.fail_after(NOTIFY_TIMEOUT):
                    await send(session)
            except Exception as exc:  # boundary: a host that went away or stalls is forgotten
                log.debug("a host connection is gone (%s: %s); forgotten", type(exc).__name__, exc)
                self._forget(key)

        async with anyio.create_task_group() as tasks:
            for key, session in targets:
                tasks.start_soon(one, key, session)


def _logger(message: ServerMessage) -> str:
    return f"{message.server}.{message.logger}" if message.logger else message.server
