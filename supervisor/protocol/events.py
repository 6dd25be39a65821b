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


Event = RegistryChanged | StateChanged | RegistryVersion
EVENT_TOPICS: Final = {RegistryChanged: b"registry", StateChanged: b"state", RegistryVersion: b"version"}

_event: msgspec.msgpack.Decoder[Event] = msgspec.msgpack.Decoder(Event)
decode_event = total_decoder(_event.decode)
