"""The tool list, kept current by the supervisor's events: reading it never asks the supervisor.

Above: ``SupervisorClient.tool_cache()`` (``ToolCache``, blocking and thread-safe, here) and
``AsyncSupervisorClient.tool_cache()`` (``AsyncToolCache``, in ``supervisor.client.aio_events``).
Below: an event subscription (``supervisor.client.watch``) and the client's listing. Both caches list
once, then apply each ``RegistryChanged`` as it arrives; when a version is missed (a gap in
``RegistryChanged``, or a beacon's version that differs) they list again. The bookkeeping is one pure
class, ``ToolTable``, which the MCP facade (``supervisor.facade.upstream``) keeps its tools with too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Self

from supervisor.client.watch import EventWatch
from supervisor.protocol import Event, RegistryChanged, RegistryVersion, ToolInfo
from supervisor.security.keys import Keys

__all__ = ["Cached", "Listing", "ToolCache", "ToolTable"]

Listing = tuple[list[ToolInfo], int]  # the tools, and the registry's version they are at


class ToolTable:
    """The tools by name at ``version``; ``apply`` says when only listing again will do."""

    def __init__(self) -> None:
        self.tools: dict[str, ToolInfo] = {}
        self.version = -1
        self.relists = 0

    def listed(self, listing: Listing) -> None:
        tools, version = listing
        self.tools = {info.name: info for info in tools}
        self.version = version
        self.relists += 1

    def apply(self, event: Event) -> bool:
        """Apply one event; True when a version was missed (list again)."""
        if isinstance(event, RegistryVersion):
            return event.version != self.version
        if isinstance(event, RegistryChanged) and event.version > self.version:
            if event.version != self.version + 1:
                return True
            for name in event.removed:
                self.tools.pop(name, None)
            for info in [*event.added, *event.changed]:
                self.tools[info.name] = info
            self.version = event.version
        return False


class Cached:
    """What both caches say of themselves."""

    _state: ToolTable

    @property
    def version(self) -> int:
        """The registry's version the tools are at."""
        return self._state.version

    @property
    def relists(self) -> int:
        """How many times it listed (the first listing, and once per missed version)."""
        return self._state.relists


class ToolCache(Cached):
    """The supervisor's tool list, kept current by its events (blocking; thread-safe).

    ``tools()`` applies the changes that arrived since the last read and returns the list; it
    lists again only when a version was missed. Made by ``SupervisorClient.tool_cache()``.
    """

    def __init__(self, endpoint: str, list_tools: Callable[[], Listing], *, keys: Keys = None) -> None:
        self._watch = EventWatch(endpoint, keys=keys)
        self._list_tools = list_tools
        self._lock = threading.Lock()
        self._state = ToolTable()
        self._watch.join()
        self._state.listed(list_tools())

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
                if event is not None and self._state.apply(event):
                    self._state.listed(self._list_tools())
                event = self._watch.next_any(0)
                if event is None:
                    return list(self._state.tools.values())
