"""The ways in that tests/benchmarks/peers.py measures (``PATHS``): each opened as its host opens it, and
what it gives its caller (a listing by backend server, an echo call)."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client

from supervisor.client import AsyncSupervisorClient
from tests.benchmarks.common import (
    EVERYTHING,
    NODE,
    REPO,
    child_pids,
)
from tests.benchmarks.facade import text_of
from tests.benchmarks.fleet import cmdline
from tests.benchmarks.peer_install import Peer
from tests.benchmarks.peer_processes import (
    descendants,
    served,
    stop_orphan,
)
from workers.remote import keepalive_http_client

ECHO_ARGS = {"message": "hi"}
ECHO_TEXT = "Echo: hi"
CALL_TIMEOUT = 10.0  # seconds a call of the kill run may take (and the facades' --timeout)
LIST_WAIT = 30.0  # the stub's list_tools(wait=...)
FASTMCP_PROXY = """\
import json, sys
from fastmcp.server import create_proxy
config = json.load(open(sys.argv[1]))
create_proxy(config, name="fastmcp-proxy", mode="auto").run(transport="stdio", show_banner=False)
"""
FASTMCP_MOUNT = """\
import json, sys
from fastmcp import FastMCP
from fastmcp.server import create_proxy
main = FastMCP("fastmcp-mount")
for name, entry in json.load(open(sys.argv[1]))["mcpServers"].items():
    main.mount(create_proxy({"mcpServers": {name: entry}}, name=name, mode="auto"), namespace=name)
main.run(transport="stdio", show_banner=False)
"""


# ------------------------------------------------------------------ what a path gives its caller


@dataclass(frozen=True)
class Listing:
    tools: dict[str, frozenset[str]]  # backend server -> its tools' original names
    own: frozenset[str]  # tools of no backend server: the path's own

    @property
    def total(self) -> int:
        return len(self.own) + sum(len(t) for t in self.tools.values())

    def holds(self, reference: Listing) -> bool:
        """Every backend server's tools that ``reference`` has are here."""
        return all(self.tools.get(s, frozenset()) >= names for s, names in reference.tools.items())


def attribute(names: list[tuple[str | None, str]], servers: list[str], prefix: str) -> Listing:
    """Tool names by backend server: a session of one server (``(server, name)``) holds its own,
    unprefixed; an aggregating one (``(None, name)``) names them ``prefix.format(server) + tool``."""
    tools: dict[str, set[str]] = {s: set() for s in servers}
    own: set[str] = set()
    for server, name in names:
        if server is not None:
            tools[server].add(name)
            continue
        for s in servers:
            if name.startswith(head := prefix.format(s)):
                tools[s].add(name[len(head) :])
                break
        else:
            own.add(name)
    return Listing({s: frozenset(t) for s, t in tools.items()}, frozenset(own))


@dataclass
class Host:
    listing: Callable[[], Awaitable[Listing]]
    echo: Callable[[], Awaitable[None]]  # one call of s0's echo, its result checked
    roots: list[int]  # processes whose trees hold the path's backends
    protocol: str
    call: Callable[[str, str, dict[str, Any]], Awaitable[str]] | None = None  # (server, tool, args) -> text


async def tool_names(client: Client) -> list[str]:
    """Every page of tools/list."""
    names: list[str] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        names += [t.name for t in page.tools]
        if not (cursor := page.next_cursor):
            return names


def check_echo(who: str, text: str) -> None:
    if text != ECHO_TEXT:
        raise RuntimeError(f"{who}: echo answered {text!r}, not {ECHO_TEXT!r}")


