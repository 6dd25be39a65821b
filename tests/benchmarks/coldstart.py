"""Benchmark: cold start to every tool registered, with 1, 10 and 50 stdio servers.

    .venv/bin/python -m tests.benchmarks.coldstart [--servers tiny,everything,test] [--counts 1,10,50]
                                                   [--repeat R] [--poll S] [--timeout S] [--json PATH]

For each server kind and each count N, four paths in the same run (in rotating order across repeats):

- supervisor: from launching ``mcp-supervisor run`` on a config of N servers until every server is
  ``ready`` at once and ``list_tools()`` then lists tools of every server (``status`` polled every
  --poll seconds through ``SupervisorClient``). Also shown: when it first answered (up), when the
  first server was ready, and each server's start-to-ready time from the supervisor's log ("ready: K
  tools in T s");
- sequential: the N servers connected one after another in this process, as OpenManus does: one
  ``AsyncExitStack``; for each server ``stdio_client`` + ``ClientSession`` + ``initialize`` +
  ``list_tools`` (asyncio, the SDK already imported, as in an agent that is running);
- alone: the N servers started all at once, directly, each taken through ``initialize`` +
  ``tools/list`` by a bare JSON-RPC driver over their stdio: the floor, the time of the slowest
  server when all start together (on this machine's cores);
- exec: the supervisor path with ``"workerSpawn": "exec"``: every worker its own interpreter that
  imports the SDK itself, instead of a fork of the pre-imported zygote.

Server kinds: ``tiny`` (a stdlib-only JSON-RPC server that starts in tens of ms, so the supervisor's
own cost shows), ``test`` (the Python SDK test server; each one imports the SDK, ~1 s CPU),
``everything`` (server-everything on Node), ``time`` (mcp-server-time). Columns:

    ready s    launch (or first connect, or first spawn) to every tool listed
    up s       the supervisor's first answer to status
    first s    the first server ready (its tools listed)
    each s     per server, its own start to its tools listed: median / max (supervisor: from its log)
    cpu s      CPU time of every process of the path from start to exit (supervisor, workers, servers;
               for sequential and alone also this process's client side)
    stop s     the supervisor's exit after SIGINT (sequential: closing the exit stack)
    restarts   restarts of servers before all were ready at once (``restarts`` in status)

Tool counts may differ between paths: the supervisor leaves out tools whose inputSchema is not valid
(the test server has one on purpose), and server-everything offers more tools to a client that
declares more capabilities, as a worker does.

Every server gets ``startTimeout`` --start-timeout (300 s): with the default, 30 s, N workers that
start at once on few cores may all be killed at 30 s and restarted together, again and again, and the
run measures no cold start at all; the summary says when a server took longer than 30 s.

Before each run the script waits (at most --idle-wait seconds) until the CPUs are at most 25 % busy,
and records how busy they were (``busy_before`` in the JSON): on a shared machine, other work skews
start-up times.

The summary gives, per kind and N, supervisor/alone (target: about 1, i.e. N workers ready in about
the time of their slowest server) and sequential/supervisor. Not a test: pytest only collects
``test_*.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from supervisor.client.blocking import SupervisorClient
from tests.benchmarks.common import REPO, print_table, write_json
from tests.benchmarks.fleet import (
    DEFAULT_START_TIMEOUT,
    IDLE,
    HelpFormatter,
    Kind,
    children_cpu,
    descendants,
    finish,
    leftovers,
    log_problems,
    machine,
    median,
    own_and_children_cpu,
    parse_counts,
    parse_kinds,
    start_direct,
    start_timeout_setting,
    supervised,
    wait_all_ready,
    wait_idle,
)

READY_LINE = re.compile(r"server '([^']+)' ready: (\d+) tools in ([\d.]+) s")
PATHS = ("alone", "supervisor", "sequential", "exec")


@dataclass
class Row:
    kind: str
    n: int
    path: str
    repeat: int
    ready_s: float
    up_s: float | None
    first_s: float
    each_median_s: float
    each_max_s: float
    cpu_s: float
    stop_s: float | None
    tools: int
    restarts: int = 0  # restarts of the servers before all were ready (supervisor)
    slow_starts: int = 0  # servers whose start to ready took longer than the default startTimeout
    busy_before: float = 0.0  # fraction of the CPUs busy just before the run (other work)

    def cells(self) -> list[str]:
        def sec(x: float | None) -> str:
            return "-" if x is None else f"{x:.3f}"

        return [
            self.kind,
            str(self.n),
            self.path,
            str(self.repeat),
            sec(self.ready_s),
            sec(self.up_s),
            sec(self.first_s),
            f"{self.each_median_s:.3f} / {self.each_max_s:.3f}",
            f"{self.cpu_s:.1f}",
            sec(self.stop_s),
            str(self.tools),
            "-" if self.path not in ("supervisor", "exec") else str(self.restarts),
        ]


HEADER = [
    "server",
    "N",
    "path",
    "rep",
    "ready s",
    "up s",
    "first s",
    "each s med / max",
    "cpu s",
    "stop s",
    "tools",
    "restarts",
]


def names_for(kind: Kind, n: int) -> list[str]:
    return [f"{kind.name}{i:02d}" for i in range(n)]


# ------------------------------------------------------------------ paths


def alone(kind: Kind, n: int, repeat: int, args: argparse.Namespace, problems: list[str]) -> Row:
    result = start_direct([kind.argv()] * n, args.timeout)
    problems.extend(f"direct server {pid} still alive" for pid in leftovers(set(result.pids)))
    return Row(
        kind.name,
        n,
        "alone",
        repeat,
        ready_s=result.wall_s,
        up_s=None,
        first_s=min(result.each_s),
        each_median_s=median(result.each_s),
        each_max_s=max(result.each_s),
        cpu_s=result.cpu_s,
        stop_s=None,
        tools=sum(result.tools),
    )


def supervisor(
    kind: Kind, n: int, repeat: int, args: argparse.Namespace, problems: list[str], spawn: str = "zygote"
) -> Row:
    names = names_for(kind, n)
    cpu0 = children_cpu()
    settings = start_timeout_setting(args.start_timeout)
    settings["supervisor"]["workerSpawn"] = spawn
    with (
        supervised({name: kind.entry() for name in names}, problems, settings) as run,
        SupervisorClient(run.endpoint, request_timeout=2.0) as sup,
    ):
        ready = wait_all_ready(sup, run, n, args.timeout, args.poll)
    problems.extend(log_problems(run.log))
    each = [float(m.group(3)) for line in run.log if (m := READY_LINE.search(line))]
    return Row(
        kind.name,
        n,
        "supervisor" if spawn == "zygote" else spawn,
        repeat,
        ready_s=ready.listed_s,
        up_s=ready.up_s,
        first_s=min(ready.first_ready.values()),
        each_median_s=median(each),
        each_max_s=max(each, default=float("nan")),
        cpu_s=children_cpu() - cpu0,
        stop_s=run.stop_s,
        tools=len(ready.tools),
        restarts=ready.restarts,
        slow_starts=sum(t > DEFAULT_START_TIMEOUT for t in each),
    )


async def _connect_all(
    kind: Kind, n: int, errlog_path: Path
) -> tuple[float, list[float], int, float, set[int]]:
    """OpenManus's way: each server connected, initialized and listed in turn, in one exit stack."""
    argv = kind.argv()
    each: list[float] = []
    tools = 0
    with errlog_path.open("w") as errlog:
        stack = AsyncExitStack()
        try:
            start = time.perf_counter()
            for _ in range(n):
                t0 = time.perf_counter()
                params = StdioServerParameters(command=argv[0], args=argv[1:])
                read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                tools += len((await session.list_tools()).tools)
                each.append(time.perf_counter() - t0)
            total = time.perf_counter() - start
        finally:
            seen = descendants(os.getpid())
            closing = time.perf_counter()
            await stack.aclose()
            closed = time.perf_counter() - closing
    return total, each, tools, closed, seen


