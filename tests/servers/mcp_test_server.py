"""A small stdio MCP server for the supervisor's end-to-end tests.

Run it as ``python tests/servers/mcp_test_server.py`` (stdlib + mcp + anyio only).

Tools:
    echo {text}              -> one text item equal to ``text``
    add {a, b}               -> the sum as text plus ``structuredContent`` {"sum": a + b}
                                (advertises an outputSchema)
    slow {seconds, tag}      -> sleeps, then "done <tag>"; writes ``<tag>.started`` / ``<tag>.cancelled``
                                marker files into TEST_SERVER_STATE_DIR when that is set
    crash {code=3}           -> prints "crashing with <code>" to stderr and ``os._exit(code)``
    fail {message}           -> a result with ``isError: true`` and ``message`` as its text
    raise_error {message}    -> a JSON-RPC error (-32603, ``message``), not an isError result
    image {}                 -> a 1x1 PNG image item plus a text item
    mixed {}                 -> text, audio (audio/wav), resource_link (test://doc/1) and an embedded
                                text resource (test://doc/2)
    empty {}                 -> a result with an empty content list
    stderr {lines, text}     -> writes ``lines`` lines of ``text`` to stderr, returns "ok"
    bad_schema               -> advertised with an inputSchema that is not valid JSON Schema; returns "bad"
    env {name}               -> the value of the environment variable ``name`` ("" when unset)
    pid {}                   -> the server's process id
    "weird name/with.chars"  -> returns "weird" (a name a client has to sanitise)
    extra_0 .. extra_{N-1}   -> echo ``text`` (N = TEST_SERVER_EXTRA_TOOLS)

Unknown tools get a JSON-RPC error -32602 ("Unknown tool: <name>").

Environment:
    TEST_SERVER_PAGE_SIZE     page size of tools/list, 0 (default) = everything in one page
    TEST_SERVER_EXTRA_TOOLS   number of extra_* tools (default 0)
    TEST_SERVER_STATE_DIR     directory for the ``slow`` marker files (optional)
    TEST_SERVER_STARTUP_STDERR  one line written to stderr at start (optional)
    TEST_SERVER_INIT_DELAY    seconds to sleep before serving (default 0)
    TEST_SERVER_NAME          server name reported to clients (default "mcp-test-server")
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
WAV_TINY = "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA=="
CURSOR_PREFIX = "page-"

ToolFn = Callable[[dict[str, Any]], Awaitable[types.CallToolResult]]


def _env_int(name: str, default: int = 0) -> int:
    return int(os.environ.get(name) or default)


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)])


def _schema(props: dict[str, dict[str, Any]], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required}


STRING = {"type": "string"}
NUMBER = {"type": "number"}
INTEGER = {"type": "integer"}

SUM_SCHEMA = {"type": "object", "properties": {"sum": NUMBER}, "required": ["sum"]}
# Accepted by the MCP wire models (an object with `type: "object"`); jsonschema's check_schema rejects it.
BAD_SCHEMA = {"type": "object", "properties": {"x": {"type": "not-a-type"}}}


def _mark(tag: str, suffix: str) -> None:
    """Atomically create ``<STATE_DIR>/<tag>.<suffix>`` (no-op without a state dir)."""
    state_dir = os.environ.get("TEST_SERVER_STATE_DIR")
    if not state_dir:
        return
    target = Path(state_dir) / f"{tag}.{suffix}"
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(f"{os.getpid()}\n")
    os.replace(tmp, target)


async def _echo(args: dict[str, Any]) -> types.CallToolResult:
    return _text(str(args["text"]))


async def _add(args: dict[str, Any]) -> types.CallToolResult:
    total = args["a"] + args["b"]
    return types.CallToolResult(
        content=[types.TextContent(text=str(total))], structured_content={"sum": total}
    )


async def _slow(args: dict[str, Any]) -> types.CallToolResult:
    tag = str(args["tag"])
    _mark(tag, "started")
    try:
        await anyio.sleep(float(args["seconds"]))
    except anyio.get_cancelled_exc_class():
        # The client's notifications/cancelled cancels this handler's scope. The marker write is
        # synchronous (no checkpoint), so nothing can interrupt it: it is effectively shielded.
        _mark(tag, "cancelled")
        raise
    return _text(f"done {tag}")


async def _crash(args: dict[str, Any]) -> types.CallToolResult:
    code = int(args.get("code", 3))
    sys.stderr.write(f"crashing with {code}\n")
    sys.stderr.flush()
    os._exit(code)


async def _fail(args: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=str(args["message"]))], is_error=True)


async def _raise_error(args: dict[str, Any]) -> types.CallToolResult:
    raise MCPError(code=types.INTERNAL_ERROR, message=str(args["message"]))


async def _image(args: dict[str, Any]) -> types.CallToolResult:
    image = types.ImageContent(data=PNG_1X1, mime_type="image/png")
    return types.CallToolResult(content=[image, types.TextContent(text="a 1x1 png")])


async def _mixed(args: dict[str, Any]) -> types.CallToolResult:
    doc2 = types.TextResourceContents(uri="test://doc/2", mime_type="text/plain", text="embedded document 2")
    content: list[types.ContentBlock] = [
        types.TextContent(text="mixed content"),
        types.AudioContent(data=WAV_TINY, mime_type="audio/wav"),
        types.ResourceLink(name="doc-1", uri="test://doc/1", mime_type="text/plain"),
        types.EmbeddedResource(resource=doc2),
    ]
    return types.CallToolResult(content=content)


async def _empty(args: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[])


async def _stderr(args: dict[str, Any]) -> types.CallToolResult:
    text = str(args["text"])
    for _ in range(int(args["lines"])):
        sys.stderr.write(text + "\n")
    sys.stderr.flush()
    return _text("ok")


async def _bad(args: dict[str, Any]) -> types.CallToolResult:
    return _text("bad")


async def _env(args: dict[str, Any]) -> types.CallToolResult:
    return _text(os.environ.get(str(args["name"]), ""))


async def _pid(args: dict[str, Any]) -> types.CallToolResult:
    return _text(str(os.getpid()))


async def _weird(args: dict[str, Any]) -> types.CallToolResult:
    return _text("weird")


def build_tools(extra: int) -> list[tuple[types.Tool, ToolFn]]:
    """All tools in listing order, each with its implementation."""

    def tool(name: str, description: str, schema: dict[str, Any], **kw: Any) -> types.Tool:
        return types.Tool(name=name, description=description, input_schema=schema, **kw)

    tools: list[tuple[types.Tool, ToolFn]] = [
        (tool("echo", "Echo the text back.", _schema({"text": STRING})), _echo),
        (
            tool("add", "Add two numbers.", _schema({"a": NUMBER, "b": NUMBER}), output_schema=SUM_SCHEMA),
            _add,
        ),
        (tool("slow", "Sleep, then answer.", _schema({"seconds": NUMBER, "tag": STRING})), _slow),
        (tool("crash", "Kill the server process.", _schema({"code": {**INTEGER, "default": 3}}, [])), _crash),
        (tool("fail", "Return an isError result.", _schema({"message": STRING})), _fail),
        (tool("raise_error", "Fail with a JSON-RPC error.", _schema({"message": STRING})), _raise_error),
        (tool("image", "Return a tiny PNG.", _schema({})), _image),
        (tool("mixed", "Return text, audio, a resource link and a resource.", _schema({})), _mixed),
        (tool("empty", "Return no content.", _schema({})), _empty),
        (tool("stderr", "Write lines to stderr.", _schema({"lines": INTEGER, "text": STRING})), _stderr),
        (tool("bad_schema", "Advertised with an invalid input schema.", BAD_SCHEMA), _bad),
        (tool("env", "Read an environment variable.", _schema({"name": STRING})), _env),
        (tool("pid", "Return the server's process id.", _schema({})), _pid),
        (tool("weird name/with.chars", "A name that needs sanitising.", _schema({})), _weird),
    ]
    for i in range(extra):
        tools.append((tool(f"extra_{i}", f"Extra echo tool #{i}.", _schema({"text": STRING})), _echo))
    return tools


def build_server() -> Server[Any]:
    page_size = _env_int("TEST_SERVER_PAGE_SIZE")
    tools = build_tools(_env_int("TEST_SERVER_EXTRA_TOOLS"))
    by_name = {t.name: fn for t, fn in tools}

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        listed = [t for t, _ in tools]
        if page_size <= 0:
            return types.ListToolsResult(tools=listed)
        cursor = params.cursor if params is not None else None
        start = 0
        if cursor is not None:
            offset = cursor.removeprefix(CURSOR_PREFIX)
            if not cursor.startswith(CURSOR_PREFIX) or not offset.isdigit() or int(offset) > len(listed):
                raise MCPError(code=types.INVALID_PARAMS, message=f"Invalid cursor: {cursor!r}")
            start = int(offset)
        end = start + page_size
        next_cursor = f"{CURSOR_PREFIX}{end}" if end < len(listed) else None
        return types.ListToolsResult(tools=listed[start:end], next_cursor=next_cursor)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        fn = by_name.get(params.name)
        if fn is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        try:
            return await fn(params.arguments or {})
        except (KeyError, TypeError, ValueError) as exc:
            raise MCPError(
                code=types.INVALID_PARAMS, message=f"Invalid arguments for {params.name}: {exc!r}"
            ) from exc

    name = os.environ.get("TEST_SERVER_NAME") or "mcp-test-server"
    return Server(name, version="0.1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    banner = os.environ.get("TEST_SERVER_STARTUP_STDERR")
    if banner:
        sys.stderr.write(banner.replace("\n", " ") + "\n")
        sys.stderr.flush()
    delay = float(os.environ.get("TEST_SERVER_INIT_DELAY") or 0)
    if delay > 0:
        await anyio.sleep(delay)
    server = build_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
