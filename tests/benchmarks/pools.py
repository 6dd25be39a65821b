"""Benchmark: a CPU-bound server with 1 and with 2 replicas under concurrent callers, and the cold start
of a per-client session (``"scope": "client"``).

    .venv/bin/python -m tests.benchmarks.pools [--burn-ms MS] [--callers C] [--calls N] [--repeat R]
        [--warmup W] [--sessions S] [--idle-check S] [--log PATH] [--json PATH]

One ``mcp-supervisor run`` holds three entries of the same stdio server, tests/servers/session_server.py
(the Python SDK; every tool runs on its event loop, so one server process does one ``burn`` at a time):

  cpu1   ``"replicas": 1``
  cpu2   ``"replicas": 2``: two workers, each with its own server process, behind one set of tool
         names; a call goes to the replica with the fewest calls in flight
  percl  ``"scope": "client"``, ``"maxSessions"`` >= --sessions, ``"idleTimeout": 600``: a worker and
         server per client identity, started on that client's first call

1. Replicas. ``burn {ms: --burn-ms}`` (a pure-Python loop for that much CPU time, one core) through one
   AsyncSupervisorClient shared by --callers trio tasks, each timing its own calls back to back;
   --calls calls per round and configuration; --repeat rounds, the two configurations in alternating
   order (AB, BA, AB, ...) so drift on the machine hits both. Before the rounds: the server ``ready``
   with every replica ``ready`` in ``status``, then --warmup unmeasured calls at --callers.
   Columns:
     config        the server entry (its replicas)
     calls         measured calls over all rounds
     calls/s       calls of a round over the time the round took: the median over rounds
     min-max       the lowest and highest round's calls/s
     ideal         replicas x 1000 / --burn-ms: the calls/s of servers that do nothing but burn
     % ideal       calls/s in % of ideal
     p50 / p99 ms  latency of one call (as its caller saw it), over every round's calls
     kit/ms        burn's loop iterations per ms of CPU (thousands; the median call): the speed of
                   the servers' cores, which drifts on a shared machine
     CPU ms/call   CPU time per call (from /proc/PID/stat over the measured rounds) of the server
                   processes (srv), their workers (wrk), the supervisor process (sup) and this process
                   (bench, the client)
     cores busy    the whole machine's busy CPU (/proc/stat) over the rounds' wall time, in cores
     others        the part of it not used by the processes above: other work on the machine, which
                   takes cores from the servers (the run also measures the machine for --idle-check
                   seconds before it starts, and says so when it was not idle)
   Then the ratio of the two medians, cpu2 / cpu1 (the target on a 2-core machine: >= 1.7x), the
   median of the per-round ratios (each round measures both), and how cpu2's server CPU split between
   its two replicas.

2. Per-client sessions. For --sessions fresh identities one after another, a new
   ``AsyncSupervisorClient(identity=f"bench-{i}")``; its first ``whoami`` on percl (the session's cold
   start: a worker forked, the server started and initialized, the call sent) is timed, then a second
   one (warm), which must answer the same server pid. As a baseline, a new client's first and second
   ``whoami`` on cpu1 (shared, already running): what a new client costs without a session to start.
   Only the calls are timed, not the clients' construction. Sessions stay alive (idleTimeout 600 s),
   so maxSessions is max(64, --sessions). Columns:
     what          which call
     n             calls
     p50 / p90 / max ms  their latency

Progress goes to stderr (each round's calls/s and others; each cold call, and the machine's busy cores
meanwhile). Writes the raw figures (every latency in ns, per round, per session) and the machine's
description to --json; --log keeps the supervisor's log (its "ready: 9 tools in T s" line per session
says how long the worker took to start the server). The supervisor is stopped with SIGINT (bounded, then
killed) on any exit. Not a test: pytest only collects test_*.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from supervisor.client.aio import AsyncSupervisorClient
from supervisor.client.blocking import SupervisorClient
from supervisor.protocol.payloads import ServerStatus
from tests.benchmarks.common import (
    READY_TIMEOUT,
    REPO,
    CpuMeter,
    Samples,
    block_order,
    cpu_seconds,
    launch_supervisor,
    log_problems,
    machine_info,
    percentile,
    print_table,
    run_block,
    stats,
    stop_supervisor,
    wait_ready,
    write_json,
)

RESULTS = REPO / "tests/benchmarks/results"
SERVER = REPO / "tests/servers/session_server.py"
CALL_TIMEOUT = 60.0  # seconds for one call at the supervisor (a cold session's included)
ROUND_TIMEOUT = 600.0  # seconds for one warm-up or measured round of one configuration
SESSIONS_TIMEOUT = 900.0  # seconds for the whole per-client section
CONFIGS = ("cpu1", "cpu2")


def server_entry(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVER)], **extra}


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far (every core): /proc/stat's first line less idle
    and iowait."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest, guest_nice are inside user, nice)
    busy = sum(fields[:8]) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


@dataclass
class Config:
    """One server entry measured in section 1, and what it measured."""

    name: str
    replicas: int
    rounds: list[Samples] = field(default_factory=list)
    pooled: Samples = field(default_factory=Samples)
    busy_s: float = 0.0  # machine busy CPU seconds over its rounds
    round_others: list[float] = field(default_factory=list)  # per round: cores busy outside this run
    iterations: list[int] = field(default_factory=list)  # burn's loop iterations, per measured call
    meter: CpuMeter | None = None
    replica_cpu: dict[str, float] = field(default_factory=dict)  # per replica: its server's CPU seconds
    pids: dict[str, list[int]] = field(default_factory=dict)

    @property
    def tool(self) -> str:
        return f"mcp_{self.name}_burn"

    def round_rates(self) -> list[float]:
        return [len(s.ns) / s.wall_ns * 1e9 for s in self.rounds]


def worker_rows(row: ServerStatus) -> list[tuple[str, int | None, int | None]]:
    """(name, worker pid, server pid) of each of a server's workers (the row itself for one worker)."""
    if not row.workers:
        return [(row.server, row.worker_pid, row.server_pid)]
    return [(w.name, w.worker_pid, w.server_pid) for w in row.workers]


