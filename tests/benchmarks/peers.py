"""Benchmark: mcp-supervisor's ways in, next to its peers, for 1 and for N backend servers.

    .venv/bin/python -m tests.benchmarks.peers [--servers 1,10] [--repeat R] [--calls N]
        [--kill-calls K] [--budget S] [--paths stdio,http,...] [--host-mode auto|legacy]
        [--peers-venv DIR] [--magg-python auto|debian|PATH] [--logs DIR] [--json PATH]

The backend servers are server-everything (Node) from tests/npm, as first_contact.py has them, named
s0..s{N-1}; the caller is the official SDK's ``mcp.Client`` (``--host-mode``, auto by default; legacy
puts every path on the initialize handshake, 2025-11-25) calling s0's ``echo``. A
stdio path is spawned as a host spawns its servers: the SDK's ``get_default_environment()`` plus
the entry's own variables. Paths (``--paths`` takes the names in brackets):

  stdio           [stdio]          ``python -m supervisor mcp --endpoint E`` in front of a running
                                   ``mcp-supervisor run`` holding the N servers
  stdio --config  [stdio-config]   ``mcp --config F``, which starts the supervisor itself: its spawn
                                   to full listing includes every server's start (that column only;
                                   once started it is the stdio path)
  http            [http]           ``python -m supervisor serve --http 127.0.0.1:0 --endpoint E``,
                                   bearer token from $MCP_SUPERVISOR_TOKEN, the SDK's streamable HTTP
                                   client over kept-alive connections
  stub            [stub]           the ZeroMQ stub ``AsyncSupervisorClient`` (no MCP hop):
                                   ``list_tools(wait=...)`` and ``call_tool``
  direct          [direct]         the host spawns the servers itself: for N servers, N sessions
                                   spawned at once; calls go to s0's session
  fastmcp proxy   [fastmcp]        fastmcp's ``create_proxy({"mcpServers": ...})`` as a stdio server;
                                   pinned to ``mode="auto"``: its default mirrors the host's protocol
                                   era to the backend, and with a 2026-07-28 host server-everything's
                                   tools/list then fails fastmcp's validation. With more than one
                                   server fastmcp builds its composite router per request, starting
                                   every server for each call
  fastmcp mount   [fastmcp-mount]  the same fastmcp, one single-server ``create_proxy`` per server
                                   mounted under its name on one FastMCP (servers kept running)
  mcp-proxy       [mcp-proxy]      ``mcp-proxy --named-server-config F --port 0`` (stdio servers behind
                                   streamable HTTP); it does not aggregate: each named server is an
                                   endpoint of its own (/servers/NAME/mcp), so the host holds N
                                   sessions, opened at once
  magg            [magg]           ``magg serve`` (stdio) with a config of the N servers (prefix = the
                                   server's name). It needs Python >= 3.12: one on this machine (on
                                   PATH, or one of pyenv's versions), else Debian's python3.13 package
                                   of the next release, downloaded with apt-get into the peers
                                   directory and run with its own C library (nothing is installed on
                                   the system); when neither works its row says "not installable"

Figures, per path and server count, the paths interleaved (the order rotates with each repeat):
  spawn -> full listing  ms from spawning the path (HTTP paths: from starting the server process) to
                         the first tools/list answered (every page), median over --repeat spawns;
                         "first listing full" counts the spawns whose first listing held every
                         backend server's tools (as the path lists them once settled)
  p50, p90               one caller calling echo back to back, --calls calls in --repeat blocks
  calls/s @16            16 trio tasks sharing one session, --calls calls in --repeat blocks
  lost around kill -9    a fresh session calls echo every 50 ms (each call a 10 s timeout) for
                         --kill-calls calls; after a third of them the s0 server-everything process
                         (found in the path's process tree by the variable each server entry sets)
                         is killed with SIGKILL: calls that failed / calls made. Supervisor paths get
                         a fresh supervisor each, so one path's restart backoff is not another's
Every block stops starting calls after --budget seconds (the row says how many calls it made), and
a path whose one-caller p50 is over 1 s is not driven by 16 callers. Every call's result is checked
(no isError, the echoed text); a path that fails is marked, and the others go on.

The peers are installed by this script, pinned (PINS), one venv each under --peers-venv (fastmcp 4
and magg's fastmcp < 4 cannot share one), never in the project's venv. This process is the
subreaper of everything it starts: whatever is left at the end (an orphaned server included) is
killed, and named among the problems. Not a test: pytest only collects test_*.py.

This module runs a measurement and prints it; its parts, each below the next: peer_phases (spawn,
calls, kill runs, the table's rows), peer_paths (each way in, opened as its host opens it),
peer_processes (subreaping, finding and stopping processes), peer_install (the peers' venvs).
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import trio

from supervisor.client import AsyncSupervisorClient
from tests.benchmarks.common import (
    EVERYTHING,
    NODE,
    REPO,
    machine_info,
    print_table,
    write_json,
)
from tests.benchmarks.fleet import HelpFormatter
from tests.benchmarks.peer_install import PEERS_DIR, PINS, Peer, install_peers
from tests.benchmarks.peer_paths import (
    PATHS,
    PEER_KEYS,
    Ctx,
    PathSpec,
    attribute,
    write_configs,
    write_scripts,
)
from tests.benchmarks.peer_phases import (
    HEADER,
    Row,
    calls_phase,
    kill_phase,
    settle,
    spawn_phase,
)
from tests.benchmarks.peer_processes import (
    SERVER_ENV,
    supervisor_running,
    swept,
)

RESULTS = REPO / "tests/benchmarks/results"


def keep_logs(dest: Path, prefix: str, tmp: Path, logs: list[Path]) -> None:
    """The paths' logs and every supervisor's, copied to ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for log in [*logs, *tmp.glob("*/supervisor.log")]:
        shutil.copy(log, dest / f"{prefix}-{log.parent.name}-{log.name}")


