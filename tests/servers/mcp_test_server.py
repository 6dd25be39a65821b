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
    stderr {lines, text, raw_hex="", repeat=1}
                             -> writes ``lines`` lines of ``text`` to stderr, then the bytes ``raw_hex``
                                (hex digits) ``repeat`` times as they are (no newline added: invalid
                                UTF-8, a line that never ends), returns "ok"
    bad_schema               -> advertised with an inputSchema that is not valid JSON Schema; returns "bad"
    env {name}               -> the value of the environment variable ``name`` ("" when unset)
    pid {}                   -> the server's process id
    "weird name/with.chars"  -> returns "weird" (a name a client has to sanitise)
    spawn {count, detach=false}
                             -> starts ``count`` processes that sleep for 600 s and returns a JSON list of
                                their pids. Plain children stay in the server's process group; with
                                ``detach`` each is a classic daemon (double fork, ``os.setsid()`` in the
                                grandchild), so a ``killpg`` on the server's group does not reach it.
                                Every sleeper has stdin/stdout/stderr on /dev/null, no other fds and
                                SIGTERM at its default disposition (even under TEST_SERVER_IGNORE_SIGTERM)
    flood_stderr {megabytes, line_length=200}
                             -> writes ``megabytes`` MiB (2**20 bytes) to stderr as lines of
                                ``line_length`` bytes (newline included; the last one may be shorter),
                                synchronously, blocking the event loop while the pipe is full; returns
                                "flooded"
    garbage_stdout {lines, huge_bytes=0}
                             -> writes ``lines`` non-JSON lines and, when ``huge_bytes`` > 0, one line of
                                ``huge_bytes`` bytes plus its newline to the protocol stdout (between two
                                JSON-RPC messages, never inside one), then returns "garbage sent"
    change_tools {add=[], remove=[]}
                             -> adds echo tools with the given names and removes the named tools, then
                                publishes tools/list_changed to ``subscriptions/listen`` streams
    ask {message, schema}    -> asks the client for input (an elicitation, form mode, with ``schema``
                                as the requested schema) the 2026-07-28 way: an "input required"
                                result, answered by the client's retry; returns {action, content}
                                as structured content and as JSON text
    hang {}                  -> ``time.sleep(3600)`` inside the handler: blocks the whole event loop, so
                                the server answers nothing any more (pings included)
    progress {count, message=""}
                             -> sends ``count`` progress notifications (when the request has a
                                progressToken) as fast as it can: progress 1..count, total ``count``,
                                message "<message> <i>" (none when ``message`` is empty); returns
                                "sent <count>"
    extra_0 .. extra_{N-1}   -> echo ``text`` (N = TEST_SERVER_EXTRA_TOOLS)

Unknown tools get a JSON-RPC error -32602 ("Unknown tool: <name>").

Resources and prompts (only with TEST_SERVER_RESOURCES=1; otherwise neither capability is offered):
    test://doc/1, test://doc/2     text/plain: "document <n>"
    test://image/pixel.png         image/png blob: the 1x1 PNG
    templates test://doc/{n} (any n) and test://slow/{seconds} (sleeps, then "slept <seconds>")
    prompt greet {name, punctuation?}  -> one user message "Hello, <name><punctuation or !>"
    prompt "plain prompt/v1"           -> one user message "plain" (a name a client has to sanitise)
    An unknown URI gets -32002 ("Resource not found"), an unknown prompt -32602.