def wait_replicas(sup: SupervisorClient, configs: list[Config]) -> dict[str, ServerStatus]:
    """Every configuration ``ready`` with all its replicas ``ready`` (bounded by READY_TIMEOUT)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        rows = {r.server: r for r in sup.status()}
        done = True
        for c in configs:
            row = rows[c.name]
            if row.state == "failed" or any(w.state == "failed" for w in row.workers):
                raise RuntimeError(f"{c.name} failed: {row.last_error}")
            workers = row.workers or []
            want = c.replicas if c.replicas > 1 else 0
            if row.state != "ready" or len(workers) != want or any(w.state != "ready" for w in workers):
                done = False
        if done:
            return rows
        if time.monotonic() > deadline:
            raise RuntimeError(f"replicas not all ready within {READY_TIMEOUT:g} s: {rows}")
        time.sleep(0.05)  # a poll interval, bounded by the deadline


def attach_meters(configs: list[Config], rows: dict[str, ServerStatus], sup_pid: int) -> None:
    for c in configs:
        named = worker_rows(rows[c.name])
        if any(wpid is None or spid is None for _, wpid, spid in named):
            raise RuntimeError(f"{c.name}: a worker without pids in status: {named}")
        c.pids = {
            "srv": [spid for _, _, spid in named if spid is not None],
            "wrk": [wpid for _, wpid, _ in named if wpid is not None],
        }
        c.meter = CpuMeter(
            {"srv": c.pids["srv"], "wrk": c.pids["wrk"], "sup": [sup_pid], "bench": [os.getpid()]}
        )
        c.replica_cpu = {name: 0.0 for name, _, _ in named}


# ------------------------------------------------------------------ section 1: replicas


async def replicas(args: argparse.Namespace, client: AsyncSupervisorClient, configs: list[Config]) -> None:
    def burner(c: Config) -> Any:
        async def call() -> None:
            result = await client.call_tool(c.tool, {"ms": args.burn_ms}, timeout=CALL_TIMEOUT)
            if result.is_error or not result.text.isdigit():
                raise RuntimeError(f"{c.tool} answered {result}")
            c.iterations.append(int(result.text))

        return call

    calls = {c.name: burner(c) for c in configs}
    for c in configs:  # warm-up: every replica has had calls (least in flight spreads 16 callers)
        with trio.fail_after(ROUND_TIMEOUT):
            await run_block(calls[c.name], args.warmup, args.callers, Samples())
    for c in configs:
        c.iterations.clear()  # the warm-up's
    for r in range(args.repeat):
        for c in block_order(configs, r):
            assert c.meter is not None
            names = list(c.replica_cpu)
            before = c.meter.read()
            replicas_before = [cpu_seconds([pid]) for pid in c.pids["srv"]]
            busy = machine_busy()
            sample = Samples()
            with trio.fail_after(ROUND_TIMEOUT):
                await run_block(calls[c.name], args.calls, args.callers, sample)
            busy = machine_busy() - busy
            after = c.meter.read()
            ours = 0.0
            for group, seconds in after.items():
                c.meter.seconds[group] += seconds - before[group]
                ours += seconds - before[group]
            c.busy_s += busy
            c.round_others.append((busy - ours) / sample.wall_ns * 1e9)
            for name, pid, was in zip(names, c.pids["srv"], replicas_before, strict=True):
                c.replica_cpu[name] += cpu_seconds([pid]) - was
            c.rounds.append(sample)
            c.pooled.ns += sample.ns
            c.pooled.wall_ns += sample.wall_ns
            rate = len(sample.ns) / sample.wall_ns * 1e9
            others = c.round_others[-1]
            print(
                f"  round {r + 1}/{args.repeat} {c.name}: {rate:.1f} calls/s, others {others:.2f} cores",
                file=sys.stderr,
            )


# ------------------------------------------------------------------ section 2: per-client sessions


@dataclass
class SessionFigures:
    cold_ns: list[int] = field(default_factory=list)  # first whoami of a new identity on percl
    warm_ns: list[int] = field(default_factory=list)  # its second
    base_first_ns: list[int] = field(default_factory=list)  # a new client's first whoami on cpu1
    base_second_ns: list[int] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)  # each session's server pid
    cold_cores_busy: list[float] = field(default_factory=list)  # the machine's, during each cold call


async def timed_whoami(client: AsyncSupervisorClient, tool: str) -> tuple[int, int]:
    t0 = time.perf_counter_ns()
    result = await client.call_tool(tool, {}, timeout=CALL_TIMEOUT)
    elapsed = time.perf_counter_ns() - t0
    if result.is_error:
        raise RuntimeError(f"{tool} answered {result}")
    return elapsed, int(result.text)


async def sessions(args: argparse.Namespace, endpoint: str, out: SessionFigures) -> None:
    with trio.fail_after(SESSIONS_TIMEOUT):
        for i in range(args.sessions):
            async with AsyncSupervisorClient(endpoint, identity=f"base-{i}") as client:
                first, _ = await timed_whoami(client, "mcp_cpu1_whoami")
                second, _ = await timed_whoami(client, "mcp_cpu1_whoami")
            out.base_first_ns.append(first)
            out.base_second_ns.append(second)
            async with AsyncSupervisorClient(endpoint, identity=f"bench-{i}") as client:
                busy = machine_busy()
                cold, pid = await timed_whoami(client, "mcp_percl_whoami")
                busy = machine_busy() - busy
                warm, again = await timed_whoami(client, "mcp_percl_whoami")
            if again != pid:
                raise RuntimeError(f"bench-{i}: the second call reached server pid {again}, not {pid}")
            out.cold_ns.append(cold)
            out.warm_ns.append(warm)
            out.pids.append(pid)
            out.cold_cores_busy.append(busy / cold * 1e9)
            print(
                f"  session {i + 1}/{args.sessions}: cold {cold / 1e6:.0f} ms,"
                f" machine {out.cold_cores_busy[-1]:.2f} cores busy meanwhile",
                file=sys.stderr,
            )


async def bench(
    args: argparse.Namespace, endpoint: str, configs: list[Config], figures: SessionFigures
) -> None:
    async with AsyncSupervisorClient(endpoint) as client:
        await replicas(args, client, configs)
    await sessions(args, endpoint, figures)


# ------------------------------------------------------------------ the run


def measure(
    args: argparse.Namespace, configs: list[Config], figures: SessionFigures, problems: list[str]
) -> dict[str, Any]:
    """Start the supervisor, measure both sections, stop it (SIGINT, bounded) on any exit."""
    servers = {
        "cpu1": server_entry(replicas=1),
        "cpu2": server_entry(replicas=2),
        "percl": server_entry(scope="client", maxSessions=max(64, args.sessions), idleTimeout=600),
    }
    with tempfile.TemporaryDirectory(prefix="bench-pools-") as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        proc, endpoint = launch_supervisor(servers, tmp)
        stopped: list[float] = []
        stack.callback(lambda: stopped.append(stop_supervisor(proc, problems)))
        try:
            sup = stack.enter_context(SupervisorClient(endpoint, request_timeout=10.0))
            ready_s = wait_ready(sup, proc, len(servers))
            rows = wait_replicas(sup, configs)
            attach_meters(configs, rows, proc.pid)
            trio.run(bench, args, endpoint, configs, figures)
            after = {r.server: r for r in sup.status()}
            for c in configs:
                now = {
                    "srv": [s for _, _, s in worker_rows(after[c.name])],
                    "wrk": [w for _, w, _ in worker_rows(after[c.name])],
                }
                if now != c.pids:
                    problems.append(f"{c.name}: workers changed during the run: {c.pids} -> {now}")
            percl = after["percl"]
            live = [w for w in percl.workers if w.state == "ready"]
            if len(live) != args.sessions:
                problems.append(f"percl: {len(live)} sessions ready at the end, not {args.sessions}")
            if len(set(figures.pids)) != args.sessions:
                problems.append(f"percl: {len(set(figures.pids))} distinct server pids for {args.sessions}")
            supervisor = {"ready_s": ready_s, "percl_sessions_at_end": len(percl.workers)}
        except BaseException as exc:
            if not interrupted(exc):
                sys.stderr.write((tmp / "supervisor.log").read_text(errors="replace")[-3000:])
            if args.log:
                shutil.copyfile(tmp / "supervisor.log", args.log)
            raise
        stack.close()  # stops the supervisor before its log is read
        supervisor["stop_s"] = stopped[0]
        problems += log_problems(tmp)
        if args.log:
            shutil.copyfile(tmp / "supervisor.log", args.log)
    return supervisor


def interrupted(exc: BaseException) -> bool:
    """Ctrl-C: a KeyboardInterrupt, or (from inside a trio nursery) a group of nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return all(interrupted(e) for e in exc.exceptions)
    return isinstance(exc, KeyboardInterrupt)


