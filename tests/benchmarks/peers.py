"""Benchmark: mcp-supervisor's ways in, next to its peers, for 1 and for N backend servers.

    .venv/bin/python -m tests.benchmarks.peers [--servers 1,10] [--repeat R] [--calls N]
        [--kill-calls K] [--budget S] [--paths stdio,http,...] [--peers-venv DIR]
        [--magg-python auto|debian|PATH] [--logs DIR] [--json PATH]

The backend servers are server-everything (Node) from tests/npm, as first_contact.py has them, named
s0..s{N-1}; the caller is the official SDK's ``mcp.Client`` (mode auto) calling s0's ``echo``. A
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
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager, contextmanager, suppress
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import IO, Any

import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client

from supervisor.client import AsyncSupervisorClient, SupervisorClient
from tests.benchmarks.common import (
    EVERYTHING,
    NODE,
    REPO,
    Samples,
    child_pids,
    launch_supervisor,
    log_problems,
    machine_info,
    percentile,
    print_table,
    stop_supervisor,
    wait_ready,
    write_json,
)
from tests.benchmarks.facade import text_of
from tests.benchmarks.fleet import HelpFormatter, cmdline
from workers.remote import keepalive_http_client

RESULTS = REPO / "tests/benchmarks/results"
PEERS_DIR = REPO / "tests/benchmarks/.peers-venv"
PINS = {"fastmcp": "fastmcp==4.2.3", "mcp-proxy": "mcp-proxy==0.13.0", "magg": "magg==1.3.0"}
PIP_FOR_NEWER_PYTHON = "pip==25.3"  # run from its wheel by a Python that has no pip of its own
DEBIAN_SUITE = "trixie"  # Debian 13: python3.13, for a Debian 12 machine without Python >= 3.12
DEBIAN_PACKAGES = (
    "python3.13",
    "python3.13-minimal",
    "libpython3.13-minimal",
    "libpython3.13-stdlib",
    "libc6",
    "libexpat1",
    "zlib1g",
    "libssl3t64",
    "libzstd1",
    "libffi8",
    "libbz2-1.0",
    "liblzma5",
    "libsqlite3-0",
    "libuuid1",
    "libmpdec4",
)
INSTALL_TIMEOUT = 900.0  # seconds for one install step

SERVER_ENV = "PEERS_BENCH_SERVER"  # set in each backend's entry: how its process is found
ECHO_ARGS = {"message": "hi"}
ECHO_TEXT = "Echo: hi"
CALL_TIMEOUT = 10.0  # seconds a call of the kill run may take (and the facades' --timeout)
MEASURED_CALL_TIMEOUT = 60.0  # seconds a measured call may take (a slow path is measured, not failed)
SPAWN_TIMEOUT = 120.0  # seconds for a path to start and answer its first listing
LIST_WAIT = 30.0  # the stub's list_tools(wait=...)
LISTEN_TIMEOUT = 60.0  # seconds for an HTTP server to say where it listens
STOP_TIMEOUT = 10.0  # seconds for a server process to exit after SIGINT
KILL_PACE = 0.05  # seconds between the calls of the kill run
KILL_BUDGET = 90.0  # seconds a kill run may take; the kill comes at a third of its calls or of this
GIVE_UP_AFTER = 3  # consecutive timed-out calls after which a kill run counts the rest as lost
SLOW_P50_MS = 1000.0  # a path slower than this with one caller is not driven by 16
WARMUP = 10  # unmeasured calls per path before the measured blocks
CALLERS = 16

FASTMCP_PROXY = """\
import json, sys
from fastmcp.server import create_proxy
config = json.load(open(sys.argv[1]))
create_proxy(config, name="fastmcp-proxy", mode="auto").run(transport="stdio", show_banner=False)
"""
FASTMCP_MOUNT = """\
import json, sys
from fastmcp import FastMCP
from fastmcp.server import create_proxy
main = FastMCP("fastmcp-mount")
for name, entry in json.load(open(sys.argv[1]))["mcpServers"].items():
    main.mount(create_proxy({"mcpServers": {name: entry}}, name=name, mode="auto"), namespace=name)
