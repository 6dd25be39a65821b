"""The supervisor's events, for agents: a subscription, and a tool list that keeps itself current.

The supervisor publishes on a PUB socket (its endpoint is in ``status``):

- ``RegistryChanged``: one server's tools added, changed or removed, with the
  registry's version after the change;
- ``StateChanged``: one server's worker changed state;
- ``RegistryVersion``: every second, the registry's current version, so a
  subscriber that missed an event (or joined between a listing and a change)
  notices within a second;
- with ``messages``: ``ServerMessage`` (a server's log message) and ``ResourceUpdated`` (a
  resource someone subscribed to changed), which a subscriber must ask for (topics ``log`` and
  ``resource``): a busy server's log would cost every other subscriber.

``EventWatch`` (blocking, here) and ``AsyncEventWatch`` (``supervisor.client.aio_events``) yield all
but the beacons; the tool caches (``supervisor.client.tool_cache``, and ``aio_events`` again) read the
first three.

Each takes ``keys`` as the client stubs do (``supervisor.security.keys``): on a
``tcp://`` events endpoint the subscription is CurveZMQ, and a refused
handshake ends ``join`` with ``SupervisorAuthenticationError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from time import monotonic
from typing import Any, Final, Self

import msgspec
import zmq

from supervisor.client.dial import dial
from supervisor.client.errors import SupervisorAuthenticationError, SupervisorUnreachableError
from supervisor.protocol import (
    EVENT_TOPICS,
    Event,
    RegistryChanged,
    RegistryVersion,
    ResourceUpdated,
    ServerMessage,
    StateChanged,
    decode_event,
)
from supervisor.security.curve import HandshakeWatch
from supervisor.security.keys import Keys, client_keys
from supervisor.shared.sockets import new_subscriber

__all__ = ["EventWatch", "PublicEvent", "Subscription", "message_data", "not_joined", "read_event"]

PublicEvent = RegistryChanged | StateChanged | ServerMessage | ResourceUpdated
CHANGES: Final = (EVENT_TOPICS[RegistryChanged], EVENT_TOPICS[StateChanged], EVENT_TOPICS[RegistryVersion])
MESSAGES: Final = (EVENT_TOPICS[ServerMessage], EVENT_TOPICS[ResourceUpdated])
JOIN_TIMEOUT: Final = 5.0  # seconds for a subscription to see its first event (beacons come every second)
JOIN_SLICE: Final = 0.1  # seconds between looks at the handshakes while joining


def message_data(message: ServerMessage) -> Any:
    """A log message's ``data``, decoded (``None`` for data that does not decode)."""
    try:
        return msgspec.msgpack.decode(message.data)
    except msgspec.DecodeError:
        return None


def _subscriber(
    ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, keys: Keys, messages: bool
) -> tuple[zmq.Socket[bytes], HandshakeWatch | None]:
    def missing(path: Path) -> str:
        return f"no events at {endpoint}: {path} does not exist"

    topics = CHANGES + MESSAGES if messages else CHANGES
    return dial(lambda: new_subscriber(ctx, topics), endpoint, client_keys(keys, endpoint), missing)


def not_joined(endpoint: str, timeout: float, watch: HandshakeWatch | None) -> SupervisorUnreachableError:
    if watch is not None and watch.failure is not None:
        return SupervisorAuthenticationError(watch.failure)
    return SupervisorUnreachableError(f"no events from {endpoint} within {timeout:g} s")


def read_event(frames: list[bytes]) -> Event | None:
    try:
        return decode_event(frames[-1])
    except msgspec.DecodeError:
        return None  # not from a supervisor we understand


class Subscription:
    """One subscription to the supervisor's events, blocking or async: its socket, and the event that
    ``join`` read before anyone asked."""

    def __init__(self, endpoint: str, *, keys: Keys = None, messages: bool = False) -> None:
        self.endpoint = endpoint
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._sock, self._watch = _subscriber(self._ctx, endpoint, keys, messages)
        self._early: list[Event] = []

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
        self._sock.close(linger=0)
        self._ctx.destroy(linger=0)


class EventWatch(Subscription):
    """Events as they come (blocking): ``for event in watch`` or ``watch.next(timeout)``; with
    ``messages``, the servers' log messages and resource updates too."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def join(self, timeout: float = JOIN_TIMEOUT) -> None:
        """Wait until the subscription is live (the first event, at most a beacon interval away)."""
        deadline = monotonic() + timeout
        while (event := self.next_any(min(JOIN_SLICE, max(0.0, deadline - monotonic())))) is None:
            refused = self._watch is not None and self._watch.update() is not None
            if refused or monotonic() >= deadline:
                self.close()
                raise not_joined(self.endpoint, timeout, self._watch)
        if not isinstance(event, RegistryVersion):
            self._early.append(event)

    def next(self, timeout: float | None = None) -> PublicEvent | None:
        """The next event but a beacon, or None after ``timeout`` seconds (None: wait for ever)."""
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
            event = read_event(self._sock.recv_multipart())
            if event is not None:
                return event

    def __iter__(self) -> Iterator[PublicEvent]:
        while True:
            event = self.next()
            if event is not None:
                yield event
