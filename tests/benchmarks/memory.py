"""Benchmark: the memory mcp-supervisor and its peers cost, holding the same 1, 10 and 50 stdio servers.

    .venv/bin/python -m tests.benchmarks.memory [--servers tiny] [--counts 1,10,50] [--settle S]
        [--peers fastmcp,fastmcp-mount,mcp-proxy,magg] [--peer-budget S] [--spawn exec] [--json PATH]

For each server kind and count N, one system after another holds N servers of that kind (the same
entries), and a host (the SDK's ``mcp.Client``) reaches it as a host does, lists the tools (every
server's tool must be there), rests ``--settle`` s, reads; calls each server's tool once (so every
server has been started and used; ``--no-calls`` to skip), rests, reads again. A reading is
/proc/PID/smaps_rollup of each process, sorted by role:

- mcp-supervisor (``mcp-supervisor run``, each server with ``startTimeout`` --timeout, the host
  connected through the stdio facade ``mcp-supervisor mcp`` once every server is ready):
  ``supervisor``, ``worker`` (each server's ``worker_pid`` in ``status``), ``other`` (any other
  process under the supervisor: the zygote that forks workers), ``facade`` (the facade process,
  one per host however many servers), ``server`` (each ``server_pid`` and its descendants);
- a peer (see tests/benchmarks/memory_peers.py; installed, pinned, by tests/benchmarks/peers.py):
  ``peer`` (its own processes) and ``server``. A peer that has not listed and called within
  --peer-budget seconds is skipped, saying why (fastmcp's proxy starts every server per request).

Figures in MB (10^6 bytes). PSS divides each shared page among the processes sharing it, so PSS adds
up across processes to what they cost together; USS (Private_Clean + Private_Dirty) is what a
process holds alone, what its exit gives back. The table puts the systems side by side: the
supervision cost (supervisor + workers + zygote; a peer's own processes) in all and per server, the
servers' own memory, our facade, and the supervision PSS read after the listing alone. A line per
count gives the per-worker PSS and USS (the median worker; target: PSS at most 4 MB), the
supervisor's (target: PSS at most 25 MB with 10 servers) and our supervision cost against each
peer's. Where the kernel's same-page merging runs (``/sys/kernel/mm/ksm/run`` 1: workers offer their
memory to it, ``memoryMerge``), each reading of ours first waits for ksmd to settle
(tests/benchmarks/ksm.py, at most --ksm-timeout s); the header says whether it ran. Server kinds:
``tiny`` (stdlib-only JSON-RPC, the default: the servers stay small), ``test``,
``everything``, ``time`` (see tests/benchmarks/fleet.py). Not a test: pytest only collects test_*.py.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import trio

from supervisor.client.blocking import SupervisorClient
from tests.benchmarks import ksm
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
    parse_counts,
    parse_kinds,
    start_timeout_setting,
    supervised,
    wait_all_ready,
)
from tests.benchmarks.memory_peers import (
    LABELS,
    NOTES,
    PEERS,
    SUPERVISION,
    Exercised,
    context,
    measure_peers,
    readings,
    through_facade,
    wanted_peers,
)
from tests.benchmarks.peer_install import PEERS_DIR, install_peers
from tests.benchmarks.peer_processes import swept

MB = 1024 * 1024 / 1e6  # MiB -> MB
ROLES = ("supervisor", "worker", "other", "facade", "peer", "server")
TARGET_WORKER_PSS_MB = 4.0  # per stdio worker, at each count
TARGET_SUPERVISOR_PSS_MB = 25.0  # the supervisor process, with 10 servers


@dataclass
class Row:
    """One role's processes in one system, after the listing (``phase`` "listed") or the calls."""

    kind: str
    n: int
    system: str
    phase: str
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


def _row(kind: str, n: int, system: str, phase: str, role: str, found: list[Memory]) -> Row:
    rss, pss, uss = ([getattr(m, f) * MB for m in found] for f in ("rss", "pss", "uss"))
    nan = float("nan")
    return Row(
        kind,
        n,
        system,
        phase,
        role,
        len(found),
        rss_median=median(rss),
        rss_max=max(rss, default=nan),
        pss_median=median(pss),
        uss_median=median(uss),
        uss_max=max(uss, default=nan),
        uss_total=sum(uss),
        pss_total=sum(pss),
        rss_total=sum(rss),
    )