main.run(transport="stdio", show_banner=False)
"""

# ------------------------------------------------------------------ the peers' environments


class NotInstallable(Exception):
    """A peer that cannot be installed here; its message is the reason."""


@dataclass
class Peer:
    name: str
    python: Path | None = None  # the interpreter it runs from
    env: dict[str, str] = field(default_factory=dict)  # what it needs in its environment
    versions: dict[str, str] = field(default_factory=dict)
    problem: str | None = None  # why it is not there

    def command(self, script: str) -> Path:
        assert self.python is not None
        return self.python.with_name(script)


def run_step(argv: list[Any], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """One install step, bounded; its output when it worked."""
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT
    )
    if done.returncode != 0:
        raise NotInstallable(f"{' '.join(map(str, argv[:3]))} ... failed: {done.stderr.strip()[-400:]}")
    return done.stdout


def versions_of(python: Path, packages: list[str], env: dict[str, str]) -> dict[str, str]:
    code = (
        "import importlib.metadata as m, json, platform;"
        f"found = {{p: m.version(p) for p in {packages!r}}};"
        "print(json.dumps({**found, 'python': platform.python_version()}))"
    )
    found: dict[str, str] = json.loads(run_step([python, "-c", code], env={**os.environ, **env}))
    return found


def pinned(directory: Path, pin: str) -> bool:
    stamp = directory / "peers-pin.txt"
    return stamp.exists() and stamp.read_text() == pin


def venv_peer(root: Path, name: str, packages: list[str]) -> Peer:
    """A venv of its own under ``root`` with ``PINS[name]`` (made again when the pin changed)."""
    venv = root / name
    python = venv / "bin" / "python"
    if not pinned(venv, PINS[name]):
        print(f"installing {PINS[name]} into {venv}", file=sys.stderr)
        shutil.rmtree(venv, ignore_errors=True)
        run_step([sys.executable, "-m", "venv", venv])
        run_step([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", PINS[name]])
        (venv / "peers-pin.txt").write_text(PINS[name])
    return Peer(name, python, {}, versions_of(python, packages, {}))


def debian_archive() -> str | None:
    """The URI of the main Debian archive this machine's apt uses (from its sources)."""
    codename = ""
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            codename = line.split("=", 1)[1].strip('"')
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    for path in sources:  # deb822 stanzas
        for stanza in path.read_text().split("\n\n"):
            fields = dict(ln.split(":", 1) for ln in stanza.splitlines() if ":" in ln and not ln[0].isspace())
            if codename in fields.get("Suites", "").split() and "URIs" in fields:
                return fields["URIs"].split()[0]
    listing = Path("/etc/apt/sources.list")
    for line in listing.read_text().splitlines() if listing.exists() else []:
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "deb" and parts[2] == codename:
            return parts[1]
    return None


def debian_python(directory: Path) -> Path:
    """Debian's python3.13 (of DEBIAN_SUITE) unpacked into ``directory`` with the C library it was
    built against, and a launcher that runs it with that library's loader: apt-get only downloads
    (its lists and cache in ``directory``), nothing is installed on the system."""
    launcher = directory / "python"
    if launcher.exists():
        return launcher
    archive = debian_archive()
    if archive is None or shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise NotInstallable("needs Python >= 3.12: none on PATH, and no Debian apt to take one from")
    apt = directory / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "debs"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb {archive} {DEBIAN_SUITE} main\n")
    options = [
        f"-oDir::Etc::sourcelist={apt / 'sources.list'}",
        "-oDir::Etc::sourceparts=-",
        f"-oDir::State::Lists={apt / 'lists'}",
        f"-oDir::Cache={apt / 'cache'}",
        "-oDir::State::status=/dev/null",
        "-oAPT::Sandbox::User=root",
    ]
    print(f"downloading Debian {DEBIAN_SUITE}'s python3.13 into {directory}", file=sys.stderr)
    try:
        run_step(["apt-get", *options, "-qq", "update"])
        run_step(["apt-get", *options, "-qq", "download", *DEBIAN_PACKAGES], cwd=apt / "debs")
    except NotInstallable as exc:
        raise NotInstallable(
            f"needs Python >= 3.12: Debian's python3.13 could not be downloaded ({exc})"
        ) from exc
    tree = directory / "root"
    for deb in sorted((apt / "debs").glob("*.deb")):
        run_step(["dpkg-deb", "-x", deb, tree])
    loaders = sorted(tree.glob("usr/lib/*-linux-gnu*/ld-linux*.so.*"))
    if not loaders:
        raise NotInstallable("needs Python >= 3.12: Debian's libc6 package held no loader")
    lib = loaders[0].parent
    launcher.write_text(
        f'#!/bin/sh\nexec "{loaders[0]}" --library-path "{lib}" "{tree / "usr/bin/python3.13"}" "$@"\n'
    )
    launcher.chmod(0o755)
    return launcher


