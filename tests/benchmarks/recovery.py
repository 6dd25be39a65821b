"""Benchmark: recovery after ``kill -9`` of a server process, and of a worker process.

    .venv/bin/python -m tests.benchmarks.recovery [--servers test,everything,tiny] [--kills N]
                                                  [--gap S] [--poll S] [--json PATH]

One ``mcp-supervisor run`` with one server of each kind. For each kind, ``--kills`` times: wait until
the server is ready and has been for ``--gap`` seconds, ``kill -9`` its server process (the
``server_pid`` of ``status``), and call its tool every ``--poll`` seconds until a call succeeds;
calls failing with ``UNAVAILABLE`` or ``WORKER_CRASHED`` in between are expected (counted), any other
error is reported. Recovery is the time from the kill to that first successful call. Then the same
with ``kill -9`` of the worker process (``worker_pid``).

Each server's policy is set so that every kill is a first failure after a healthy period, which the
default policy restarts at once: ``backoffResetAfter`` 1 s (shorter than ``--gap``), ``maxRestarts``
1000 within ``restartWindow`` 60 s (never ``failed``).

Before each kill the script also waits (at most --idle-wait seconds, within the gap) until the CPUs
are at most 25 % busy, and records how busy they were (``busy_before``): on a shared machine, other
work skews start-up times.

After each recovery the same server is started directly (own process group, the worker's
environment) and taken through ``initialize`` + ``tools/list`` by a bare JSON-RPC driver: its own
start-up, measured in the same run as the recoveries it is compared with. Columns, in ms, medians
unless "max":

    recovery p50 / max        kill to the first successful call
    start-up                  the server started directly, to its tools/list answer
    rec - start-up p50 / max  per kill, recovery minus the start-up measured right after it
    detect                    kill to the supervisor's first log line about that server (the worker
                              relays the server's exit; ms precision)
    gone                      kill to the keeper's line saying how that worker incarnation ended
    new worker                the new worker's start to ready, as the log says ("ready ... in T s")
    logged ready              kill to that "ready" line
    failed calls              calls that failed in between, by error code (all kills together)

Target: recovery within 0.5 s plus the server's own start-up (rec - start-up p50 <= 0.5 s). Server
kinds: ``test`` (Python SDK), ``everything`` (Node), ``tiny`` (stdlib-only: recovery is then almost
all the supervisor's own), ``time`` (see tests/benchmarks/fleet.py). Not a test: pytest only collects
``test_*.py``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import SupervisorError
from tests.benchmarks.common import REPO, print_table, write_json
from tests.benchmarks.fleet import (
    IDLE,
    HelpFormatter,
    Kind,
    finish,
    log_problems,
    machine,
    median,
    parse_kinds,
    start_direct,
    supervised,
    wait_all_ready,
    wait_idle,
)

EXPECTED_CODES = ("UNAVAILABLE", "WORKER_CRASHED")
RESET_AFTER = 1.0  # backoffResetAfter, seconds: a kill after this much ready time is a first failure
POLICY = {"maxRestarts": 1000, "restartWindow": 60, "backoffResetAfter": RESET_AFTER}
TARGET_S = 0.5
CALL_TIMEOUT = 5.0  # seconds each polling call may take
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
READY_LINE = re.compile(r"server '([^']+)' ready: \d+ tools in ([\d.]+) s")


@dataclass
class Kill:
    kind: str
    target: str  # "server" or "worker"
    pid: int
    wall: float  # time.time() of the kill
    recovery_s: float
    startup_s: float  # the server started directly, right after
    failed_calls: dict[str, int]
    new_worker_pid: int | None
    new_server_pid: int | None
    busy_before: float = 0.0  # fraction of the CPUs busy just before the kill (other work)
    # from the supervisor's log, seconds after the kill (ms precision), or None when not found there
    detect_s: float | None = None  # its first line about the server
    gone_s: float | None = None  # the keeper's line saying how the incarnation ended
    logged_ready_s: float | None = None  # its line saying the new incarnation is ready
    worker_ready_s: float | None = None  # that line's "in T s": the new worker's start to ready


@dataclass
class Row:
    kind: str
    target: str
    kills: int
    recovery_p50: float
    recovery_max: float
    startup_p50: float
    over_startup_p50: float
    over_startup_max: float
    detect_p50: float
    gone_p50: float
    worker_ready_p50: float
    logged_ready_p50: float
    failed_calls: dict[str, int] = field(default_factory=dict)

    def cells(self) -> list[str]:
        def ms(x: float) -> str:
            return "-" if x != x else f"{x * 1000:.0f}"  # x != x: NaN, not in the log

        calls = " ".join(f"{code}={count}" for code, count in sorted(self.failed_calls.items())) or "-"
        return [
            self.kind,
            self.target,
            str(self.kills),
            f"{ms(self.recovery_p50)} / {ms(self.recovery_max)}",
            ms(self.startup_p50),
            f"{ms(self.over_startup_p50)} / {ms(self.over_startup_max)}",
            ms(self.detect_p50),
            ms(self.gone_p50),
            ms(self.worker_ready_p50),
            ms(self.logged_ready_p50),
            calls,
        ]


HEADER = [
    "server",
    "killed",
    "kills",
    "recovery p50 / max",
    "start-up",
    "rec - start-up p50 / max",
    "detect",
    "gone",
    "new worker",
    "logged ready",
    "failed calls",
]


def _ready(sup: SupervisorClient, server: str, timeout: float) -> tuple[int, int]:
    """Wait (bounded) until ``server`` is ready; its worker and server pids."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = next(r for r in sup.status() if r.server == server)
        if row.state == "failed":
            raise RuntimeError(f"server {server} failed: {row.last_error}")
        if row.state == "ready" and row.worker_pid and row.server_pid:
            return row.worker_pid, row.server_pid
        time.sleep(0.02)
    raise RuntimeError(f"server {server} not ready within {timeout:g} s")


