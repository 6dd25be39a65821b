"""The tools a host sees through the facade: ``tools/list`` and ``tools/call``, routed through the
supervisor, or with ``search`` the two tools that search the registry and call a tool by name.

Above: the MCP facade (``supervisor.facade.server``), which registers ``list_tools`` and
``call_tool`` as its handlers and says when the registry's tools changed (``changed``). Below: the
link to the supervisor (``supervisor.facade.upstream``), each host connection's own client
(``supervisor.facade.callers``), the view of this facade and the registry search
(``supervisor.facade.views``), and what a host's protocol version can take
(``supervisor.facade.resources``: ``listable``, ``refusal``).

A listing is kept until the tools change (per protocol version), and so is the search index. How
calls map: routed through the supervisor with its deadline; the host's ``notifications/cancelled``
cancels the routed call (the stub sends ``Cancel``, and the server gets its own
``notifications/cancelled``); the server's progress reaches the host under the host's token; the
result is relayed as the server sent it. A tool's own error is a result with ``isError``, and so are
``UNAVAILABLE``, ``TIMEOUT``, ``WORKER_CRASHED`` and the other failures of the route, their text naming
the server and what happened; an unknown tool and bad arguments are JSON-RPC errors. With ``single``,
the host names the server's tools as the server does, and they are called by their prefixed names.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import LATEST_MODERN_VERSION

from supervisor.client.aio import AsyncSupervisorClient
from supervisor.client.errors import SupervisorError
from supervisor.facade.access import Access, scope_of
from supervisor.facade.callers import Hosts
from supervisor.facade.resources import complete, listable, refusal
from supervisor.facade.upstream import SupervisorGone
from supervisor.facade.upstreams import Upstreams
from supervisor.facade.views import SearchIndex, View
from supervisor.protocol import ProgressCallback, ToolInfo, ToolResult
from supervisor.shared.names import free_name

if TYPE_CHECKING:
    from supervisor.facade.server import FacadeOptions

__all__ = ["CALL_TOOL", "SEARCH_TOOL", "ServedTools", "error_result"]

log = logging.getLogger("mcp_supervisor.facade")

SEARCH_TOOL: Final = "search_tools"
CALL_TOOL: Final = "call_tool"
JSONRPC_ERRORS: Final = frozenset({"UNKNOWN_TOOL", "INVALID_ARGUMENTS"})
MAX_LISTINGS: Final = 256  # (version, view) listings kept


class ServedTools:
    """The facade's tool handlers over the supervisor's registry, as ``options`` show it."""

    def __init__(
        self, options: FacadeOptions, client: Callable[[], Upstreams], hosts: Hosts, access: Access
    ) -> None:
        self.options = options
        self.access = access  # each request's view and identity (a gateway's clients)
        self._client = client  # the link to the supervisor (set before the facade serves)
        self._hosts = hosts  # each host connection a client of its own, answering its server's requests
        self._generation = 0  # grows with every change of the tools
        # (version, view) -> (generation, tools)
        self._listings: dict[tuple[str, View], tuple[int, list[dict[str, Any]]]] = {}
        self._warned: set[str] = set()  # tools left out of a listing that were warned about
        self._index: tuple[int, SearchIndex, View] | None = None  # (generation, index, the view it is of)
        self._originals: tuple[int, dict[str, str]] | None = None  # with single: (version, name -> prefixed)
        self._single_seen: tuple[int, bool] | None = None  # with single: (generation, its tools listed)
        self._schemas: tuple[object, dict[str, dict[str, Any]]] | None = None  # (listing, name -> schema)

    def changed(self) -> None:
        """The registry's tools changed: the next listing and search are made anew."""
        self._generation += 1

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        if self.options.search:
            return complete(ctx, {"tools": _SEARCH_TOOLS})
        upstream = self._client()
        view = self.access.of(scope_of(ctx)).view
        tools = await upstream.tools(self.options.list_wait)
        if not upstream.connected:  # the host hears why it sees no tools (or only the last known ones)
            await _tell_host(
                ctx, "warning", f"{upstream.why}; the tools arrive when it answers (list_changed)"
            )
        elif self.options.single is not None and not any(t.server == self.options.single for t in tools):
            missing = await self._missing_server(upstream, self.options.single)
            if missing:
                log.warning("%s", missing)
                await _tell_host(ctx, "warning", missing)
        return complete(ctx, {"tools": self._entries(ctx.protocol_version, tools, view)})

    @property
    def generation(self) -> int:
        """Grows with every change of the registry's tools (a listing made before is stale)."""
        return self._generation

    def listing_now(self, version: str, view: View | None = None) -> list[dict[str, Any]] | None:
        """The listing a host of protocol ``version`` gets through ``view`` (None: the facade's), when it
        can be answered now and with nothing to tell the host (``can_list_now``); else None."""
        if self.options.search:
            return _SEARCH_TOOLS
        if not self.can_list_now():
            return None
        return self._entries(version, self._client().listed(), view or self.options.view)

    def can_list_now(self) -> bool:
        """Whether a listing can be answered now, with nothing to tell the host: a supervisor listed,
        and with ``single`` its server among the tools."""
        if self.options.search:
            return True
        upstream = self._client()
        return upstream.settled and self._single_listed(upstream)

    def _single_listed(self, upstream: Upstreams) -> bool:
        """Without ``single``, True; with it, whether the registry lists that server's tools."""
        if self.options.single is None:
            return True
        seen = self._single_seen
        if seen is None or seen[0] != self._generation:
            listed = any(t.server == self.options.single for t in upstream.listed())
            seen = self._single_seen = (self._generation, listed)
        return seen[1]

    def _entries(self, version: str, tools: list[ToolInfo], view: View) -> list[dict[str, Any]]:
        kept = self._listings.get((version, view))
        if kept is None or kept[0] != self._generation:
            single = self.options.single is not None
            entries = [_tool_entry(tool, single) for tool in view.select(tools)]
            entries = listable(
                version, "tools/list", entries, self._warned
            )  # less what this host cannot take
            if len(self._listings) >= MAX_LISTINGS:
                self._listings.clear()
            kept = self._listings[(version, view)] = (self._generation, entries)
        return kept[1]

    def input_schema(self, name: str) -> dict[str, Any] | None:
        """The input schema of the tool ``name`` as the latest protocol's hosts see it listed (None: not
        listed), for the SDK's check of a 2026-07-28 call's ``Mcp-Param-*`` headers."""
        entries = self.listing_now(LATEST_MODERN_VERSION)
        schemas = self._schemas
        if schemas is None or schemas[0] is not entries:
            by_name = {entry["name"]: entry["inputSchema"] for entry in entries or ()}
            schemas = self._schemas = (entries, by_name)
        return schemas[1].get(name)

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        name, arguments = params.name, params.arguments or {}
        grant = self.access.of(scope_of(ctx))
        if self.options.search:
            if name == SEARCH_TOOL:
                return await self._search(arguments, grant.view)
            if name != CALL_TOOL:
                raise MCPError(
                    types.INVALID_PARAMS, f"Unknown tool: {name} (tools: {SEARCH_TOOL}, {CALL_TOOL})"
                )
            name, arguments = _call_by_name(arguments)
        upstream = self._client()
        await upstream.wait_reached(self.options.list_wait)
        name, tool = self.target(upstream, name, grant.view)
        progress = _progress_to(ctx) if _wants_progress(ctx.params) else None

        async def routed(host: AsyncSupervisorClient) -> types.CallToolResult:
            wire = self.relayed(ctx.protocol_version, tool, await self.route(host, name, arguments, progress))
            return types.CallToolResult.model_validate(wire, by_name=False)

        try:
            async with upstream.calling(upstream.server_of(name, tool)) as client:
                return await self._hosts.call(ctx, params, client, routed, grant)
        except SupervisorGone as exc:
            return _error_result(f"UNAVAILABLE: {exc}")

    def target(self, upstream: Upstreams, name: str, view: View) -> tuple[str, ToolInfo | None]:
        """The registry's name of the tool a host calls ``name``, and its entry; ``MCPError`` when
        ``view`` (the facade's, or a gateway client's within it) does not show it."""
        if self.options.single is not None:
            name = self._prefixed(upstream, self.options.single, name)
        tool = upstream.find(name)
        if not view.may_call(name, tool):
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name}")
        return name, tool

    async def route(
        self,
        host: AsyncSupervisorClient,
        name: str,
        arguments: Mapping[str, Any],
        progress: ProgressCallback | None,
    ) -> ToolResult:
        """The routed call's result; the route's failures as an ``isError`` result saying what
        happened, but an unknown tool and bad arguments, which are ``MCPError``."""
        try:
            return await host.call_tool(
                name, arguments, self.options.timeout, raise_on_error=False, progress=progress
            )
        except SupervisorError as exc:
            if exc.code in JSONRPC_ERRORS:
                raise MCPError(types.INVALID_PARAMS, exc.message or str(exc)) from exc
            return error_result(f"{exc.code or 'ERROR'}: {exc.message or exc}")

    @staticmethod
    async def _missing_server(upstream: Upstreams, server: str) -> str:
        """Why a facade of one server shows no tools, when it is that the supervisor has no such server."""
        try:
            async with upstream.calling() as client:
                names = [row.server for row in await client.status()]
        except (SupervisorGone, SupervisorError):
            return ""
        if server in names:
            return ""
        return f"the supervisor has no server named {server!r} (servers: {', '.join(names) or 'none'})"

    def _prefixed(self, upstream: Upstreams, server: str, name: str) -> str:
        """The registry's name of ``server``'s tool ``name`` (by the registry's own rule when it does
        not list the tool now: its server restarting, say)."""
        originals = self._originals
        if originals is None or originals[0] != upstream.version:
            table = {tool.original_name: tool.name for tool in upstream.listed() if tool.server == server}
            originals = self._originals = (upstream.version, table)
        return originals[1].get(name) or free_name(server, name, ())

    @staticmethod
    def relayed(version: str, tool: ToolInfo | None, result: ToolResult) -> dict[str, Any]:
        """A routed call's result as a host of protocol ``version`` gets it (or why it cannot take it)."""
        wire: dict[str, Any] = {"content": result.content, "isError": result.is_error}
        if result.structured_content is not None:
            wire["structuredContent"] = result.structured_content
        why = refusal(version, "tools/call", wire, types.CallToolResult)
        if why is not None:  # the SDK would answer the host "Handler returned an invalid result"
            server = tool.server if tool is not None else "?"
            return _wire(
                error_result(
                    f"SERVER_ERROR: server {server!r} returned a result MCP hosts cannot take ({why})"
                )
            )
        return wire

    async def _search(self, arguments: Mapping[str, Any], view: View) -> types.CallToolResult:
        query, limit = arguments.get("query"), arguments.get("limit", self.options.search_limit)
        if not isinstance(query, str) or not query.strip():
            raise MCPError(types.INVALID_PARAMS, f"{SEARCH_TOOL}: 'query' must be a non-empty string")
        if type(limit) is not int or not 1 <= limit <= 100:
            raise MCPError(types.INVALID_PARAMS, f"{SEARCH_TOOL}: 'limit' must be an integer from 1 to 100")
        upstream = self._client()
        tools = view.select(await upstream.tools(self.options.list_wait))
        index = self._index
        if index is None or index[0] != self._generation or index[2] != view:
            index = self._index = (self._generation, SearchIndex.build(tools), view)
        hits = index[1].search(query, limit)
        found = [{**_tool_entry(hit.tool), "score": round(hit.score, 3)} for hit in hits]
        if not upstream.connected and not found:
            return _error_result(f"UNAVAILABLE: {upstream.why}")
        structured = {"tools": found}
        # The text is the same JSON (as MCP asks of structured results): a host that shows the model
        # only the text still gives it the input schemas that call_tool needs.
        text = json.dumps(structured, ensure_ascii=False, separators=(",", ":"))
        if not found:
            text = f"no tool matches {query!r}; try other words"
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=structured
        )