def newer_python() -> Path | None:
    """A Python >= 3.12 that runs: on PATH, or one of pyenv's versions (not on PATH unless selected)."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [shutil.which(f"python3.{minor}") for minor in (14, 13, 12)]
    candidates += [str(p) for p in sorted(pyenv.glob("3.1[2-9]*/bin/python3"), reverse=True)]
    for candidate in filter(None, candidates):
        check = [candidate, "-c", "import sys, venv, ssl; sys.exit(sys.version_info < (3, 12))"]
        if subprocess.run(check, capture_output=True, timeout=60).returncode == 0:
            return Path(candidate)
    return None


def magg_peer(root: Path, choice: str) -> Peer:
    """magg, from a Python >= 3.12: ``choice`` ("auto": one on this machine, else Debian's; "debian";
    or the path of one); in a venv, or Debian's with ``pip --target``."""
    directory = root / "magg"
    found = None if choice == "debian" else newer_python() if choice == "auto" else Path(choice)
    if found is not None:
        python = directory / "venv" / "bin" / "python"
        env: dict[str, str] = {}
        pin = f"{PINS['magg']} {found}"
        if not pinned(directory, pin):
            print(f"installing {PINS['magg']} into {directory / 'venv'} ({found})", file=sys.stderr)
            shutil.rmtree(directory / "venv", ignore_errors=True)
            run_step([found, "-m", "venv", directory / "venv"])
            run_step([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", PINS["magg"]])
    else:
        python = debian_python(directory)
        site = directory / "site"
        env = {"PYTHONPATH": str(site)}
        pin = f"{PINS['magg']} {python}"
        if not pinned(directory, pin):
            print(f"installing {PINS['magg']} into {site}", file=sys.stderr)
            wheels = directory / "wheels"
            pip_wheel = ["download", "-q", "--no-deps", "-d", wheels, PIP_FOR_NEWER_PYTHON]
            run_step([sys.executable, "-m", "pip", *pip_wheel])
            pip = next(wheels.glob("pip-*.whl")) / "pip"
            shutil.rmtree(site, ignore_errors=True)
            run_step(
                [python, pip, "install", "-q", "--root-user-action=ignore", "--target", site, PINS["magg"]]
            )
    (directory / "peers-pin.txt").write_text(pin)
    versions = versions_of(python, ["magg", "fastmcp", "mcp"], env)
    versions["python"] += (
        f" ({found})" if found else f" (Debian {DEBIAN_SUITE}'s python3.13, with its own libc)"
    )
    return Peer("magg", python, env, versions)


def install_peers(root: Path, wanted: set[str], magg_python: str) -> dict[str, Peer]:
    makers: dict[str, Callable[[], Peer]] = {
        "fastmcp": lambda: venv_peer(root, "fastmcp", ["fastmcp", "mcp"]),
        "mcp-proxy": lambda: venv_peer(root, "mcp-proxy", ["mcp-proxy", "mcp"]),
        "magg": lambda: magg_peer(root, magg_python),
    }
    peers: dict[str, Peer] = {}
    for name in sorted(wanted & set(makers)):
        try:
            peers[name] = makers[name]()
        except (NotInstallable, subprocess.TimeoutExpired) as exc:
            peers[name] = Peer(name, problem=f"not installable: {exc}")
    return peers


# ------------------------------------------------------------------ processes


def become_subreaper() -> None:
    """Orphans of everything this process starts become its children, so none escapes the sweep."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def descendants(roots: list[int]) -> list[int]:
    """``roots`` and every process below them, alive or not yet reaped."""
    seen: list[int] = []
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        try:
            todo.extend(child_pids(pid))
        except OSError:
            continue
    return seen


def backend_pid(roots: list[int], server: str) -> int | None:
    """The live server-everything (node) process of ``server`` below ``roots``."""
    mark = f"{SERVER_ENV}={server}".encode()
    for pid in descendants(roots):
        try:
            is_node = os.readlink(f"/proc/{pid}/exe").endswith("/node")
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if is_node and mark in env:
            return pid
    return None


def sweep() -> list[str]:
    """SIGKILL every process still below this one and reap them; what was still running."""
    left = [f"{pid} {cmdline(pid)[:160]}" for pid in descendants([os.getpid()])[1:] if cmdline(pid)]
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        pids = descendants([os.getpid()])[1:]
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            break
        if not pids:
            break
        time.sleep(0.02)  # a poll for the kernel to deliver the kills, bounded by the deadline
    return left


def reaped(pid: int) -> bool:
    """Whether ``pid`` (a child of this process) has exited, reaping it if so; True if not a child."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return True


async def stop_orphan(pid: int) -> None:
    """SIGINT a process that has become this one's child (an orphan), SIGKILL if it is still there
    after 20 s; it is reaped."""
    try:
        os.kill(pid, signal.SIGINT)
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        reaped(pid)
        return
    try:
        with trio.move_on_after(20.0) as waiting:
            await trio.lowlevel.wait_readable(fd)  # a pidfd is readable once its process has exited
        if waiting.cancelled_caught:
            os.kill(pid, signal.SIGKILL)
            with trio.move_on_after(10.0):
                await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)
    reaped(pid)


async def stop_process(proc: trio.Process) -> None:
    """SIGINT, then SIGKILL to its process group after STOP_TIMEOUT."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)
        with trio.move_on_after(STOP_TIMEOUT):
            await proc.wait()
    if proc.returncode is None:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


def append_chunk(out: IO[bytes], chunk: bytes | bytearray) -> None:
    out.write(chunk)
    out.flush()


@asynccontextmanager
async def served(
    argv: list[str], env: dict[str, str], log: Path, ready: re.Pattern[str]
) -> AsyncIterator[tuple[trio.Process, str]]:
    """A server process, its stderr copied to ``log``; yields it and the URL of its ``ready`` line."""
    found: list[str] = []
    seen, copied = trio.Event(), trio.Event()
    with ExitStack() as files:
        out = files.enter_context(log.open("ab"))
        proc = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )

        async def copy() -> None:
            text = ""
            assert proc.stderr is not None
            async for chunk in proc.stderr:
                append_chunk(out, chunk)
                if not seen.is_set():
                    text += chunk.decode(errors="replace")
                    if match := ready.search(text):
                        found.append(match.group(1))
                        seen.set()
            seen.set()  # end of file: it has exited
            copied.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(copy)
            try:
                with trio.fail_after(LISTEN_TIMEOUT):
                    await seen.wait()
                if not found:
                    raise RuntimeError(f"{Path(argv[0]).name} exited before it listened; see {log}")
                yield proc, found[0]
            finally:
                with trio.CancelScope(shield=True):
                    await stop_process(proc)
                    with trio.move_on_after(2.0):  # a child of its may hold the pipe
                        await copied.wait()
                nursery.cancel_scope.cancel()


@asynccontextmanager
async def supervisor_running(
    servers: dict[str, Any], tmp: Path, problems: list[str], crashes_expected: bool = False
) -> AsyncIterator[tuple[str, int]]:
    """``mcp-supervisor run`` on the servers, its files in ``tmp`` (a directory); yields its endpoint and
    pid once every server is ready."""
    proc, endpoint = launch_supervisor(servers, tmp)
    try:

        def ready() -> None:
            with SupervisorClient(endpoint, request_timeout=5.0) as sup:
                wait_ready(sup, proc, len(servers))

        await trio.to_thread.run_sync(ready)
        yield endpoint, proc.pid
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(stop_supervisor, proc, problems)
        if not crashes_expected:
            problems.extend(log_problems(tmp))


# ------------------------------------------------------------------ what a path gives its caller


@dataclass(frozen=True)
class Listing:
    tools: dict[str, frozenset[str]]  # backend server -> its tools' original names
    own: frozenset[str]  # tools of no backend server: the path's own

    @property
    def total(self) -> int:
        return len(self.own) + sum(len(t) for t in self.tools.values())

    def holds(self, reference: Listing) -> bool:
        """Every backend server's tools that ``reference`` has are here."""
        return all(self.tools.get(s, frozenset()) >= names for s, names in reference.tools.items())


def attribute(names: list[tuple[str | None, str]], servers: list[str], prefix: str) -> Listing:
    """Tool names by backend server: a session of one server (``(server, name)``) holds its own,
    unprefixed; an aggregating one (``(None, name)``) names them ``prefix.format(server) + tool``."""
    tools: dict[str, set[str]] = {s: set() for s in servers}
    own: set[str] = set()
    for server, name in names:
        if server is not None:
            tools[server].add(name)
            continue
        for s in servers:
            if name.startswith(head := prefix.format(s)):
                tools[s].add(name[len(head) :])
                break
        else:
            own.add(name)
    return Listing({s: frozenset(t) for s, t in tools.items()}, frozenset(own))


@dataclass
class Host:
    listing: Callable[[], Awaitable[Listing]]
    echo: Callable[[], Awaitable[None]]  # one call of s0's echo, its result checked
    roots: list[int]  # processes whose trees hold the path's backends
    protocol: str
    call: Callable[[str, str, dict[str, Any]], Awaitable[str]] | None = None  # (server, tool, args) -> text


async def tool_names(client: Client) -> list[str]:
    """Every page of tools/list."""
    names: list[str] = []
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        names += [t.name for t in page.tools]
        if not (cursor := page.next_cursor):
            return names


def check_echo(who: str, text: str) -> None:
    if text != ECHO_TEXT:
        raise RuntimeError(f"{who}: echo answered {text!r}, not {ECHO_TEXT!r}")


def mcp_host(
    who: str, sessions: list[tuple[str | None, Client]], servers: list[str], prefix: str, roots: list[int]
) -> Host:
    """Sessions of the SDK's Client: one aggregating (server None) or one per server."""
    own = {server: client for server, client in sessions if server is not None}

    async def listing() -> Listing:
        pages: list[list[str]] = [[] for _ in sessions]

        async def one(i: int) -> None:
            pages[i] = await tool_names(sessions[i][1])

        async with trio.open_nursery() as nursery:
            for i in range(len(sessions)):
                nursery.start_soon(one, i)
        named = [(server, n) for (server, _), names in zip(sessions, pages, strict=True) for n in names]
        return attribute(named, servers, prefix)

    async def call(server: str, tool: str, arguments: dict[str, Any]) -> str:
        """``tool`` of ``server``: on its own session, or on the aggregating one by its prefixed name."""
        name = tool if server in own else prefix.format(server) + tool
        result = await own.get(server, sessions[0][1]).call_tool(name, arguments)
        if result.is_error:
            raise RuntimeError(f"{who}: {name} answered isError: {text_of(result.content)}")
        return text_of(result.content)

    async def echo() -> None:
        check_echo(who, await call(servers[0], "echo", ECHO_ARGS))

    return Host(listing, echo, roots, str(sessions[0][1].protocol_version), call)


@asynccontextmanager
async def opened(
    makers: list[Callable[[], AbstractAsyncContextManager[Client]]],
) -> AsyncIterator[list[Client]]:
    """Every session entered at once, as a host starts its servers; each held by a task of its own."""
    if len(makers) == 1:
        async with makers[0]() as client:
            yield [client]
        return
    clients: list[Client | None] = [None] * len(makers)
    all_open, leave = trio.Event(), trio.Event()

    async def hold(i: int) -> None:
        async with makers[i]() as client:
            clients[i] = client
            if all(c is not None for c in clients):
                all_open.set()
            await leave.wait()

    async with trio.open_nursery() as nursery:
        for i in range(len(makers)):
            nursery.start_soon(hold, i)
        await all_open.wait()
        try:
            yield [c for c in clients if c is not None]
        finally:
            leave.set()


# ------------------------------------------------------------------ the paths


@dataclass
class Ctx:
    """What the paths of one server count share."""

    servers: dict[str, dict[str, Any]]  # mcpServers entries s0..s{N-1}
    tmp: Path
    endpoint: str  # the running supervisor's
    supervisor_pid: int
    peers: dict[str, Peer]
    token: str
    configs: dict[str, Path]  # "mcp": {"mcpServers": ...}, "magg": magg's own format
    scripts: dict[str, Path]  # the fastmcp servers' scripts
    logs: dict[str, Path] = field(default_factory=dict)  # stderr of each path's processes

    @property
    def names(self) -> list[str]:
        return list(self.servers)

    def log(self, key: str) -> Path:
        return self.logs.setdefault(key, self.tmp / f"{key}.stderr")


def host_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**get_default_environment(), **(extra or {})}