def sequential(kind: Kind, n: int, repeat: int, args: argparse.Namespace, problems: list[str]) -> Row:
    cpu0 = own_and_children_cpu()
    with tempfile.TemporaryDirectory(prefix="bench-seq-") as tmpdir:
        errlog = Path(tmpdir) / "servers.stderr"

        async def bounded() -> tuple[float, list[float], int, float, set[int]]:
            async with asyncio.timeout(args.timeout):
                return await _connect_all(kind, n, errlog)

        total, each, tools, closed, seen = asyncio.run(bounded())
    problems.extend(f"process {pid} still alive after the exit stack closed" for pid in leftovers(seen))
    return Row(
        kind.name,
        n,
        "sequential",
        repeat,
        ready_s=total,
        up_s=None,
        first_s=each[0],
        each_median_s=median(each),
        each_max_s=max(each),
        cpu_s=own_and_children_cpu() - cpu0,
        stop_s=closed,
        tools=tools,
    )


def exec_spawn(kind: Kind, n: int, repeat: int, args: argparse.Namespace, problems: list[str]) -> Row:
    """The supervisor with ``workerSpawn: exec``: every worker its own interpreter (no zygote)."""
    return supervisor(kind, n, repeat, args, problems, spawn="exec")


RUNNERS = {"alone": alone, "supervisor": supervisor, "sequential": sequential, "exec": exec_spawn}


# ------------------------------------------------------------------ report