def log_lines(path: Path, who: str, summary: bool = False) -> list[str]:
    """The log's lines that say something went wrong (for a peer's log: how many tracebacks)."""
    if not path.exists():
        return []
    bad = re.compile(r"\b(ERROR|CRITICAL|Traceback)\b")
    lines = [ln.strip()[:200] for ln in path.read_text(errors="replace").splitlines() if bad.search(ln)]
    if summary:
        count = sum("Traceback" in ln for ln in lines)
        return [f"{who}: {count} tracebacks before the kill runs (--logs keeps the logs)"] if count else []
    return [f"{who}: {ln}" for ln in lines]


async def measure_count(
    n: int, specs: list[PathSpec], peers: dict[str, Peer], args: argparse.Namespace, problems: list[str]
) -> list[Row]:
    rows = {s.key: Row(s.label, n) for s in specs}
    for spec in specs:
        if spec.peer is not None and (problem := peers[spec.peer].problem):
            rows[spec.key].errors.append(problem)
    live = [s for s in specs if not rows[s.key].errors]
    servers = {
        f"s{i}": {"command": str(NODE), "args": [str(EVERYTHING), "stdio"], "env": {SERVER_ENV: f"s{i}"}}
        for i in range(n)
    }
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmpdir:
        tmp = Path(tmpdir)
        async with supervisor_running(servers, Path(tempfile.mkdtemp(dir=tmp)), problems) as (endpoint, pid):
            ctx = Ctx(
                servers,
                tmp,
                endpoint,
                pid,
                peers,
                secrets.token_urlsafe(24),
                write_configs(tmp, servers),
                write_scripts(tmp),
                host_mode=args.host_mode,
            )
            async with AsyncSupervisorClient(endpoint) as asup:
                registry = attribute([(None, t.name) for t in await asup.list_tools()], ctx.names, "mcp_{}_")
            print(f"{n} server(s): spawn to first listing", file=sys.stderr)
            firsts = await spawn_phase(live, ctx, rows, args.repeat)
            print(f"{n} server(s): calls", file=sys.stderr)
            calls_specs = [s for s in live if not s.spawn_only and not rows[s.key].errors]
            settled = await calls_phase(calls_specs, ctx, rows, args)
        for key, path in ctx.logs.items():  # before the kill runs, whose failures are on purpose
            problems += log_lines(path, f"{key} stderr ({n} servers)", summary=key in PEER_KEYS)
        print(f"{n} server(s): kill -9", file=sys.stderr)
        await kill_phase(
            [s for s in calls_specs if not rows[s.key].errors], ctx, rows, args.kill_calls, problems
        )
        if args.logs is not None:
            keep_logs(args.logs, f"{n}-servers", tmp, list(ctx.logs.values()))
        direct = settled.get("direct")
        for spec in live:
            row = rows[spec.key]
            reference = registry if spec.supervised or spec.spawn_only else settled.get(spec.key)
            if spec.key in settled:
                settle(row, settled[spec.key], direct)
                if spec.supervised and settled[spec.key].tools != registry.tools:
                    row.errors.append("its listing differs from the supervisor's registry")
            if reference is not None:
                row.first_full = [f.holds(reference) for f in firsts[spec.key]]
                row.first_listings = [f.total for f in firsts[spec.key]]
                row.first_missing = sorted(
                    {
                        f"{server}: {', '.join(sorted(names - f.tools.get(server, frozenset())))}"
                        for f in firsts[spec.key]
                        for server, names in reference.tools.items()
                        if not f.tools.get(server, frozenset()) >= names
                    }
                )
    return list(rows.values())