@asynccontextmanager
async def stdio_host(
    ctx: Ctx, key: str, entries: list[tuple[str | None, StdioServerParameters]], prefix: str, roots: list[int]
) -> AsyncIterator[Host]:
    with ExitStack() as files:
        errlog = files.enter_context(ctx.log(key).open("a"))
        before = child_pids(os.getpid())

        def maker(params: StdioServerParameters) -> Callable[[], AbstractAsyncContextManager[Client]]:
            return lambda: Client(stdio_client(params, errlog=errlog), cache=None)

        async with opened([maker(p) for _, p in entries]) as clients:
            spawned = sorted(child_pids(os.getpid()) - before)
            sessions = [(s, c) for (s, _), c in zip(entries, clients, strict=True)]
            yield mcp_host(key, sessions, ctx.names, prefix, spawned + roots)


@asynccontextmanager
async def http_host(
    ctx: Ctx,
    key: str,
    urls: list[tuple[str | None, str]],
    headers: dict[str, str] | None,
    prefix: str,
    roots: list[int],
) -> AsyncIterator[Host]:
    async with keepalive_http_client(headers) as http:

        def maker(url: str) -> Callable[[], AbstractAsyncContextManager[Client]]:
            return lambda: Client(streamable_http_client(url, http_client=http), cache=None)

        async with opened([maker(u) for _, u in urls]) as clients:
            sessions = [(s, c) for (s, _), c in zip(urls, clients, strict=True)]
            yield mcp_host(key, sessions, ctx.names, prefix, roots)


