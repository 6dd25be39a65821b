"""The supervisor's events for asyncio and trio (through anyio): ``AsyncEventWatch``, a subscription,
and ``AsyncToolCache``, a tool list that keeps itself current.

Above: ``AsyncSupervisorClient.watch()`` and ``.tool_cache()`` (``supervisor.client.aio``), and the MCP
facade's link (``supervisor.facade.upstream``). Beside them: their blocking twins, ``EventWatch``
(``supervisor.client.watch``, which says what the events are) and ``ToolCache``
(``supervisor.client.tool_cache``, whose ``ToolTable`` both caches keep). Kept apart from those so
that the blocking client loads no anyio.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Self

import anyio
import zmq

from supervisor.client.tool_cache import Cached, Listing, ToolTable
from supervisor.client.watch import JOIN_TIMEOUT, PublicEvent, Subscription, not_joined, read_event
from supervisor.protocol import Event, RegistryVersion, ToolInfo
from supervisor.security.curve import HandshakeWatch
from supervisor.security.keys import Keys
from supervisor.shared.sockets import fd_of, readable

__all__ = ["AsyncEventWatch", "AsyncToolCache"]


class AsyncEventWatch(Subscription):
    """Events as they come, for asyncio and trio: ``async for event in watch``; ``messages`` as for
    ``EventWatch``."""

    async def join(self, timeout: float = JOIN_TIMEOUT) -> None:
        """Wait until the subscription is live (the first event, at most a beacon interval away)."""
        with anyio.move_on_after(timeout):
            async with anyio.create_task_group() as joining:
                if self._watch is not None:
                    joining.start_soon(self._wait_refused, self._watch, joining.cancel_scope)
                event = await self._next_any()
                if not isinstance(event, RegistryVersion):
                    self._early.append(event)
                joining.cancel_scope.cancel()
                return
        self.close()
        raise not_joined(self.endpoint, timeout, self._watch)

    @staticmethod
    async def _wait_refused(watch: HandshakeWatch, scope: anyio.CancelScope) -> None:
        """Cancel ``scope`` (the join) when a handshake fails."""
        while watch.update() is None:
            if not readable(watch.monitor):
                await anyio.wait_readable(watch.fd)
        scope.cancel()

    async def next_any(self, timeout: float | None = None) -> Event | None:
        """The next event, the version beacons included, or None after ``timeout`` seconds (None: wait
        for ever)."""
        if self._early:
            return self._early.pop(0)
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            return await self._next_any()
        return None

    def next_nowait(self) -> Event | None:
        """The next event if one has come, else None."""
        if self._early:
            return self._early.pop(0)
        while True:
            try:
                event = read_event(self._sock.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return None
            if event is not None:
                return event

    async def _next_any(self) -> Event:
        fd = fd_of(self._sock)
        while True:
            try:
                frames = self._sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                if not readable(self._sock):
                    await anyio.wait_readable(fd)
                continue
            event = read_event(frames)
            if event is not None:
                return event

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __aiter__(self) -> AsyncIterator[PublicEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[PublicEvent]:
        while self._early:
            early = self._early.pop(0)
            if not isinstance(early, RegistryVersion):
                yield early
        while True:
            event = await self._next_any()
            if not isinstance(event, RegistryVersion):
                yield event


class AsyncToolCache(Cached):
    """As ``ToolCache``, for asyncio and trio: ``await cache.tools()``. Made by
    ``AsyncSupervisorClient.tool_cache()``; close it (``async with``, or ``close()``)."""

    def __init__(self, watch: AsyncEventWatch, list_tools: Callable[[], Awaitable[Listing]]) -> None:
        self._watch = watch
        self._list_tools = list_tools
        self._lock = anyio.Lock()
        self._state = ToolTable()

    @classmethod
    async def open(
        cls, endpoint: str, list_tools: Callable[[], Awaitable[Listing]], *, keys: Keys = None
    ) -> AsyncToolCache:
        """Subscribe, wait until the subscription is live, then list."""
        watch = AsyncEventWatch(endpoint, keys=keys)
        try:
            await watch.join()
            cache = cls(watch, list_tools)
            cache._state.listed(await list_tools())
        except BaseException:
            watch.close()
            raise
        return cache

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._watch.close()

    async def tools(self, wait: float = 0.0) -> list[ToolInfo]:
        """The current tools; with ``wait``, first wait up to that many seconds for a change."""
        async with self._lock:
            event = await self._watch.next_any(wait) if wait > 0 else None
            while True:
                if event is not None and self._state.apply(event):
                    self._state.listed(await self._list_tools())
                event = self._watch.next_nowait()
                if event is None:
                    return list(self._state.tools.values())
