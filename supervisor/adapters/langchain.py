"""The supervisor's tools as LangChain tools, following the live registry.

Above: a LangChain or LangGraph agent (``model.bind_tools(toolkit.get_tools())``, a ``ToolNode``).
Below: the registry-style tool sets of ``supervisor.adapters.toolset`` (``ToolRegistry`` over a
``SupervisorClient``, ``AsyncToolRegistry`` over an ``AsyncSupervisorClient``). It needs
``langchain-core``, the ``langchain`` extra (``pip install 'mcp-supervisor[langchain]'``); nothing
else in ``supervisor`` imports it.

Each tool is a ``SupervisorTool`` (a ``langchain_core.tools.BaseTool``) whose ``args_schema`` is the
tool's JSON schema as the registry has it; LangChain passes the arguments on unchecked and the
worker checks them (``INVALID_ARGUMENTS``). A call's output is the result's text, and its artifact
the whole ``ToolResult`` (``structured_content``, images): invoked with a tool call, the tool
returns a ``ToolMessage`` with both. A failed call (every ``SupervisorError``: ``TOOL_ERROR`` for a
tool's ``isError`` result, ``TIMEOUT``, ``INVALID_ARGUMENTS``, ``UNAVAILABLE``, ...) raises
``ToolException("CODE: message")``; with ``handle_tool_error`` (on by default) LangChain gives
that text to the model as the tool's output, in a ``ToolMessage`` with ``status="error"``.

``SupervisorToolkit(sup)`` over a blocking client: ``get_tools()`` follows the registry (call it
again each turn: a tool that appeared or vanished is in or out), and its tools run both ``invoke``
and ``ainvoke`` (in a worker thread). ``await SupervisorToolkit.aopen(sup)`` over an async client:
``await toolkit.aget_tools()`` follows the registry (``get_tools()`` gives the tools as it last
did), and its tools run ``ainvoke`` only.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Self, cast

import anyio.to_thread

try:
    from langchain_core.tools import BaseTool, BaseToolkit, ToolException
    from pydantic import ConfigDict, PrivateAttr
except ImportError as exc:
    raise ImportError(
        "supervisor.adapters.langchain needs langchain-core: pip install 'mcp-supervisor[langchain]'"
    ) from exc

from supervisor.adapters.toolset import Arguments, AsyncToolRegistry, ToolDefinition, ToolRegistry
from supervisor.client.aio import AsyncSupervisorClient
from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import SupervisorError
from supervisor.protocol import ToolInfo, ToolResult

__all__ = ["SupervisorTool", "SupervisorToolkit"]

ErrorHandling = bool | str | Callable[[ToolException], str]  # BaseTool.handle_tool_error
SyncCall = Callable[[Arguments], ToolResult]
AsyncCall = Callable[[Arguments], Awaitable[ToolResult]]


class SupervisorTool(BaseTool):
    """One registry tool as a LangChain tool; ``info`` is its registry entry. Made by
    ``SupervisorToolkit`` (or ``SupervisorTool.of`` from a ``ToolDefinition``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    info: ToolInfo
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"  # text, ToolResult
    _call: SyncCall | None = PrivateAttr(default=None)
    _acall: AsyncCall | None = PrivateAttr(default=None)

    @classmethod
    def of(
        cls,
        definition: ToolDefinition[ToolResult] | ToolDefinition[Awaitable[ToolResult]],
        *,
        asynchronous: bool,
        handle_tool_error: ErrorHandling = True,
    ) -> SupervisorTool:
        """The tool calling ``definition.call``: a blocking call, or (``asynchronous``) an awaitable."""
        info = definition.info
        tool = cls(
            name=definition.name,
            description=definition.description,
            args_schema=definition.input_schema,
            info=info,
            metadata={"server": info.server, "original_name": info.original_name},
            handle_tool_error=handle_tool_error,
        )
        if asynchronous:
            tool._acall = cast("AsyncCall", definition.call)
        else:
            tool._call = cast("SyncCall", definition.call)
        return tool

    def _run(self, /, *args: Any, **arguments: Any) -> tuple[str, ToolResult]:
        # ``self`` is positional-only so that a tool may take an argument of any name; and no
        # ``run_manager``/``config`` parameter, so LangChain injects nothing into the arguments.
        if self._call is None:
            raise NotImplementedError(
                f"{self.name} was made over an AsyncSupervisorClient: call it with ainvoke"
            )
        return _output(self._call, arguments)

    async def _arun(self, /, *args: Any, **arguments: Any) -> tuple[str, ToolResult]:
        if self._acall is not None:
            try:
                result = await self._acall(arguments)
            except SupervisorError as exc:
                raise ToolException(str(exc)) from exc
            return result.text, result
        call = self._call
        if call is None:  # ``of`` sets one of the two
            raise NotImplementedError(f"{self.name} has nothing to call")
        return await anyio.to_thread.run_sync(_output, call, arguments)


def _output(call: SyncCall, arguments: Arguments) -> tuple[str, ToolResult]:
    try:
        result = call(arguments)
    except SupervisorError as exc:
        raise ToolException(str(exc)) from exc
    return result.text, result


class SupervisorToolkit(BaseToolkit):
    """The supervisor's tools as LangChain tools, following its registry (see the module docstring).

    ``SupervisorToolkit(sup, timeout=30)`` over a ``SupervisorClient``, or
    ``await SupervisorToolkit.aopen(sup, timeout=30)`` over an ``AsyncSupervisorClient``. ``timeout``
    (seconds) is every call's budget (None: each server's ``toolTimeout``); ``handle_tool_error`` is
    each tool's (``BaseTool.handle_tool_error``). Close it (``with``/``async with``, or ``close()``)
    before the client.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    _registry: ToolRegistry | AsyncToolRegistry = PrivateAttr()
    _handle_tool_error: ErrorHandling = PrivateAttr(default=True)
    _tools: dict[str, tuple[object, SupervisorTool]] = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(
        self,
        client: SupervisorClient,
        *,
        timeout: float | None = None,
        handle_tool_error: ErrorHandling = True,
    ) -> None:
        if not isinstance(client, SupervisorClient):
            raise TypeError(
                f"SupervisorToolkit takes a SupervisorClient, not {type(client).__name__} "
                "(over an AsyncSupervisorClient: await SupervisorToolkit.aopen(client))"
            )
        super().__init__()
        self._handle_tool_error = handle_tool_error
        self._registry = ToolRegistry(client, timeout=timeout)

    @classmethod
    async def aopen(
        cls,
        client: AsyncSupervisorClient,
        *,
        timeout: float | None = None,
        handle_tool_error: ErrorHandling = True,
    ) -> SupervisorToolkit:
        """A toolkit over an ``AsyncSupervisorClient`` (entered): its tools run ``ainvoke``."""
        if not isinstance(client, AsyncSupervisorClient):
            raise TypeError(f"aopen takes an AsyncSupervisorClient, not {type(client).__name__}")
        registry = await AsyncToolRegistry.open(client, timeout=timeout)
        try:
            toolkit = cls.__new__(cls)
            BaseToolkit.__init__(toolkit)
            toolkit._handle_tool_error = handle_tool_error
            toolkit._registry = registry
            await toolkit.aget_tools()
        except BaseException:
            registry.close()
            raise
        return toolkit

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._registry.close()

    @property
    def version(self) -> int:
        """The registry's version the tools are at."""
        return self._registry.version

    def get_tools(self, wait: float = 0.0) -> builtins.list[BaseTool]:
        """The current tools; with ``wait``, first wait up to that many seconds for a change. Over an
        async client: the tools as the last ``aget_tools`` found them (``wait`` does not apply)."""
        registry = self._registry
        if isinstance(registry, AsyncToolRegistry):
            with self._lock:
                return [tool for _, tool in self._tools.values()]
        return self._update(registry.list(wait), asynchronous=False)

    async def aget_tools(self, wait: float = 0.0) -> builtins.list[BaseTool]:
        """The current tools; with ``wait``, first wait up to that many seconds for a change."""
        registry = self._registry
        if isinstance(registry, AsyncToolRegistry):
            return self._update(await registry.list(wait), asynchronous=True)
        return await anyio.to_thread.run_sync(self.get_tools, wait)

    def _update(
        self,
        definitions: builtins.list[ToolDefinition[ToolResult]]
        | builtins.list[ToolDefinition[Awaitable[ToolResult]]],
        *,
        asynchronous: bool,
    ) -> builtins.list[BaseTool]:
        """The tools of ``definitions``, reusing each tool whose definition is unchanged."""
        with self._lock:
            known = self._tools
            self._tools = {
                d.name: (d, old[1])
                if (old := known.get(d.name)) is not None and old[0] is d
                else (
                    d,
                    SupervisorTool.of(
                        d, asynchronous=asynchronous, handle_tool_error=self._handle_tool_error
                    ),
                )
                for d in definitions
            }
            return [tool for _, tool in self._tools.values()]
