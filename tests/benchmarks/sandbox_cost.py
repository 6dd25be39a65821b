"""Benchmark: what a sandbox costs, and what attacks on the machine cost the other servers.

    .venv/bin/python -m tests.benchmarks.sandbox_cost [--starts N] [--calls N]

One ``mcp-supervisor run`` with the same servers sandboxed and not (``tests/servers/attack_server.py``,
stdlib only, so start-up is mostly the supervisor's and the sandbox's; and ``mcp-server-time``), the
attack servers of ``tests/e2e/test_sandbox_attacks.py``, and a plain test server, ``other``.

1. Start-up: ``restart`` of each server, ``--starts`` times in alternation, to ready again (status
   polled every 5 ms); medians.
2. Call latency: ``--calls`` sequential calls through each, in alternating blocks of 100; p50, p99.
3. Attacks: ``other``'s p99 over 300 sequential calls before each attack, and over its calls while
   the attack runs (until the attack's call ends); what stopped the attack and what status said.

Prints tables (no pass/fail). Not a test: pytest only collects ``test_*.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from supervisor.client.errors import SupervisorError
from tests.benchmarks.common import machine_info, print_table
from tests.e2e.harness import SupervisorProcess, stdio_test_server

ATTACK = str(Path(__file__).resolve().parents[1] / "servers" / "attack_server.py")
LIMITS = {"memory": "256M", "processes": 64, "files": 256}
TIME = {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]}


def _attack(sandbox: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [ATTACK], "sandbox": sandbox, "backoffInitial": 0.2}


SERVERS = {
    "plain": _attack(False),
    "boxed": _attack(LIMITS),
    "time_plain": TIME,
    "time_boxed": {**TIME, "sandbox": LIMITS},
    "mem": _attack({"memory": "128M"}),
    "forks": _attack({"processes": 24}),
    "files": _attack({"files": 64}),
    "cpu": _attack({"cpu": 2}),
    "reach": _attack(True),
    "other": stdio_test_server(),
}
CALLS = {
    "plain": ("mcp_plain_echo", {"text": "x"}),
    "boxed": ("mcp_boxed_echo", {"text": "x"}),
    "time_plain": ("mcp_time_plain_get_current_time", {"timezone": "UTC"}),
    "time_boxed": ("mcp_time_boxed_get_current_time", {"timezone": "UTC"}),
}
ATTACKS = [
    ("allocate without bound", "mem", "allocate", {}),
    ("fork without bound", "forks", "fork", {}),
    ("open files without bound", "files", "open_files", {}),
    ("burn CPU", "cpu", "burn", {"seconds": 60}),
    ("connect to 127.0.0.1", "reach", "connect", {"host": "127.0.0.1", "port": 22}),
    ("read ~/.bashrc", "reach", "read", {"path": str(Path.home() / ".bashrc")}),
    ("write /usr/x", "reach", "write", {"path": "/usr/x"}),
    ("read an env var not given", "reach", "env", {"name": "SANDBOX_BENCH_SECRET"}),
]


def _ms(seconds: list[float], q: float) -> str:
    ordered = sorted(seconds)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.2f}"


def _restart(sup: SupervisorProcess, name: str) -> float:
    before = sup.status()[name]
    start = time.perf_counter()
    sup.client.restart(name)
    while True:
        row = sup.status()[name]
        if row.state == "ready" and row.server_pid not in (None, before.server_pid):
            return time.perf_counter() - start
        time.sleep(0.005)


def _calls(sup: SupervisorProcess, name: str, count: int) -> list[float]:
    tool, arguments = CALLS[name]
    took = []
    for _ in range(count):
        start = time.perf_counter()
        sup.client.call_tool(tool, arguments, timeout=10)
        took.append(time.perf_counter() - start)
    return took


def _other(sup: SupervisorProcess, count: int | None, until: threading.Event | None = None) -> list[float]:
    took = []
    while (count is None or len(took) < count) and not (until is not None and until.is_set()):
        start = time.perf_counter()
        sup.client.call_tool("mcp_other_echo", {"text": "x"}, timeout=10)
        took.append(time.perf_counter() - start)
    return took


def _attack_call(
    sup: SupervisorProcess,
    server: str,
    tool: str,
    arguments: dict[str, Any],
    outcome: list[str],
    done: threading.Event,
) -> None:
    try:
        outcome.append(sup.client.call_tool(f"mcp_{server}_{tool}", arguments, timeout=90).text)
    except SupervisorError as exc:
        outcome.append(f"{exc.code}")
    done.set()


def _attacks(sup: SupervisorProcess) -> list[list[str]]:
    rows = []
    for what, server, tool, arguments in ATTACKS:
        while sup.status()[server].state != "ready":
            time.sleep(0.05)
        before = _other(sup, 300)
        restarts = sup.status()[server].restarts
        done = threading.Event()
        outcome: list[str] = []
        thread = threading.Thread(target=_attack_call, args=(sup, server, tool, arguments, outcome, done))
        thread.start()
        during = _other(sup, None, done)
        thread.join(90)
        row = sup.status()[server]
        said = (
            (row.last_error or "").split(";")[0].split(": server process")[0]
            if row.restarts > restarts
            else "-"
        )
        result = outcome[0][:44] if outcome else "?"
        rows.append([what, result, said, _ms(before, 0.99), _ms(during, 0.99), str(len(during))])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=15, help="restarts of each server (default 15)")
    parser.add_argument("--calls", type=int, default=2000, help="calls through each server (default 2000)")
    options = parser.parse_args()
    print(machine_info(starts=options.starts, calls=options.calls))
    with tempfile.TemporaryDirectory(prefix="mcps-bench-") as tmp:
        sup = SupervisorProcess(Path(tmp), SERVERS, log_level="info", env={"SANDBOX_BENCH_SECRET": "x"})
        try:
            sup.wait_states()
            starts: dict[str, list[float]] = {name: [] for name in CALLS}
            for _ in range(options.starts):
                for name in CALLS:
                    starts[name].append(_restart(sup, name))
            took: dict[str, list[float]] = {name: [] for name in CALLS}
            for _ in range(max(1, options.calls // 100)):
                for name in CALLS:
                    took[name] += _calls(sup, name, 100)
            print("\nStart-up (restart to ready) and call latency, sandboxed vs not, ms")
            print_table(
                ["server", "start-up p50", "call p50", "call p99"],
                [
                    [
                        name,
                        f"{statistics.median(starts[name]) * 1000:.1f}",
                        _ms(took[name], 0.5),
                        _ms(took[name], 0.99),
                    ]
                    for name in CALLS
                ],
            )
            print("\nAttacks, each on a sandboxed server; the other server's p99 (ms) before and during")
            print_table(
                ["attack", "the attack's call", "status said", "p99 before", "p99 during", "calls during"],
                _attacks(sup),
            )
        finally:
            sup.stop()


if __name__ == "__main__":
    main()