def ms(ns: list[int], q: float) -> str:
    return f"{percentile(sorted(ns), q):.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--burn-ms", type=float, default=20.0, help="CPU ms of each burn call")
    parser.add_argument("--callers", type=int, default=16, help="concurrent callers (trio tasks)")
    parser.add_argument("--calls", type=int, default=400, help="measured calls per round and configuration")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (alternating order)")
    parser.add_argument("--warmup", type=int, default=64, help="unmeasured calls per configuration first")
    parser.add_argument("--sessions", type=int, default=20, help="per-client sessions to cold-start")
    parser.add_argument("--idle-check", type=float, default=2.0, help="seconds of machine CPU before")
    parser.add_argument("--log", default="", help="copy the supervisor's log here at the end")
    parser.add_argument("--json", default=str(RESULTS / "pools.json"), help="'' to write none")
    args = parser.parse_args()
    if (
        min(args.callers, args.calls, args.repeat, args.sessions) < 1
        or min(args.warmup, args.idle_check) < 0
        or args.burn_ms <= 0
    ):
        parser.error(
            "--callers, --calls, --repeat, --sessions >= 1, --warmup, --idle-check >= 0, --burn-ms > 0 please"
        )
    if args.sessions > 1024:
        parser.error("--sessions <= 1024 (maxSessions' limit) please")
    run = {k: getattr(args, k) for k in ("burn_ms", "callers", "calls", "repeat", "warmup", "sessions")}
    machine = machine_info(**run)
    configs = [Config("cpu1", 1), Config("cpu2", 2)]
    figures = SessionFigures()
    problems: list[str] = []
    before = machine_busy()
    time.sleep(args.idle_check)
    idle_cores = (machine_busy() - before) / args.idle_check if args.idle_check else None
    machine["cores_busy_before"] = None if idle_cores is None else round(idle_cores, 2)
    started = time.monotonic()
    try:
        supervisor = measure(args, configs, figures, problems)
    except BaseException as exc:
        if not interrupted(exc):
            raise
        print("interrupted: the supervisor and its servers are stopped", file=sys.stderr)
        return 130

    for key, value in machine.items():
        print(f"{key}: {value}")
    if idle_cores is not None and idle_cores > 0.2:
        print(f"NOTE: the machine was not idle before the run: {idle_cores:.2f} cores busy")
    print(f"server: {SERVER.relative_to(REPO)}, tool burn {{ms: {args.burn_ms:g}}}, {args.callers} callers")
    print()
    print("1. replicas")
    header = ["config", "calls", "calls/s", "min-max", "ideal", "% ideal", "p50 ms", "p99 ms", "kit/ms"]
    header += ["CPU ms/call srv", "wrk", "sup", "bench", "cores busy", "others"]
    table: list[list[str]] = []
    summary: dict[str, Any] = {}
    for c in configs:
        assert c.meter is not None
        s = stats(c.pooled)
        rates = c.round_rates()
        median = statistics.median(rates)
        ideal = c.replicas * 1000 / args.burn_ms
        cpu = c.meter.ms_per_call(s.calls)
        cores = c.busy_s / c.pooled.wall_ns * 1e9
        speed = statistics.median(c.iterations) / args.burn_ms / 1e3
        others = (c.busy_s - sum(c.meter.seconds.values())) / c.pooled.wall_ns * 1e9
        table.append(
            [
                f"{c.name} (replicas {c.replicas})",
                str(s.calls),
                f"{median:.1f}",
                f"{min(rates):.1f}-{max(rates):.1f}",
                f"{ideal:.0f}",
                f"{median / ideal * 100:.0f}",
                f"{s.p50_ms:.1f}",
                f"{s.p99_ms:.1f}",
                f"{speed:.1f}",
                *(f"{cpu[g] or 0.0:.2f}" for g in ("srv", "wrk", "sup", "bench")),
                f"{cores:.2f}",
                f"{others:.2f}",
            ]
        )
        summary[c.name] = {
            "replicas": c.replicas,
            "calls": s.calls,
            "calls_per_s_median": median,
            "calls_per_s_rounds": rates,
            "ideal_calls_per_s": ideal,
            "p50_ms": s.p50_ms,
            "p99_ms": s.p99_ms,
            "mean_ms": s.mean_ms,
            "burn_kiterations_per_cpu_ms": speed,
            "burn_iterations": c.iterations,
            "cpu_ms_per_call": cpu,
            "machine_cores_busy": cores,
            "other_cores_busy": others,
            "replica_server_cpu_s": c.replica_cpu,
            "pids": c.pids,
            "rounds_ns": [r.ns for r in c.rounds],
            "rounds_wall_ns": [r.wall_ns for r in c.rounds],
            "rounds_other_cores_busy": c.round_others,
        }
    print_table(header, table)
    one, two = configs
    ratio = summary["cpu2"]["calls_per_s_median"] / summary["cpu1"]["calls_per_s_median"]
    paired = [b / a for a, b in zip(one.round_rates(), two.round_rates(), strict=True)]
    verdict = "meets" if ratio >= 1.7 else "BELOW"
    print(
        f"ratio replicas2/replicas1 calls/s: {ratio:.2f}x (median of per-round ratios"
        f" {statistics.median(paired):.2f}x; rounds {', '.join(f'{p:.2f}' for p in paired)}):"
        f" {verdict} the 1.7x target"
    )
    split = two.replica_cpu
    total = sum(split.values()) or 1.0
    print(
        "cpu2's server CPU by replica: " + ", ".join(f"{k} {v / total * 100:.0f}%" for k, v in split.items())
    )

    print()
    print(f"2. per-client sessions (percl, scope client; {args.sessions} identities one after another)")
    f = figures
    rows = [
        ["percl: first call (session cold start)", f.cold_ns],
        ["percl: second call (warm)", f.warm_ns],
        ["cpu1 (shared): a new client's first call", f.base_first_ns],
        ["cpu1 (shared): its second call", f.base_second_ns],
    ]
    print_table(
        ["what", "n", "p50 ms", "p90 ms", "max ms"],
        [[str(w), str(len(ns)), ms(ns, 0.5), ms(ns, 0.9), f"{max(ns) / 1e6:.1f}"] for w, ns in rows],
    )
    sessions_summary = {
        "cold_p50_ms": percentile(sorted(f.cold_ns), 0.5),
        "cold_p90_ms": percentile(sorted(f.cold_ns), 0.9),
        "warm_p50_ms": percentile(sorted(f.warm_ns), 0.5),
        "baseline_first_p50_ms": percentile(sorted(f.base_first_ns), 0.5),
        "baseline_second_p50_ms": percentile(sorted(f.base_second_ns), 0.5),
        "cold_ns": f.cold_ns,
        "warm_ns": f.warm_ns,
        "baseline_first_ns": f.base_first_ns,
        "baseline_second_ns": f.base_second_ns,
        "server_pids": f.pids,
        "cold_machine_cores_busy": f.cold_cores_busy,
    }
    print(f"run took {time.monotonic() - started:.0f} s")
    for problem in problems:
        print(f"problem: {problem}")
    if args.json:
        data = {
            "machine": machine,
            "supervisor": supervisor,
            "replicas": summary,
            "ratio_replicas2_over_1": ratio,
            "ratio_per_round": paired,
            "sessions": sessions_summary,
            "problems": problems,
        }
        write_json(Path(args.json), data)
        print(f"json: {args.json}")
    return 0


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """--help with the module docstring as written and every option's default."""


if __name__ == "__main__":
    sys.exit(main())
