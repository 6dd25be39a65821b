"""Process helpers shared by the supervisor and its workers: process groups, adopted orphans, and
memory offered to the kernel's same-page merging.

Both the supervisor and each worker make themselves *child subreapers*
(``PR_SET_CHILD_SUBREAPER``): a server's descendant that escapes its process
group (a double-forking daemon) is re-parented to the worker, or to the
supervisor when the worker is gone, instead of to init. Those adopted
processes are killed when their server stops, and reaped so no zombie stays.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import signal
from collections.abc import Callable, Collection
from contextlib import suppress
from pathlib import Path
from typing import Final

import trio

__all__ = [
    "become_subreaper",
    "children",
    "kill_adopted",
    "kill_group",
    "ksm_running",
    "merge_identical_pages",
    "prctl",
    "reap_adopted",
    "reap_on_sigchld",
    "run_state",
    "set_process_name",
]

log = logging.getLogger("mcp_supervisor.process")

PR_SET_CHILD_SUBREAPER: Final = 36
PR_SET_NAME: Final = 15
MADV_MERGEABLE: Final = 12
MADV_UNMERGEABLE: Final = 13


def kill_group(pgid: int, sig: signal.Signals) -> None:
    """Signal a whole process group (a server and every child it started), if any of it is left."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library this interpreter runs on: its own symbols (no ``find_library``, which runs
    ``ldconfig`` in a child process each time)."""
    return ctypes.CDLL(None, use_errno=True)


def prctl(option: int, arg: int | bytes) -> bool:
    """Linux ``prctl(option, arg)``; False where it failed or does not exist."""
    try:
        return bool(_libc().prctl(option, arg, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def merge_identical_pages(enable: bool = True) -> bool:
    """Offer this process's memory to the kernel's same-page merging (KSM), or take it back.

    Workers forked from one zygote write the same bytes to the same pages: CPython 3.11 writes a
    reference count into every object it touches, and every worker runs the same code, so each copies
    the same pages. Where KSM runs (``/sys/kernel/mm/ksm/run`` is 1; off by default on most
    distributions) the kernel folds such identical pages back into one. Marks (``MADV_MERGEABLE``) or
    unmarks every writable private mapping there is now (anonymous memory, the heap, and libraries'
    data, whose written pages are anonymous too); a ``fork`` inherits the marks, a
    program ``exec`` starts (the MCP server) does not (unlike ``PR_SET_MEMORY_MERGE``, which would
    carry them into the server). False where nothing could be marked.
    """
    try:
        madvise = _libc().madvise
        maps = Path("/proc/self/maps").read_text().splitlines()
    except (OSError, AttributeError):
        return False
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    advice = MADV_MERGEABLE if enable else MADV_UNMERGEABLE
    marked = 0
    for line in maps:  # "lo-hi perms offset dev inode [path]"
        fields = line.split()
        if len(fields) < 5 or fields[1][1] != "w" or fields[1][3] != "p":
            continue
        if len(fields) > 5 and fields[5].startswith("[") and fields[5] != "[heap]":  # the stack, the vdso
            continue
        lo, hi = (int(end, 16) for end in fields[0].split("-"))
        marked += madvise(lo, hi - lo, advice) == 0
    return marked > 0


def ksm_running() -> bool | None:
    """Whether the kernel's same-page merging runs on this host; None where the kernel has none."""
    try:
        return Path("/sys/kernel/mm/ksm/run").read_text().strip() == "1"
    except OSError:
        return None


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux); False where that is not possible."""
    return prctl(PR_SET_CHILD_SUBREAPER, 1)


def set_process_name(name: str) -> bool:
    """The name ``ps -o comm`` and ``top`` show (the first 15 bytes); best effort."""
    return prctl(PR_SET_NAME, name.encode()[:15])


def children(parent: int | None = None) -> dict[int, str]:
    """The direct children of ``parent`` (default: this process) and their states ('Z' for zombies)."""
    parent = os.getpid() if parent is None else parent
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            found[int(entry.name)] = fields[0]
    return found


def run_state(pid: int) -> str:
    """The kernel's one-letter state of process ``pid`` (``R`` running or waiting for a CPU, ``S``
    asleep, ``D`` in uninterruptible I/O, ``T`` stopped, ``Z`` exited), and what it sleeps in (its
    ``wchan``), e.g. ``S pipe_write``; "" when it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return ""
    state = stat[stat.rfind(b")") + 2 :][:1].decode("ascii", "replace")
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
    except OSError:
        wchan = ""
    return f"{state} {wchan}" if wchan and wchan != "0" else state


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def kill_adopted(keep: Callable[[int, bytes], bool], group: int | None = None) -> list[int]:
    """SIGKILL every child (and its process group) that ``keep(pid, cmdline)`` does not claim; those
    still in process group ``group`` (the server's, already killed, not yet gone) are not reported."""
    killed = []
    for pid, state in children().items():
        if state != "Z" and not keep(pid, _cmdline(pid)):
            with suppress(OSError):
                if group is not None and os.getpgid(pid) == group:
                    os.kill(pid, signal.SIGKILL)
                    continue
            kill_group(pid, signal.SIGKILL)
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    if killed:
        log.warning(
            "killed %d process(es) that escaped their server's process group: %s", len(killed), killed
        )
    return killed


def reap_adopted(exclude: Collection[int]) -> list[int]:
    """Reap zombie children other than ``exclude`` (the children trio waits for itself)."""
    reaped = []
    for pid, state in children().items():
        if state == "Z" and pid not in exclude:
            with suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
                reaped.append(pid)
    return reaped


async def reap_on_sigchld(exclude: Callable[[], Collection[int] | None]) -> None:
    """Reap adopted zombies whenever a child exits; ``exclude()`` returning None means not now."""
    with trio.open_signal_receiver(signal.SIGCHLD) as signals:
        async for _ in signals:
            while (pids := exclude()) is None:  # noqa: ASYNC110 - a fork in progress ends on its own
                await trio.sleep(0.05)
            reap_adopted(pids)
