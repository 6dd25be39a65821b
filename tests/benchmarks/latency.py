"""Benchmark: tool-call latency and throughput routed through mcp-supervisor vs a direct mcp.Client,
at several numbers of concurrent callers, with the pure pyzmq floor under the routed path.

    .venv/bin/python -m tests.benchmarks.latency [--server everything|python|both] [--concurrency 1,16,64]
        [--calls N] [--per-caller N] [--warmup N] [--blocks B] [--json PATH] [--plot PATH]

Servers (each measured in turn, default both), both stdio:
  everything  the npm reference server server-everything (Node), tool echo {"message": "hi"}
  python      tests/servers/mcp_test_server.py (the Python SDK), tool echo {"text": "hi"}

Paths, side by side in one run, in alternating blocks (forward, then backward: ABBA order) so drift on
a shared machine hits them alike:
  direct  one in-process mcp.Client session to its own server process, shared by the concurrent trio
          tasks (the SDK multiplexes by JSON-RPC id)
  routed  through one `mcp-supervisor run` holding both servers: at 1 caller the blocking
          SupervisorClient (as an agent would call); at more, one AsyncSupervisorClient shared by the
          concurrent trio tasks (it multiplexes by request id)
  floor   (1 caller only) blocking pyzmq, this process -> a relay process -> an echo worker process
          and back over ipc://, with messages of the routed request's and reply's sizes
          (tests/benchmarks/zmq_floor.py): what two process hops cost before any routing or MCP work

Each caller times its own calls back to back; calls/s is all calls over the time the blocks took.
At C callers a level makes max(--calls, C * --per-caller) measured calls per path. Each row also
gives the CPU time per call of each process on the path (from /proc): the caller (this process), the
router (the supervisor, or the floor's relay), the worker (or the floor's echo worker), the server.

Summary, per server: the router's added latency (routed p50 - direct p50 at 1 caller) against the
floor's p50 (target: at most 1.5x the floor), and routed calls/s over direct calls/s at the highest
concurrency (target: at least 0.90).

Writes every row and the machine's description to --json, and a plot (p50 solid, p99 dashed, the floor
dotted; needs matplotlib: pip install -e '.[bench]') to --plot. Not a test: pytest only collects
test_*.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import msgspec
import trio
from mcp import Client

from supervisor.client import AsyncSupervisorClient, SupervisorClient
from supervisor.protocol import CallResult, CallTool, encode
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
    print_table,
    run_block,
    stats,
    stop_supervisor,
    wait_ready,
    write_json,
)
from tests.benchmarks.zmq_floor import Floor
from workers.results import to_tool_result

RESULTS = REPO / "tests/benchmarks/results"
CALL_TIMEOUT = 30.0  # seconds for one routed call (its budget at the supervisor, and the client's wait)
BLOCK_TIMEOUT = 600.0  # seconds for one block of calls on the async paths
ADDED_TARGET = 1.5  # the router's added latency at 1 caller, in floor p50s, at most
THROUGHPUT_TARGET = 0.90  # routed calls/s over direct calls/s at the highest concurrency, at least
PATHS = ["routed", "direct"]


@dataclass(frozen=True)
class Row:
    server: str
    callers: int
    path: str
    calls: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    calls_per_s: float
    cpu_ms_per_call: dict[str, float | None]  # by CPU_GROUPS; None: the path has no such process

    def cells(self) -> list[str]:
        ms = (self.p50_ms, self.p99_ms, self.mean_ms)
        head = [self.server, str(self.callers), self.path, str(self.calls)]
        cpu = ["-" if (c := self.cpu_ms_per_call[g]) is None else f"{c:.3f}" for g in CPU_GROUPS]
        return [*head, *(f"{x:.3f}" for x in ms), f"{self.calls_per_s:.0f}", *cpu]


CPU_GROUPS = ["caller", "router", "worker", "server"]
HEADER = ["server", "callers", "path", "calls", "p50 ms", "p99 ms", "mean ms", "calls/s"]
HEADER += [f"CPU {g}" for g in CPU_GROUPS]
CPU_NOTE = (
    "CPU columns: CPU ms per call used by each process (caller: this process; router: the supervisor,"
    " or the floor's relay; worker: the server's worker, or the floor's echo worker)"
)


def message_sizes(server: StdioServer, routed_name: str, first: Any) -> tuple[bytes, bytes]:
    """A routed request and its reply as they cross the front link, from a real result of the tool."""
    arguments = msgspec.Raw(msgspec.msgpack.encode(server.arguments))
    request = encode(CallTool(id=1000, name=routed_name, arguments=arguments, timeout=CALL_TIMEOUT))
    reply = encode(CallResult(id=1000, result=msgspec.Raw(encode(to_tool_result(first)))))
    return request, reply


async def measure_server(
    args: argparse.Namespace,
    server: StdioServer,
    routed_name: str,
    sup: SupervisorClient,
    asup: AsyncSupervisorClient,
    tmp: Path,
    sizes: dict[str, dict[str, int]],
    supervisor_pid: int,
) -> list[Row]:
    rows: list[Row] = []
    async with AsyncExitStack() as stack:
        children = child_pids(os.getpid())
        direct = await stack.enter_async_context(Client(server.params(), cache=None))
        direct_server = sorted(child_pids(os.getpid()) - children)
        first = await direct.call_tool(server.tool, server.arguments)
        request, reply = message_sizes(server, routed_name, first)
        sizes[server.kind] = {"request": len(request), "reply": len(reply)}
        floor = stack.enter_context(Floor(tmp, request, reply))
        status = next(row for row in sup.status() if row.server == server.kind)
        me = [os.getpid()]
        meters = {
            "routed": CpuMeter(
                {
                    "caller": me,
                    "router": [supervisor_pid],
                    "worker": [status.worker_pid] if status.worker_pid else [],
                    "server": [status.server_pid] if status.server_pid else [],
                }
            ),
            "direct": CpuMeter({"caller": me, "router": None, "worker": None, "server": direct_server}),
            "floor": CpuMeter(
                {"caller": me, "router": [floor.procs[0].pid], "worker": [floor.procs[1].pid], "server": None}
            ),
        }

        async def direct_call() -> None:
            result = await direct.call_tool(server.tool, server.arguments)
            if result.is_error:
                raise RuntimeError(f"direct {server.tool} failed: {result.content}")

        def blocking_routed_call() -> None:
            # Blocks trio's loop for the call, which is fine: at 1 caller nothing else runs meanwhile.
            sup.call_tool(routed_name, server.arguments, timeout=CALL_TIMEOUT)

        async def routed_call_1() -> None:
            blocking_routed_call()

        async def routed_call_n() -> None:
            await asup.call_tool(routed_name, server.arguments, timeout=CALL_TIMEOUT)

        async def floor_call() -> None:
            floor.round_trip()

        for callers in args.concurrency:
            paths: dict[str, AsyncCall] = {
                "routed": routed_call_1 if callers == 1 else routed_call_n,
                "direct": direct_call,
            }
            if callers == 1:
                paths["floor"] = floor_call
            samples = {path: Samples() for path in paths}
            total = max(args.calls, callers * args.per_caller)
            with trio.fail_after(BLOCK_TIMEOUT * (args.blocks + 1)):
                for path, call in paths.items():
                    await run_block(call, max(args.warmup, callers), callers, Samples())
                    meters[path].reset()
                for block in range(args.blocks):
                    size = total // args.blocks + (block < total % args.blocks)
                    for path in block_order(list(paths), block):
                        before = meters[path].read()
                        await run_block(paths[path], size, callers, samples[path])
                        meters[path].add_since(before)
            for path, s in samples.items():
                cpu = meters[path].ms_per_call(len(s.ns))
                rows.append(Row(server.kind, callers, path, **asdict(stats(s)), cpu_ms_per_call=cpu))
            print(f"  {server.kind}, {callers} callers: done", file=sys.stderr)
    return rows


async def bench(
    args: argparse.Namespace,
    servers: list[StdioServer],
    sup: SupervisorClient,
    tmp: Path,
    supervisor_pid: int,
) -> tuple[list[Row], dict[str, dict[str, int]]]:
    names = {(t.server, t.original_name): t.name for t in sup.list_tools()}
    rows: list[Row] = []
    sizes: dict[str, dict[str, int]] = {}
    async with AsyncSupervisorClient(sup.endpoint) as asup:
        for server in servers:
            routed_name = names[(server.kind, server.tool)]
            rows += await measure_server(args, server, routed_name, sup, asup, tmp, sizes, supervisor_pid)
    return rows, sizes


def _find(rows: list[Row], server: str, callers: int, path: str) -> Row | None:
    return next((r for r in rows if (r.server, r.callers, r.path) == (server, callers, path)), None)


def summarize(rows: list[Row], servers: list[StdioServer], levels: list[int]) -> dict[str, dict[str, Any]]:
    summary: dict[str, dict[str, Any]] = {}
    top = max(levels)
    for server in servers:
        s: dict[str, Any] = {}
        routed, direct, floor = (_find(rows, server.kind, 1, p) for p in ("routed", "direct", "floor"))
        words: list[str] = []
        if routed and direct and floor:
            added = routed.p50_ms - direct.p50_ms
            s |= {
                "added_p50_ms": added,
                "floor_p50_ms": floor.p50_ms,
                "added_over_floor": added / floor.p50_ms,
            }
            met = "met" if added / floor.p50_ms <= ADDED_TARGET else "MISSED"
            words.append(
                f"added latency at 1 caller (routed p50 - direct p50) {added:+.3f} ms"
                f" = {added / floor.p50_ms:.2f}x the floor p50 {floor.p50_ms:.3f} ms"
                f" (target <= {ADDED_TARGET:g}x: {met})"
            )
        routed_top, direct_top = (
            _find(rows, server.kind, top, "routed"),
            _find(rows, server.kind, top, "direct"),
        )
        if routed_top and direct_top:
            ratio = routed_top.calls_per_s / direct_top.calls_per_s
            s[f"calls_per_s_ratio_at_{top}"] = ratio
            met = "met" if ratio >= THROUGHPUT_TARGET else "MISSED"
            words.append(
                f"routed/direct calls/s at {top} callers {ratio:.2f}"
                f" (target >= {THROUGHPUT_TARGET:.2f}: {met})"
            )
            cpu = {
                r.path: sum(c for c in r.cpu_ms_per_call.values() if c is not None)
                for r in (routed_top, direct_top)
            }
            s[f"cpu_ms_per_call_at_{top}"] = cpu
            words.append(
                f"CPU per call at {top} callers, all processes:"
                f" routed {cpu['routed']:.3f} ms, direct {cpu['direct']:.3f} ms"
            )
        p50: dict[int, float] = {}
        for level in levels:
            r, d = _find(rows, server.kind, level, "routed"), _find(rows, server.kind, level, "direct")
            if r and d:
                p50[level] = r.p50_ms / d.p50_ms
        s["p50_ratio_by_callers"] = p50
        words.append("routed/direct p50 " + ", ".join(f"{v:.2f}x at {k}" for k, v in p50.items()))
        summary[server.kind] = s
        print(f"{server.kind}: " + "; ".join(words))
    return summary


def plot(rows: list[Row], servers: list[StdioServer], levels: list[int], path: Path, title: str) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "note: matplotlib is not installed (pip install -e '.[bench]'), so no plot"
    fig, axes = plt.subplots(1, len(servers), figsize=(6.4 * len(servers), 4.8), squeeze=False)
    colors = {"direct": "tab:blue", "routed": "tab:orange"}
    for ax, server in zip(axes[0], servers, strict=True):
        for name, color in colors.items():
            points = sorted(
                (r.callers, r.p50_ms, r.p99_ms) for r in rows if (r.server, r.path) == (server.kind, name)
            )
            if not points:
                continue
            x, p50, p99 = zip(*points, strict=True)
            ax.plot(x, p50, marker="o", color=color, label=f"{name} p50")
            ax.plot(x, p99, marker="o", fillstyle="none", color=color, linestyle="--", label=f"{name} p99")
        floor = _find(rows, server.kind, 1, "floor")
        if floor:
            ax.axhline(
                floor.p50_ms,
                color="gray",
                linestyle=":",
                label=f"pyzmq 2-hop floor p50 ({floor.p50_ms:.3f} ms)",
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(level) for level in levels])
        ax.set_yscale("log")
        ax.set_title(f"{server.kind}: {server.tool}")
        ax.set_xlabel("concurrent callers")
        ax.set_ylabel("latency per call, ms")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"


def _levels(text: str) -> list[int]:
    try:
        levels = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma-separated list of integers, not {text!r}") from None
    if not levels or levels[0] < 1:
        raise argparse.ArgumentTypeError("concurrency levels must be >= 1")
    return levels


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help with the module docstring as written and every option's default."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument(
        "--server", choices=[*STDIO_SERVERS, "both"], default="both", help="server kind(s) to measure"
    )
    parser.add_argument(
        "--concurrency", type=_levels, default=[1, 16, 64], help="concurrent callers, e.g. 1,16,64 (default)"
    )
    parser.add_argument("--calls", type=int, default=3000, help="measured calls per path and level, at least")
    parser.add_argument("--per-caller", type=int, default=150, help="measured calls per caller, at least")
    parser.add_argument("--warmup", type=int, default=200, help="unmeasured calls per path and level first")
    parser.add_argument("--blocks", type=int, default=10, help="alternating blocks per level")
    parser.add_argument("--json", default=str(RESULTS / "latency.json"), help="'' to write none")
    parser.add_argument("--plot", default=str(RESULTS / "latency.png"), help="'' to draw none")
    args = parser.parse_args()
    if min(args.calls, args.per_caller, args.blocks) < 1 or args.warmup < 0 or args.calls < args.blocks:
        parser.error("--calls >= --blocks >= 1, --per-caller >= 1 and --warmup >= 0 please")
    servers = list(STDIO_SERVERS.values()) if args.server == "both" else [STDIO_SERVERS[args.server]]
    for server in servers:
        server.check()
    levels: list[int] = args.concurrency
    run = {
        "servers": ",".join(s.kind for s in servers),
        "callers": ",".join(map(str, levels)),
        "calls": args.calls,
        "per_caller": args.per_caller,
        "warmup": args.warmup,
        "blocks": args.blocks,
    }
    machine = machine_info(**run)
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmpdir:
        tmp = Path(tmpdir)
        proc, endpoint = launch_supervisor({s.kind: s.config() for s in servers}, tmp)
        try:
            with SupervisorClient(endpoint, request_timeout=5.0) as sup:
                ready_s = wait_ready(sup, proc, len(servers))
                rows, sizes = trio.run(bench, args, servers, sup, tmp, proc.pid)
        except BaseException:
            stop_supervisor(proc, problems)
            sys.stderr.write((tmp / "supervisor.log").read_text(errors="replace")[-4000:])
            raise
        stop_s = stop_supervisor(proc, problems)
        problems += log_problems(tmp)
    for key, value in machine.items():
        print(f"{key}: {value}")
    print_table(HEADER, [r.cells() for r in rows])
    print(CPU_NOTE)
    summary = summarize(rows, servers, levels)
    print(f"supervisor ready in {ready_s:.2f} s, stopped in {stop_s:.2f} s after SIGINT")
    print(
        "message bytes (request/reply): "
        + ", ".join(f"{k} {v['request']}/{v['reply']}" for k, v in sizes.items())
    )
    for problem in problems:
        print(problem)
    if args.plot:
        print(
            plot(
                rows,
                servers,
                levels,
                Path(args.plot),
                f"mcp-supervisor, routed vs direct; {machine['platform']}",
            )
        )
    if args.json:
        data = {"machine": machine, "message_bytes": sizes, "rows": [asdict(r) for r in rows]}
        write_json(Path(args.json), {**data, "summary": summary, "problems": problems})
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
