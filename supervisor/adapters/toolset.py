"""Registry-style tool sets: the supervisor's tools as definitions an agent framework registers
(name, description, input schema, and a function that calls the tool), following the live registry.

Above: an agent framework's tool registry or an agent's own loop, and the LangChain tool set of
``supervisor.adapters.langchain``, built on these. Below: the client stubs: ``tool_cache()`` (the
tool list kept current by the supervisor's events, ``supervisor.client.tool_cache``) and ``call_tool``.

``ToolRegistry`` works over a ``SupervisorClient`` (blocking, thread-safe); ``AsyncToolRegistry``
over an ``AsyncSupervisorClient`` (asyncio or trio). ``list()`` reads the cache, so it never asks
the supervisor unless an event was missed: a tool that appears or vanishes in the registry (a
server added or removed by a reload, a server that changes its tools) is in the next ``list()`` or
gone from it. A definition stays the same object while its tool is unchanged. ``call`` always goes
to the supervisor, which is the authority: a name the cache has not seen yet still works, and a
name it never had raises ``UnknownToolError``. Framework-free: nothing here imports one.
"""

from __future__ import annotations

import builtins
import functools
import math
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from supervisor.adapters.formats import input_schema_of
from supervisor.protocol import ToolInfo, ToolResult

if TYPE_CHECKING:
    from supervisor.client.aio import AsyncSupervisorClient
    from supervisor.client.aio_events import AsyncToolCache
    from supervisor.client.blocking import SupervisorClient
    from supervisor.client.tool_cache import ToolCache

__all__ = ["AsyncToolRegistry", "ToolDefinition", "ToolRegistry"]

_R = TypeVar("_R")
_C = TypeVar("_C", bound="ToolCache | AsyncToolCache")
Arguments = Mapping[str, Any]


@dataclass(frozen=True, slots=True, eq=False)
class ToolDefinition(Generic[_R]):
    """One tool as a framework registers it. ``call(arguments)`` calls it through the supervisor:
    it returns the ``ToolResult`` (from an ``AsyncToolRegistry``: an awaitable of it) and raises the
    ``SupervisorError`` of a failed call."""

    name: str  # the prefixed name, ``mcp_{server}_{tool}``
    description: str  # the tool's description, else its title, else ""
    input_schema: dict[str, Any]  # a JSON Schema object
    call: Callable[[Arguments], _R]
    info: ToolInfo  # the registry entry: server, original_name, title, output_schema, annotations


class _Definitions(Generic[_R]):
    """The definitions of the current tools by name; one is made again only when its tool changed."""

    def __init__(self, define: Callable[[ToolInfo], ToolDefinition[_R]]) -> None:
        self._define = define
        self._by_name: dict[str, ToolDefinition[_R]] = {}

    def update(self, tools: builtins.list[ToolInfo]) -> builtins.list[ToolDefinition[_R]]:
        known = self._by_name
        self._by_name = {
            info.name: old
            if (old := known.get(info.name)) is not None and old.info == info
            else self._define(info)
            for info in tools
        }
        return builtins.list(self._by_name.values())

    def get(self, name: str) -> ToolDefinition[_R] | None:
        return self._by_name.get(name)


def _define(info: ToolInfo, call: Callable[[str, Arguments], _R]) -> ToolDefinition[_R]:
    description = info.description or info.title or ""
    return ToolDefinition(
        info.name, description, input_schema_of(info), functools.partial(call, info.name), info
    )


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is not None and not (
        isinstance(timeout, int | float) and timeout > 0 and math.isfinite(timeout)
    ):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return timeout


class _Following(Generic[_C]):
    """What both registries say of themselves, over the tool cache they read."""

    _cache: _C

    def close(self) -> None:
        self._cache.close()

    @property
    def version(self) -> int:
        """The registry's version the tools are at."""
        return self._cache.version


class ToolRegistry(_Following["ToolCache"]):
    """The supervisor's tools as ``ToolDefinition``s, over a ``SupervisorClient`` (thread-safe).

    ``timeout`` (seconds) is every call's budget (None: each server's ``toolTimeout``);
    ``raise_on_error=False`` returns a tool's ``isError`` result instead of raising
    ``ToolExecutionError``. Close it (``with``, or ``close()``) before the client.
    """

    def __init__(
        self, client: SupervisorClient, *, timeout: float | None = None, raise_on_error: bool = True
    ) -> None:
        self.timeout = _check_timeout(timeout)
        self.raise_on_error = raise_on_error
        self._client = client
        self._lock = threading.Lock()
        self._definitions: _Definitions[ToolResult] = _Definitions(lambda info: _define(info, self.call))
        self._cache = client.tool_cache()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def list(self, wait: float = 0.0) -> builtins.list[ToolDefinition[ToolResult]]:
        """The current tools; with ``wait``, first wait up to that many seconds for a change."""
        tools = self._cache.tools(wait)
        with self._lock:
            return self._definitions.update(tools)

    def get(self, name: str) -> ToolDefinition[ToolResult] | None:
        """The current tool of that name, or None."""
        self.list()
        with self._lock:
            return self._definitions.get(name)

    def call(self, name: str, arguments: Arguments | None = None) -> ToolResult:
        """Call a tool by its prefixed name (see ``SupervisorClient.call_tool``)."""
        return self._client.call_tool(name, arguments, self.timeout, raise_on_error=self.raise_on_error)


class AsyncToolRegistry(_Following["AsyncToolCache"]):
    """As ``ToolRegistry``, over an ``AsyncSupervisorClient``: ``await AsyncToolRegistry.open(sup)``
    (or ``async with await AsyncToolRegistry.open(sup) as tools``); each definition's ``call``
    returns an awaitable."""

    def __init__(
        self,
        client: AsyncSupervisorClient,
        cache: AsyncToolCache,
        timeout: float | None,
        raise_on_error: bool,
    ) -> None:
        """Use ``open``."""
        self.timeout = timeout
        self.raise_on_error = raise_on_error
        self._client = client
        self._cache = cache
        self._definitions: _Definitions[Awaitable[ToolResult]] = _Definitions(
            lambda info: _define(info, self.call)
        )

    @classmethod
    async def open(
        cls, client: AsyncSupervisorClient, *, timeout: float | None = None, raise_on_error: bool = True
    ) -> AsyncToolRegistry:
        """Subscribe to the client's supervisor and list its tools; ``timeout`` and
        ``raise_on_error`` as for ``ToolRegistry``."""
        timeout = _check_timeout(timeout)
        return cls(client, await client.tool_cache(), timeout, raise_on_error)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def list(self, wait: float = 0.0) -> builtins.list[ToolDefinition[Awaitable[ToolResult]]]:
        """The current tools; with ``wait``, first wait up to that many seconds for a change."""
        return self._definitions.update(await self._cache.tools(wait))

    async def get(self, name: str) -> ToolDefinition[Awaitable[ToolResult]] | None:
        """The current tool of that name, or None."""
        await self.list()
        return self._definitions.get(name)

    async def call(self, name: str, arguments: Arguments | None = None) -> ToolResult:
        """Call a tool by its prefixed name (see ``AsyncSupervisorClient.call_tool``)."""
        return await self._client.call_tool(name, arguments, self.timeout, raise_on_error=self.raise_on_error)