def kill_and_recover(
    sup: SupervisorClient, kind: Kind, tool: str, target: str, args: argparse.Namespace, seen: set[int]
) -> Kill:
    worker_pid, server_pid = _ready(sup, kind.name, args.timeout)
    started = time.monotonic()
    busy = wait_idle(args.idle_wait)
    time.sleep(max(0.0, args.gap - (time.monotonic() - started)))
    worker_pid, server_pid = _ready(sup, kind.name, args.timeout)
    seen |= {worker_pid, server_pid}
    pid = server_pid if target == "server" else worker_pid
    failed: dict[str, int] = {}
    wall = time.time()
    start = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    deadline = start + args.timeout
    while True:
        try:
            sup.call_tool(tool, kind.arguments, timeout=CALL_TIMEOUT)
            recovery = time.perf_counter() - start
            break
        except SupervisorError as exc:
            code = exc.code if exc.code in EXPECTED_CODES else f"unexpected {exc.code}"
            failed[code] = failed.get(code, 0) + 1
        if time.perf_counter() > deadline:
            raise RuntimeError(
                f"{kind.name}: no successful call within {args.timeout:g} s of kill -9 {target}"
            )
        time.sleep(args.poll)
    new_worker, new_server = _ready(sup, kind.name, args.timeout)
    seen |= {new_worker, new_server}
    if new_server == server_pid or new_worker == worker_pid:
        raise RuntimeError(f"{kind.name}: a call succeeded, but the same processes are still there")
    startup = start_direct([kind.argv()], args.timeout)
    seen.update(startup.pids)
    return Kill(
        *(kind.name, target, pid, wall, recovery, startup.each_s[0], failed, new_worker, new_server, busy)
    )


def _log_time(line: str) -> float | None:
    match = LOG_TIME.match(line)
    if match is None:
        return None
    return datetime.datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S").timestamp() + int(match[2]) / 1000


def add_log_times(kills: list[Kill], log: list[str], problems: list[str]) -> None:
    """From the supervisor's log, for each kill: its first line about the server after the kill, the
    keeper's line on how the incarnation ended, the new one's ready line and its start to ready."""
    for kind in dict.fromkeys(k.kind for k in kills):
        mine = [k for k in kills if k.kind == kind]
        lines = [(t, line) for line in log if (t := _log_time(line)) is not None and _about(line, kind)]
        ready = [(t, line) for t, line in lines if (m := READY_LINE.search(line)) and m[1] == kind]
        if len(ready) != len(mine) + 1:
            problems.append(
                f"{kind}: {len(ready)} ready lines in the log for {len(mine)} kills (expected one more)"
            )
            continue
        for kill, (ready_t, ready_line) in zip(mine, ready[1:], strict=True):
            match = READY_LINE.search(ready_line)
            assert match is not None
            kill.worker_ready_s = float(match[2])
            kill.logged_ready_s = ready_t - kill.wall
            after = [(t, line) for t, line in lines if kill.wall - 0.001 <= t <= ready_t]
            kill.detect_s = after[0][0] - kill.wall if after else None
            gone = [t for t, line in after if f"server '{kind}': " in line]
            kill.gone_s = gone[0] - kill.wall if gone else None


def _about(line: str, server: str) -> bool:
    return f"'{server}'" in line or f"[{server}]" in line