def facade_params(args: list[str]) -> StdioServerParameters:
    argv = ["-m", "supervisor", "mcp", *args, "--timeout", str(CALL_TIMEOUT)]
    return StdioServerParameters(command=sys.executable, args=argv, env=host_env(), cwd=str(REPO))


def open_stdio(ctx: Ctx) -> AbstractAsyncContextManager[Host]:
    params = facade_params(["--endpoint", ctx.endpoint])
    return stdio_host(ctx, "stdio", [(None, params)], "mcp_{}_", [ctx.supervisor_pid])


@asynccontextmanager
async def open_stdio_config(ctx: Ctx) -> AsyncIterator[Host]:
    """The facade with --config, on an endpoint of its own: it starts the supervisor itself, which
    outlives it (and so becomes this process's orphan, stopped here)."""
    endpoint = f"ipc://{tempfile.mkdtemp(dir=ctx.tmp, prefix='c')}/s.sock"
    params = facade_params(["--config", str(ctx.configs["mcp"]), "--endpoint", endpoint])
    try:
        async with stdio_host(ctx, "stdio-config", [(None, params)], "mcp_{}_", []) as host:
            yield host
    finally:
        with trio.CancelScope(shield=True):
            for pid in descendants([os.getpid()])[1:]:
                if endpoint in cmdline(pid) and " run " in cmdline(pid):
                    await stop_orphan(pid)


@asynccontextmanager
async def open_http(ctx: Ctx) -> AsyncIterator[Host]:
    argv = [sys.executable, "-m", "supervisor", "serve", "--http", "127.0.0.1:0", "--endpoint", ctx.endpoint]
    argv += ["--timeout", str(CALL_TIMEOUT)]
    env = {**os.environ, "MCP_SUPERVISOR_TOKEN": ctx.token}
    ready = re.compile(r"^LISTENING (http://\S+)", re.MULTILINE)
    async with served(argv, env, ctx.log("http"), ready) as (proc, url):
        auth = {"Authorization": f"Bearer {ctx.token}"}
        async with http_host(
            ctx, "http", [(None, url)], auth, "mcp_{}_", [proc.pid, ctx.supervisor_pid]
        ) as host:
            yield host


@asynccontextmanager
async def open_stub(ctx: Ctx) -> AsyncIterator[Host]:
    async with AsyncSupervisorClient(ctx.endpoint) as asup:
        echo_name = f"mcp_{ctx.names[0]}_echo"

        async def listing() -> Listing:
            tools = await asup.list_tools(wait=LIST_WAIT)
            return attribute([(None, t.name) for t in tools], ctx.names, "mcp_{}_")

        async def echo() -> None:
            result = await asup.call_tool(echo_name, ECHO_ARGS, timeout=CALL_TIMEOUT)  # raises on isError
            check_echo("stub", text_of(result.content))

        yield Host(listing, echo, [ctx.supervisor_pid], "ZeroMQ")


def open_direct(ctx: Ctx) -> AbstractAsyncContextManager[Host]:
    entries: list[tuple[str | None, StdioServerParameters]] = [
        (
            name,
            StdioServerParameters(
                command=str(NODE), args=[str(EVERYTHING), "stdio"], env=host_env(entry["env"])
            ),
        )
        for name, entry in ctx.servers.items()
    ]
    return stdio_host(ctx, "direct", entries, "", [])


def open_fastmcp(ctx: Ctx, key: str) -> AbstractAsyncContextManager[Host]:
    peer = ctx.peers["fastmcp"]
    assert peer.python is not None
    args = [str(ctx.scripts[key]), str(ctx.configs["mcp"])]
    params = StdioServerParameters(command=str(peer.python), args=args, env=host_env(), cwd=str(ctx.tmp))
    if key == "fastmcp" and len(ctx.servers) == 1:  # one server: fastmcp connects it as is, unprefixed
        return stdio_host(ctx, key, [(ctx.names[0], params)], "", [])
    return stdio_host(ctx, key, [(None, params)], "{}_", [])


