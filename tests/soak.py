"""Soak run: every call gets exactly one reply while workers and servers are killed at random.

    .venv/bin/python tests/soak.py --minutes 1 [--servers 4] [--clients 4] [--kill-every 2] [--seed N]

Starts a supervisor over N copies of the stdio test server, calls ``echo`` and ``slow`` from C
client threads, and kill -9s a random worker or server every S seconds. At the end it measures the
supervisor's RSS, FDs, children and zombies, stops it with SIGINT and checks nothing is left.
Exit code 1 when a reply is missing, wrong or duplicated, a process is left, or a zombie exists.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from supervisor.client.blocking import SupervisorClient  # noqa: E402
from supervisor.client.errors import SupervisorError, SupervisorUnreachableError  # noqa: E402
from supervisor.protocol import ServerStatus  # noqa: E402

TEST_SERVER = REPO / "tests" / "servers" / "mcp_test_server.py"
READY_TIMEOUT = 60.0  # seconds for every server to be ready, at the start and at the end
STOP_TIMEOUT = 20.0  # seconds for the supervisor to exit after SIGINT
LEFTOVER_TIMEOUT = 10.0  # seconds for workers and servers to be gone once the supervisor exited
CALL_TIMEOUT = 5.0


class NotReady(Exception):
    pass


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()  # sent, replies, missing, wrong, duplicate
        self.errors: Counter[str] = Counter()
        self.kills: Counter[str] = Counter()
        self.seen: dict[int, int] = {}  # every worker and server pid seen in status -> its start time

    def add(self, *counts: str, error: str | None = None, kill: str | None = None) -> None:
        with self.lock:
            self.counts.update(counts)
            self.errors.update([error] if error else [])
            self.kills.update([kill] if kill else [])

    def saw(self, rows: list[ServerStatus]) -> None:
        for pid in (p for r in rows for p in (r.worker_pid, r.server_pid) if p):
            if (st := stat(pid)) is not None:
                with self.lock:
                    self.seen.setdefault(pid, st[2])


def until(check: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    """Whether ``check`` became true within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def stat(pid: int) -> tuple[str, int, int] | None:
    """(state letter, ppid, start time) of a process, or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return fields[0], int(fields[1]), int(fields[19])


def alive(pid: int, started: int | None = None) -> bool:
    """Whether ``pid`` runs (not a zombie), and is the process that started at ``started``."""
    st = stat(pid)
    return st is not None and st[0] != "Z" and started in (None, st[2])


def children(ppid: int) -> dict[int, str]:
    """Child pid -> state letter."""
    found = {int(e): stat(int(e)) for e in os.listdir("/proc") if e.isdigit()}
    return {pid: st[0] for pid, st in found.items() if st is not None and st[1] == ppid}


def usage(pid: int) -> tuple[int, int]:
    """(RSS in kB, open file descriptors) of a process."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    rss = next(int(line.split()[1]) for line in lines if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def all_ready(sup: SupervisorClient, proc: subprocess.Popen[bytes]) -> list[ServerStatus]:
    """Every server's status once all are ready; NotReady when one failed or after READY_TIMEOUT."""
    rows: list[ServerStatus] = []

    def check() -> bool:
        nonlocal rows
        if proc.poll() is not None:
            raise RuntimeError(f"supervisor exited with {proc.returncode}")
        try:
            rows = sup.status()
        except SupervisorUnreachableError:
            return False
        if failed := [f"{r.server}: {r.last_error}" for r in rows if r.state == "failed"]:
            raise NotReady(f"server failed: {'; '.join(failed)}")
        return bool(rows) and all(r.state == "ready" for r in rows)

    if not until(check, READY_TIMEOUT):
        raise NotReady(f"not every server ready within {READY_TIMEOUT:g} s: {rows}")
    return rows


def extra_replies(sup: SupervisorClient, wait_ms: int = 0) -> int:
    """Messages waiting on this thread's socket between calls: each is a 2nd reply to an answered call."""
    sock, n = sup._socket(), 0
    while sock.poll(wait_ms if n == 0 else 0):
        sock.recv()
        n += 1
    return n


