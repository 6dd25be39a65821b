"""Benchmark: many servers busy at once, through mcp-supervisor vs one process hosting every session.

    .venv/bin/python -m tests.benchmarks.many [--server everything|python|both] [--servers 8]
        [--callers-per-server 8] [--client-procs 2] [--calls N] [--warmup N] [--blocks B] [--json PATH]

For each kind of server (default both, each measured separately: everything is the npm reference
server server-everything on Node, python is tests/servers/mcp_test_server.py on the Python SDK), start
--servers copies twice over, and keep every copy busy with --callers-per-server concurrent callers that
each call its echo tool back to back. Paths, in alternating blocks (forward, then backward: ABBA
order) so drift hits them alike:

  host         one process holding one mcp.Client session per server (as the workers hold theirs,
               cache=None) in one AsyncExitStack, calls dispatched by prefixed tool name through a dict,
               as mcp's ClientSessionGroup does; the concurrent callers are trio tasks of this process.
               (ClientSessionGroup itself names tools by the server's reported name, which every copy
               of one server shares, and drives the lower-level ClientSession rather than Client.)
  routed       one `mcp-supervisor run` with every server; the callers are trio tasks of this process
               sharing one AsyncSupervisorClient (it multiplexes by request id)
  routed xP    the same supervisor, the same callers spread over --client-procs client processes,
               each with its own AsyncSupervisorClient (0 leaves this path out): if it beats
               `routed`, one client process was the bottleneck

Per path: total calls/s (all calls over the time the blocks took), p50 and p99 of every call, and the
CPU each group of processes used while the blocks ran, in % of one core: the callers' process(es)
(for host, the host itself), the supervisor, the workers, the servers. The summary gives the
supervisor's calls/s over the host's (target: at least 1.0).

Writes every row and the machine's description to --json. Not a test: pytest only collects test_*.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import trio
from mcp import Client

from supervisor.client import AsyncSupervisorClient, SupervisorClient
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
    stats,
    stop_supervisor,
    wait_ready,
    write_json,
)

RESULTS = REPO / "tests/benchmarks/results"
CALL_TIMEOUT = 30.0  # seconds for one routed call (its budget at the supervisor, and the client's wait)
BLOCK_TIMEOUT = 600.0  # seconds for one block of calls
PROC_TIMEOUT = 30.0  # seconds for a client process to start, or to exit once its stdin is closed
TARGET = 1.0  # supervisor calls/s over host calls/s, at least
CPU_GROUPS = ["callers", "supervisor", "workers", "servers"]


@dataclass(frozen=True)
class Row:
    server: str
    path: str
    callers: int
    calls: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    calls_per_s: float
    cpu_percent: dict[str, float | None]  # by CPU_GROUPS; None: the path has no such processes

    def cells(self) -> list[str]:
        ms = (self.p50_ms, self.p99_ms, self.mean_ms)
        head = [self.server, self.path, str(self.callers), str(self.calls)]
        cpu = ["-" if (p := self.cpu_percent[g]) is None else f"{p:.0f}" for g in CPU_GROUPS]
        return [*head, *(f"{x:.3f}" for x in ms), f"{self.calls_per_s:.0f}", *cpu]


HEADER = ["server", "path", "callers", "calls", "p50 ms", "p99 ms", "mean ms", "calls/s"]
HEADER += [f"{g} CPU%" for g in CPU_GROUPS]


async def run_tasks(calls: list[AsyncCall], n: int, out: Samples) -> tuple[int, int]:
    """``n`` calls spread over one task per entry of ``calls``, each timing its own calls back to back;
    returns the block's start and end (``time.monotonic_ns``, comparable across processes)."""

    async def caller(call: AsyncCall, count: int) -> None:
        for _ in range(count):
            t0 = time.perf_counter_ns()
            await call()
            out.ns.append(time.perf_counter_ns() - t0)

    start = time.monotonic_ns()
    async with trio.open_nursery() as nursery:
        for i, call in enumerate(calls):
            nursery.start_soon(caller, call, n // len(calls) + (i < n % len(calls)))
    end = time.monotonic_ns()
    out.wall_ns += end - start
    return start, end


# ------------------------------------------------------------------ client processes of "routed xP"


async def serve_callers(endpoint: str) -> None:
    """A client process: runs each block its parent writes on stdin (one JSON line: the tool name of
    each caller, the arguments, the number of calls) and answers with one JSON line (start, end, every
    call's ns); ends at end of file."""
    async with AsyncSupervisorClient(endpoint) as sup:
        while line := await trio.to_thread.run_sync(sys.stdin.buffer.readline):
            order = json.loads(line)
            arguments = order["arguments"]

            def routed(name: str, arguments: dict[str, Any] = arguments) -> AsyncCall:
                async def call() -> None:
                    await sup.call_tool(name, arguments, timeout=CALL_TIMEOUT)

                return call

            out = Samples()
            start, end = await run_tasks([routed(name) for name in order["names"]], order["calls"], out)
            answer = {"start": start, "end": end, "ns": out.ns}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()


class ClientProcs:
    """Client processes running ``serve_callers``, driven block by block."""

    def __init__(self) -> None:
        self.procs: list[trio.Process] = []
        self.buffers: list[bytearray] = []

    async def start(self, endpoint: str, count: int) -> None:
        command = [sys.executable, "-m", "tests.benchmarks.many", "--serve-callers", endpoint]
        for _ in range(count):
            proc = await trio.lowlevel.open_process(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO
            )
            self.procs.append(proc)
            self.buffers.append(bytearray())

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    async def run(self, names: list[str], arguments: dict[str, Any], calls: int, out: Samples) -> None:
        """``calls`` calls by the callers ``names`` (one per entry), spread over the processes."""
        count = len(self.procs)
        if len(names) < count:
            raise ValueError("fewer callers than client processes")
        # Contiguous shares of the callers (so each process has callers of every server), and of the calls.
        shares = [names[len(names) * i // count : len(names) * (i + 1) // count] for i in range(count)]
        parts = [calls * len(share) // len(names) for share in shares]
        parts[-1] += calls - sum(parts)
        for proc, share, part in zip(self.procs, shares, parts, strict=True):
            order = {"names": share, "arguments": arguments, "calls": part}
            assert proc.stdin is not None
            await proc.stdin.send_all(json.dumps(order).encode() + b"\n")
        answers = [json.loads(await self._line(i)) for i in range(len(self.procs))]
        for answer in answers:
            out.ns += answer["ns"]
        out.wall_ns += max(a["end"] for a in answers) - min(a["start"] for a in answers)

    async def _line(self, i: int) -> bytes:
        proc, buffer = self.procs[i], self.buffers[i]
        assert proc.stdout is not None
        while (end := buffer.find(b"\n")) < 0:
            data = await proc.stdout.receive_some(1 << 20)
            if not data:
                raise RuntimeError(f"client process {proc.pid} exited with {await proc.wait()}")
            buffer += data
        line = bytes(buffer[:end])
        del buffer[: end + 1]
        return line

    async def aclose(self) -> None:
        for proc in self.procs:
            if proc.stdin is not None:
                await proc.stdin.aclose()
        for proc in self.procs:
            with trio.move_on_after(PROC_TIMEOUT):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


# ------------------------------------------------------------------ the measurement


async def measure(
    args: argparse.Namespace, server: StdioServer, sup: SupervisorClient, supervisor_pid: int
) -> list[Row]:
    names = [f"{server.kind}{i}" for i in range(args.servers)]
    status = {row.server: row for row in sup.status()}
    routed_tools = {(t.server, t.original_name): t.name for t in sup.list_tools()}
    tool_names = [routed_tools[(name, server.tool)] for name in names]
    callers = args.servers * args.callers_per_server
    # Caller i keeps server i % --servers busy, so every server has --callers-per-server callers.
    caller_tools = [tool_names[i % args.servers] for i in range(callers)]
    total = max(args.calls, callers * 10)
    async with AsyncExitStack() as stack:
        before = child_pids(os.getpid())
        host: dict[str, tuple[Client, str]] = {}
        for tool_name in tool_names:
            client = await stack.enter_async_context(Client(server.params(), cache=None))
            host[tool_name] = (client, server.tool)
        host_servers = sorted(child_pids(os.getpid()) - before)
        asup = await stack.enter_async_context(AsyncSupervisorClient(sup.endpoint))
        procs = ClientProcs()
        stack.push_async_callback(procs.aclose)
        if args.client_procs:
            await procs.start(sup.endpoint, args.client_procs)

        def host_call(tool_name: str) -> AsyncCall:
            async def call() -> None:
                client, tool = host[tool_name]  # the session group's lookup
                result = await client.call_tool(tool, server.arguments)
                if result.is_error:
                    raise RuntimeError(f"{tool_name} failed: {result.content}")

            return call

        def routed_call(tool_name: str) -> AsyncCall:
            async def call() -> None:
                await asup.call_tool(tool_name, server.arguments, timeout=CALL_TIMEOUT)

            return call

        host_calls = [host_call(t) for t in caller_tools]
        routed_calls = [routed_call(t) for t in caller_tools]
        routed_pids: dict[str, list[int] | None] = {
            "supervisor": [supervisor_pid],
            "workers": [pid for n in names if (pid := status[n].worker_pid) is not None],
            "servers": [pid for n in names if (pid := status[n].server_pid) is not None],
        }
        multi = f"routed x{args.client_procs}"
        meters = {
            "host": CpuMeter(
                {"callers": [os.getpid()], "supervisor": None, "workers": None, "servers": host_servers}
            ),
            "routed": CpuMeter({"callers": [os.getpid()], **routed_pids}),
        }
        if args.client_procs:
            meters[multi] = CpuMeter({"callers": procs.pids, **routed_pids})

        async def run(path: str, n: int, out: Samples) -> None:
            meter = meters[path]
            before = meter.read()
            if path == "host":
                await run_tasks(host_calls, n, out)
            elif path == "routed":
                await run_tasks(routed_calls, n, out)
            else:
                await procs.run(caller_tools, server.arguments, n, out)
            meter.add_since(before)

        samples = {path: Samples() for path in meters}
        with trio.fail_after(BLOCK_TIMEOUT * (args.blocks + 1)):
            for path in meters:
                await run(path, max(args.warmup, callers), Samples())
            for meter in meters.values():
                meter.reset()
            for block in range(args.blocks):
                size = total // args.blocks + (block < total % args.blocks)
                for path in block_order(list(meters), block):
                    await run(path, size, samples[path])
        print(f"  {server.kind}: done", file=sys.stderr)
    rows = []
    for path, s in samples.items():
        cpu = meters[path].percent(s.wall_ns)
        rows.append(Row(server.kind, path, callers, **asdict(stats(s)), cpu_percent=cpu))
    return rows


def measure_kind(
    args: argparse.Namespace, server: StdioServer, problems: list[str]
) -> tuple[list[Row], float]:
    """One supervisor with --servers copies of ``server``, and the host's own copies, measured."""
    servers = {f"{server.kind}{i}": server.config() for i in range(args.servers)}
    with tempfile.TemporaryDirectory(prefix="bench-many-") as tmpdir:
        tmp = Path(tmpdir)
        proc, endpoint = launch_supervisor(servers, tmp)
        try:
            with SupervisorClient(endpoint, request_timeout=5.0) as sup:
                ready_s = wait_ready(sup, proc, len(servers))
                rows = trio.run(measure, args, server, sup, proc.pid)
        except BaseException:
            stop_supervisor(proc, problems)
            sys.stderr.write((tmp / "supervisor.log").read_text(errors="replace")[-4000:])
            raise
        stop_supervisor(proc, problems)
        problems += log_problems(tmp)
    return rows, ready_s


def summarize(rows: list[Row], multi: str) -> dict[str, dict[str, float]]:
    summary: dict[str, dict[str, float]] = {}
    for kind in dict.fromkeys(r.server for r in rows):
        by_path = {r.path: r for r in rows if r.server == kind}
        host = by_path["host"]
        s = {f"{path}_over_host_calls_per_s": r.calls_per_s / host.calls_per_s for path, r in by_path.items()}
        summary[kind] = s
        words = [
            f"{path} / host calls/s {r.calls_per_s / host.calls_per_s:.2f}"
            f" (target >= {TARGET:.2f}: {'met' if r.calls_per_s >= TARGET * host.calls_per_s else 'MISSED'})"
            for path, r in by_path.items()
            if path != "host"
        ]
        if multi in by_path:
            gain = by_path[multi].calls_per_s / by_path["routed"].calls_per_s
            s["client_procs_gain"] = gain
            verdict = "was" if gain > 1.1 else "was not"
            words.append(f"{multi} / routed {gain:.2f}: one client process {verdict} the bottleneck")
        cpu = {path: _cpu_ms_per_call(r) for path, r in by_path.items()}
        s |= {f"{path}_cpu_ms_per_call": ms for path, ms in cpu.items()}
        words.append("CPU per call, all processes: " + ", ".join(f"{p} {ms:.3f} ms" for p, ms in cpu.items()))
        print(f"{kind}: " + "; ".join(words))
    return summary


def _cpu_ms_per_call(row: Row) -> float:
    return sum(p for p in row.cpu_percent.values() if p is not None) / 100 / row.calls_per_s * 1e3


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help with the module docstring as written and every option's default."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument(
        "--server", choices=[*STDIO_SERVERS, "both"], default="both", help="server kind(s) to measure"
    )
    parser.add_argument("--servers", type=int, default=8, help="copies of the server, busy at once")
    parser.add_argument("--callers-per-server", type=int, default=8, help="concurrent callers per server")
    parser.add_argument("--client-procs", type=int, default=2, help="client processes of 'routed xP'")
    parser.add_argument("--calls", type=int, default=12000, help="measured calls per path, in all")
    parser.add_argument("--warmup", type=int, default=640, help="unmeasured calls per path first")
    parser.add_argument("--blocks", type=int, default=6, help="alternating blocks")
    parser.add_argument("--json", default=str(RESULTS / "many.json"), help="'' to write none")
    parser.add_argument("--serve-callers", metavar="ENDPOINT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_callers:
        trio.run(serve_callers, args.serve_callers)
        return 0
    callers = args.servers * args.callers_per_server
    if min(args.servers, args.callers_per_server, args.blocks) < 1 or args.calls < args.blocks:
        parser.error("--servers, --callers-per-server and --blocks >= 1 and --calls >= --blocks please")
    if args.client_procs < 0 or args.client_procs > callers or args.warmup < 0:
        parser.error("0 <= --client-procs <= --servers * --callers-per-server and --warmup >= 0 please")
    kinds = list(STDIO_SERVERS.values()) if args.server == "both" else [STDIO_SERVERS[args.server]]
    for server in kinds:
        server.check()
    run = {
        "servers": f"{args.servers}x " + ",".join(s.kind for s in kinds),
        "callers_per_server": args.callers_per_server,
        "client_procs": args.client_procs,
        "calls": args.calls,
        "warmup": args.warmup,
        "blocks": args.blocks,
    }
    machine = machine_info(**run)
    problems: list[str] = []
    rows: list[Row] = []
    ready: dict[str, float] = {}
    for server in kinds:
        kind_rows, ready[server.kind] = measure_kind(args, server, problems)
        rows += kind_rows
    for key, value in machine.items():
        print(f"{key}: {value}")
    print_table(HEADER, [r.cells() for r in rows])
    summary = summarize(rows, f"routed x{args.client_procs}")
    print("supervisor ready in " + ", ".join(f"{v:.2f} s ({k})" for k, v in ready.items()))
    for problem in problems:
        print(problem)
    if args.json:
        data = {"machine": machine, "rows": [asdict(r) for r in rows], "summary": summary}
        write_json(Path(args.json), {**data, "ready_s": ready, "problems": problems})
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