@asynccontextmanager
async def open_mcp_proxy(ctx: Ctx) -> AsyncIterator[Host]:
    peer = ctx.peers["mcp-proxy"]
    argv = [str(peer.command("mcp-proxy")), "--named-server-config", str(ctx.configs["mcp"])]
    argv += ["--host", "127.0.0.1", "--port", "0"]
    ready = re.compile(r"Uvicorn running on (http://\S+)")
    async with served(argv, dict(os.environ), ctx.log("mcp-proxy"), ready) as (proc, base):
        urls: list[tuple[str | None, str]] = [(s, f"{base}/servers/{s}/mcp") for s in ctx.names]
        async with http_host(ctx, "mcp-proxy", urls, None, "", [proc.pid]) as host:
            yield host


def open_magg(ctx: Ctx) -> AbstractAsyncContextManager[Host]:
    peer = ctx.peers["magg"]
    assert peer.python is not None
    env = host_env({**peer.env, "MAGG_CONFIG_PATH": str(ctx.configs["magg"])})
    params = StdioServerParameters(
        command=str(peer.python), args=["-m", "magg", "serve"], env=env, cwd=str(ctx.tmp)
    )
    return stdio_host(ctx, "magg", [(None, params)], "{}_", [])


@dataclass(frozen=True)
class PathSpec:
    key: str  # its name in --paths
    label: str  # its name in the table
    open: Callable[[Ctx], AbstractAsyncContextManager[Host]]
    peer: str | None = None  # the peer it needs
    supervised: bool = False  # it reaches the servers through the running supervisor
    spawn_only: bool = False  # only its spawn to full listing is measured


PEER_KEYS = {"fastmcp", "fastmcp-mount", "mcp-proxy", "magg"}
PATHS = [
    PathSpec("stdio", "stdio", open_stdio, supervised=True),
    PathSpec("stdio-config", "stdio --config", open_stdio_config, spawn_only=True),
    PathSpec("http", "http", open_http, supervised=True),
    PathSpec("stub", "stub", open_stub, supervised=True),
    PathSpec("direct", "direct", open_direct),
    PathSpec("fastmcp", "fastmcp proxy", lambda ctx: open_fastmcp(ctx, "fastmcp"), peer="fastmcp"),
    PathSpec(
        "fastmcp-mount", "fastmcp mount", lambda ctx: open_fastmcp(ctx, "fastmcp-mount"), peer="fastmcp"
    ),
    PathSpec("mcp-proxy", "mcp-proxy", open_mcp_proxy, peer="mcp-proxy"),
    PathSpec("magg", "magg", open_magg, peer="magg"),
]


# ------------------------------------------------------------------ measuring


@dataclass
class Row:
    path: str
    servers: int
    protocol: str | None = None
    spawn_ms: list[float] = field(default_factory=list)
    first_listings: list[int] = field(default_factory=list)  # each spawn's first listing: tools
    first_full: list[bool] = field(default_factory=list)
    tools: int | None = None  # the settled listing: all tools, per server, the path's own
    tools_per_server: int | None = None
    own_tools: int | None = None
    missing_vs_direct: list[str] = field(default_factory=list)  # s0's tools a direct session has
    first_missing: list[str] = field(default_factory=list)  # what first listings lacked, by server
    p50_ms: float | None = None
    p90_ms: float | None = None
    calls_1: int = 0
    calls_per_s_16: float | None = None
    calls_16: int = 0
    lost: int | None = None
    kill_calls: int | None = None
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def cells(self, calls: int) -> list[str]:
        spawn = f"{statistics.median(self.spawn_ms):.0f}" if self.spawn_ms else "-"
        full = f"{sum(self.first_full)}/{len(self.first_full)}" if self.first_full else "-"
        p50 = "-" if self.p50_ms is None else f"{self.p50_ms:.2f}"
        p90 = "-" if self.p90_ms is None else f"{self.p90_ms:.2f}"
        if self.p50_ms is not None and self.calls_1 < calls:
            p50 += f" (n={self.calls_1})"
        rate = "-" if self.calls_per_s_16 is None else f"{self.calls_per_s_16:.0f}"
        if self.calls_per_s_16 is not None and self.calls_16 < calls:
            rate += f" (n={self.calls_16})"
        lost = "-" if self.lost is None else f"{self.lost}/{self.kill_calls}"
        if self.errors and not self.spawn_ms:
            spawn = "failed" if not self.errors[0].startswith("not installable") else "not installable"
        return [self.path, str(self.servers), spawn, full, p50, p90, rate, lost]

    def remarks(self) -> list[str]:
        """What the table cannot say: tools listed, errors, notes."""
        said = []
        if self.tools_per_server is not None:
            own = f" (+{self.own_tools} of its own)" if self.own_tools else ""
            said.append(f"{self.tools_per_server} tools per server{own}")
        if self.first_missing:
            said.append(f"a first listing lacked {'; '.join(self.first_missing)}")
        return said + self.errors + self.notes


HEADER = [
    "path",
    "servers",
    "spawn->full listing ms",
    "first listing full",
    "p50 ms",
    "p90 ms",
    "calls/s @16",
    "lost around kill -9",
    "notes",
]


def rotated(items: list[Any], turn: int) -> list[Any]:
    k = turn % len(items) if items else 0
    return items[k:] + items[:k]