# ------------------------------------------------------------------ helpers


def _tool_entry(tool: ToolInfo, original: bool = False) -> dict[str, Any]:
    name = tool.original_name if original else tool.name
    entry: dict[str, Any] = {"name": name, "inputSchema": tool.input_schema or {"type": "object"}}
    if tool.description:
        entry["description"] = tool.description
    if tool.title is not None:
        entry["title"] = tool.title
    if tool.output_schema is not None:
        entry["outputSchema"] = tool.output_schema
    if tool.annotations is not None:
        entry["annotations"] = tool.annotations
    return entry


_SEARCH_TOOLS: Final[list[dict[str, Any]]] = [
    {
        "name": SEARCH_TOOL,
        "description": "Search the available tools by what they do. Returns the best matches with their "
        "names, descriptions and input schemas; then call one with call_tool.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "words describing the task or the tool"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "at most (10)"},
            },
            "required": ["query"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": CALL_TOOL,
        "description": "Call a tool found with search_tools, by its exact name, with arguments that match "
        "its input schema.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "the tool's name, as search_tools gave it"},
                "arguments": {"type": "object", "description": "the tool's arguments"},
            },
            "required": ["name"],
        },
    },
]


def _call_by_name(arguments: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    name, inner = arguments.get("name"), arguments.get("arguments", {})
    if not isinstance(name, str) or not name:
        raise MCPError(types.INVALID_PARAMS, f"{CALL_TOOL}: 'name' must be a tool's name (see {SEARCH_TOOL})")
    if not isinstance(inner, dict):
        raise MCPError(types.INVALID_PARAMS, f"{CALL_TOOL}: 'arguments' must be an object")
    return name, inner


def _wants_progress(params: Mapping[str, Any] | None) -> bool:
    meta = params.get("_meta") if params else None
    return isinstance(meta, Mapping) and meta.get("progressToken") is not None


def _progress_to(ctx: ServerRequestContext[Any, Any]) -> Any:
    session = ctx.session

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        await session.report_progress(progress, total, message)

    return relay


async def _tell_host(ctx: ServerRequestContext[Any, Any], level: types.LoggingLevel, text: str) -> None:
    """A log message to the host about its request (``notifications/message``; on 2026-07-28 only if
    the request asked for log messages at that level)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCPDeprecationWarning)  # logging: deprecated on 2026-07-28
            await ctx.session.send_log_message(level, text, "mcp-supervisor", ctx.request_id)
    except Exception as exc:  # boundary: a host that cannot be told is still answered
        log.debug("could not tell the host (%s: %s)", type(exc).__name__, exc)


def error_result(text: str) -> ToolResult:
    """What a host gets for a call the route could not make: ``text`` as an ``isError`` result."""
    return ToolResult(content=[{"type": "text", "text": text}], is_error=True, text=text)


def _wire(result: ToolResult) -> dict[str, Any]:
    return {"content": result.content, "isError": result.is_error}


def _error_result(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
