"""The processes of a peers run: this process is the subreaper of everything it starts, a backend server
is found by its environment, and whatever is left at the end is killed and named (``sweep``)."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import IO, Any

import trio

from supervisor.client import SupervisorClient
from tests.benchmarks.common import (
    REPO,
    child_pids,
    launch_supervisor,
    log_problems,
    stop_supervisor,
    wait_ready,
)
from tests.benchmarks.fleet import cmdline

SERVER_ENV = "PEERS_BENCH_SERVER"  # set in each backend's entry: how its process is found
LISTEN_TIMEOUT = 60.0  # seconds for an HTTP server to say where it listens
STOP_TIMEOUT = 10.0  # seconds for a server process to exit after SIGINT


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


@contextmanager
def swept(problems: list[str]) -> Iterator[None]:
    """Every process this one started (and their orphans) killed on the way out, however it ends."""
    become_subreaper()
    try:
        yield
    finally:
        problems += [f"left running at the end, killed: {p}" for p in sweep()]
