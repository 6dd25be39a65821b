"""Pieces shared by the cold start, memory and recovery scripts: kinds of stdio server, starting servers
directly (the floor to compare with), a supervisor run that always stops, and readings from /proc.

Server kinds (``--servers`` in each script):

- ``tiny``: tests/servers/legacy_server.py, a hand-written stdlib-only JSON-RPC server (tool ``echo``);
  it starts in a few tens of ms, so what is measured around it is the supervisor's own cost;
- ``test``: tests/servers/mcp_test_server.py, a Python MCP SDK server (imports the SDK: ~1 s CPU);
- ``everything``: the npm reference server ``@modelcontextprotocol/server-everything`` on Node, stdio;
- ``time``: ``mcp-server-time`` from PyPI (Python SDK).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import SupervisorUnreachableError
from supervisor.protocol import ToolInfo
from tests.benchmarks.common import REPO, launch_supervisor, machine_info, stop_supervisor
from tests.e2e.harness import EVERYTHING, NODE

BIN = Path(sys.executable).parent
LOG_STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
DEFAULT_START_TIMEOUT = 30.0  # the supervisor's startTimeout when the config sets none
DIRECT_STOP_TIMEOUT = 5.0  # seconds directly started servers get to exit after their stdin closes
# What a worker passes on to its stdio server from its own environment (README, "env").
PASSED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
INITIALIZE = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "mcp-supervisor-benchmark", "version": "0"},
}


@dataclass(frozen=True)
class Kind:
    name: str
    label: str
    command: str
    args: tuple[str, ...]
    tool: str  # a cheap tool to call, and its arguments
    arguments: dict[str, Any]

    def entry(self, **extra: Any) -> dict[str, Any]:
        """A config entry that runs this server."""
        return {"command": self.command, "args": list(self.args), **extra}

    def argv(self) -> list[str]:
        """The command line, resolved as the worker resolves it (PATH, then beside sys.executable)."""
        search = os.pathsep.join([os.environ.get("PATH", ""), str(BIN)])
        return [shutil.which(self.command, path=search) or self.command, *self.args]

    def missing(self) -> str | None:
        """Why this kind cannot run here, or None."""
        for part in (self.command, *self.args):
            if part.startswith("/") and not Path(part).exists():
                return f"{part} is missing (npm servers: see tests/run.sh, `npm ci --prefix tests/npm`)"
        if not Path(self.argv()[0]).exists():
            return f"{self.command} not found on PATH or in {BIN}"
        return None


ECHO = {"text": "hi"}
KINDS = {
    "tiny": Kind(
        "tiny",
        "stdlib JSON-RPC (tests/servers/legacy_server.py)",
        sys.executable,
        (str(REPO / "tests/servers/legacy_server.py"),),
        "echo",
        ECHO,
    ),
    "test": Kind(
        "test",
        "Python SDK (tests/servers/mcp_test_server.py)",
        sys.executable,
        (str(REPO / "tests/servers/mcp_test_server.py"),),
        "echo",
        ECHO,
    ),
    "everything": Kind(
        "everything",
        "Node, server-everything stdio",
        str(NODE),
        (str(EVERYTHING), "stdio"),
        "echo",
        {"message": "hi"},
    ),
    "time": Kind(
        "time",
        "Python SDK (mcp-server-time)",
        "mcp-server-time",
        ("--local-timezone", "UTC"),
        "get_current_time",
        {"timezone": "UTC"},
    ),
}


def parse_kinds(text: str) -> list[Kind]:
    """``tiny,test`` -> kinds; raises ValueError naming an unknown or unavailable one."""
    kinds = []
    for name in filter(None, (part.strip() for part in text.split(","))):
        if name not in KINDS:
            raise ValueError(f"unknown server kind {name!r} (known: {', '.join(KINDS)})")
        if why := KINDS[name].missing():
            raise ValueError(f"server kind {name!r}: {why}")
        kinds.append(KINDS[name])
    if not kinds:
        raise ValueError("no server kind given")
    return kinds


def parse_counts(text: str) -> list[int]:
    counts = [int(part) for part in text.split(",") if part.strip()]
    if not counts or min(counts) < 1:
        raise ValueError("counts must be integers >= 1")
    return counts


def server_env() -> dict[str, str]:
    """The environment a worker gives its server (without a config ``env``)."""
    return {k: v for k, v in os.environ.items() if k in PASSED_ENV}


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and each option's default."""


def machine(**run: object) -> dict[str, Any]:
    """``machine_info``, plus what else changes start-up times: whether Python may cache bytecode."""
    return {**machine_info(**run), "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", "")}