Environment:
    TEST_SERVER_PAGE_SIZE     page size of tools/list and resources/list, 0 (default) = all in one page
    TEST_SERVER_RESOURCES     "1": offer the resources and prompts above
    TEST_SERVER_LIST_DELAY    seconds resources/list sleeps before answering (default 0)
    TEST_SERVER_EXTRA_TOOLS   number of extra_* tools (default 0)
    TEST_SERVER_READ_ONLY     tool names, comma-separated, listed with the annotation readOnlyHint
    TEST_SERVER_STATE_DIR     directory for the ``slow`` marker files (optional)
    TEST_SERVER_STARTUP_STDERR  one line written to stderr at start (optional)
    TEST_SERVER_INIT_DELAY    seconds to sleep before serving (default 0)
    TEST_SERVER_HANG_INIT     "1": never serve, so ``initialize`` is never answered (an infinite
                              TEST_SERVER_INIT_DELAY; stdin is not read)
    TEST_SERVER_IGNORE_SIGTERM  "1": ignore SIGTERM (SIG_IGN, set before the startup stderr line); when
                              stdin closes, write PARKED_LINE ("stdin closed; staying alive ...") to
                              stderr and sleep forever with stdout still open: only SIGKILL stops it
    TEST_SERVER_NAME          server name reported to clients (default "mcp-test-server")
    TEST_SERVER_CLOSE_STDOUT_TOOL  "1": one more tool, ``close_stdout {tag}``: closes the protocol stdout,
                              creates ``<tag>.closed`` in the state dir, then blocks the event loop for
                              an hour (the process lives on, reading nothing, until it is killed)
    TEST_SERVER_SILENT_CHANGES  "1": no ``subscriptions/listen``, so tool changes are never announced
    TEST_SERVER_REQUIRE_TOKEN (--http/--sse) the bearer token every request must carry, else 401
    TEST_SERVER_HTTP_STATUS   (--http/--sse) answer every request with this HTTP status
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError

PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
WAV_TINY = "UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA=="
CURSOR_PREFIX = "page-"
MIB = 1 << 20
SPAWN_SLEEP_SECONDS = 600
PARKED_LINE = "stdin closed; staying alive (TEST_SERVER_IGNORE_SIGTERM)"

# A plain child: back to the default SIGTERM disposition (SIG_IGN survives exec), then sleep.
SLEEPER = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_DFL)
time.sleep(float(sys.argv[1]))
"""
# The intermediate of a detached child: fork, and in the grandchild setsid() *before* reporting the
# pid through fd 1 (a pipe to the server), so a reported pid has already left the process group.
# The grandchild then points fds 0-2 at /dev/null, which drops that pipe: the server reads EOF.
DAEMONIZER = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_DFL)
if os.fork() == 0:
    os.setsid()
    os.write(1, b"%d\\n" % os.getpid())
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    time.sleep(float(sys.argv[1]))
os._exit(0)
"""

ToolFn = Callable[[dict[str, Any]], Awaitable[types.CallToolResult]]


def _env_int(name: str, default: int = 0) -> int:
    return int(os.environ.get(name) or default)


