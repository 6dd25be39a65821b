"""The server's tools as the worker knows them: listed at start-up, listed again when they may have
changed.

Above: the session (``workers.session``), which lists the tools once before ``Ready``, hands over
the session's tool-change notifications (``changed``) and has the tools followed while the session
serves (``follow``), told of each change it finds. Below: ``workers.listing``, which lists through
the session's ``Pager`` and leaves bad entries out with a warning, each said once (``Warnings``).

The tools may change when the server says so: a ``notifications/tools/list_changed`` (servers of
the handshake era), or an event on a ``subscriptions/listen`` stream (2026-07-28 servers, which
send changes no other way; a lost stream is opened again, and what changed meanwhile listed
again). With ``refreshInterval`` they are listed that often too, for servers that never say.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, Final

import trio

from supervisor.protocol import WorkerTool
from workers.lean import MODERN_PROTOCOL_VERSIONS
from workers.listing import ListingFailed, Pager, Warnings, list_tools
from workers.server_errors import http_error, listen_unsupported, rpc_error, subscription_lost

Client = Any  # ``workers.lean.LeanClient``, or the SDK's ``mcp.Client`` (``workers.session``)

__all__ = ["ToolWatch"]

log = logging.getLogger("mcp_supervisor.worker")

RELIST_TIMEOUT: Final = 30.0  # seconds for listing the tools again after a change
LISTEN_RETRY_INITIAL: Final = 1.0  # seconds before listening again for tool changes, doubling...
LISTEN_RETRY_MAX: Final = 30.0  # ...up to this


class ToolWatch:
    """One server's tools: ``list_all`` of them, and ``follow`` their changes while the session serves."""

    def __init__(self, server: str, pager: Callable[[Client], Pager], refresh: float | None) -> None:
        self._pager = pager
        self._refresh = refresh or math.inf  # seconds between listings nobody asked for
        self._warnings = Warnings(server)  # about the tools listed
        self._relist = trio.Event()  # set when the server's tools may have changed
        # Tell the session the tools listed (the SDK's session derives state from them: ``workers.sdk``).
        self.absorb: Callable[[Client, list[WorkerTool]], None] = lambda client, tools: None

    def changed(self) -> None:
        """The server's tools may have changed: list them again."""
        self._relist.set()

    async def list_all(self, client: Client) -> list[WorkerTool]:
        """Every usable tool of the server (``workers.listing``); the session is told them too."""
        modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
        tools = await list_tools(self._pager(client), self._warnings, modern=modern)
        self.absorb(client, tools)
        return tools

    async def follow(
        self,
        client: Client,
        tools: list[WorkerTool],
        nursery: trio.Nursery,
        on_change: Callable[[list[WorkerTool]], None],
    ) -> None:
        """List the tools again when the server says they changed, or every ``refreshInterval``;
        ``on_change`` when they did."""
        capability = client.server_capabilities.tools
        if capability is not None and capability.list_changed:
            nursery.start_soon(self._listen, client)
        while True:
            with trio.move_on_after(self._refresh):
                await self._relist.wait()
            self._relist = trio.Event()  # a change noticed while listing lists again
            try:
                with trio.fail_after(RELIST_TIMEOUT):
                    listed = await self.list_all(client)
            except ListingFailed as exc:
                log.warning("listing the tools again failed: %s", exc)
                continue
            except Exception as exc:
                if not (isinstance(exc, trio.TooSlowError) or rpc_error(exc) or http_error(exc)):
                    raise
                log.warning("listing the tools again failed: tools/list: %s", exc or "timed out")
                continue
            if listed != tools:
                tools = listed
                on_change(tools)

    async def _listen(self, client: Client) -> None:
        """2026-07-28 servers send changes only on a ``subscriptions/listen`` stream: keep one open."""
        delay = LISTEN_RETRY_INITIAL
        while True:
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    delay = LISTEN_RETRY_INITIAL
                    async for _ in subscription:
                        self._relist.set()
                return  # the server closed the stream in order: it will send no more
            except Exception as exc:
                if listen_unsupported(exc):
                    return  # a handshake-era session: changes come as notifications (``changed``)
                if not (subscription_lost(exc) or rpc_error(exc) or isinstance(exc, TimeoutError)):
                    raise
                log.warning("tool change subscription lost (%s); listening again in %g s", exc, delay)
                self._relist.set()  # there is no replay: what changed meanwhile is listed again
            await trio.sleep(delay)
            delay = min(2 * delay, LISTEN_RETRY_MAX)
