"""What the HTTP facade sent on its event streams, kept so that a host that lost a stream gets the rest.

Above: ``supervisor.facade.host_sessions``, which gives every host session a ``Replay`` of its own (so
no session can ask for another's events). Below: the SDK's streamable HTTP transport, which stores
each message it sends on a stream (and the priming event that opens a stream, for hosts of
2025-11-25 and later) and, when a host comes back with ``Last-Event-ID``, asks for what followed.

Every session's events count against one ``Ledger``: at most ``MAX_BYTES`` (their JSON) and
``MAX_EVENTS`` in all, the oldest dropped first, whichever session they belong to. A host that comes
back after its events were dropped gets nothing replayed (the transport then answers as for an
unknown event id), and its request's answer may be lost, as without resumability.
"""

from __future__ import annotations

import itertools
import weakref
from collections import OrderedDict, deque
from typing import Final

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage, jsonrpc_message_adapter

__all__ = ["MAX_BYTES", "MAX_EVENTS", "Ledger", "Replay"]

MAX_BYTES: Final = 64 * 1024 * 1024  # JSON bytes of the events kept, every session's together
MAX_EVENTS: Final = 100_000  # events kept, every session's together
PRIMING_SIZE: Final = 64  # what a priming event (no message) counts as


class Ledger:
    """The events of every session, oldest first, within ``max_bytes`` and ``max_events``."""

    def __init__(self, max_bytes: int = MAX_BYTES, max_events: int = MAX_EVENTS) -> None:
        self.max_bytes = max_bytes
        self.max_events = max_events
        self.bytes = 0
        self._order: deque[tuple[weakref.ref[Replay], EventId, int]] = deque()

    def added(self, replay: Replay, event: EventId, size: int) -> None:
        self._order.append((weakref.ref(replay), event, size))
        self.bytes += size
        while self._order and (self.bytes > self.max_bytes or len(self._order) > self.max_events):
            owner, oldest, oldest_size = self._order.popleft()
            self.bytes -= oldest_size
            kept = owner()
            if kept is not None:
                kept.drop(oldest)

    @property
    def events(self) -> int:
        return len(self._order)


class Replay(EventStore):
    """One host session's events, in the order they were sent."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._ids = itertools.count(1)
        # a message as the transport sent it, or as the fast path wrote it (its JSON); None: priming
        self._events: OrderedDict[EventId, tuple[StreamId, JSONRPCMessage | bytes | None]] = OrderedDict()

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event = str(next(self._ids))
        self._events[event] = (stream_id, message)
        size = PRIMING_SIZE if message is None else len(message.model_dump_json(by_alias=True))
        self._ledger.added(self, event, size)
        return event

    def store_json(self, stream_id: StreamId, message: bytes) -> EventId:
        """``store_event`` for a message the fast path answered, as its JSON (read only if replayed)."""
        event = str(next(self._ids))
        self._events[event] = (stream_id, message)
        self._ledger.added(self, event, len(message))
        return event

    def drop(self, event: EventId) -> None:
        self._events.pop(event, None)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        """Send the messages of ``last_event_id``'s stream that followed it; that stream's id, or None
        for an event this session no longer has (or never had)."""
        found = self._events.get(last_event_id)
        if found is None:
            return None
        stream = found[0]
        after = False
        for event, (stream_id, message) in list(self._events.items()):
            if after and stream_id == stream and message is not None:
                if isinstance(message, bytes):
                    message = jsonrpc_message_adapter.validate_json(message, by_name=False)
                await send_callback(EventMessage(message, event))
            after = after or event == last_event_id
        return stream
