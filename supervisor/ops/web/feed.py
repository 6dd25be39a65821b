"""The status page's live feed: Server-Sent Events to at most ``MAX_CLIENTS`` browsers.

Above: the site (``supervisor.ops.web.site``), which publishes the supervisor's ``StateChanged`` and
``RegistryChanged`` events as they happen (from the publisher, in-process) and a ``stats`` event
every second, and the ``/events`` path, which streams one ``Subscription``. Below: one bounded
trio memory channel per client.

``publish`` never blocks and never waits for a client: a client whose queue is full (``QUEUE``
events it has not taken: it reads slowly, or not at all) is dropped, and its stream ends; a browser's
``EventSource`` then connects again and loads the status anew. A client that takes nothing is sent a
comment every ``KEEPALIVE`` seconds, so a connection that went away is noticed.
"""

from __future__ import annotations

from typing import Final

import trio

__all__ = ["KEEPALIVE", "MAX_CLIENTS", "QUEUE", "Feed", "Subscription"]

MAX_CLIENTS: Final = 16  # event streams at once; past it /events is answered 503
QUEUE: Final = 64  # events queued for one client; past it the client is dropped
KEEPALIVE: Final = 15.0  # seconds between comments to a client that has had nothing
RETRY_MS: Final = 2000  # how soon a browser connects again after its stream ended


class Subscription:
    """One client's stream: its events as SSE bytes (``next``), until dropped or closed."""

    def __init__(self, feed: Feed, queue: int) -> None:
        self._feed = feed
        self._send, self._receive = trio.open_memory_channel[bytes](queue)
        self.dropped = False
        self._first = True

    def offer(self, message: bytes) -> bool:
        """Queue ``message`` without waiting; False (and the client dropped) when its queue is full."""
        if self.dropped:
            return False
        try:
            self._send.send_nowait(message)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            self.close()
            self.dropped = True
            return False
        return True

    async def next(self) -> bytes | None:
        """The next chunk to send: an event, or a keep-alive comment; None once dropped or closed."""
        if self._first:
            self._first = False
            return b"retry: %d\n\n" % RETRY_MS
        if self.dropped:
            return None
        with trio.move_on_after(KEEPALIVE):
            try:
                return await self._receive.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                return None
        return b": keep-alive\n\n"

    def close(self) -> None:
        self._feed.forget(self)
        self._send.close()
        self._receive.close()


class Feed:
    """The clients of the live feed, and what is published to them."""

    def __init__(self, max_clients: int = MAX_CLIENTS, queue: int = QUEUE) -> None:
        self._max_clients = max_clients
        self._queue = queue
        self._clients: set[Subscription] = set()

    def __len__(self) -> int:
        return len(self._clients)

    def subscribe(self) -> Subscription | None:
        """A new client's stream; None when there are ``max_clients`` already."""
        if len(self._clients) >= self._max_clients:
            return None
        subscription = Subscription(self, self._queue)
        self._clients.add(subscription)
        return subscription

    def forget(self, subscription: Subscription) -> None:
        self._clients.discard(subscription)

    def publish(self, kind: str, data: bytes) -> None:
        """Send every client an event ``kind`` with ``data`` (one line of JSON); slow clients are dropped."""
        message = b"event: %s\ndata: %s\n\n" % (kind.encode(), data)
        for subscription in list(self._clients):
            subscription.offer(message)
