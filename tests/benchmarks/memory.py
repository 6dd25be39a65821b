"""Benchmark: memory of the supervisor and of its workers, with 1, 10 and 50 stdio servers ready.

    .venv/bin/python -m tests.benchmarks.memory [--servers tiny] [--counts 1,10,50] [--settle S] [--json PATH]

For each server kind and count N: ``mcp-supervisor run`` on N servers (each with ``startTimeout``
--timeout, so that N workers starting at once on few cores are not killed at the default 30 s), wait
until all are ready, call each server's tool once (``--no-calls`` to skip), rest ``--settle``
seconds, then read /proc/PID/smaps_rollup of every process under the supervisor. Processes are sorted by role:

- supervisor: the ``mcp-supervisor run`` process;
- worker: the ``worker_pid`` of each server in ``status``;
- server: the ``server_pid`` of each server in ``status``, and its descendants (for context: their
  memory is the servers' own, not the supervisor's);
- other: any other process under the supervisor (e.g. one that forks workers).

Figures in MB (10^6 bytes): RSS; PSS (shared pages divided among the processes sharing them: the sum
over processes is what they really cost); USS = Private_Clean + Private_Dirty (what exiting would
give back). Per role: count, median and max RSS, median PSS, median and max USS, and totals. Summary
lines give the per-worker USS against the target (< 20 MB), and the supervision cost: the PSS of
supervisor + workers + other, in all and per server. Server kinds: ``tiny`` (stdlib-only JSON-RPC,
the default: the servers stay small), ``test``, ``everything``, ``time`` (see tests/benchmarks/fleet.py).
Not a test: pytest only collects ``test_*.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from supervisor.client.blocking import SupervisorClient
from tests.benchmarks.common import REPO, print_table, write_json
from tests.benchmarks.fleet import (
    HelpFormatter,
    Kind,
    Memory,
    cmdline,
    descendants,
    finish,
    log_problems,
    machine,
    median,
    memory,
    parse_counts,
    parse_kinds,
    start_timeout_setting,
    supervised,
    wait_all_ready,
)

MB = 1024 * 1024 / 1e6  # MiB -> MB
ROLES = ("supervisor", "worker", "other", "server")
TARGET_WORKER_USS_MB = 20.0


@dataclass
class Row:
    kind: str
    n: int
    role: str
    count: int
    rss_median: float
    rss_max: float
    pss_median: float
    uss_median: float
    uss_max: float
    uss_total: float
    pss_total: float
    rss_total: float

    def cells(self) -> list[str]:
        figures = (self.rss_median, self.rss_max, self.pss_median, self.uss_median, self.uss_max)
        totals = (self.uss_total, self.pss_total)
        shown = ["-" if x != x else f"{x:.1f}" for x in (*figures, *totals)]  # x != x: NaN, no process
        return [self.kind, str(self.n), self.role, str(self.count), *shown]


HEADER = [
    "server",
    "N",
    "role",
    "procs",
    "RSS med",
    "RSS max",
    "PSS med",
    "USS med",
    "USS max",
    "USS sum",
    "PSS sum",
]


def _row(kind: str, n: int, role: str, readings: list[Memory]) -> Row:
    def mb(values: list[float]) -> list[float]:
        return [v * MB for v in values]

    rss, pss, uss = (mb([getattr(m, f) for m in readings]) for f in ("rss", "pss", "uss"))
    nan = float("nan")
    return Row(
        kind,
        n,
        role,
        len(readings),
        rss_median=median(rss),
        rss_max=max(rss, default=nan),
        pss_median=median(pss),
        uss_median=median(uss),
        uss_max=max(uss, default=nan),
        uss_total=sum(uss),
        pss_total=sum(pss),
        rss_total=sum(rss),
    )


def measure(
    kind: Kind, n: int, args: argparse.Namespace, problems: list[str]
) -> tuple[list[Row], dict[str, object]]:
    names = [f"{kind.name}{i:02d}" for i in range(n)]
    setting = start_timeout_setting(args.timeout)
    setting["supervisor"]["workerSpawn"] = args.spawn
    with supervised({name: kind.entry() for name in names}, problems, setting) as run:
        with SupervisorClient(run.endpoint, request_timeout=5.0) as sup:
            ready_s = wait_all_ready(sup, run, n, args.timeout, 0.05).listed_s
            if args.calls:
                tool = {(t.server, t.original_name): t.name for t in sup.list_tools()}
                for name in names:
                    sup.call_tool(tool[(name, kind.tool)], kind.arguments, timeout=10)
            time.sleep(args.settle)
            rows = sup.status()
        workers = {r.worker_pid for r in rows if r.worker_pid}
        servers = {r.server_pid for r in rows if r.server_pid}
        for pid in list(servers):
            servers |= descendants(pid)
        everything = descendants(run.proc.pid)
        run.seen |= everything
        if missing := workers - everything:
            problems.append(f"workers {sorted(missing)} from status are not under the supervisor")
        by_role: dict[str, list[int]] = {
            "supervisor": [run.proc.pid],
            "worker": sorted(workers),
            "server": sorted(servers),
            "other": sorted(everything - workers - servers),
        }
        readings: dict[str, list[Memory]] = {}
        for role, pids in by_role.items():
            readings[role] = [m for pid in pids if (m := memory(pid)) is not None]
        others = [f"{pid}: {cmdline(pid)[:100]}" for pid in by_role["other"][:5]]
    problems.extend(log_problems(run.log))
    detail = {"ready_s": ready_s, "pids": by_role, "other_cmdlines": others}
    return [_row(kind.name, n, role, readings[role]) for role in ROLES], detail


def summarize(rows: list[Row]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for kind, n in dict.fromkeys((r.kind, r.n) for r in rows):
        role = {r.role: r for r in rows if (r.kind, r.n) == (kind, n)}
        cost = sum(role[x].pss_total for x in ("supervisor", "worker", "other"))
        worker = role["worker"]
        out.append(
            {
                "server": kind,
                "n": n,
                "worker_uss_median_mb": worker.uss_median,
                "worker_uss_max_mb": worker.uss_max,
                "worker_pss_median_mb": worker.pss_median,
                "worker_uss_target_met": worker.uss_max < TARGET_WORKER_USS_MB,
                "supervision_pss_mb": cost,
                "supervision_pss_per_server_mb": cost / n,
                "supervisor_uss_mb": role["supervisor"].uss_median,
                "servers_pss_mb": role["server"].pss_total,
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--servers", default="tiny", help="server kinds, comma-separated")
    parser.add_argument("--counts", default="1,10,50", help="numbers of servers, comma-separated")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds of rest before reading memory")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds for all to be ready (also their startTimeout)"
    )
    parser.add_argument(
        "--spawn",
        choices=["zygote", "exec"],
        default="zygote",
        help="workerSpawn: fork workers from the zygote, or exec each as its own interpreter",
    )
    parser.add_argument(
        "--no-calls",
        dest="calls",
        action="store_false",
        help="do not call each server's tool once before reading (calls made: %(default)s)",
    )
    parser.add_argument(
        "--json", type=Path, default=REPO / "tests/benchmarks/results/memory.json", help="where to write"
    )
    args = parser.parse_args()
    try:
        kinds, counts = parse_kinds(args.servers), parse_counts(args.counts)
    except ValueError as exc:
        parser.error(str(exc))
    if args.settle < 0 or args.timeout <= 0:
        parser.error("--settle >= 0 and --timeout > 0 please")
    info = machine(
        servers=args.servers, counts=args.counts, settle=args.settle, calls=args.calls, spawn=args.spawn
    )
    problems: list[str] = []
    rows: list[Row] = []
    details: list[dict[str, object]] = []
    for kind in kinds:
        for n in counts:
            print(f"... {kind.name} x{n}", file=sys.stderr, flush=True)
            new, detail = measure(kind, n, args, problems)
            rows += new
            details.append({"server": kind.name, "n": n, **detail})
    finish(info)
    for key, value in info.items():
        print(f"{key}: {value}")
    print_table(HEADER, [r.cells() for r in rows])
    summary = summarize(rows)
    for s in summary:
        verdict = "met" if s["worker_uss_target_met"] else "NOT met"
        print(
            f"{s['server']} x{s['n']}: per-worker USS median {s['worker_uss_median_mb']:.1f} MB, "
            f"max {s['worker_uss_max_mb']:.1f} MB (target < {TARGET_WORKER_USS_MB:g} MB: {verdict}); "
            f"supervisor + workers + other PSS {s['supervision_pss_mb']:.0f} MB "
            f"({s['supervision_pss_per_server_mb']:.1f} MB per server); "
            f"servers PSS {s['servers_pss_mb']:.0f} MB"
        )
    for detail in details:
        if detail["other_cmdlines"]:
            print(f"other processes ({detail['server']} x{detail['n']}): {detail['other_cmdlines']}")
    for problem in problems:
        print(f"problem: {problem}")
    data = {"machine": info, "rows": [asdict(r) for r in rows], "summary": summary, "details": details}
    write_json(args.json, {**data, "problems": problems})
    print(f"wrote {args.json}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
