"""Benchmark: a tool call from an MCP host through the facade (stdio and streamable HTTP), next to the
host's own session with the server and the supervisor's ZeroMQ stub, at several numbers of callers.

    .venv/bin/python -m tests.benchmarks.facade [--server everything|python] [--concurrency 1,16]
        [--calls N] [--warmup W] [--blocks B] [--modes auto,legacy] [--json PATH]

The host is the official SDK's ``mcp.Client``; the server (stdio) is one of
  everything  the npm reference server server-everything (Node), tool echo {"message": "hi"}
  python      tests/servers/mcp_test_server.py (the Python SDK), tool echo {"text": "hi"}

Paths, side by side in one run, in alternating blocks (forward, then backward: ABCD/DCBA order) so
drift on a shared machine hits them alike:
  direct  the host's Client starts the server itself over stdio (its own server process)
  stub    AsyncSupervisorClient.call_tool through `mcp-supervisor run` holding the server: the floor
          the facade adds to (the facade calls through this same stub)
  stdio   Client(StdioServerParameters(python -m supervisor mcp --endpoint E)): the stdio facade
  http    `python -m supervisor serve --http 127.0.0.1:0 --endpoint E` with a random bearer token in
          $MCP_SUPERVISOR_TOKEN, reached with the SDK's streamable HTTP client over the keep-alive
          httpx client a worker uses (workers.remote.keepalive_http_client) sending
          `Authorization: Bearer`; the TCP connections its calls used are counted (by client port)
Each Client path runs once per protocol mode in --modes: "auto" (the SDK's default: server/discover,
2026-07-28, falling back to the initialize handshake) and "legacy" (the initialize handshake); the
table says which protocol version each session negotiated. Mode "bare" puts the direct and stdio paths
behind tests/benchmarks/bare_host.py instead of the SDK's Client: JSON lines on the pipes, answers
matched by id, nothing else. The SDK host's own CPU is a share of every stdio path's p50 (about
0.2 ms per call, more with cold caches); the bare rows show what the facade itself adds.

At C callers, C trio tasks share one client (the SDK multiplexes by JSON-RPC id, the stub by request
id); each times its own calls back to back; calls/s is all calls over the time the blocks took. Every
call's result is checked (no isError), and the first result on each path must equal the direct one.
Added p50 is against the direct path in the same mode (the stub's: against the first mode's direct
path) and against the stub. CPU columns: ms of CPU per call of this process (the host) and of the
facade process (from /proc).

Writes every row and the machine's description to --json. Not a test: pytest only collects test_*.py.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx2
import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from supervisor.client import AsyncSupervisorClient, SupervisorClient
from tests.benchmarks.bare_host import bare_host, host_env
from tests.benchmarks.common import (
    REPO,
    STDIO_SERVERS,
    AsyncCall,
    CpuMeter,
    Samples,
    StdioServer,
    block_order,
    child_pids,
    launch_supervisor,
    log_problems,
    machine_info,
    run_block,
    stats,
    stop_process,
    stop_supervisor,
    wait_ready,
    write_json,
)
from workers.remote import KEEPALIVE_LIMITS, keepalive_http_client

RESULTS = REPO / "tests/benchmarks/results"
CALL_TIMEOUT = 30.0  # seconds for one stub call (its budget at the supervisor)
CONNECT_TIMEOUT = 60.0  # seconds for a host to connect and list the tools
LISTEN_TIMEOUT = 30.0  # seconds for `serve --http` to print its LISTENING line
LEVEL_TIMEOUT = 900.0  # seconds for the warm-up and all blocks of one level
MODES = ("auto", "legacy", "bare")  # the SDK host's protocol modes; "bare": tests/benchmarks/bare_host.py
KINDS = ("direct", "stub", "stdio", "http")  # path kinds, in block order


@dataclass(frozen=True)
class Row:
    callers: int
    path: str
    protocol: str
    calls: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    calls_per_s: float
    added_p50_vs_direct_ms: float | None
    added_p50_vs_stub_ms: float | None
    cpu_host_ms_per_call: float
    cpu_facade_ms_per_call: float | None
    tcp_connections: int | None  # HTTP only: distinct client ports seen over the measured calls

    def cells(self) -> list[str]:
        def ms(x: float | None) -> str:
            return "-" if x is None else f"{x:+.3f}"

        facade = "-" if self.cpu_facade_ms_per_call is None else f"{self.cpu_facade_ms_per_call:.3f}"
        conns = "-" if self.tcp_connections is None else str(self.tcp_connections)
        return [
            str(self.callers),
            self.path,
            self.protocol,
            str(self.calls),
            f"{self.p50_ms:.3f}",
            f"{self.p99_ms:.3f}",
            f"{self.calls_per_s:.0f}",
            ms(self.added_p50_vs_direct_ms),
            ms(self.added_p50_vs_stub_ms),
            f"{self.cpu_host_ms_per_call:.3f}",
            facade,
            conns,
        ]


HEADER = [
    "callers",
    "path",
    "protocol",
    "calls",
    "p50 ms",
    "p99 ms",
    "calls/s",
    "+p50 vs direct",
    "+p50 vs stub",
    "CPU host",
    "CPU facade",
    "TCP conns",
]


@dataclass
class Route:
    """One way of calling the tool: its call, what it negotiated, and the processes to meter."""

    name: str
    kind: str
    mode: str | None
    protocol: str
    call: AsyncCall
    facade_pids: list[int] | None = None
    ports: set[int] | None = None  # HTTP: client ports the facade's answers came back on
    meter: CpuMeter = field(init=False)

    def __post_init__(self) -> None:
        self.meter = CpuMeter({"host": [os.getpid()], "facade": self.facade_pids})


def markdown(header: list[str], rows: list[list[str]]) -> None:
    """A markdown table, the first three columns left-aligned and the others right-aligned."""
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=True)]
    for i, line in enumerate([header, ["-" * w for w in widths], *rows]):
        cells = [
            c.ljust(w) if j < 3 else c.rjust(w) for j, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        if i == 1:
            cells = [c[:-1] + ":" if j >= 3 else c for j, c in enumerate(cells)]
        print("| " + " | ".join(cells) + " |")


# ------------------------------------------------------------------ the HTTP facade's process


class HttpFacade:
    """``python -m supervisor serve --http 127.0.0.1:0 --endpoint E``, its log in ``tmp``."""

    def __init__(self, endpoint: str, tmp: Path, token: str) -> None:
        self.log = tmp / "facade-http.log"
        env = {**os.environ, "MCP_SUPERVISOR_TOKEN": token}
        argv = [sys.executable, "-m", "supervisor", "serve", "--http", "127.0.0.1:0", "--endpoint", endpoint]
        with self.log.open("wb") as err:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
                cwd=REPO,
                start_new_session=True,  # Ctrl-C reaches it through this script, after the hosts are gone
            )

    def url(self) -> str:
        """The URL from its ``LISTENING http://127.0.0.1:PORT/mcp ...`` line (waits for it, bounded)."""
        deadline = time.monotonic() + LISTEN_TIMEOUT
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            if match := re.search(r"^LISTENING (http://\S+)", text, re.MULTILINE):
                return match.group(1)
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve --http exited with {self.proc.returncode}:\n{text[-2000:]}")
            time.sleep(0.02)  # a poll interval, bounded by LISTEN_TIMEOUT
        raise RuntimeError(f"serve --http printed no LISTENING line within {LISTEN_TIMEOUT:g} s")

    def stop(self, problems: list[str]) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10.0)
            except subprocess.TimeoutExpired:
                problems.append("serve --http did not exit within 10 s of SIGINT; killed")
                self.proc.kill()
                self.proc.wait()