def rows_of(kind: str, n: int, system: str, done: Exercised) -> list[Row]:
    out = []
    for phase, by_role in (("listed", done.listed), ("called", done.called)):
        out += [_row(kind, n, system, phase, r, by_role[r]) for r in ROLES if r in by_role]
    return out


def measure_ours(kind: Kind, n: int, args: argparse.Namespace, problems: list[str]) -> Exercised:
    names = [f"{kind.name}{i:02d}" for i in range(n)]
    setting = start_timeout_setting(args.timeout)
    setting["supervisor"]["workerSpawn"] = args.spawn
    servers = {name: kind.entry() for name in names}
    by_role: dict[str, list[int]] = {}
    others: list[str] = []  # the command lines of the first "other" processes
    settled: list[str] = []
    with (
        supervised(servers, problems, setting) as run,
        SupervisorClient(run.endpoint, request_timeout=5.0) as sup,
        tempfile.TemporaryDirectory(prefix="bench-mem-") as tmpdir,
    ):
        ready_s = wait_all_ready(sup, run, n, args.timeout, 0.05).listed_s

        def read(facade: int) -> dict[str, list[Memory]]:
            settled.append(ksm.settle(args.ksm_timeout))  # where KSM runs: what it will fold, folded
            rows = sup.status()
            workers = {r.worker_pid for r in rows if r.worker_pid}
            servers = {r.server_pid for r in rows if r.server_pid}
            for pid in list(servers):
                servers |= descendants(pid)
            everything = descendants(run.proc.pid)
            run.seen |= everything
            if missing := workers - everything:
                problems.append(f"workers {sorted(missing)} from status are not under the supervisor")
            by_role.update(
                supervisor=[run.proc.pid],
                worker=sorted(workers),
                other=sorted(everything - workers - servers),
                facade=[facade],
                server=sorted(servers),
            )
            others[:] = [f"{pid}: {cmdline(pid)[:100]}" for pid in by_role["other"][:5]]
            return readings(by_role)

        ctx = context(servers, Path(tmpdir), {}, run.endpoint, run.proc.pid)
        done = trio.run(through_facade, ctx, kind, args.settle, args.calls, read)
    problems.extend(log_problems(run.log))
    done.detail |= {"ready_s": ready_s, "pids": by_role, "other_cmdlines": others, "ksm": settled}
    return done


# ------------------------------------------------------------------ the table


def totals(by_role: dict[str, list[Memory]], n: int) -> dict[str, float]:
    def total(roles: tuple[str, ...], attr: str) -> float:
        return float(sum(getattr(m, attr) for r in roles for m in by_role.get(r, []))) * MB

    cost = {f"supervision_{a}_mb": total(SUPERVISION, a) for a in ("pss", "uss")}
    return {
        **cost,
        **{f"supervision_{a}_per_server_mb": cost[f"supervision_{a}_mb"] / n for a in ("pss", "uss")},
        **{f"{r}s_{a}_mb": total((r,), a) for r in ("server", "facade") for a in ("pss", "uss")},
        "own_procs": sum(len(by_role.get(r, [])) for r in SUPERVISION),
        "server_procs": len(by_role.get("server", [])),
    }


FIGURES = [  # (label, key in totals, of the listing alone)
    ("supervision PSS", "supervision_pss_mb", False),
    ("  per server", "supervision_pss_per_server_mb", False),
    ("supervision USS", "supervision_uss_mb", False),
    ("  per server", "supervision_uss_per_server_mb", False),
    ("servers PSS", "servers_pss_mb", False),
    ("servers USS", "servers_uss_mb", False),
    ("stdio facade PSS", "facades_pss_mb", False),
    ("stdio facade USS", "facades_uss_mb", False),
    ("supervision PSS, listed only", "supervision_pss_mb", True),
    ("processes: own + servers", "", False),
]