def finish(info: dict[str, Any]) -> None:
    """Note the load at the end of the run too: other work on the machine shows in it."""
    info["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_busy(interval: float = 0.5) -> float:
    """The fraction of all CPUs' time spent busy over the next ``interval`` seconds (/proc/stat)."""

    def sample() -> tuple[int, int]:
        values = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return values[3] + values[4], sum(values)  # idle + iowait, all

    idle0, all0 = sample()
    time.sleep(interval)
    idle1, all1 = sample()
    return 1 - (idle1 - idle0) / max(1, all1 - all0)


IDLE = 0.25  # the busy fraction of the CPUs under which a run starts


def wait_idle(max_wait: float, threshold: float = IDLE) -> float:
    """Wait, at most ``max_wait`` seconds, until the CPUs are at most ``threshold`` busy: other work on a
    shared machine skews start-up times. Returns the last busy fraction seen (recorded with the runs)."""
    deadline = time.monotonic() + max_wait
    while True:
        busy = cpu_busy()
        if busy <= threshold or time.monotonic() >= deadline:
            return busy


# ------------------------------------------------------------- servers started directly


@dataclass
class DirectStart:
    """Servers started at once and each taken through initialize + tools/list."""

    wall_s: float  # first spawn to the last tools/list answer
    each_s: list[float]  # per server: its spawn to its tools/list answer
    tools: list[int]  # tools each server listed
    pids: list[int]
    cpu_s: float = 0.0  # CPU of the servers (start to exit) and of this process's driver loop


@dataclass
class _Handshake:
    proc: subprocess.Popen[bytes]
    spawned: float
    buffer: bytes = b""
    done: float | None = None
    tools: int = 0

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        os.write(self.proc.stdin.fileno(), json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

    def feed(self, data: bytes) -> None:
        """Take what the server wrote; answer initialize with tools/list; note the tools/list answer."""
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict) or message.get("id") not in (1, 2) or "method" in message:
                continue  # notifications and the server's own requests
            if "error" in message:
                raise RuntimeError(f"server {self.proc.args!r} answered with an error: {message['error']}")
            if message["id"] == 1:
                self.send({"method": "notifications/initialized"})
                self.send({"id": 2, "method": "tools/list", "params": {}})
            else:
                self.done = time.perf_counter()
                self.tools = len(message["result"].get("tools", []))


def start_direct(argvs: list[list[str]], timeout: float) -> DirectStart:
    """Start every command at once (own process group each, the worker's environment), take each through
    ``initialize`` + ``tools/list`` over stdio with a bare JSON-RPC driver, then stop them all."""
    env = server_env()
    shakes: list[_Handshake] = []
    cpu0 = own_and_children_cpu()
    try:
        start = time.perf_counter()
        for argv in argvs:
            spawned = time.perf_counter()
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
            shake = _Handshake(proc, spawned)
            shakes.append(shake)
            shake.send({"id": 1, "method": "initialize", "params": INITIALIZE})
        with selectors.DefaultSelector() as selector:
            for shake in shakes:
                assert shake.proc.stdout is not None
                os.set_blocking(shake.proc.stdout.fileno(), False)
                selector.register(shake.proc.stdout, selectors.EVENT_READ, shake)
            deadline = start + timeout
            while any(shake.done is None for shake in shakes):
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    late = [str(s.proc.args) for s in shakes if s.done is None]
                    raise RuntimeError(f"{len(late)} servers did not answer within {timeout:g} s: {late[0]}")
                for key, _ in selector.select(remaining):
                    shake = key.data
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        selector.unregister(key.fileobj)
                        if shake.done is None:
                            code = shake.proc.wait(DIRECT_STOP_TIMEOUT)
                            raise RuntimeError(
                                f"server {shake.proc.args!r} exited with {code} before tools/list"
                            )
                        continue
                    shake.feed(data)
                    if shake.done is not None:
                        selector.unregister(key.fileobj)
        done = [shake.done for shake in shakes if shake.done is not None]
        result = DirectStart(
            wall_s=max(done) - start,
            each_s=[shake.done - shake.spawned for shake in shakes if shake.done is not None],
            tools=[shake.tools for shake in shakes],
            pids=[shake.proc.pid for shake in shakes],
        )
    finally:
        stop_direct([shake.proc for shake in shakes])
    result.cpu_s = own_and_children_cpu() - cpu0
    return result


def stop_direct(procs: list[subprocess.Popen[bytes]]) -> None:
    """Close every stdin, wait (bounded) for them to exit, then SIGKILL each process group."""
    for proc in procs:
        with suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
    deadline = time.monotonic() + DIRECT_STOP_TIMEOUT
    for proc in procs:
        with suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # its group: the server and any child it left
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def own_and_children_cpu() -> float:
    """CPU seconds of this process and of every child it (or they) have reaped."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def children_cpu() -> float:
    """CPU seconds of every reaped child of this process (a supervisor and what it reaped)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


# ------------------------------------------------------------- a supervisor run


@dataclass
class SupervisorRun:
    proc: subprocess.Popen[bytes]
    endpoint: str
    tmp: Path
    started: float  # time.perf_counter() just before the supervisor was launched
    log: list[str] = field(default_factory=list)  # its log, once it has stopped
    stop_s: float = 0.0
    seen: set[int] = field(default_factory=set)  # pids of workers, servers and others seen under it


@contextmanager
def supervised(
    servers: dict[str, Any], problems: list[str], extra: dict[str, Any] | None = None
) -> Iterator[SupervisorRun]:
    """``mcp-supervisor run`` on ``servers``; stopped (SIGINT, bounded, then SIGKILL) however the block
    ends, its log kept in ``run.log``, and every process seen under it checked to be gone."""
    with tempfile.TemporaryDirectory(prefix="bench-sup-") as tmpdir:
        tmp = Path(tmpdir)
        started = time.perf_counter()
        proc, endpoint = launch_supervisor(servers, tmp, extra=extra)
        run = SupervisorRun(proc, endpoint, tmp, started)
        ok = False
        try:
            yield run
            ok = True
        finally:
            run.seen.update(descendants(proc.pid))
            run.stop_s = stop_supervisor(proc, problems)
            run.log = (tmp / "supervisor.log").read_text(errors="replace").splitlines()
            if not ok:
                sys.stderr.write("supervisor log (tail):\n" + "\n".join(run.log[-40:]) + "\n")
            problems.extend(
                f"process {pid} still alive after the supervisor stopped" for pid in leftovers(run.seen)
            )


@dataclass
class Readiness:
    """How a supervisor became ready, in seconds since its launch."""

    up_s: float | None  # its first answer to status
    first_ready: dict[str, float]  # when each server was first seen ready
    ready_s: float  # the first status answer with every server ready at once
    listed_s: float  # list_tools() then answered, with tools of every server
    tools: list[ToolInfo]
    restarts: int  # the servers' restarts, summed, at that moment
    bounces: int  # all-ready answers after which list_tools() still missed a server (one went down)


def wait_all_ready(
    sup: SupervisorClient, run: SupervisorRun, count: int, timeout: float, poll: float
) -> Readiness:
    """Poll ``status`` every ``poll`` s (bounded by ``timeout`` from the launch) until one answer shows
    ``count`` servers ready at once and ``list_tools()`` then lists tools of each of them. A ``failed``
    server or an exited supervisor ends the wait at once."""
    up: float | None = None
    first: dict[str, float] = {}
    bounces = 0
    deadline = run.started + timeout
    while True:
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{count - len(first)} of {count} servers never ready within {timeout:g} s")
        if run.proc.poll() is not None:
            raise RuntimeError(f"supervisor exited with {run.proc.returncode} before it was ready")
        try:
            rows = sup.status()
        except SupervisorUnreachableError:
            rows = []
        now = time.perf_counter() - run.started
        if rows and up is None:
            up = now
        for row in rows:
            if row.state == "ready":
                first.setdefault(row.server, now)
            elif row.state == "failed":
                raise RuntimeError(f"server {row.server} failed: {row.last_error}")
            run.seen.update(pid for pid in (row.worker_pid, row.server_pid) if pid)
        if len(rows) == count and all(row.state == "ready" for row in rows):
            tools = sup.list_tools()
            listed = time.perf_counter() - run.started
            if {tool.server for tool in tools} >= {row.server for row in rows}:
                restarts = sum(row.restarts for row in rows)
                return Readiness(up, first, now, listed, tools, restarts, bounces)
            bounces += 1
        time.sleep(poll)


def start_timeout_setting(seconds: float) -> dict[str, Any]:
    """The top-level config that gives every server ``seconds`` to start (default 30)."""
    return {"supervisor": {"startTimeout": seconds}}


def log_problems(log: list[str], expected: tuple[str, ...] = ()) -> list[str]:
    """ERROR and WARNING lines of a supervisor log, but for those containing one of ``expected``; lines
    that differ only in server names and numbers are counted as one."""
    # The test server's bad_schema tool is left out with a warning by design.
    expected = (*expected, "'bad_schema' left out")
    counts: dict[str, int] = {}
    for line in log:
        if (" ERROR " in line or " WARNING " in line) and not any(e in line for e in expected):
            text = LOG_STAMP.sub("", line)
            text = re.sub(r"\d+(\.\d+)?", "N", re.sub(r"'[^']*'|\[[^\]]*\]", "'*'", text))
            counts[text] = counts.get(text, 0) + 1
    return [f"supervisor log, {n} line(s): {text}" for text, n in counts.items()]


# ------------------------------------------------------------- /proc


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state is [0], ppid [1]), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not a zombie)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def leftovers(pids: set[int]) -> list[int]:
    """Those of ``pids`` still alive (after a short bounded grace for exits under way)."""
    deadline = time.monotonic() + 2.0
    while (left := sorted(pid for pid in pids if alive(pid))) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def descendants(root: int) -> set[int]:
    """Every live descendant of ``root`` (not ``root`` itself)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


@dataclass(frozen=True)
class Memory:
    """One process's memory, in MiB, from /proc/PID/smaps_rollup."""

    rss: float
    pss: float
    uss: float  # Private_Clean + Private_Dirty: what exiting would give back


def memory(pid: int) -> Memory | None:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    kb: dict[str, int] = {}
    for line in text.splitlines()[1:]:
        key, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            kb[key] = int(parts[0])
    if "Rss" not in kb:
        return None  # a kernel thread, or a process that exited while read
    uss = kb.get("Private_Clean", 0) + kb.get("Private_Dirty", 0)
    return Memory(rss=kb["Rss"] / 1024, pss=kb.get("Pss", 0) / 1024, uss=uss / 1024)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:  # gone, or not ours to read
        return ""


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