def _env_flag(name: str) -> bool:
    return (os.environ.get(name) or "").strip().lower() not in ("", "0", "false", "no")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class ProtocolStdout:
    """The stream the JSON-RPC messages go out on, shared by the SDK's writer and ``garbage_stdout``.

    ``stdio_server()`` takes fd 1 for itself (it serves the wire from a private duplicate and points
    fd 1 at stderr), which would leave no way to reach the wire. So ``claim()`` does the same divert
    itself and hands this object to ``stdio_server(stdout=...)``. Every ``write`` goes out whole under
    one lock, so garbage always lands between two messages, never inside one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None

    @contextmanager
    def claim(self) -> Iterator[ProtocolStdout]:
        # Close-on-exec and above 2: children never inherit the wire.
        self._fd = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
        os.dup2(2, 1)  # stray prints (and inheriting children) hit stderr, as under stdio_server()
        try:
            yield self
        finally:
            os.dup2(self._fd, 1)  # like stdio_server(): the wire is fd 1 again on exit

    def write(self, text: str) -> int:
        self.write_bytes(text.encode("utf-8"))
        return len(text)

    def write_bytes(self, data: bytes) -> None:
        if self._fd is None:
            raise MCPError(code=types.INTERNAL_ERROR, message="the protocol stdout is not claimed")
        with self._lock:
            _write_all(self._fd, data)

    def flush(self) -> None:
        """Nothing is buffered."""


PROTOCOL_STDOUT = ProtocolStdout()
_children: list[subprocess.Popen[bytes]] = []  # plain spawn children, kept so they are not collected


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)])


def _schema(props: dict[str, dict[str, Any]], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required}


STRING = {"type": "string"}
NUMBER = {"type": "number"}
INTEGER = {"type": "integer"}

STDERR = {"lines": INTEGER, "text": STRING, "raw_hex": STRING, "repeat": {**INTEGER, "default": 1}}
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


async def _change_tools(args: dict[str, Any]) -> types.CallToolResult:
    raise AssertionError("change_tools changes the server's own tool table: see build_server")


async def _ask(args: dict[str, Any]) -> types.CallToolResult:
    raise AssertionError("ask needs the request context: see _ask_client")


async def _progress(args: dict[str, Any]) -> types.CallToolResult:
    raise AssertionError("progress needs the request context: see _send_progress")


async def _send_progress(ctx: ServerRequestContext[Any], args: dict[str, Any]) -> types.CallToolResult:
    count, message = int(args["count"]), str(args.get("message", ""))
    for i in range(1, count + 1):
        await ctx.session.report_progress(i, count, f"{message} {i}" if message else None)
    return _text(f"sent {count}")


def _ask_client(params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult:
    """The 2026-07-28 way: answer "input required" with the form; the client calls again with its answer."""
    args = params.arguments or {}
    answer = (params.input_responses or {}).get("ask")
    if answer is None:
        form = types.ElicitRequestFormParams(message=str(args["message"]), requested_schema=args["schema"])
        return types.InputRequiredResult(input_requests={"ask": types.ElicitRequest(params=form)})
    if not isinstance(answer, types.ElicitResult):
        raise ValueError(f"expected an elicitation result, got {type(answer).__name__}")
    outcome = {"action": answer.action, "content": answer.content}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(outcome))], structured_content=outcome
    )


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
    raw = bytes.fromhex(str(args.get("raw_hex", ""))) * int(args.get("repeat", 1))
    if raw:
        _write_all(2, raw)
    return _text("ok")


async def _bad(args: dict[str, Any]) -> types.CallToolResult:
    return _text("bad")


async def _env(args: dict[str, Any]) -> types.CallToolResult:
    return _text(os.environ.get(str(args["name"]), ""))


async def _pid(args: dict[str, Any]) -> types.CallToolResult:
    return _text(str(os.getpid()))


async def _weird(args: dict[str, Any]) -> types.CallToolResult:
    return _text("weird")


def _spawn_attached() -> int:
    child = subprocess.Popen(
        [sys.executable, "-c", SLEEPER, str(SPAWN_SLEEP_SECONDS)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
    )
    _children.append(child)
    return child.pid


def _spawn_detached() -> int:
    intermediate = subprocess.Popen(
        [sys.executable, "-c", DAEMONIZER, str(SPAWN_SLEEP_SECONDS)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        close_fds=True,
    )
    out, _ = intermediate.communicate(timeout=30)  # EOF once the grandchild dropped the pipe
    if intermediate.returncode != 0 or not out.strip().isdigit():
        raise MCPError(
            code=types.INTERNAL_ERROR,
            message=f"detaching failed: exit {intermediate.returncode}, output {out!r}",
        )
    return int(out)


def _spawn_all(count: int, detach: bool) -> list[int]:
    spawn_one = _spawn_detached if detach else _spawn_attached
    return [spawn_one() for _ in range(count)]


async def _spawn(args: dict[str, Any]) -> types.CallToolResult:
    count = int(args["count"])
    if count < 0:
        raise ValueError(f"count must not be negative: {count}")
    pids = await anyio.to_thread.run_sync(_spawn_all, count, bool(args.get("detach", False)))
    return _text(json.dumps(pids))


async def _flood_stderr(args: dict[str, Any]) -> types.CallToolResult:
    total = int(float(args["megabytes"]) * MIB)
    line_length = int(args.get("line_length", 200))
    if total < 0 or line_length < 1:
        raise ValueError(f"need megabytes >= 0 and line_length >= 1, got {total} bytes, {line_length}")
    line = (b"flood " + b"x" * line_length)[: line_length - 1] + b"\n"
    chunk = line * max(1, (64 * 1024) // line_length)
    sys.stderr.flush()
    remaining = total
    while remaining >= len(chunk):
        _write_all(2, chunk)
        remaining -= len(chunk)
    whole, rest = divmod(remaining, line_length)
    _write_all(2, line * whole + (line[: rest - 1] + b"\n" if rest else b""))
    return _text("flooded")


async def _garbage_stdout(args: dict[str, Any]) -> types.CallToolResult:
    lines = int(args["lines"])
    huge_bytes = int(args.get("huge_bytes", 0))
    garbage = [f"garbage line {i}: this is not JSON-RPC }}{{ <<>>\n".encode() for i in range(lines)]
    if huge_bytes > 0:
        garbage.append(b"H" * huge_bytes + b"\n")
    # The reply to this call goes out after this write, on the same stream: the garbage comes first.
    await anyio.to_thread.run_sync(PROTOCOL_STDOUT.write_bytes, b"".join(garbage))
    return _text("garbage sent")


async def _close_stdout(args: dict[str, Any]) -> types.CallToolResult:
    fd = PROTOCOL_STDOUT._fd  # the wire (see ProtocolStdout.claim)
    if fd is not None:
        os.close(fd)
    _mark(str(args["tag"]), "closed")
    time.sleep(3600)  # noqa: ASYNC251 - alive and deaf, as a server whose stdout broke may be
    return _text("woke up")


async def _hang(args: dict[str, Any]) -> types.CallToolResult:
    time.sleep(3600)  # noqa: ASYNC251 - blocking the event loop is the point
    return _text("woke up")


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
        (tool("stderr", "Write lines (and bytes) to stderr.", _schema(STDERR, ["lines", "text"])), _stderr),
        (tool("bad_schema", "Advertised with an invalid input schema.", BAD_SCHEMA), _bad),
        (tool("env", "Read an environment variable.", _schema({"name": STRING})), _env),
        (tool("pid", "Return the server's process id.", _schema({})), _pid),
        (tool("weird name/with.chars", "A name that needs sanitising.", _schema({})), _weird),
        (
            tool(
                "spawn",
                "Start long-sleeping child processes (detach: escape the process group).",
                _schema({"count": INTEGER, "detach": {"type": "boolean", "default": False}}, ["count"]),
            ),
            _spawn,
        ),
        (
            tool(
                "flood_stderr",
                "Write megabytes of lines to stderr as fast as possible.",
                _schema({"megabytes": NUMBER, "line_length": {**INTEGER, "default": 200}}, ["megabytes"]),
            ),
            _flood_stderr,
        ),
        (
            tool(
                "garbage_stdout",
                "Write non-JSON lines (and optionally one huge line) to the protocol stdout.",
                _schema({"lines": INTEGER, "huge_bytes": {**INTEGER, "default": 0}}, ["lines"]),
            ),
            _garbage_stdout,
        ),
        (tool("hang", "Block the server's event loop for an hour.", _schema({})), _hang),
        (
            tool(
                "change_tools",
                "Add echo tools and remove tools, then notify list_changed.",
                _schema(
                    {"add": {"type": "array", "items": STRING}, "remove": {"type": "array", "items": STRING}},
                    [],
                ),
            ),
            _change_tools,
        ),
        (
            tool(
                "progress",
                "Send count progress notifications as fast as possible, then answer.",
                _schema({"count": INTEGER, "message": {**STRING, "default": ""}}, ["count"]),
            ),
            _progress,
        ),
        (
            tool(
                "ask",
                "Ask the client for input (elicitation) with the given form schema.",
                _schema({"message": STRING, "schema": {"type": "object"}}),
            ),
            _ask,
        ),
    ]
    for i in range(extra):
        tools.append((tool(f"extra_{i}", f"Extra echo tool #{i}.", _schema({"text": STRING})), _echo))
    return tools


RESOURCES = [
    types.Resource(name="doc-1", uri="test://doc/1", mime_type="text/plain", description="Document 1."),
    types.Resource(name="doc-2", uri="test://doc/2", mime_type="text/plain", description="Document 2."),
    types.Resource(
        name="pixel", uri="test://image/pixel.png", mime_type="image/png", description="A 1x1 PNG."
    ),
]
RESOURCE_TEMPLATES = [
    types.ResourceTemplate(name="doc", uri_template="test://doc/{n}", mime_type="text/plain"),
    types.ResourceTemplate(
        name="slow", uri_template="test://slow/{seconds}", description="Sleeps, then answers."
    ),
]
PROMPTS = [
    types.Prompt(
        name="greet",
        description="Greet someone.",
        arguments=[
            types.PromptArgument(name="name", description="Who to greet.", required=True),
            types.PromptArgument(name="punctuation", required=False),
        ],
    ),
    types.Prompt(name="plain prompt/v1", description="No arguments."),
]


def _page(
    listed: list[Any], params: types.PaginatedRequestParams | None, size: int
) -> tuple[list[Any], str | None]:
    """One page of ``listed`` (everything when ``size`` <= 0) and the next cursor."""
    if size <= 0:
        return listed, None
    cursor = params.cursor if params is not None else None
    start = 0
    if cursor is not None:
        offset = cursor.removeprefix(CURSOR_PREFIX)
        if not cursor.startswith(CURSOR_PREFIX) or not offset.isdigit() or int(offset) > len(listed):
            raise MCPError(code=types.INVALID_PARAMS, message=f"Invalid cursor: {cursor!r}")
        start = int(offset)
    end = start + size
    return listed[start:end], f"{CURSOR_PREFIX}{end}" if end < len(listed) else None


async def read_resource(
    ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    uri = str(params.uri)
    contents: types.TextResourceContents | types.BlobResourceContents
    if uri.startswith("test://doc/"):
        contents = types.TextResourceContents(uri=uri, mime_type="text/plain", text=f"document {uri[11:]}")
    elif uri == "test://image/pixel.png":
        contents = types.BlobResourceContents(uri=uri, mime_type="image/png", blob=PNG_1X1)
    elif uri.startswith("test://slow/"):
        seconds = uri.removeprefix("test://slow/")
        await anyio.sleep(float(seconds))
        contents = types.TextResourceContents(uri=uri, text=f"slept {seconds}")
    else:
        raise MCPError(code=-32002, message=f"Resource not found: {uri}")
    return types.ReadResourceResult(contents=[contents])


async def get_prompt(
    ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
) -> types.GetPromptResult:
    args = params.arguments or {}
    if params.name == "greet":
        if "name" not in args:
            raise MCPError(code=types.INVALID_PARAMS, message="greet needs the argument 'name'")
        text = f"Hello, {args['name']}{args.get('punctuation', '!')}"
    elif params.name == "plain prompt/v1":
        text = "plain"
    else:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")
    message = types.PromptMessage(role="user", content=types.TextContent(text=text))
    return types.GetPromptResult(description=f"prompt {params.name}", messages=[message])


def build_server() -> Server[Any]:
    page_size = _env_int("TEST_SERVER_PAGE_SIZE")
    list_delay = float(os.environ.get("TEST_SERVER_LIST_DELAY") or 0)
    tools = build_tools(_env_int("TEST_SERVER_EXTRA_TOOLS"))
    if _env_flag("TEST_SERVER_CLOSE_STDOUT_TOOL"):
        closer = types.Tool(
            name="close_stdout",
            description="Close the protocol stdout and block.",
            input_schema=_schema({"tag": STRING}),
        )
        tools.append((closer, _close_stdout))
    read_only = {name for name in (os.environ.get("TEST_SERVER_READ_ONLY") or "").split(",") if name}
    tools = [
        (t.model_copy(update={"annotations": types.ToolAnnotations(read_only_hint=True)}), fn)
        if t.name in read_only
        else (t, fn)
        for t, fn in tools
    ]
    by_name = {t.name: fn for t, fn in tools}

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        page, next_cursor = _page([t for t, _ in tools], params, page_size)
        return types.ListToolsResult(tools=page, next_cursor=next_cursor)

    async def list_resources(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        if list_delay > 0:
            await anyio.sleep(list_delay)
        page, next_cursor = _page(RESOURCES, params, page_size)
        return types.ListResourcesResult(resources=page, next_cursor=next_cursor)

    async def list_resource_templates(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=RESOURCE_TEMPLATES)

    async def list_prompts(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=PROMPTS)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        fn = by_name.get(params.name)
        if fn is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        try:
            if fn is _ask:
                return _ask_client(params)
            if fn is _change_tools:
                return await change_tools(params.arguments or {})
            if fn is _progress:
                return await _send_progress(ctx, params.arguments or {})
            return await fn(params.arguments or {})
        except (KeyError, TypeError, ValueError) as exc:
            raise MCPError(
                code=types.INVALID_PARAMS, message=f"Invalid arguments for {params.name}: {exc!r}"
            ) from exc

    bus = InMemorySubscriptionBus()

    async def change_tools(args: dict[str, Any]) -> types.CallToolResult:
        """Add echo tools and remove tools by name, then tell listening clients."""
        for added in args.get("add", []):
            added_tool = types.Tool(
                name=added, description="Added while running.", input_schema=_schema({"text": STRING})
            )
            tools.append((added_tool, _echo))
            by_name[added] = _echo
        for removed in args.get("remove", []):
            tools[:] = [(t, fn) for t, fn in tools if t.name != removed]
            by_name.pop(removed, None)
        await bus.publish(ToolsListChanged())
        return _text(f"{len(tools)} tools")

    name = os.environ.get("TEST_SERVER_NAME") or "mcp-test-server"
    catalog: dict[str, Any] = {}
    if _env_flag("TEST_SERVER_RESOURCES"):
        catalog = {
            "on_list_resources": list_resources,
            "on_list_resource_templates": list_resource_templates,
            "on_read_resource": read_resource,
            "on_list_prompts": list_prompts,
            "on_get_prompt": get_prompt,
        }
    return Server(
        name,
        version="0.1.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=None if _env_flag("TEST_SERVER_SILENT_CHANGES") else ListenHandler(bus),
        **catalog,
    )


async def main() -> None:
    ignore_sigterm = _env_flag("TEST_SERVER_IGNORE_SIGTERM")
    if ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    banner = os.environ.get("TEST_SERVER_STARTUP_STDERR")
    if banner:
        sys.stderr.write(banner.replace("\n", " ") + "\n")
        sys.stderr.flush()
    delay = float(os.environ.get("TEST_SERVER_INIT_DELAY") or 0)
    if _env_flag("TEST_SERVER_HANG_INIT"):
        delay = math.inf
    if delay > 0:
        await anyio.sleep(delay)
    server = build_server()
    with PROTOCOL_STDOUT.claim() as protocol_stdout:
        # Duck-typed: the SDK's writer only calls write() and flush() (in a worker thread).
        stdout = anyio.wrap_file(cast("IO[str]", protocol_stdout))
        async with stdio_server(stdout=stdout) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    if ignore_sigterm:
        sys.stderr.write(PARKED_LINE + "\n")
        sys.stderr.flush()
        await anyio.sleep_forever()


def serve_http(transport: str, port: int) -> None:
    """``--http PORT`` / ``--sse PORT``: the same tools over HTTP on 127.0.0.1:PORT.

    Streamable HTTP is served at ``/mcp``; legacy SSE at ``/sse`` (messages posted to ``/messages/``).
    With TEST_SERVER_REQUIRE_TOKEN set, a request without ``Authorization: Bearer <token>`` gets 401;
    with TEST_SERVER_HTTP_STATUS set, every request gets that status.
    """
    import uvicorn  # the SDK's HTTP server side depends on it

    server = build_server()
    app: Any
    if transport == "--sse":
        from mcp.server.sse import SseServerTransport
        from starlette.applications import Starlette
        from starlette.responses import Response
        from starlette.routing import Mount, Route

        sse = SseServerTransport("/messages/")

        async def handle_sse(request: Any) -> Response:
            async with sse.connect_sse(request.scope, request.receive, request._send) as (read, write):
                await server.run(read, write, server.create_initialization_options())
            return Response()

        routes = [
            Route("/sse", handle_sse, methods=["GET"]),
            Mount("/messages/", app=sse.handle_post_message),
        ]
        app = Starlette(routes=routes)
    else:
        app = server.streamable_http_app(host="127.0.0.1")
    token = os.environ.get("TEST_SERVER_REQUIRE_TOKEN")
    status = int(os.environ.get("TEST_SERVER_HTTP_STATUS") or 0)
    if token or status:
        inner = app

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            headers = dict(scope.get("headers") or [])
            refusal = 0
            if scope["type"] == "http":
                wrong_token = token and headers.get(b"authorization") != f"Bearer {token}".encode()
                refusal = 401 if wrong_token else status
            if refusal:
                await send({"type": "http.response.start", "status": refusal, "headers": []})
                await send({"type": "http.response.body", "body": b"refused by TEST_SERVER_HTTP_STATUS"})
                return
            await inner(scope, receive, send)

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("--http", "--sse"):
        serve_http(sys.argv[1], int(sys.argv[2]))
    else:
        anyio.run(main)
