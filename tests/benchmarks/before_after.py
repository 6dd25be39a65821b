"""Benchmark: the routed path of this source tree against an earlier revision's, side by side in one run.

    .venv/bin/python -m tests.benchmarks.before_after [--baseline REV] [--server everything|python]
        [--concurrency 1,64] [--calls N] [--blocks B]

Two supervisors run at once, each holding the same stdio server: ``after`` from this tree, ``before``
from ``git archive REV`` unpacked in a temporary directory (its supervisor and worker code; the
server is the same program). The same caller, this process with this tree's client stub, calls
both in alternating blocks (forward, then backward: ABBA order) so drift on a shared machine hits
them alike: at 1 caller the blocking ``SupervisorClient``, at more one ``AsyncSupervisorClient``
shared by that many trio tasks. Each row gives p50, p99, calls/s and the CPU time per call of the
supervisor and of the worker (from /proc); the summary gives after/before ratios.

Not a test: pytest only collects test_*.py.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
import tempfile
from contextlib import AsyncExitStack, ExitStack
from dataclasses import asdict
from pathlib import Path

import trio

from supervisor.client import AsyncSupervisorClient, SupervisorClient
from tests.benchmarks.common import (
    REPO,
    STDIO_SERVERS,
    AsyncCall,
    CpuMeter,
    Samples,
    StdioServer,
    block_order,
    launch_supervisor,
    machine_info,
    print_table,
    run_block,
    stats,
    stop_supervisor,
    wait_ready,
)

CALL_TIMEOUT = 30.0
TREES = ["before", "after"]
HEADER = ["callers", "tree", "calls", "p50 ms", "p99 ms", "calls/s", "CPU supervisor", "CPU worker"]


def unpack(rev: str, into: Path) -> Path:
    """The source tree of ``rev`` (its supervisor/ and workers/ packages), unpacked in ``into``."""
    archive = subprocess.run(
        ["git", "archive", rev, "supervisor", "workers"], cwd=REPO, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


async def measure(
    args: argparse.Namespace, server: StdioServer, clients: dict[str, SupervisorClient], pids: dict[str, int]
) -> list[list[str]]:
    rows: list[list[str]] = []
    async with AsyncExitStack() as stack:
        async_clients = {
            tree: await stack.enter_async_context(AsyncSupervisorClient(sup.endpoint))
            for tree, sup in clients.items()
        }
        meters = {}
        for tree, sup in clients.items():
            status = next(row for row in sup.status() if row.server == server.kind)
            worker = [status.worker_pid] if status.worker_pid else []
            meters[tree] = CpuMeter({"supervisor": [pids[tree]], "worker": worker})
        name = f"mcp_{server.kind}_{server.tool}"
        for callers in args.concurrency:
            calls: dict[str, AsyncCall] = {}
            for tree in TREES:
                calls[tree] = _caller(clients[tree], async_clients[tree], name, server, callers)
            samples = {tree: Samples() for tree in TREES}
            total = max(args.calls, callers * 150)
            with trio.fail_after(600):
                for tree in TREES:
                    await run_block(calls[tree], max(200, callers), callers, Samples())
                    meters[tree].reset()
                for block in range(args.blocks):
                    size = total // args.blocks + (block < total % args.blocks)
                    for tree in block_order(TREES, block):
                        before = meters[tree].read()
                        await run_block(calls[tree], size, callers, samples[tree])
                        meters[tree].add_since(before)
            figures = {tree: stats(samples[tree]) for tree in TREES}
            for tree in TREES:
                s, cpu = figures[tree], meters[tree].ms_per_call(len(samples[tree].ns))
                cells = [f"{s.p50_ms:.3f}", f"{s.p99_ms:.3f}", f"{s.calls_per_s:.0f}"]
                cpu_cells = [f"{cpu[g] or 0:.3f}" for g in ("supervisor", "worker")]
                rows.append([str(callers), tree, str(s.calls), *cells, *cpu_cells])
            ratio_p50 = figures["after"].p50_ms / figures["before"].p50_ms
            ratio_rate = figures["after"].calls_per_s / figures["before"].calls_per_s
            rows.append(
                [str(callers), "after/before", "", f"{ratio_p50:.3f}", "", f"{ratio_rate:.3f}", "", ""]
            )
            print(f"  {callers} callers: done ({asdict(figures['after'])})", file=sys.stderr)
    return rows


def _caller(
    sup: SupervisorClient, asup: AsyncSupervisorClient, name: str, server: StdioServer, callers: int
) -> AsyncCall:
    if callers == 1:

        async def blocking() -> None:  # blocks trio's loop for the call: at 1 caller nothing else runs
            sup.call_tool(name, server.arguments, timeout=CALL_TIMEOUT)

        return blocking

    async def shared() -> None:
        await asup.call_tool(name, server.arguments, timeout=CALL_TIMEOUT)

    return shared


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--baseline", default="HEAD~1", help="the git revision to compare with (default HEAD~1)"
    )
    parser.add_argument("--server", choices=list(STDIO_SERVERS), default="everything")
    parser.add_argument(
        "--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 64], help="e.g. 1,64"
    )
    parser.add_argument("--calls", type=int, default=3000, help="measured calls per tree and level, at least")
    parser.add_argument("--blocks", type=int, default=10, help="alternating blocks per level")
    args = parser.parse_args()
    server = STDIO_SERVERS[args.server]
    server.check()
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-before-after-") as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        sources = {"before": unpack(args.baseline, tmp / "before-src"), "after": REPO}
        procs, clients = {}, {}
        try:
            for tree in TREES:
                (tmp / tree).mkdir()
                procs[tree], endpoint = launch_supervisor(
                    {server.kind: server.config()}, tmp / tree, source=sources[tree]
                )
                clients[tree] = stack.enter_context(SupervisorClient(endpoint, request_timeout=5.0))
                wait_ready(clients[tree], procs[tree], 1)
            rows = trio.run(measure, args, server, clients, {tree: proc.pid for tree, proc in procs.items()})
        finally:
            for proc in procs.values():
                stop_supervisor(proc, problems)
    for key, value in machine_info(baseline=args.baseline, server=server.kind, calls=args.calls).items():
        print(f"{key}: {value}")
    print_table(HEADER, rows)
    print("CPU columns: CPU ms per call of the supervisor process and of the server's worker process")
    for problem in problems:
        print(problem)
    return 0


if __name__ == "__main__":
    sys.exit(main())