async def measure(
    counts: list[int],
    specs: list[PathSpec],
    peers: dict[str, Peer],
    args: argparse.Namespace,
    problems: list[str],
) -> list[Row]:
    rows: list[Row] = []
    for n in counts:
        rows += await measure_count(n, specs, peers, args, problems)
    return rows


# ------------------------------------------------------------------ the command


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma-separated list of integers, not {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("server counts must be >= 1")
    return counts


def _paths(text: str) -> list[PathSpec]:
    by_key = {p.key: p for p in PATHS}
    keys = [k.strip() for k in text.split(",") if k.strip()]
    if not keys or any(k not in by_key for k in keys):
        raise argparse.ArgumentTypeError(f"paths are some of {', '.join(by_key)}, not {text!r}")
    return [by_key[k] for k in keys]


def report(
    rows: list[Row], args: argparse.Namespace, peers: dict[str, Peer], load_start: str, problems: list[str]
) -> dict[str, Any]:
    table: list[list[str]] = []
    remarks: list[str] = []
    for r in rows:
        said = r.remarks()
        refs = [str(len(remarks) + 1 + i) for i in range(len(said))]
        remarks += [
            f"[{ref}] {r.path}, {r.servers} servers: {text}" for ref, text in zip(refs, said, strict=True)
        ]
        table.append([*r.cells(args.calls), ",".join(refs) or "-"])
    print_table(HEADER, table)
    print()
    for line in remarks:
        print(line)
    machine = machine_info(
        servers=",".join(map(str, args.servers)),
        repeat=args.repeat,
        calls=args.calls,
        kill_calls=args.kill_calls,
    )
    print(f"machine: {machine['nproc']} cores, Python {machine['python']}, {machine['platform']}")
    print(f"load average: {load_start} at the start, {machine['loadavg']} at the end")
    for name, peer in peers.items():
        print(f"peer {name}: {peer.problem or ', '.join(f'{k} {v}' for k, v in peer.versions.items())}")
    protocols = sorted({f"{r.path} {r.protocol}" for r in rows if r.protocol})
    print("negotiated: " + ", ".join(protocols))
    for problem in problems:
        print(f"problem: {problem}")
    return {
        "machine": {**machine, "loadavg_start": load_start},
        "peers": {name: asdict(peer) | {"python": str(peer.python)} for name, peer in peers.items()},
        "pins": PINS,
        "rows": [asdict(r) for r in rows],
        "problems": problems,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--servers", type=_counts, default="1,10", help="counts of backend servers")
    parser.add_argument("--repeat", type=int, default=3, help="spawns per path, and blocks of calls")
    parser.add_argument(
        "--calls", type=int, default=200, help="measured calls per path, for each caller count"
    )
    parser.add_argument("--kill-calls", type=int, default=60, help="calls of the kill -9 run, every 50 ms")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds a block of calls may start calls")
    parser.add_argument(
        "--paths", type=_paths, default=",".join(p.key for p in PATHS), help="paths to measure"
    )
    parser.add_argument("--peers-venv", type=Path, default=PEERS_DIR, help="where the peers are installed")
    parser.add_argument(
        "--magg-python",
        default="auto",
        help="Python >= 3.12 for magg: auto (on PATH or pyenv's, else Debian's), debian, or a path",
    )
    parser.add_argument(
        "--host-mode",
        choices=["auto", "legacy"],
        default="auto",
        help="the host's mcp.Client mode: auto (2026-07-28 where the path speaks it) or legacy (every path"
        " on the initialize handshake, 2025-11-25)",
    )
    parser.add_argument("--logs", type=Path, help="copy every process's log into this directory")
    parser.add_argument("--json", default=str(RESULTS / "peers.json"), help="'' to write none")
    args = parser.parse_args()
    if min(args.repeat, args.calls, args.kill_calls) < 1 or args.calls < args.repeat:
        parser.error("--calls >= --repeat >= 1 and --kill-calls >= 1 please")
    if not EVERYTHING.exists():
        raise SystemExit(f"{EVERYTHING} is missing: `bash tests/run.sh` sets up .venv and tests/npm")
    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    started = time.monotonic()
    peers = install_peers(args.peers_venv, {p.peer for p in args.paths if p.peer}, args.magg_python)
    problems: list[str] = []
    with swept(problems):
        rows = trio.run(measure, args.servers, args.paths, peers, args, problems)
    data = report(rows, args, peers, load_start, problems)
    print(f"run took {time.monotonic() - started:.0f} s")
    if args.json:
        write_json(Path(args.json), data)
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
