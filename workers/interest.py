"""What the worker's callers want of the server besides calls: a log level, resources to hear about.

Above: the link, which hands each ``Interest`` to ``want``, and the session's message handler
(``workers.session``), which hands the server's log messages to ``logged`` and its resource
updates to ``updated``. Below: the session (``workers.lean``, or the SDK's ``mcp.Client``).

``Interest`` is declarative: it always says everything wanted. ``follow`` makes it so once the
session is ready and again whenever it changes, doing only what differs from what it did before
(``logging/setLevel`` once per level, ``resources/subscribe`` and ``resources/unsubscribe`` per
URI). A 2026-07-28 server has neither: its resources are heard on one ``subscriptions/listen``
stream for every wanted URI, opened again when they change. A request the server refuses or does
not answer in ``APPLY_TIMEOUT`` is logged and not retried until the interest changes.

The server's log messages go on to the supervisor as ``Logged`` through a token bucket
(``LOG_BURST`` at once, ``LOG_RATE`` a second); the rest are counted and the count logged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import msgspec
import trio

from supervisor.protocol import LOG_BURST, LOG_RATE, MAX_LOG_DATA, Interest, Logged, Updated, WorkerEvent
from workers.lean import MODERN_PROTOCOL_VERSIONS
from workers.ratelimit import RateLimit
from workers.server_errors import listen_unsupported, quiet_deprecations, rpc_error, subscription_lost

Client = Any  # ``workers.lean.LeanClient``, or the SDK's ``mcp.Client`` (``workers.session``)


class LogParams(Protocol):
    """A log message's params: ``workers.lean.LogMessage``, or the SDK's model of them."""

    @property
    def level(self) -> str: ...
    @property
    def logger(self) -> str | None: ...
    @property
    def data(self) -> Any: ...


__all__ = ["APPLY_TIMEOUT", "Interests"]

log = logging.getLogger("mcp_supervisor.worker")

APPLY_TIMEOUT: Final = 10.0  # seconds for one logging/setLevel or (un)subscribe request
LISTEN_RETRY: Final = 2.0  # seconds before a lost subscriptions/listen stream is opened again


class Interests:
    """The interest wanted (``want``), made so on the session (``follow``), and what the server says
    about it sent on (``logged``, ``updated``)."""

    def __init__(self, send: Callable[[WorkerEvent], None]) -> None:
        """``send(event)`` sends a ``WorkerEvent`` to the supervisor."""
        self._send = send
        self._wanted = Interest()
        self._changed = trio.Event()
        self._level = ""  # the level last set on the server
        self._uris: frozenset[str] = frozenset()  # the URIs the server was last subscribed to
        self._logs = RateLimit(LOG_RATE, LOG_BURST)

    def want(self, interest: Interest) -> None:
        self._wanted = interest
        self._changed.set()

    async def follow(self, client: Client) -> None:
        """Make the wanted interest so, now and whenever it changes (runs with the session)."""
        modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
        async with trio.open_nursery() as nursery:
            listening: trio.CancelScope | None = None
            while True:
                wanted = self._wanted
                if wanted.level and wanted.level != self._level and not modern:
                    self._level = wanted.level
                    await self._set_level(client, wanted.level)
                uris = frozenset(wanted.uris)
                if uris != self._uris:
                    if modern:
                        if listening is not None:
                            listening.cancel()
                        listening = await nursery.start(self._listen, client, uris) if uris else None
                        self._uris = uris
                    else:
                        await self._subscribe(client, uris)
                await self._changed.wait()
                self._changed = trio.Event()

    async def _set_level(self, client: Client, level: str) -> None:
        if client.server_capabilities.logging is None:
            log.debug("log level %s not set: the server has no logging capability", level)
            return
        try:
            with trio.fail_after(APPLY_TIMEOUT), quiet_deprecations():  # only the 2026-07-28 era lacks it
                await client.session.set_logging_level(level)
            log.debug("log level set to %s", level)
        except Exception as exc:
            if not (rpc_error(exc) or isinstance(exc, trio.TooSlowError | OSError)):
                raise
            log.warning("the server did not take log level %s: %s", level, exc or "timed out")

    async def _subscribe(self, client: Client, uris: frozenset[str]) -> None:
        """Subscribe to the URIs newly wanted and unsubscribe from those no longer wanted (2025 era)."""
        capability = client.server_capabilities.resources
        if capability is None or not capability.subscribe:
            if uris - self._uris:
                log.warning("resource updates not heard: the server offers no resource subscriptions")
            self._uris = uris
            return
        for uri in sorted(uris - self._uris):
            await self._request(client.session.subscribe_resource, "resources/subscribe", uri)
        for uri in sorted(self._uris - uris):
            await self._request(client.session.unsubscribe_resource, "resources/unsubscribe", uri)
        self._uris = uris

    @staticmethod
    async def _request(request: Callable[[str], Awaitable[Any]], method: str, uri: str) -> None:
        log.debug("%s %s", method, uri)
        try:
            with trio.fail_after(APPLY_TIMEOUT), quiet_deprecations():  # only the 2026-07-28 era lacks it
                await request(uri)
        except Exception as exc:
            if not (rpc_error(exc) or isinstance(exc, trio.TooSlowError | OSError)):
                raise
            log.warning("%s %s: %s", method, uri, exc or "timed out")

    async def _listen(
        self, client: Client, uris: frozenset[str], *, task_status: trio.TaskStatus[trio.CancelScope]
    ) -> None:
        """2026-07-28: hear ``uris`` on one ``subscriptions/listen`` stream, opened again when lost."""
        with trio.CancelScope() as scope:
            task_status.started(scope)
            while True:
                try:
                    async with client.listen(resource_subscriptions=sorted(uris)) as subscription:
                        async for event in subscription:
                            if isinstance(uri := getattr(event, "uri", None), str):  # a resource's update
                                self.updated(uri)
                    return  # closed in order: the server sends no more
                except Exception as exc:
                    if listen_unsupported(exc):
                        return
                    if not (subscription_lost(exc) or rpc_error(exc) or isinstance(exc, TimeoutError)):
                        raise
                    log.warning("resource subscription lost (%s); listening again in %g s", exc, LISTEN_RETRY)
                await trio.sleep(LISTEN_RETRY)

    # ------------------------------------------------------------ what the server says

    def logged(self, params: LogParams) -> None:
        """A log message of the server (its params): on to the supervisor, if the bucket allows."""
        if not self._logs.allow():
            return
        dropped = self._logs.take_dropped()
        if dropped:
            log.warning("%d log messages of the server dropped (over %g a second)", dropped, LOG_RATE)
        self._send(Logged(level=params.level, logger=params.logger or "", data=_data(params.data)))

    def updated(self, uri: str) -> None:
        self._send(Updated(uri=uri))


def _data(value: object) -> msgspec.Raw:
    """A log message's data as msgpack; one larger than ``MAX_LOG_DATA`` is cut to a string."""
    try:
        encoded = msgspec.msgpack.encode(value)
    except (TypeError, ValueError, OverflowError):
        encoded = msgspec.msgpack.encode(repr(value))
    if len(encoded) > MAX_LOG_DATA:
        text = msgspec.json.encode(value).decode(errors="replace")[: MAX_LOG_DATA // 2]
        encoded = msgspec.msgpack.encode(f"{text}... ({len(encoded)} bytes, cut)")
    return msgspec.Raw(encoded)