def log_lines(path: Path, who: str) -> list[str]:
    """A facade's (or a direct server's) log lines that say something went wrong."""
    if not path.exists():
        return []
    lines = path.read_text(errors="replace").splitlines()
    bad = re.compile(r"\b(ERROR|WARNING|CRITICAL|Traceback)\b")
    return [f"{who}: {line}" for line in lines if bad.search(line)]


# ------------------------------------------------------------------ measuring


def content_of(result: Any) -> str:
    return json.dumps([item.model_dump(mode="json", exclude_none=True) for item in result.content])


def text_of(content: list[Any]) -> str:
    """The text items of a result's content (SDK models or the stub's dicts), joined."""
    texts = [item.get("text") if isinstance(item, dict) else getattr(item, "text", None) for item in content]
    return "".join(t for t in texts if isinstance(t, str))


def stub_call(asup: AsyncSupervisorClient, routed: str, server: StdioServer) -> AsyncCall:
    async def call() -> None:
        await asup.call_tool(routed, server.arguments, timeout=CALL_TIMEOUT)

    return call


async def bare_route(
    stack: AsyncExitStack,
    name: str,
    kind: str,
    server: StdioServer,
    routed: str,
    endpoint: str,
    stdio_pids: list[int],
    check: Callable[[str, str], None],
) -> Route:
    """The server itself (``direct``) or the stdio facade, behind the bare host."""
    if kind == "direct":
        argv, tool = [server.command, *server.args], server.tool
    else:
        argv, tool = [sys.executable, "-m", "supervisor", "mcp", "--endpoint", endpoint], routed
    host = await stack.enter_async_context(bare_host(argv, host_env(), str(REPO)))
    stdio_pids.append(host.proc.pid)
    if tool not in await host.tool_names():
        raise RuntimeError(f"{name}: tools/list has no {tool}")
    check(name, await host.call(tool, server.arguments))

    async def call() -> None:
        await host.call(tool, server.arguments)

    return Route(name, kind, "bare", host.protocol, call, None if kind == "direct" else [host.proc.pid])