def table(results: dict[tuple[str, int], dict[str, Exercised]], systems: list[str]) -> list[str]:
    """The side-by-side table (printed); its notes returned."""
    notes = [NOTES[s] for s in systems]
    lines: list[list[str]] = []
    for (kind, n), done in results.items():
        sums = {s: (totals(d.listed, n), totals(d.called or d.listed, n)) for s, d in done.items()}
        skipped: dict[str, int] = {}
        for system in systems:
            if why := done[system].skipped:
                notes.append(f"{LABELS[system]}, {kind} x{n}: skipped, {why}")
                skipped[system] = len(notes)
        for i, (label, key, listed_only) in enumerate(FIGURES):
            cells = []
            for system in systems:
                if system in skipped and not (listed_only and done[system].listed):
                    cells.append(f"skipped [{skipped[system]}]" if i == 0 else "-")
                    continue
                figures = sums[system][0 if listed_only else 1]
                if not key:
                    cells.append(f"{figures['own_procs']:.0f} + {figures['server_procs']:.0f}")
                elif key.startswith("facades") and system != "ours":
                    cells.append("-")
                else:
                    cells.append(f"{figures[key]:.1f}")
            lines.append([kind, str(n), label, *cells])
    header = ["server", "N", "MB", *(f"{LABELS[s]} [{i + 1}]" for i, s in enumerate(systems))]
    print_table(header, lines, left=3)
    return notes


def summarize(results: dict[tuple[str, int], dict[str, Exercised]]) -> list[dict[str, Any]]:
    out = []
    for (kind, n), done in results.items():
        at = done["ours"].called or done["ours"].listed
        worker = _row(kind, n, "ours", "", "worker", at.get("worker", []))
        supervisor = _row(kind, n, "ours", "", "supervisor", at.get("supervisor", []))
        peers = {s: totals(d.called or d.listed, n) for s, d in done.items() if s != "ours" and not d.skipped}
        out.append(
            {
                "server": kind,
                "n": n,
                "worker_pss_median_mb": worker.pss_median,
                "worker_uss_median_mb": worker.uss_median,
                "worker_uss_max_mb": worker.uss_max,
                "worker_pss_target_met": worker.pss_median <= TARGET_WORKER_PSS_MB,
                "supervisor_pss_mb": supervisor.pss_median,
                "supervisor_uss_mb": supervisor.uss_median,
                "ours": totals(at, n),
                "peers": peers,
                "skipped": {s: d.skipped for s, d in done.items() if d.skipped},
            }
        )
    return out


def summary_line(s: dict[str, Any]) -> str:
    ours = s["ours"]
    verdict = "met" if s["worker_pss_target_met"] else "NOT met"
    text = (
        f"{s['server']} x{s['n']}: per worker PSS {s['worker_pss_median_mb']:.1f} MB (target <= "
        f"{TARGET_WORKER_PSS_MB:g}: {verdict}), USS {s['worker_uss_median_mb']:.1f} MB (max "
        f"{s['worker_uss_max_mb']:.1f}); supervisor PSS {s['supervisor_pss_mb']:.1f} MB, USS "
        f"{s['supervisor_uss_mb']:.1f} MB"
    )
    if s["n"] == 10:
        met = "met" if s["supervisor_pss_mb"] <= TARGET_SUPERVISOR_PSS_MB else "NOT met"
        text += f" (target <= {TARGET_SUPERVISOR_PSS_MB:g}: {met})"
    text += (
        f"; supervision PSS {ours['supervision_pss_mb']:.0f} MB, USS "
        f"{ours['supervision_uss_mb']:.0f} MB (+ facade {ours['facades_pss_mb']:.0f} / "
        f"{ours['facades_uss_mb']:.0f})"
    )
    for system, peer in s["peers"].items():
        pss, uss = peer["supervision_pss_mb"], peer["supervision_uss_mb"]
        text += (
            f"; {LABELS[system]} {pss:.0f} / {uss:.0f} MB (ours "
            f"{ours['supervision_pss_mb'] / pss:.2f}x PSS, {ours['supervision_uss_mb'] / uss:.2f}x USS)"
        )
    return text + "".join(f"; {LABELS[k]} skipped" for k in s["skipped"])