def summarize(kills: list[Kill]) -> list[Row]:
    rows = []
    for kind, target in dict.fromkeys((k.kind, k.target) for k in kills):
        mine = [k for k in kills if (k.kind, k.target) == (kind, target)]
        over = [k.recovery_s - k.startup_s for k in mine]
        failed: dict[str, int] = {}
        for k in mine:
            for code, count in k.failed_calls.items():
                failed[code] = failed.get(code, 0) + count

        def logged(values: list[float | None]) -> float:
            return median([v for v in values if v is not None])

        rows.append(
            Row(
                kind,
                target,
                len(mine),
                recovery_p50=median([k.recovery_s for k in mine]),
                recovery_max=max(k.recovery_s for k in mine),
                startup_p50=median([k.startup_s for k in mine]),
                over_startup_p50=median(over),
                over_startup_max=max(over),
                detect_p50=logged([k.detect_s for k in mine]),
                gone_p50=logged([k.gone_s for k in mine]),
                worker_ready_p50=logged([k.worker_ready_s for k in mine]),
                logged_ready_p50=logged([k.logged_ready_s for k in mine]),
                failed_calls=failed,
            )
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--servers", default="test,everything,tiny", help="server kinds, comma-separated")
    parser.add_argument("--kills", type=int, default=10, help="kills per server kind and process killed")
    parser.add_argument(
        "--targets", default="server,worker", help="processes to kill: server, worker or both"
    )
    parser.add_argument(
        "--gap", type=float, default=1.5, help=f"seconds ready before each kill (> {RESET_AFTER:g})"
    )
    parser.add_argument("--poll", type=float, default=0.01, help="seconds between calls while recovering")
    parser.add_argument(
        "--idle-wait", type=float, default=60.0, help="seconds to wait at most for idle CPUs before each kill"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one recovery or start may take")
    parser.add_argument(
        "--json",
        type=Path,
        default=REPO / "tests/benchmarks/results/recovery.json",
        help="where to write ('' to write none)",
    )
    args = parser.parse_args()
    try:
        kinds = parse_kinds(args.servers)
    except ValueError as exc:
        parser.error(str(exc))
    targets = [t for t in ("server", "worker") if t in args.targets.split(",")]
    if (
        not targets
        or args.kills < 1
        or args.gap <= RESET_AFTER
        or not 0 < args.poll <= 1
        or args.timeout <= 0
    ):
        parser.error(
            f"--targets server,worker; --kills >= 1; --gap > {RESET_AFTER:g}; 0 < --poll <= 1; --timeout > 0"
        )
    info = machine(servers=args.servers, kills=args.kills, gap=args.gap, poll=args.poll)
    problems: list[str] = []
    kills: list[Kill] = []
    servers = {kind.name: kind.entry(**POLICY) for kind in kinds}
    with supervised(servers, problems) as run, SupervisorClient(run.endpoint, request_timeout=5.0) as sup:
        wait_all_ready(sup, run, len(kinds), args.timeout, 0.05)
        tools = {(t.server, t.original_name): t.name for t in sup.list_tools()}
        for kind in kinds:
            for target in targets:
                print(f"... {kind.name}: kill -9 {target} x{args.kills}", file=sys.stderr, flush=True)
                tool = tools[(kind.name, kind.tool)]
                try:
                    for _ in range(args.kills):
                        kills.append(kill_and_recover(sup, kind, tool, target, args, run.seen))
                except Exception as exc:  # the other kinds still get measured
                    problems.append(f"{kind.name}, kill -9 {target}: {type(exc).__name__}: {exc}")
                    print(f"... failed: {exc}", file=sys.stderr, flush=True)
    add_log_times(kills, run.log, problems)
    # Errors and warnings about the servers killed are the point; any other one is news.
    problems += log_problems(run.log, tuple(f for k in kinds for f in (f"'{k.name}'", f"[{k.name}]")))
    rows = summarize(kills)
    problems += [f"{r.kind} {r.target}: unexpected errors {r.failed_calls}" for r in rows if _unexpected(r)]
    finish(info)
    for key, value in info.items():
        print(f"{key}: {value}")
    print_table(HEADER, [r.cells() for r in rows])
    for r in rows:
        verdict = "met" if r.over_startup_p50 <= TARGET_S else "NOT met"
        print(
            f"{r.kind}, kill -9 {r.target}: recovery p50 {r.recovery_p50 * 1000:.0f} ms, max "
            f"{r.recovery_max * 1000:.0f} ms; server start-up p50 {r.startup_p50 * 1000:.0f} ms; recovery - "
            f"start-up p50 {r.over_startup_p50 * 1000:.0f} ms (target <= {TARGET_S * 1000:.0f} ms: {verdict})"
        )
    if busy := [k for k in kills if k.busy_before > IDLE]:
        worst = max(k.busy_before for k in busy)
        print(f"{len(busy)} kills came with the CPUs more than {IDLE:.0%} busy (up to {worst:.0%})")
    for problem in problems:
        print(f"problem: {problem}")
    data = {"machine": info, "rows": [asdict(r) for r in rows], "kills": [asdict(k) for k in kills]}
    write_json(args.json, {**data, "problems": problems})
    print(f"wrote {args.json}")
    return 1 if problems else 0


def _unexpected(row: Row) -> bool:
    return any(code.startswith("unexpected") for code in row.failed_calls)


if __name__ == "__main__":
    sys.exit(main())