async def open_paths(
    stack: AsyncExitStack,
    args: argparse.Namespace,
    server: StdioServer,
    routed: str,
    endpoint: str,
    http_url: str,
    token: str,
    http_pid: int,
    tmp: Path,
    logs: list[tuple[Path, str]],
    stdio_pids: list[int],
) -> list[Route]:
    """Every path, connected, its tool listed and called once; the first results must agree."""
    paths: list[Route] = []
    expected: str | None = None

    def check(name: str, text: str) -> None:
        nonlocal expected
        if expected is None:
            expected = text
        elif text != expected:
            raise RuntimeError(f"{name}: the tool answered {text}, not {expected} as on the first path")

    def client_call(name: str, client: Client, tool: str) -> AsyncCall:
        async def call() -> None:
            result = await client.call_tool(tool, server.arguments)
            if result.is_error:
                raise RuntimeError(f"{name}: {tool} answered isError: {content_of(result)}")

        return call

    async def stdio_host(name: str, params: StdioServerParameters, mode: str) -> tuple[Client, list[int]]:
        log = tmp / f"{name.replace(' ', '-').replace('(', '').replace(')', '')}.stderr"
        errlog: IO[str] = stack.enter_context(log.open("w"))
        logs.append((log, name))
        before = child_pids(os.getpid())
        client = await stack.enter_async_context(
            Client(stdio_client(params, errlog=errlog), mode=mode, cache=None)  # type: ignore[arg-type]
        )
        pids = sorted(child_pids(os.getpid()) - before)
        stdio_pids.extend(pids)
        return client, pids

    async def listed(name: str, client: Client, tool: str) -> None:
        with trio.fail_after(CONNECT_TIMEOUT):
            names = {t.name for t in (await client.list_tools()).tools}
            if tool not in names:
                raise RuntimeError(f"{name}: tools/list has no {tool} ({len(names)} tools)")
            first = await client.call_tool(tool, server.arguments)
        if first.is_error:
            raise RuntimeError(f"{name}: {tool} answered isError: {content_of(first)}")
        check(name, text_of(first.content))

    for kind in KINDS:
        if kind == "stub":
            asup = await stack.enter_async_context(AsyncSupervisorClient(endpoint))
            result = await asup.call_tool(routed, server.arguments, timeout=CALL_TIMEOUT)
            check("stub", text_of(result.content))

            paths.append(Route("stub", "stub", None, "zmq", stub_call(asup, routed, server)))
            continue
        for mode in args.modes:
            name = f"{kind} ({mode})"
            if mode == "bare":
                if kind != "http":  # the bare host speaks stdio only
                    paths.append(
                        await bare_route(stack, name, kind, server, routed, endpoint, stdio_pids, check)
                    )
                continue
            if kind == "direct":
                client, _ = await stdio_host(name, server.params(), mode)
                await listed(name, client, server.tool)
                paths.append(
                    Route(name, kind, mode, client.protocol_version, client_call(name, client, server.tool))
                )
            elif kind == "stdio":
                argv = ["-m", "supervisor", "mcp", "--endpoint", endpoint]
                params = StdioServerParameters(command=sys.executable, args=argv, cwd=str(REPO))
                client, pids = await stdio_host(name, params, mode)
                await listed(name, client, routed)
                paths.append(
                    Route(name, kind, mode, client.protocol_version, client_call(name, client, routed), pids)
                )
            else:
                ports: set[int] = set()

                async def seen(response: httpx2.Response, ports: set[int] = ports) -> None:
                    stream = response.extensions.get("network_stream")
                    addr = stream.get_extra_info("client_addr") if stream is not None else None
                    if addr:
                        ports.add(addr[1])

                http = await stack.enter_async_context(
                    keepalive_http_client({"Authorization": f"Bearer {token}"})
                )
                http.event_hooks["response"].append(seen)
                transport = streamable_http_client(http_url, http_client=http)
                client = await stack.enter_async_context(Client(transport, mode=mode, cache=None))  # type: ignore[arg-type]
                await listed(name, client, routed)
                call = client_call(name, client, routed)
                paths.append(Route(name, kind, mode, client.protocol_version, call, [http_pid], ports))
    return paths


