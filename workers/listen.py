"""``subscriptions/listen`` streams (2026-07-28) of the worker's own client for a stdio server.

Above: ``workers.lean`` (``LeanClient.listen``, used by ``workers.tools`` for tool changes and by
``workers.interest`` for resource updates, as they use the SDK's ``Client.listen``), which feeds each
stream what the server stamps with its id (``Route``: the acknowledgment, the events, a cancel). Below:
the worker's own requests (``workers.own_requests``): the listen request, with a string id
(``listen-N``) and no read timeout, whose result is the stream's graceful close.

As the SDK's ``mcp.client.subscriptions``: entering waits for the server's acknowledgment (the filter
it honors); iterating yields the events that filter admits, each once while it waits (at most
``MAX_PENDING_EVENTS``, past which the stream is lost); a graceful close ends the loop, anything else
raises ``SubscriptionLost``; leaving cancels the request (``notifications/cancelled``).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec
import trio

from workers.server_errors import INTERNAL_ERROR, ListenNotSupportedError, MCPError, SubscriptionLost

if TYPE_CHECKING:
    from workers.lean import LeanClient

__all__ = ["MAX_PENDING_EVENTS", "ListChanged", "ResourceUpdated", "Route", "Subscription", "listen"]

MAX_PENDING_EVENTS: Final = 1024  # a listen stream's unread events (the SDK's bound)

_listen_ids = itertools.count(1)  # ``listen-N``: string ids, which never meet our numbered ones


class Route:
    """One ``subscriptions/listen`` stream's state, fed in the order the server's lines are read."""

    def __init__(self) -> None:
        self.acked = trio.Event()
        self.honored: dict[str, Any] | None = None
        self.end: Literal["graceful", "lost", "local"] | None = None
        self.error: MCPError | None = None
        self._pending: dict[tuple[str, str], None] = {}
        self._wake = trio.Event()

    def set_acked(self, honored: dict[str, Any]) -> None:
        if not self.acked.is_set():
            self.honored = honored
            self.acked.set()

    def deliver(self, event: tuple[str, str]) -> None:
        """Queue an event the acknowledged filter admits, once while it waits."""
        if self.end is not None or self.honored is None:
            return
        kind, _uri = event
        admitted = (
            bool(self.honored.get("resourceSubscriptions"))
            if kind == "updated"
            else self.honored.get(f"{kind}ListChanged") is True
        )
        if not admitted or event in self._pending:
            return
        if len(self._pending) >= MAX_PENDING_EVENTS:
            why = (
                f"subscription backlog exceeded {MAX_PENDING_EVENTS} unconsumed events; re-listen and refetch"
            )
            self.settle("lost", MCPError(INTERNAL_ERROR, why))
            return
        self._pending[event] = None
        self._wake.set()

    def settle(self, end: Literal["graceful", "lost", "local"], error: MCPError | None = None) -> None:
        if self.end is None:
            self.end, self.error = end, error
            self.acked.set()
            self._wake.set()

    async def next_event(self) -> tuple[str, str] | str:
        while True:
            wake = self._wake
            if self.end == "local":
                return self.end
            if self._pending:
                event = next(iter(self._pending))
                del self._pending[event]
                return event
            if self.end is not None:
                return self.end
            await wake.wait()
            self._wake = trio.Event()


class ResourceUpdated(msgspec.Struct, frozen=True):
    """A listen stream's event: the resource at ``uri`` changed (other events carry no ``uri``)."""

    uri: str


class ListChanged(msgspec.Struct, frozen=True):
    """A listen stream's event: a list (``tools``, ``prompts``, ``resources``) changed."""

    kind: str


class Subscription:
    """An open listen stream: an async iterator of its events, ending when the server closes it."""

    def __init__(self, route: Route, subscription_id: str) -> None:
        self._route = route
        self.subscription_id = subscription_id

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> ResourceUpdated | ListChanged:
        outcome = await self._route.next_event()
        if isinstance(outcome, str):
            if outcome == "lost":
                raise SubscriptionLost(
                    f"subscription {self.subscription_id!r} ended without the server's graceful close;"
                    " re-listen and refetch"
                ) from self._route.error
            raise StopAsyncIteration
        kind, uri = outcome
        return ResourceUpdated(uri=uri) if kind == "updated" else ListChanged(kind=kind)


@asynccontextmanager
async def listen(
    client: LeanClient,
    routes: dict[str, Route],
    tasks: trio.Nursery,
    tools_list_changed: bool = False,
    resource_subscriptions: Sequence[str] = (),
) -> AsyncIterator[Subscription]:
    """One ``subscriptions/listen`` stream (2026-07-28), as the SDK's ``listen`` opens it: its request
    runs in ``tasks`` (the client's), so what the stream raises reaches the caller as it is."""
    if not client.modern:
        raise ListenNotSupportedError(
            f"subscriptions/listen is not available at protocol version {client.protocol_version!r}"
        )
    wanted: dict[str, Any] = {}
    if tools_list_changed:
        wanted["toolsListChanged"] = True
    if resource_subscriptions:
        wanted["resourceSubscriptions"] = list(resource_subscriptions)
    request_id = f"listen-{next(_listen_ids)}"
    route = routes[request_id] = Route()
    driver = trio.CancelScope()

    async def drive() -> None:
        with driver:
            try:
                await client.own.request(
                    "subscriptions/listen", {"notifications": wanted}, request_id=request_id
                )
            except MCPError as error:
                route.settle("lost", error)
                return
            route.set_acked({})  # a result, whatever its body, is the graceful close
            route.settle("graceful")

    tasks.start_soon(drive)
    try:
        await route.acked.wait()
        if route.honored is None:
            if route.error is not None:
                raise route.error
            raise SubscriptionLost(f"subscription {request_id!r} ended before it was acknowledged")
        yield Subscription(route, request_id)
    finally:
        route.settle("local")
        driver.cancel()  # the request, abandoned, is cancelled (``notifications/cancelled``)
        routes.pop(request_id, None)