def mcp_host(
    who: str, sessions: list[tuple[str | None, Client]], servers: list[str], prefix: str, roots: list[int]
) -> Host:
    """Sessions of the SDK's Client: one aggregating (server None) or one per server."""
    own = {server: client for server, client in sessions if server is not None}

    async def listing() -> Listing:
        pages: list[list[str]] = [[] for _ in sessions]

        async def one(i: int) -> None:
            pages[i] = await tool_names(sessions[i][1])

        async with trio.open_nursery() as nursery:
            for i in range(len(sessions)):
                nursery.start_soon(one, i)
        named = [(server, n) for (server, _), names in zip(sessions, pages, strict=True) for n in names]
        return attribute(named, servers, prefix)

    async def call(server: str, tool: str, arguments: dict[str, Any]) -> str:
        """``tool`` of ``server``: on its own session, or on the aggregating one by its prefixed name."""
        name = tool if server in own else prefix.format(server) + tool
        result = await own.get(server, sessions[0][1]).call_tool(name, arguments)
        if result.is_error:
            raise RuntimeError(f"{who}: {name} answered isError: {text_of(result.content)}")
        return text_of(result.content)

    async def echo() -> None:
        check_echo(who, await call(servers[0], "echo", ECHO_ARGS))

    return Host(listing, echo, roots, str(sessions[0][1].protocol_version), call)


@asynccontextmanager
async def opened(
    makers: list[Callable[[], AbstractAsyncContextManager[Client]]],
) -> AsyncIterator[list[Client]]:
    """Every session entered at once, as a host starts its servers; each held by a task of its own."""
    if len(makers) == 1:
        async with makers[0]() as client:
            yield [client]
        return
    clients: list[Client | None] = [None] * len(makers)
    all_open, leave = trio.Event(), trio.Event()

    async def hold(i: int) -> None:
        async with makers[i]() as client:
            clients[i] = client
            if all(c is not None for c in clients):
                all_open.set()
            await leave.wait()

    async with trio.open_nursery() as nursery:
        for i in range(len(makers)):
            nursery.start_soon(hold, i)
        await all_open.wait()
        try:
            yield [c for c in clients if c is not None]
        finally:
            leave.set()


# ------------------------------------------------------------------ the paths


@dataclass
class Ctx:
    """What the paths of one server count share."""

    servers: dict[str, dict[str, Any]]  # mcpServers entries s0..s{N-1}
    tmp: Path
    endpoint: str  # the running supervisor's
    supervisor_pid: int
    peers: dict[str, Peer]
    token: str
    configs: dict[str, Path]  # "mcp": {"mcpServers": ...}, "magg": magg's own format
    scripts: dict[str, Path]  # the fastmcp servers' scripts
    logs: dict[str, Path] = field(default_factory=dict)  # stderr of each path's processes
    host_mode: str = "auto"  # the host's mcp.Client mode: "auto", or "legacy" (the initialize handshake)

    @property
    def names(self) -> list[str]:
        return list(self.servers)

    def log(self, key: str) -> Path:
        return self.logs.setdefault(key, self.tmp / f"{key}.stderr")


def host_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**get_default_environment(), **(extra or {})}


@asynccontextmanager
async def stdio_host(
    ctx: Ctx, key: str, entries: list[tuple[str | None, StdioServerParameters]], prefix: str, roots: list[int]
) -> AsyncIterator[Host]:
    with ExitStack() as files:
        errlog = files.enter_context(ctx.log(key).open("a"))
        before = child_pids(os.getpid())

        def maker(params: StdioServerParameters) -> Callable[[], AbstractAsyncContextManager[Client]]:
            return lambda: Client(stdio_client(params, errlog=errlog), cache=None, mode=ctx.host_mode)

        async with opened([maker(p) for _, p in entries]) as clients:
            spawned = sorted(child_pids(os.getpid()) - before)
            sessions = [(s, c) for (s, _), c in zip(entries, clients, strict=True)]
            yield mcp_host(key, sessions, ctx.names, prefix, spawned + roots)