async def bench(
    args: argparse.Namespace,
    server: StdioServer,
    sup: SupervisorClient,
    http_url: str,
    token: str,
    http_pid: int,
    tmp: Path,
    logs: list[tuple[Path, str]],
    stdio_pids: list[int],
) -> tuple[list[Row], list[Route]]:
    routed = next(
        t.name for t in sup.list_tools() if (t.server, t.original_name) == (server.kind, server.tool)
    )
    rows: list[Row] = []
    # A deadline for connecting every path, lifted (not left) once they are: the Clients' task groups
    # live in the exit stack, so their scopes may not be inside one that is left before they are.
    with trio.fail_after(CONNECT_TIMEOUT) as connecting:
        async with AsyncExitStack() as stack:
            paths = await open_paths(
                stack, args, server, routed, sup.endpoint, http_url, token, http_pid, tmp, logs, stdio_pids
            )
            connecting.deadline = math.inf  # connected: the levels have deadlines of their own
            for callers in args.concurrency:
                samples = {p.name: Samples() for p in paths}
                ports_before = {p.name: set(p.ports) for p in paths if p.ports is not None}
                used: dict[str, set[int]] = {name: set() for name in ports_before}
                with trio.fail_after(LEVEL_TIMEOUT):
                    for p in paths:
                        await run_block(p.call, max(args.warmup, callers), callers, Samples())
                        p.meter.reset()
                    for block in range(args.blocks):
                        size = args.calls // args.blocks + (block < args.calls % args.blocks)
                        for p in block_order(paths, block):
                            if p.ports is not None:
                                p.ports.clear()
                            before = p.meter.read()
                            await run_block(p.call, size, callers, samples[p.name])
                            p.meter.add_since(before)
                            if p.ports is not None:
                                used[p.name] |= p.ports
                figures = {p.name: stats(samples[p.name]) for p in paths}
                stub = figures["stub"]
                for p in paths:
                    s = figures[p.name]
                    direct = f"direct ({p.mode or args.modes[0]})"
                    cpu = p.meter.ms_per_call(s.calls)
                    rows.append(
                        Row(
                            callers=callers,
                            path=p.name,
                            protocol=p.protocol,
                            calls=s.calls,
                            p50_ms=s.p50_ms,
                            p99_ms=s.p99_ms,
                            mean_ms=s.mean_ms,
                            calls_per_s=s.calls_per_s,
                            added_p50_vs_direct_ms=None
                            if p.kind == "direct"
                            else s.p50_ms - figures[direct].p50_ms,
                            added_p50_vs_stub_ms=None
                            if p.kind in ("direct", "stub")
                            else s.p50_ms - stub.p50_ms,
                            cpu_host_ms_per_call=cpu["host"] or 0.0,
                            cpu_facade_ms_per_call=cpu["facade"],
                            tcp_connections=len(used[p.name]) if p.name in used else None,
                        )
                    )
                print(f"  {callers} callers: done", file=sys.stderr)
    return rows, paths