# ------------------------------------------------------------------ the command


def _peers(text: str) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip() and k.strip() != "none"]
    if unknown := [k for k in keys if k not in PEERS]:
        raise argparse.ArgumentTypeError(f"peers are some of {', '.join(PEERS)} (or none), not {unknown}")
    return keys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--servers", default="tiny", help="server kinds, comma-separated")
    parser.add_argument("--counts", default="1,10,50", help="numbers of servers, comma-separated")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds of rest before each reading")
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
        "--ksm-timeout",
        type=float,
        default=300.0,
        help="where the kernel's same-page merging runs: seconds to wait for it to settle before a reading",
    )
    parser.add_argument("--peers", type=_peers, default=",".join(PEERS), help="peers to measure, or none")
    parser.add_argument(
        "--peer-budget", type=float, default=240.0, help="seconds a peer may take to list and call"
    )
    parser.add_argument("--peers-venv", type=Path, default=PEERS_DIR, help="where the peers are installed")
    parser.add_argument("--magg-python", default="auto", help="Python >= 3.12 for magg (see peers.py)")
    parser.add_argument(
        "--json",
        type=Path,
        default=REPO / "tests/benchmarks/results/memory.json",
        help="where to write ('' to write none)",
    )
    args = parser.parse_args()
    try:
        kinds, counts = parse_kinds(args.servers), parse_counts(args.counts)
    except ValueError as exc:
        parser.error(str(exc))
    if args.settle < 0 or args.timeout <= 0 or args.peer_budget <= 0:
        parser.error("--settle >= 0, --timeout > 0 and --peer-budget > 0 please")
    info = machine(
        servers=args.servers,
        counts=args.counts,
        settle=args.settle,
        calls=args.calls,
        spawn=args.spawn,
        peers=",".join(args.peers) or "none",
        peer_budget=args.peer_budget,
        ksm=ksm.describe(),
    )
    installed = install_peers(args.peers_venv, wanted_peers(args.peers), args.magg_python)
    problems: list[str] = []
    results: dict[tuple[str, int], dict[str, Exercised]] = {}
    with swept(problems):
        for kind in kinds:
            for n in counts:
                print(f"... {kind.name} x{n}: mcp-supervisor", file=sys.stderr, flush=True)
                results[kind.name, n] = {"ours": measure_ours(kind, n, args, problems)}
                names = [f"{kind.name}{i:02d}" for i in range(n)]
                results[kind.name, n] |= measure_peers(kind, names, args.peers, installed, args, problems)
    finish(info)
    for key, value in info.items():
        print(f"{key}: {value}")
    for name, peer in installed.items():
        print(f"peer {name}: {peer.problem or ', '.join(f'{k} {v}' for k, v in peer.versions.items())}")
    notes = table(results, ["ours", *args.peers])
    for i, note in enumerate(notes):
        print(f"[{i + 1}] {note}")
    summary = summarize(results)
    for s in summary:
        print(summary_line(s))
    for (name, n), done in results.items():
        if others := done["ours"].detail.get("other_cmdlines"):
            print(f"other processes under the supervisor ({name} x{n}): {others}")
    for problem in problems:
        print(f"problem: {problem}")
    rows = [asdict(r) for (k, n), by in results.items() for s, d in by.items() for r in rows_of(k, n, s, d)]
    details = [
        {"server": k, "n": n, "system": s, "list_s": d.list_s, "calls": d.calls_made, **d.detail}
        for (k, n), done in results.items()
        for s, d in done.items()
    ]
    peers = {name: asdict(p) | {"python": str(p.python)} for name, p in installed.items()}
    data = {"machine": info, "peers": peers, "rows": rows, "summary": summary, "notes": notes}
    write_json(args.json, {**data, "details": details, "problems": problems})
    print(f"wrote {args.json}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