def short(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {str(exc)[:200]}"


async def spawn_once(spec: PathSpec, ctx: Ctx) -> tuple[float, Listing, str]:
    started = time.perf_counter()
    with trio.fail_after(SPAWN_TIMEOUT):
        async with spec.open(ctx) as host:
            listing = await host.listing()
            elapsed = (time.perf_counter() - started) * 1e3
    return elapsed, listing, host.protocol


async def spawn_phase(
    specs: list[PathSpec], ctx: Ctx, rows: dict[str, Row], repeat: int
) -> dict[str, list[Listing]]:
    """Each path spawned ``repeat`` times, the order rotating; the first listings, for checking later."""
    firsts: dict[str, list[Listing]] = {s.key: [] for s in specs}
    for turn in range(repeat):
        for spec in rotated(specs, turn):
            row = rows[spec.key]
            if row.errors:
                continue
            try:
                elapsed, listing, protocol = await spawn_once(spec, ctx)
            except Exception as exc:
                row.errors.append(f"spawn: {short(exc)}")
                continue
            row.spawn_ms.append(elapsed)
            row.protocol = protocol
            firsts[spec.key].append(listing)
            print(f"  spawn {spec.label}: {elapsed:.0f} ms, {listing.total} tools", file=sys.stderr)
    return firsts


async def timed_calls(
    call: Callable[[], Awaitable[None]], n: int, callers: int, budget: float, out: Samples
) -> None:
    """``n`` calls over ``callers`` tasks, each timing its own; none is started after ``budget`` s."""
    deadline = trio.current_time() + budget
    left = n

    async def caller() -> None:
        nonlocal left
        while left > 0 and trio.current_time() < deadline:
            left -= 1
            t0 = time.perf_counter_ns()
            with trio.move_on_after(MEASURED_CALL_TIMEOUT) as scope:
                await call()
            if scope.cancelled_caught:
                raise RuntimeError(f"a call took over {MEASURED_CALL_TIMEOUT:g} s")
            out.ns.append(time.perf_counter_ns() - t0)

    start = time.perf_counter_ns()
    async with trio.open_nursery() as nursery:
        for _ in range(callers):
            nursery.start_soon(caller)
    out.wall_ns += time.perf_counter_ns() - start


@asynccontextmanager
async def held(specs: list[PathSpec], ctx: Ctx, rows: dict[str, Row]) -> AsyncIterator[dict[str, Host]]:
    """Every path open at once, each held by a task of its own (a path that fails is only marked)."""
    hosts: dict[str, Host] = {}
    leave = trio.Event()

    async def hold(spec: PathSpec, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started = False
        try:
            with trio.fail_after(SPAWN_TIMEOUT) as opening:
                async with spec.open(ctx) as host:
                    opening.deadline = float("inf")
                    hosts[spec.key] = host
                    task_status.started()
                    started = True
                    await leave.wait()
        except Exception as exc:
            if leave.is_set():
                rows[spec.key].notes.append(f"closing its session: {short(exc)}")
            else:
                rows[spec.key].errors.append(f"session: {short(exc)}")
            hosts.pop(spec.key, None)
            if not started:
                task_status.started()

    async with trio.open_nursery() as nursery:
        for spec in specs:
            await nursery.start(hold, spec)
        try:
            yield hosts
        finally:
            leave.set()


def settle(row: Row, listing: Listing, direct: Listing | None) -> None:
    per = {len(t) for t in listing.tools.values()}
    row.tools, row.own_tools = listing.total, len(listing.own)
    row.tools_per_server = per.pop() if len(per) == 1 else None
    if row.tools_per_server is None:
        row.errors.append(f"servers listed unevenly: { {s: len(t) for s, t in listing.tools.items()} }")
    elif row.tools_per_server == 0:
        row.errors.append("no backend server's tools listed")
    if direct is not None:
        first = next(iter(direct.tools))
        row.missing_vs_direct = sorted(direct.tools[first] - listing.tools[first])
        if row.missing_vs_direct:
            row.notes.append(f"lists no {', '.join(row.missing_vs_direct)} (a direct session does)")


async def calls_phase(
    specs: list[PathSpec], ctx: Ctx, rows: dict[str, Row], args: argparse.Namespace
) -> dict[str, Listing]:
    """Every path held open: warm-up and settled listing, then p50/p90 with one caller and calls/s
    with CALLERS, in --repeat blocks each, the order rotating."""
    settled: dict[str, Listing] = {}
    lat = {s.key: Samples() for s in specs}
    rate = {s.key: Samples() for s in specs}
    async with held(specs, ctx, rows) as hosts:

        async def guarded(key: str, block: Callable[..., Awaitable[None]], *block_args: Any) -> None:
            if key not in hosts or rows[key].errors:
                return
            try:
                await block(*block_args)
            except Exception as exc:
                rows[key].errors.append(f"calls: {short(exc)}")

        async def warm(key: str) -> None:
            await timed_calls(hosts[key].echo, WARMUP, 1, args.budget, Samples())
            with trio.fail_after(SPAWN_TIMEOUT):
                settled[key] = await hosts[key].listing()

        for key in list(hosts):
            await guarded(key, warm, key)
        for callers, samples in ((1, lat), (CALLERS, rate)):
            for turn in range(args.repeat):
                size = args.calls // args.repeat + (turn < args.calls % args.repeat)
                for spec in rotated(specs, turn):
                    if callers > 1 and (p := lat[spec.key].ns) and percentile(sorted(p), 0.5) > SLOW_P50_MS:
                        continue
                    if spec.key in hosts:
                        call = hosts[spec.key].echo
                        await guarded(
                            spec.key, timed_calls, call, size, callers, args.budget, samples[spec.key]
                        )
            print(f"  {callers} caller(s): done", file=sys.stderr)
    for spec in specs:
        row, ordered = rows[spec.key], sorted(lat[spec.key].ns)
        if ordered:
            row.p50_ms, row.p90_ms, row.calls_1 = (
                percentile(ordered, 0.5),
                percentile(ordered, 0.9),
                len(ordered),
            )
        if rate[spec.key].ns:
            row.calls_16 = len(rate[spec.key].ns)
            row.calls_per_s_16 = row.calls_16 / rate[spec.key].wall_ns * 1e9
        elif ordered and row.p50_ms is not None and row.p50_ms > SLOW_P50_MS:
            row.notes.append(f"not driven by {CALLERS} callers (p50 > {SLOW_P50_MS / 1e3:g} s)")
    return settled


async def kill_run(host: Host, calls: int, row: Row) -> None:
    """Calls every KILL_PACE s; s0's server process is killed with SIGKILL after a third of them."""
    await host.echo()
    row.lost, row.kill_calls = 0, 0
    started, killed, timeouts = trio.current_time(), False, 0
    for i in range(calls):
        elapsed = trio.current_time() - started
        if elapsed > KILL_BUDGET:
            row.notes.append(f"kill run stopped at the {KILL_BUDGET:g} s budget")
            break
        if not killed and (i >= calls // 3 or elapsed > KILL_BUDGET / 3):
            pid = backend_pid(host.roots, "s0")
            if pid is None:
                row.lost = row.kill_calls = None
                row.notes.append("no long-lived s0 process to kill (each call starts the servers)")
                return
            os.kill(pid, signal.SIGKILL)
            killed = True
        row.kill_calls += 1
        failed = False
        with trio.move_on_after(CALL_TIMEOUT) as scope:
            try:
                await host.echo()
            except Exception as exc:  # a call that failed is what is counted
                failed = True
                if not row.lost:
                    row.notes.append(f"first failure: {short(exc)}")
        timeouts = timeouts + 1 if scope.cancelled_caught else 0
        row.lost += failed or scope.cancelled_caught
        if timeouts >= GIVE_UP_AFTER:
            row.lost += calls - 1 - i
            row.kill_calls += calls - 1 - i
            row.notes.append(
                f"no answer after the kill ({GIVE_UP_AFTER} calls timed out: the rest counted lost)"
            )
            break
        await trio.sleep(KILL_PACE)  # the caller's pace, not a wait for a state


async def kill_phase(
    specs: list[PathSpec], ctx: Ctx, rows: dict[str, Row], calls: int, problems: list[str]
) -> None:
    """A fresh session of each path (and for the supervisor's paths, a fresh supervisor)."""
    for spec in specs:
        row = rows[spec.key]
        if row.errors:
            continue
        try:
            with trio.fail_after(KILL_BUDGET + 4 * SPAWN_TIMEOUT):
                if spec.supervised:
                    tmp = Path(tempfile.mkdtemp(dir=ctx.tmp, prefix=f"kill-{spec.key}-"))
                    async with supervisor_running(ctx.servers, tmp, problems, crashes_expected=True) as sup:
                        fresh = replace(ctx, endpoint=sup[0], supervisor_pid=sup[1])
                        async with spec.open(fresh) as host:
                            await kill_run(host, calls, row)
                else:
                    async with spec.open(ctx) as host:
                        await kill_run(host, calls, row)
        except Exception as exc:
            if not row.kill_calls or row.lost is None:
                row.errors.append(f"kill run: {short(exc)}")
            elif row.kill_calls < calls:
                row.notes.append(f"the session ended after the kill ({short(exc)}): the rest counted lost")
                row.lost += calls - row.kill_calls
                row.kill_calls = calls
            else:
                row.notes.append(f"closing after the kill run: {short(exc)}")
        print(f"  kill -9 {spec.label}: lost {row.lost}/{row.kill_calls}", file=sys.stderr)


def write_configs(tmp: Path, servers: dict[str, dict[str, Any]]) -> dict[str, Path]:
    configs = {"mcp": tmp / "mcp-servers.json", "magg": tmp / "magg.json"}
    configs["mcp"].write_text(json.dumps({"mcpServers": servers}))
    magg = {name: {"source": "server-everything", "prefix": name, **entry} for name, entry in servers.items()}
    configs["magg"].write_text(json.dumps({"servers": magg}))
    return configs


def write_scripts(tmp: Path) -> dict[str, Path]:
    scripts = {"fastmcp": tmp / "fastmcp_proxy.py", "fastmcp-mount": tmp / "fastmcp_mount.py"}
    scripts["fastmcp"].write_text(FASTMCP_PROXY)
    scripts["fastmcp-mount"].write_text(FASTMCP_MOUNT)
    return scripts


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


@contextmanager
def swept(problems: list[str]) -> Iterator[None]:
    """Every process this one started (and their orphans) killed on the way out, however it ends."""
    become_subreaper()
    try:
        yield
    finally:
        problems += [f"left running at the end, killed: {p}" for p in sweep()]


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