async def interruptible(interrupted: list[bool], *args: Any) -> tuple[list[Row], list[Route]]:
    """``bench``, cancelled at Ctrl-C (SIGINT): its exit stack then closes every path in order."""
    result: tuple[list[Row], list[Route]] | None = None
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                async for _ in signals:
                    interrupted.append(True)
                    nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            result = await bench(*args)
            nursery.cancel_scope.cancel()
    if result is None:
        raise KeyboardInterrupt
    return result


def summarize(rows: list[Row], levels: list[int], modes: list[str]) -> list[str]:
    words: list[str] = []
    by = {(r.callers, r.path): r for r in rows}
    for level in levels:
        stub = by[(level, "stub")]
        for mode in modes:
            direct = by[(level, f"direct ({mode})")]
            for kind in ("stdio", "http"):
                if (r := by.get((level, f"{kind} ({mode})"))) is None:
                    continue  # the bare host speaks stdio only
                words.append(
                    f"{level} callers, {kind} facade ({mode}, {r.protocol}): p50 {r.p50_ms:.3f} ms ="
                    f" stub {stub.p50_ms:.3f} ms {r.p50_ms - stub.p50_ms:+.3f} ms"
                    f" = direct {direct.p50_ms:.3f} ms {r.p50_ms - direct.p50_ms:+.3f} ms;"
                    f" calls/s {r.calls_per_s / stub.calls_per_s:.2f}x the stub's,"
                    f" {r.calls_per_s / direct.calls_per_s:.2f}x direct's"
                )
    return words


def _levels(text: str) -> list[int]:
    try:
        levels = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma-separated list of integers, not {text!r}") from None
    if not levels or levels[0] < 1:
        raise argparse.ArgumentTypeError("concurrency levels must be >= 1")
    return levels


def _modes(text: str) -> list[str]:
    modes = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not modes or any(mode not in MODES for mode in modes):
        raise argparse.ArgumentTypeError(f"a comma-separated list of {', '.join(MODES)}, not {text!r}")
    return modes


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help with the module docstring as written and every option's default."""


@contextmanager
def reaped(pids: list[int]) -> Iterator[None]:
    """On the way out, SIGKILL any of ``pids`` (stdio processes the SDK started for this run) that is
    still this process's child: the SDK ends them itself unless the run was interrupted mid-way."""
    try:
        yield
    finally:
        alive = child_pids(os.getpid())
        for pid in pids:
            if pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass


def measure(
    args: argparse.Namespace,
    server: StdioServer,
    problems: list[str],
    logs: list[tuple[Path, str]],
    stdio_pids: list[int],
    token: str,
    interrupted: list[bool],
) -> tuple[list[Row], list[Route]]:
    """Start the supervisor and the HTTP facade, measure every path, stop everything (on any exit)."""
    with tempfile.TemporaryDirectory(prefix="bench-facade-") as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        proc, endpoint = launch_supervisor({server.kind: server.config()}, tmp)
        stack.callback(lambda: stop_supervisor(proc, problems))
        http = HttpFacade(endpoint, tmp, token)
        stack.callback(stop_process, http.proc)  # in case stop() itself was interrupted
        stack.callback(http.stop, problems)
        stack.enter_context(reaped(stdio_pids))
        try:
            sup = stack.enter_context(SupervisorClient(endpoint, request_timeout=5.0))
            wait_ready(sup, proc, 1)
            url = http.url()
            rows, paths = trio.run(
                interruptible,
                interrupted,
                args,
                server,
                sup,
                url,
                token,
                http.proc.pid,
                tmp,
                logs,
                stdio_pids,
            )
        except BaseException as exc:
            if interrupted or isinstance(exc, KeyboardInterrupt):
                interrupted.append(True)
                raise
            sys.stderr.write((tmp / "supervisor.log").read_text(errors="replace")[-3000:])
            for path, who in [(http.log, "serve --http"), *logs]:
                if path.exists():
                    sys.stderr.write(f"--- {who}\n" + path.read_text(errors="replace")[-2000:])
            raise
        stack.close()  # stops the facade, the supervisor, and anything left; before reading their logs
        problems += log_problems(tmp)
        problems += log_lines(http.log, "serve --http log")
        for path, who in logs:
            problems += log_lines(path, f"{who} stderr")
    return rows, paths


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--server", choices=list(STDIO_SERVERS), default="everything", help="server to call")
    parser.add_argument("--concurrency", type=_levels, default="1,16", help="concurrent callers, e.g. 1,16")
    parser.add_argument("--calls", type=int, default=600, help="measured calls per path and level")
    parser.add_argument("--warmup", type=int, default=50, help="unmeasured calls per path and level first")
    parser.add_argument("--blocks", type=int, default=10, help="alternating blocks per level")
    parser.add_argument(
        "--modes",
        type=_modes,
        default=",".join(MODES),
        help="host modes: auto,legacy (the SDK's Client), bare (the bare host; stdio only)",
    )
    parser.add_argument("--json", default=str(RESULTS / "facade.json"), help="'' to write none")
    args = parser.parse_args()
    if min(args.calls, args.blocks) < 1 or args.warmup < 0 or args.calls < args.blocks:
        parser.error("--calls >= --blocks >= 1 and --warmup >= 0 please")
    server = STDIO_SERVERS[args.server]
    server.check()
    run = {
        "server": server.kind,
        "callers": ",".join(map(str, args.concurrency)),
        "calls": args.calls,
        "warmup": args.warmup,
        "blocks": args.blocks,
        "modes": ",".join(args.modes),
    }
    machine = machine_info(**run)
    problems: list[str] = []
    logs: list[tuple[Path, str]] = []
    stdio_pids: list[int] = []
    token = secrets.token_urlsafe(24)
    started = time.monotonic()
    interrupted: list[bool] = []
    try:
        rows, paths = measure(args, server, problems, logs, stdio_pids, token, interrupted)
    except BaseException:
        if not interrupted:
            raise
        print("interrupted: the supervisor, the facades and the servers are stopped", file=sys.stderr)
        return 130
    for key, value in machine.items():
        print(f"{key}: {value}")
    print(
        f"server: {server.kind} ({' '.join([server.command, *server.args])}),"
        f" tool {server.tool} {server.arguments}"
    )
    print()
    markdown(HEADER, [r.cells() for r in rows])
    print()
    print(
        "+p50: p50 minus the direct path's p50 in the same mode (the stub's: minus the first mode's) and"
        " minus the stub's p50. CPU: ms of CPU per call of this process (host) and of the facade"
        " process. TCP conns: distinct client ports the HTTP facade's answers came on over the"
        " measured calls."
    )
    expiry = KEEPALIVE_LIMITS.keepalive_expiry
    print(
        f"HTTP client: workers.remote.keepalive_http_client (keep-alive; idle connections expire after"
        f" {expiry:g} s, so a block may open new ones after the other paths ran); connections kept alive"
        " when a path used at most callers x blocks of them:"
    )
    for r in rows:
        if r.tcp_connections:
            kept = "kept alive" if r.tcp_connections <= r.callers * args.blocks else "NOT kept alive"
            print(
                f"  {r.path}, {r.callers} callers: {r.calls} calls over {r.tcp_connections} TCP connections"
                f" ({r.calls / r.tcp_connections:.0f} calls each): {kept}"
            )
    protocols = {p.name: p.protocol for p in paths}
    print("negotiated: " + ", ".join(f"{name} {proto}" for name, proto in protocols.items()))
    summary = summarize(rows, args.concurrency, args.modes)
    for line in summary:
        print(line)
    print(f"run took {time.monotonic() - started:.0f} s")
    for problem in problems:
        print(f"problem: {problem}")
    if args.json:
        data = {
            "machine": machine,
            "server": {"kind": server.kind, "tool": server.tool, "arguments": server.arguments},
            "protocols": protocols,
            "http_client": {"keepalive": True, "keepalive_expiry_s": expiry},
            "rows": [asdict(r) for r in rows],
            "summary": summary,
            "problems": problems,
        }
        write_json(Path(args.json), data)
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