@asynccontextmanager
async def http_host(
    ctx: Ctx,
    key: str,
    urls: list[tuple[str | None, str]],
    headers: dict[str, str] | None,
    prefix: str,
    roots: list[int],
) -> AsyncIterator[Host]:
    async with keepalive_http_client(headers) as http:

        def maker(url: str) -> Callable[[], AbstractAsyncContextManager[Client]]:
            return lambda: Client(
                streamable_http_client(url, http_client=http), cache=None, mode=ctx.host_mode
            )

        async with opened([maker(u) for _, u in urls]) as clients:
            sessions = [(s, c) for (s, _), c in zip(urls, clients, strict=True)]
            yield mcp_host(key, sessions, ctx.names, prefix, roots)


def facade_params(args: list[str]) -> StdioServerParameters:
    argv = ["-m", "supervisor", "mcp", *args, "--timeout", str(CALL_TIMEOUT)]
    return StdioServerParameters(command=sys.executable, args=argv, env=host_env(), cwd=str(REPO))


def open_stdio(ctx: Ctx) -> AbstractAsyncContextManager[Host]:
    params = facade_params(["--endpoint", ctx.endpoint])
    return stdio_host(ctx, "stdio", [(None, params)], "mcp_{}_", [ctx.supervisor_pid])


@asynccontextmanager
async def open_stdio_config(ctx: Ctx) -> AsyncIterator[Host]:
    """The facade with --config, on an endpoint of its own: it starts the supervisor itself, which
    outlives it (and so becomes this process's orphan, stopped here)."""
    endpoint = f"ipc://{tempfile.mkdtemp(dir=ctx.tmp, prefix='c')}/s.sock"
    params = facade_params(["--config", str(ctx.configs["mcp"]), "--endpoint", endpoint])
    try:
        async with stdio_host(ctx, "stdio-config", [(None, params)], "mcp_{}_", []) as host:
            yield host
    finally:
        with trio.CancelScope(shield=True):
            for pid in descendants([os.getpid()])[1:]:
                if endpoint in cmdline(pid) and " run " in cmdline(pid):
                    await stop_orphan(pid)


@asynccontextmanager
async def open_http(ctx: Ctx) -> AsyncIterator[Host]:
    argv = [sys.executable, "-m", "supervisor", "serve", "--http", "127.0.0.1:0", "--endpoint", ctx.endpoint]
    argv += ["--timeout", str(CALL_TIMEOUT)]
    env = {**os.environ, "MCP_SUPERVISOR_TOKEN": ctx.token}
    ready = re.compile(r"^LISTENING (http://\S+)", re.MULTILINE)
    async with served(argv, env, ctx.log("http"), ready) as (proc, url):
        auth = {"Authorization": f"Bearer {ctx.token}"}
        async with http_host(
            ctx, "http", [(None, url)], auth, "mcp_{}_", [proc.pid, ctx.supervisor_pid]
        ) as host:
            yield host


@asynccontextmanager
async def open_stub(ctx: Ctx) -> AsyncIterator[Host]:
    async with AsyncSupervisorClient(ctx.endpoint) as asup:
        echo_name = f"mcp_{ctx.names[0]}_echo"

        async def listing() -> Listing:
            tools = await asup.list_tools(wait=LIST_WAIT)
            return attribute([(None, t.name) for t in tools], ctx.names, "mcp_{}_")

        async def echo() -> None:
            result = await asup.call_tool(echo_name, ECHO_ARGS, timeout=CALL_TIMEOUT)  # raises on isError
            check_echo("stub", text_of(result.content))

        yield Host(listing, echo, [ctx.supervisor_pid], "ZeroMQ")


def open_direct(ctx: Ctx) -> AbstractAsyncContextManager[Host]:
    entries: list[tuple[str | None, StdioServerParameters]] = [
        (
            name,
            StdioServerParameters(
                command=str(NODE), args=[str(EVERYTHING), "stdio"], env=host_env(entry["env"])
            ),
        )
        for name, entry in ctx.servers.items()
    ]
    return stdio_host(ctx, "direct", entries, "", [])