def summarize(rows: list[Row]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for kind, n in dict.fromkeys((r.kind, r.n) for r in rows):

        def ready(path: str, kind: str = kind, n: int = n) -> float:
            return median([r.ready_s for r in rows if (r.kind, r.n, r.path) == (kind, n, path)])

        sup, seq, floor = ready("supervisor"), ready("sequential"), ready("alone")
        execd = ready("exec")
        out.append(
            {
                "server": kind,
                "n": n,
                "supervisor_s": sup,
                "sequential_s": seq,
                "alone_s": floor,
                "exec_s": execd,
                "supervisor_over_alone": sup / floor,
                "sequential_over_supervisor": seq / sup,
                "supervisor_minus_alone_s": sup - floor,
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--servers", default="tiny,everything,test", help="server kinds, comma-separated")
    parser.add_argument("--counts", default="1,10,50", help="numbers of servers, comma-separated")
    parser.add_argument("--repeat", type=int, default=1, help="runs of every path per kind and count")
    parser.add_argument("--paths", default=",".join(PATHS), help="paths to run, comma-separated")
    parser.add_argument("--poll", type=float, default=0.01, help="seconds between status polls")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one path may take to be ready")
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=300.0,
        help=f"startTimeout in the config, for every server (without it: {DEFAULT_START_TIMEOUT:g})",
    )
    parser.add_argument(
        "--idle-wait", type=float, default=120.0, help="seconds to wait at most for idle CPUs before each run"
    )
    parser.add_argument("--settle", type=float, default=1.0, help="seconds of rest between runs")
    parser.add_argument(
        "--json",
        type=Path,
        default=REPO / "tests/benchmarks/results/coldstart.json",
        help="where to write ('' to write none)",
    )
    args = parser.parse_args()
    try:
        kinds, counts = parse_kinds(args.servers), parse_counts(args.counts)
    except ValueError as exc:
        parser.error(str(exc))
    paths = [p for p in PATHS if p in args.paths.split(",")]
    if not paths or args.repeat < 1 or not 0 < args.poll <= 1 or min(args.timeout, args.start_timeout) <= 0:
        parser.error(
            "--paths from alone,supervisor,sequential; --repeat >= 1; 0 < --poll <= 1; --timeout > 0"
        )
    info = machine(
        servers=args.servers,
        counts=args.counts,
        repeat=args.repeat,
        poll=args.poll,
        startTimeout=args.start_timeout,
    )
    problems: list[str] = []
    rows: list[Row] = []
    for repeat in range(1, args.repeat + 1):
        for kind in kinds:
            for n in counts:
                shift = (repeat - 1) % len(paths)
                for path in paths[shift:] + paths[:shift]:
                    print(f"... {kind.name} x{n} {path} (run {repeat})", file=sys.stderr, flush=True)
                    busy = wait_idle(args.idle_wait)
                    try:
                        rows.append(RUNNERS[path](kind, n, repeat, args, problems))
                        rows[-1].busy_before = busy
                    except Exception as exc:  # one path failing leaves the others' figures
                        what = f"{kind.name} x{n} {path} (run {repeat})"
                        problems.append(f"{what}: {type(exc).__name__}: {exc}")
                        print(f"... failed: {exc}", file=sys.stderr, flush=True)
                    time.sleep(args.settle)
    order = [kind.name for kind in kinds]
    rows.sort(key=lambda r: (order.index(r.kind), counts.index(r.n), PATHS.index(r.path), r.repeat))
    finish(info)
    for key, value in info.items():
        print(f"{key}: {value}")
    print_table(HEADER, [r.cells() for r in rows])
    summary = summarize(rows) if set(paths) == set(PATHS) else []
    for s in summary:
        print(
            f"{s['server']} x{s['n']}: supervisor {s['supervisor_s']:.2f} s, "
            f"sequential {s['sequential_s']:.2f} s, alone {s['alone_s']:.2f} s; "
            f"supervisor/alone {s['supervisor_over_alone']:.2f}x (+{s['supervisor_minus_alone_s']:.2f} s), "
            f"sequential/supervisor {s['sequential_over_supervisor']:.2f}x; "
            f"exec (no zygote) {s['exec_s']:.2f} s"
        )
    for r in rows:
        if r.slow_starts:
            print(
                f"{r.kind} x{r.n} {r.path} (run {r.repeat}): {r.slow_starts} servers took longer than "
                f"the default startTimeout ({DEFAULT_START_TIMEOUT:g} s) to be ready: without --start-timeout"
                " they are killed and restarted instead"
            )
    if busy_runs := [r for r in rows if r.busy_before > IDLE]:
        worst = max(r.busy_before for r in busy_runs)
        print(f"{len(busy_runs)} runs started with the CPUs more than {IDLE:.0%} busy (up to {worst:.0%})")
    print("target: supervisor/alone about 1 (N workers ready in about the time of their slowest server)")
    for problem in problems:
        print(f"problem: {problem}")
    write_json(
        args.json,
        {"machine": info, "rows": [asdict(r) for r in rows], "summary": summary, "problems": problems},
    )
    if args.json:
        print(f"wrote {args.json}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
