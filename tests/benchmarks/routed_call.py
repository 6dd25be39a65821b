"""Benchmark: a tool call routed through mcp-supervisor vs a direct in-process ``mcp.Client`` call.

    .venv/bin/python -m tests.benchmarks.routed_call [--server test|time|all] [--calls N] [--concurrency C]

Both paths talk to the same kind of stdio server, in the same run, in alternating blocks (ABBA order) so
drift on a shared machine hits both alike. Not a test: pytest only collects ``test_*.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import trio
from mcp import Client, StdioServerParameters

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

BIN = os.path.dirname(sys.executable)


@dataclass(frozen=True)
class Target:
    name: str
    command: str
    args: list[str]
    tool: str
    arguments: dict[str, Any]

    def resolved_command(self) -> str:
        """As the worker finds it: on PATH, then beside sys.executable."""
        search = os.pathsep.join([os.environ.get("PATH", ""), BIN])
        return shutil.which(self.command, path=search) or self.command


TEST_SERVER = str(REPO / "tests/servers/mcp_test_server.py")
UTC = {"timezone": "UTC"}
TARGETS = {
    "test": Target("test", sys.executable, [TEST_SERVER], "echo", {"text": "hi"}),
    "time": Target("time", "mcp-server-time", ["--local-timezone", "UTC"], "get_current_time", UTC),
}


@dataclass
class Row:
    server: str
    path: str
    calls: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    calls_per_s: float

    def cells(self) -> list[str]:
        ms = (self.p50_ms, self.p99_ms, self.mean_ms)
        return [self.server, self.path, str(self.calls), *(f"{x:.3f}" for x in ms), f"{self.calls_per_s:.0f}"]


ALIGN = [str.ljust, str.ljust, *[str.rjust] * 5]


def _row(server: str, path: str, s: Samples) -> Row:
    ordered = sorted(s.ns)
    n, mean = len(ordered), sum(ordered) / len(ordered) / 1e6
    p50, p99 = percentile(ordered, 0.5), percentile(ordered, 0.99)
    return Row(server, path, n, p50, p99, mean, n / s.wall_ns * 1e9)


async def bench(args: argparse.Namespace, targets: list[Target], sup: SupervisorClient) -> list[Row]:
    names = {(t.server, t.original_name): t.name for t in sup.list_tools()}
    rows: list[Row] = []
    async with AsyncExitStack() as stack:
        asup = None
        if args.concurrency > 1:
            asup = await stack.enter_async_context(AsyncSupervisorClient(sup.endpoint))
        for target in targets:
            params = StdioServerParameters(command=target.resolved_command(), args=target.args)
            direct = await stack.enter_async_context(Client(params, cache=None))
            routed_name = names[(target.name, target.tool)]

            async def direct_call(direct: Client = direct, target: Target = target) -> None:
                result = await direct.call_tool(target.tool, target.arguments)
                if result.is_error:
                    raise RuntimeError(f"direct {target.tool} failed: {result.content}")

            async def routed_call(name: str = routed_name, target: Target = target) -> None:
                if asup is None:
                    # Concurrency 1: the blocking client, as an agent would use it; this blocks trio's loop
                    # for the call, which is fine since nothing else runs meanwhile.
                    sup.call_tool(name, target.arguments)
                else:
                    await asup.call_tool(name, target.arguments)

            paths: dict[str, AsyncCall] = {"direct": direct_call, "routed": routed_call}
            samples = {path: Samples() for path in paths}
            for call in paths.values():
                await run_block(call, args.warmup, args.concurrency, Samples())
            for block in range(args.blocks):
                size = args.calls // args.blocks + (block < args.calls % args.blocks)
                order = ["routed", "direct"] if block % 4 in (0, 3) else ["direct", "routed"]
                for path in order:
                    await run_block(paths[path], size, args.concurrency, samples[path])
            rows += [_row(target.name, path, samples[path]) for path in ("direct", "routed")]
    return rows


def start_supervisor(targets: list[Target], tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    servers = {t.name: {"command": t.command, "args": t.args} for t in targets}
    return launch_supervisor(servers, tmp)


def report(rows: list[Row], machine: dict[str, Any], extra: list[str]) -> dict[str, dict[str, float]]:
    for key, value in machine.items():
        print(f"{key}: {value}")
    header = ["server", "path", "calls", "p50 ms", "p99 ms", "mean ms", "calls/s"]
    cells = [r.cells() for r in rows]
    widths = [max(len(c) for c in col) for col in zip(header, *cells, strict=True)]
    for line in (header, *cells):
        print("  ".join(pad(c, w) for pad, c, w in zip(ALIGN, line, widths, strict=True)))
    summary: dict[str, dict[str, float]] = {}
    for d, r in zip(rows[::2], rows[1::2], strict=True):
        summary[d.server] = {
            "ratio_p50": r.p50_ms / d.p50_ms,
            "ratio_p99": r.p99_ms / d.p99_ms,
            "ratio_calls_per_s": r.calls_per_s / d.calls_per_s,
            "added_p50_ms": r.p50_ms - d.p50_ms,
        }
        s = summary[d.server]
        print(
            f"{d.server}: ratio routed/direct p50 {s['ratio_p50']:.2f}x, p99 {s['ratio_p99']:.2f}x, "
            f"calls/s {s['ratio_calls_per_s']:.2f}x; added latency (routed p50 - direct p50) "
            f"{s['added_p50_ms']:+.3f} ms"
        )
    for note in extra:
        print(note)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--server", choices=["test", "time", "all"], default="all")
    parser.add_argument("--calls", type=int, default=2000, help="measured calls per path and server")
    parser.add_argument("--warmup", type=int, default=100, help="unmeasured calls per path first")
    parser.add_argument("--concurrency", type=int, default=1, help="concurrent callers per path")
    parser.add_argument("--blocks", type=int, default=10, help="alternating routed/direct blocks")
    parser.add_argument("--json", type=Path, help="also write the numbers to this JSON file")
    args = parser.parse_args()
    if min(args.calls, args.concurrency, args.blocks) < 1 or args.warmup < 0 or args.calls < args.blocks:
        parser.error("--calls >= --blocks >= 1, --concurrency >= 1 and --warmup >= 0 please")
    targets = list(TARGETS.values()) if args.server == "all" else [TARGETS[args.server]]
    machine = {
        "nproc": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "run": f"calls={args.calls} warmup={args.warmup} concurrency={args.concurrency} blocks={args.blocks}",
    }
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-sup-") as tmpdir:
        tmp = Path(tmpdir)
        proc, endpoint = start_supervisor(targets, tmp)
        try:
            with SupervisorClient(endpoint, request_timeout=2.0) as sup:
                ready_s = wait_ready(sup, proc, len(targets))
                rows = trio.run(bench, args, targets, sup)
        except BaseException:
            stop_supervisor(proc, problems)
            sys.stderr.write((tmp / "supervisor.log").read_text(errors="replace")[-4000:])
            raise
        stop_s = stop_supervisor(proc, problems)
        log = (tmp / "supervisor.log").read_text(errors="replace").splitlines()
    # The test server's bad_schema tool is left out with a WARNING by design; anything else is news.
    noted = [ln for ln in log if (" ERROR " in ln or " WARNING " in ln) and "'bad_schema' left out" not in ln]
    problems += [f"supervisor log: {line}" for line in noted]
    extra = [f"supervisor ready in {ready_s:.2f} s, stopped in {stop_s:.2f} s after SIGINT", *problems]
    summary = report(rows, machine, extra)
    if args.json:
        data = {"machine": machine, "rows": [asdict(r) for r in rows], "summary": summary}
        args.json.write_text(json.dumps({**data, "problems": problems}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
