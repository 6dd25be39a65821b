"""The supervisor's events, for agents: a subscription, and a tool list that keeps itself current.

The supervisor publishes on a PUB socket (its endpoint is in ``status``):

- ``RegistryChanged``: one server's tools added, changed or removed, with the
  registry's version after the change;
- ``StateChanged``: one server's worker changed state;
- ``RegistryVersion``: every second, the registry's current version, so a
  subscriber that missed an event (or joined between a listing and a change)
  notices within a second.

``EventWatch`` (blocking) and ``AsyncEventWatch`` yield the first two.
``ToolCache`` holds the tool list: it lists once, then applies each change as it
arrives; when a version is missed it lists again. Reading it never asks the
supervisor anything.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator
from time import monotonic
from typing import Final, Self

import anyio
import msgspec
import zmq

from supervisor._zmq import fd_of, readable
from supervisor.errors import SupervisorUnreachableError
from supervisor.paths import ipc_path
from supervisor.protocol import (
    Event,
    RegistryChanged,
    RegistryVersion,
    StateChanged,
    ToolInfo,
    decode_event,
)

__all__ = ["AsyncEventWatch", "EventWatch", "ToolCache"]

PublicEvent = RegistryChanged | StateChanged
JOIN_TIMEOUT: Final = 5.0  # seconds for a subscription to see its first event (beacons come every second)


def _subscriber(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> zmq.Socket[bytes]:
    path = ipc_path(endpoint)
    if path is not None and not path.exists():
        raise SupervisorUnreachableError(f"no events at {endpoint}: {path} does not exist")
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.SUBSCRIBE, b"")
    try:
        sock.connect(endpoint)
    except zmq.ZMQError as exc:
        sock.close(linger=0)
        raise SupervisorUnreachableError(f"cannot connect to {endpoint!r}: {exc}") from exc
    return sock


def _decode(frames: list[bytes]) -> Event | None:
    try:
        return decode_event(frames[-1])
    except msgspec.DecodeError:
        return None  # not from a supervisor we understand


class EventWatch:
    """Events as they come (blocking): ``for event in watch`` or ``watch.next(timeout)``."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._sock = _subscriber(self._ctx, endpoint)
        self._early: list[Event] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def join(self, timeout: float = JOIN_TIMEOUT) -> None:
        """Wait until the subscription is live (the first event, at most a beacon interval away)."""
        event = self.next_any(timeout)
        if event is None:
            self.close()
            raise SupervisorUnreachableError(f"no events from {self.endpoint} within {timeout:g} s")
        if not isinstance(event, RegistryVersion):
            self._early.append(event)

    def close(self) -> None:
        self._sock.close(linger=0)
        self._ctx.destroy(linger=0)

    def next(self, timeout: float | None = None) -> PublicEvent | None:
        """The next registry or state event, or None after ``timeout`` seconds (None: wait for ever)."""
        event = self.next_any(timeout)
        while isinstance(event, RegistryVersion):
            event = self.next_any(timeout)
        return event

    def next_any(self, timeout: float | None = None) -> Event | None:
        """The next event, the version beacons included."""
        if self._early:
            return self._early.pop(0)
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - monotonic())
            if not self._sock.poll(None if left is None else int(left * 1000)):
                return None
            event = _decode(self._sock.recv_multipart())
            if event is not None:
                return event

    def __iter__(self) -> Iterator[PublicEvent]:
        while True:
            event = self.next()
            if event is not None:
                yield event


class AsyncEventWatch:
    """Events as they come, for asyncio and trio: ``async for event in watch``."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._sock = _subscriber(self._ctx, endpoint)
        self._early: list[PublicEvent] = []

    async def join(self, timeout: float = JOIN_TIMEOUT) -> None:
        """Wait until the subscription is live (the first event, at most a beacon interval away)."""
        with anyio.move_on_after(timeout):
            event = await self._next_any()
            if isinstance(event, (RegistryChanged, StateChanged)):
                self._early.append(event)
            return
        self.close()
        raise SupervisorUnreachableError(f"no events from {self.endpoint} within {timeout:g} s")

    async def _next_any(self) -> Event:
        fd = fd_of(self._sock)
        while True:
            try:
                frames = self._sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                if not readable(self._sock):
                    await anyio.wait_readable(fd)
                continue
            event = _decode(frames)
            if event is not None:
                return event

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close(linger=0)
        self._ctx.destroy(linger=0)

    def __aiter__(self) -> AsyncIterator[PublicEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[PublicEvent]:
        while self._early:
            yield self._early.pop(0)
        while True:
            event = await self._next_any()
            if isinstance(event, (RegistryChanged, StateChanged)):
                yield event


class ToolCache:
    """The supervisor's tool list, kept current by its events (blocking; thread-safe).

    ``tools()`` applies the changes that arrived since the last read and returns the list; it
    lists again only when a version was missed. Made by ``SupervisorClient.tool_cache()``.
    """

    def __init__(self, endpoint: str, list_tools: Callable[[], tuple[list[ToolInfo], int]]) -> None:
        self._watch = EventWatch(endpoint)
        self._list_tools = list_tools
        self._lock = threading.Lock()
        self._tools: dict[str, ToolInfo] = {}
        self.version = -1
        self.relists = 0  # how many times it had to list again (a missed version)
        self._watch.join()
        self._relist()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._watch.close()

    def tools(self, wait: float = 0.0) -> list[ToolInfo]:
        """The current tools; with ``wait``, first wait up to that many seconds for a change."""
        with self._lock:
            event = self._watch.next_any(wait) if wait > 0 else None
            while True:
                if event is not None:
                    self._apply(event)
                event = self._watch.next_any(0)
                if event is None:
                    return list(self._tools.values())

    def _apply(self, event: Event) -> None:
        if isinstance(event, RegistryVersion):
            if event.version != self.version:
                self._relist()
        elif isinstance(event, RegistryChanged) and event.version > self.version:
            if event.version != self.version + 1:
                self._relist()
                return
            for name in event.removed:
                self._tools.pop(name, None)
            for info in [*event.added, *event.changed]:
                self._tools[info.name] = info
            self.version = event.version

    def _relist(self) -> None:
        tools, version = self._list_tools()
        self._tools = {info.name: info for info in tools}
        self.version = version
        self.relists += 1
