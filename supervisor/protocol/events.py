"""The events the supervisor publishes (PUB; the topic is the first frame)."""

from __future__ import annotations

from typing import Final

import msgspec

from supervisor.protocol.codec import StateName, _Message, total_decoder
from supervisor.protocol.payloads import ToolInfo


class RegistryChanged(_Message):
    """Published when a server's tools enter, change in or leave the registry (topic ``registry``).

    ``version`` is the registry's version after the change: a subscriber holding a listing of
    ``version - 1`` applies this diff; one that missed a version lists the tools again.
    """

    version: int
    server: str
    added: list[ToolInfo] = []
    removed: list[str] = []  # prefixed names
    changed: list[ToolInfo] = []


class StateChanged(_Message):
    """Published when a server's worker changes state (topic ``state``)."""

    server: str
    state: StateName
    previous: StateName
    restarts: int = 0
    last_error: str | None = None


class RegistryVersion(_Message):
    """Published every second (topic ``version``): the registry's version, for subscribers to check."""

    version: int


LOG_BURST: Final = 100
"""Log messages a worker relays at once (``ServerMessage``) before ``LOG_RATE`` paces them."""
LOG_RATE: Final = 50.0
"""Log messages a second a worker relays past a burst; the rest are dropped and counted."""
MAX_LOG_DATA: Final = 65536
"""Bytes of a log message's ``data`` (msgpack); a larger one is cut to a string saying so."""


class ServerMessage(_Message):
    """A server's log message (MCP ``notifications/message``), topic ``log``: ``level`` one of
    ``LOG_LEVELS``, ``logger`` as the server named it (may be empty), ``data`` any JSON value as
    msgpack. At most ``LOG_BURST`` at once and ``LOG_RATE`` a second per worker; the rest are
    dropped and counted in the worker's log."""

    server: str
    level: str
    logger: str = ""
    data: msgspec.Raw = msgspec.Raw(b"\xc0")  # msgpack nil


class ResourceUpdated(_Message):
    """A resource someone subscribed to (``Subscribe``) changed, topic ``resource``; read it again."""

    server: str
    uri: str


Event = RegistryChanged | StateChanged | RegistryVersion | ServerMessage | ResourceUpdated
EVENT_TOPICS: Final = {
    RegistryChanged: b"registry",
    StateChanged: b"state",
    RegistryVersion: b"version",
    ServerMessage: b"log",
    ResourceUpdated: b"resource",
}

_event: msgspec.msgpack.Decoder[Event] = msgspec.msgpack.Decoder(Event)
decode_event = total_decoder(_event.decode)