def open_fastmcp(ctx: Ctx, key: str) -> AbstractAsyncContextManager[Host]:
    peer = ctx.peers["fastmcp"]
    assert peer.python is not None
    args = [str(ctx.scripts[key]), str(ctx.configs["mcp"])]
    params = StdioServerParameters(command=str(peer.python), args=args, env=host_env(), cwd=str(ctx.tmp))
    if key == "fastmcp" and len(ctx.servers) == 1:  # one server: fastmcp connects it as is, unprefixed
        return stdio_host(ctx, key, [(ctx.names[0], params)], "", [])
    return stdio_host(ctx, key, [(None, params)], "{}_", [])


@asynccontextmanager
async def open_mcp_proxy(ctx: Ctx) -> AsyncIterator[Host]:
    peer = ctx.peers["mcp-proxy"]
    argv = [str(peer.command("mcp-proxy")), "--named-server-config", str(ctx.configs["mcp"])]
    argv += ["--host", "127.0.0.1", "--port", "0"]
    ready = re.compile(r"Uvicorn running on (http://\S+)")
    async with served(argv, dict(os.environ), ctx.log("mcp-proxy"), ready) as (proc, base):
        urls: list[tuple[str | None, str]] = [(s, f"{base}/servers/{s}/mcp") for s in ctx.names]
        async with http_host(ctx, "mcp-proxy", urls, None, "", [proc.pid]) as host:
            yield host


def open_magg(ctx: Ctx) -> AbstractAsyncContextManager[Host]:
    peer = ctx.peers["magg"]
    assert peer.python is not None
    env = host_env({**peer.env, "MAGG_CONFIG_PATH": str(ctx.configs["magg"])})
    params = StdioServerParameters(
        command=str(peer.python), args=["-m", "magg", "serve"], env=env, cwd=str(ctx.tmp)
    )
    return stdio_host(ctx, "magg", [(None, params)], "{}_", [])


@dataclass(frozen=True)
class PathSpec:
    key: str  # its name in --paths
    label: str  # its name in the table
    open: Callable[[Ctx], AbstractAsyncContextManager[Host]]
    peer: str | None = None  # the peer it needs
    supervised: bool = False  # it reaches the servers through the running supervisor
    spawn_only: bool = False  # only its spawn to full listing is measured


PEER_KEYS = {"fastmcp", "fastmcp-mount", "mcp-proxy", "magg"}
PATHS = [
    PathSpec("stdio", "stdio", open_stdio, supervised=True),
    PathSpec("stdio-config", "stdio --config", open_stdio_config, spawn_only=True),
    PathSpec("http", "http", open_http, supervised=True),
    PathSpec("stub", "stub", open_stub, supervised=True),
    PathSpec("direct", "direct", open_direct),
    PathSpec("fastmcp", "fastmcp proxy", lambda ctx: open_fastmcp(ctx, "fastmcp"), peer="fastmcp"),
    PathSpec(
        "fastmcp-mount", "fastmcp mount", lambda ctx: open_fastmcp(ctx, "fastmcp-mount"), peer="fastmcp"
    ),
    PathSpec("mcp-proxy", "mcp-proxy", open_mcp_proxy, peer="mcp-proxy"),
    PathSpec("magg", "magg", open_magg, peer="magg"),
]


def write_configs(tmp: Path, servers: dict[str, dict[str, Any]]) -> dict[str, Path]:
    configs = {"mcp": tmp / "mcp-servers.json", "magg": tmp / "magg.json"}
    configs["mcp"].write_text(json.dumps({"mcpServers": servers}))
    magg = {name: {"source": "server-everything", "prefix": name, **entry} for name, entry in servers.items()}
    configs["magg"].write_text(json.dumps({"servers": magg}))
    return configs


def write_scripts(tmp: Path) -> dict[str, Path]:
    scripts = {"fastmcp": tmp / "fastmcp_proxy.py", "fastmcp-mount": tmp / "fastmcp_mount.py"}
    scripts["fastmcp"].write_text(FASTMCP_PROXY)
    scripts["fastmcp-mount"].write_text(FASTMCP_MOUNT)
    return scripts
