"""The events the supervisor publishes: registry changes, state changes, and the version beacon.

Above: the supervisor, which reports each change as it makes it. Below: the events PUB socket
(``socket``, set once bound), which ``supervisor.client.watch`` subscribes to on the agents' side, and the
in-process ``listeners`` (the status page's live feed, ``supervisor.ops.web.feed``), which must neither
block nor raise.
Fire and forget: a subscriber too slow to keep up loses events and sees a version gap (the beacon
says the registry's version every second, so a subscriber that missed a change notices).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import suppress
from typing import Final

import trio
import zmq

from supervisor.daemon.registry import Diff, Registry
from supervisor.protocol import (
    EVENT_TOPICS,
    Event,
    RegistryChanged,
    RegistryVersion,
    StateChanged,
    WorkerState,
    encode,
)
from supervisor.shared.repeats import Repeats

__all__ = ["BEACON_INTERVAL", "Publisher"]

BEACON_INTERVAL: Final = 1.0  # seconds between RegistryVersion events


class Publisher:
    def __init__(self, registry: Registry, repeats: Repeats) -> None:
        self.socket: zmq.Socket[bytes] | None = None
        self.listeners: list[Callable[[Event], None]] = []  # in-process subscribers
        self._registry = registry
        self._repeats = repeats

    def registry_changed(self, server: str, diff: Diff | None) -> None:
        """What a change to ``server``'s tools did to the registry, if anything."""
        if diff is not None:
            version = self._registry.version
            self.publish(RegistryChanged(version=version, server=server, **dataclasses.asdict(diff)))

    def state_changed(
        self, server: str, state: WorkerState, previous: WorkerState, restarts: int, last_error: str | None
    ) -> None:
        self.publish(
            StateChanged(
                server=server, state=state, previous=previous, restarts=restarts, last_error=last_error
            )
        )

    async def beacon(self) -> None:
        """The registry's version every second; the log's held-back repeats are flushed with it."""
        while True:
            self.publish(RegistryVersion(version=self._registry.version))
            self._repeats.flush()  # a storm's count is written once its second is over
            await trio.sleep(BEACON_INTERVAL)

    def publish(self, event: Event) -> None:
        for listener in self.listeners:
            listener(event)
        if self.socket is not None:
            with suppress(zmq.Again):
                self.socket.send_multipart([EVENT_TOPICS[type(event)], encode(event)], zmq.NOBLOCK)