def client_loop(endpoint: str, names: list[str], rng: random.Random, stop_at: float, stats: Stats) -> None:
    with SupervisorClient(endpoint) as sup:
        n = 0
        while time.monotonic() < stop_at:
            n += 1
            server, text = rng.choice(names), f"{threading.get_ident()}-{n}"
            stats.add("sent", *["duplicate"] * extra_replies(sup))
            try:
                if rng.random() < 0.2:  # slow: 20 % of the calls
                    args: dict[str, Any] = {"seconds": rng.uniform(0.05, 0.5), "tag": text}
                    tool, want = "slow", f"done {text}"
                else:
                    tool, args, want = "echo", {"text": text}, text
                ok = sup.call_tool(f"mcp_{server}_{tool}", args, timeout=CALL_TIMEOUT).text == want
                stats.add("replies", *([] if ok else ["wrong"]))
            except SupervisorUnreachableError:  # the client gave up waiting: no reply
                stats.add("missing", error="SupervisorUnreachableError (missing)")
            except SupervisorError as exc:
                stats.add("replies", error=type(exc).__name__)
        stats.add(*["duplicate"] * extra_replies(sup, wait_ms=1000))


def chaos_loop(
    sup: SupervisorClient, sup_pid: int, rng: random.Random, every: float, stop: threading.Event, stats: Stats
) -> None:
    while not stop.wait(every):
        try:
            rows = sup.status()
        except SupervisorError as exc:
            stats.add(kill=f"skipped (status: {type(exc).__name__})")
            continue
        stats.saw(rows)
        row = rng.choice(rows)
        kind = rng.choice(("worker", "server"))
        pid, parent = (row.worker_pid, sup_pid) if kind == "worker" else (row.server_pid, row.worker_pid)
        st = stat(pid) if pid else None
        if pid is None or st is None or st[0] == "Z" or st[1] != parent:  # gone, or not ours any more
            stats.add(kill=f"{kind} skipped ({row.state})")
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            stats.add(kill=kind)
        except ProcessLookupError:
            stats.add(kill=f"{kind} skipped (gone)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    for flag, kind, default in [("--minutes", float, 10.0), ("--servers", int, 4), ("--clients", int, 4)]:
        parser.add_argument(flag, type=kind, default=default)
    parser.add_argument("--kill-every", type=float, default=2.0, help="seconds between kills")
    parser.add_argument("--seed", type=int, default=random.randrange(2**31))
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=1000,
        help="each server's maxRestarts (default 1000, so the kills test recovery, not the give-up rule)",
    )
    parser.add_argument(
        "--backoff-max", type=float, default=1.0, help="each server's backoffMax (default 1 s)"
    )
    args = parser.parse_args()
    rng, tmp = random.Random(args.seed), Path(tempfile.mkdtemp(prefix="mcp-soak-"))
    names = [f"s{i}" for i in range(args.servers)]
    # A short backoff cap keeps servers coming back between kills, so calls meet live workers.
    entry = {
        "command": sys.executable,
        "args": [str(TEST_SERVER)],
        "maxRestarts": args.max_restarts,
        "backoffMax": args.backoff_max,
    }
    (config := tmp / "mcp.json").write_text(json.dumps({"mcpServers": dict.fromkeys(names, entry)}))
    endpoint, log_path = f"ipc://{tmp}/s.sock", tmp / "supervisor.log"
    cmd = [sys.executable, "-m", "supervisor", "run", str(config), "--endpoint", endpoint]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*cmd, "--log-level", "info"], cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )
    sup, stats, problems = SupervisorClient(endpoint, request_timeout=5.0), Stats(), list[str]()
    try:
        stats.saw(all_ready(sup, proc))
        start_usage = usage(proc.pid)
        print(f"seed {args.seed}: {len(names)} servers ready; log {log_path}", flush=True)
        started = time.monotonic()
        stop_at, stop_chaos = started + args.minutes * 60, threading.Event()
        chaos_args = (sup, proc.pid, random.Random(rng.random()), args.kill_every, stop_chaos, stats)
        threads = [threading.Thread(target=chaos_loop, args=chaos_args)]
        for _ in range(args.clients):
            client_args = (endpoint, names, random.Random(rng.random()), stop_at, stats)
            threads.append(threading.Thread(target=client_loop, args=client_args))
        for thread in threads:
            thread.start()
        for thread in threads[1:]:
            thread.join(max(0.0, stop_at - time.monotonic()) + CALL_TIMEOUT + 10)
            if thread.is_alive():
                problems.append("a client thread is stuck past its call's deadline")
        stop_chaos.set()
        threads[0].join(10)
        duration = time.monotonic() - started
        gave_up = {r.server: r.restarts for r in sup.status() if r.state == "failed"}
        for server in gave_up:  # past the restart intensity: an operator's restart brings it back
            sup.restart(server)
        # status() can still say "failed" just after restart() returned: wait for it to move on
        until(lambda: all(r.state != "failed" for r in sup.status() if r.server in gave_up), 5.0)
        try:
            rows = all_ready(sup, proc)
        except NotReady as exc:
            problems.append(str(exc))
            rows = sup.status()
        end_usage, kids = usage(proc.pid), children(proc.pid)
        until(lambda: "Z" not in children(proc.pid).values(), 2.0)  # let a just-killed one be reaped
        zombies = sorted(pid for pid, state in children(proc.pid).items() if state == "Z")
        stats.saw(rows)
        pids = stats.seen | {kid: stat_kid[2] for kid in kids if (stat_kid := stat(kid))}
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            problems.append(f"supervisor did not exit within {STOP_TIMEOUT:g} s of SIGINT; killed")
            proc.kill()
            proc.wait(5)
        at_exit = sorted(p for p, t in pids.items() if alive(p, t))
        until(lambda: not any(alive(p, t) for p, t in pids.items()), LEFTOVER_TIMEOUT)
        leftover = sorted(p for p, t in pids.items() if alive(p, t))
        for pid in leftover:
            os.kill(pid, signal.SIGKILL)
    finally:
        sup.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    c = stats.counts
    checks = [
        (c["missing"] or c["sent"] != c["replies"], f"{c['sent'] - c['replies']} call(s) got no reply"),
        (c["wrong"], f"{c['wrong']} reply(ies) with the wrong content"),
        (c["duplicate"], f"{c['duplicate']} extra reply(ies) to answered calls"),
        (leftover, f"processes left after stop: {leftover}"),
        (zombies, f"zombie children: {zombies}"),
    ]
    problems += [message for failed, message in checks if failed]
    out: dict[str, Any] = {
        "seed": args.seed,
        "duration_s": round(duration, 1),
        "calls_sent": c["sent"],
        "replies_received": c["replies"],
        "missing_replies": c["missing"],
        "wrong_replies": c["wrong"],
        "duplicate_replies_seen": c["duplicate"],
        "errors": dict(stats.errors.most_common()),
        "kills": dict(stats.kills.most_common()),
        "restarts_total": sum(r.restarts for r in rows) + sum(gave_up.values()),
        "servers_failed_then_restarted": sorted(gave_up),
        "supervisor_rss_kb_start_end": [start_usage[0], end_usage[0]],
        "supervisor_fds_start_end": [start_usage[1], end_usage[1]],
        "children_at_end": len(kids),
        "worker_and_server_pids_seen": len(pids),
        "zombies": zombies,
        "alive_right_after_exit": at_exit,
        "leftover_after_stop": leftover,
        "supervisor_exit_code": proc.returncode,
        "tracebacks_in_log": log_path.read_text(errors="replace").count("Traceback"),
        "log_kept_on_fail_or_traceback": str(log_path),
        "problems": problems,
    }
    for key, value in out.items():
        print(f"{key.replace('_', ' '):<30}  {value}")
    print("FAIL" if problems else "OK")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    if not problems and not out["tracebacks_in_log"]:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
