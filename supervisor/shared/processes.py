"""Process helpers shared by the supervisor and its workers: process groups and adopted orphans.

Both the supervisor and each worker make themselves *child subreapers*
(``PR_SET_CHILD_SUBREAPER``): a server's descendant that escapes its process
group (a double-forking daemon) is re-parented to the worker, or to the
supervisor when the worker is gone, instead of to init. Those adopted
processes are killed when their server stops, and reaped so no zombie stays.
"""

from __future__ import annotations

import ctypes
import ctypes.util
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
    "prctl",
    "reap_adopted",
    "reap_on_sigchld",
    "set_process_name",
]

log = logging.getLogger("mcp_supervisor.process")

PR_SET_CHILD_SUBREAPER: Final = 36
PR_SET_NAME: Final = 15


def kill_group(pgid: int, sig: signal.Signals) -> None:
    """Signal a whole process group (a server and every child it started), if any of it is left."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def prctl(option: int, arg: int | bytes) -> bool:
    """Linux ``prctl(option, arg)``; False where it failed or does not exist."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return bool(libc.prctl(option, arg, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


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


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def kill_adopted(keep: Callable[[int, bytes], bool]) -> list[int]:
    """SIGKILL every child (and its process group) that ``keep(pid, cmdline)`` does not claim."""
    killed = []
    for pid, state in children().items():
        if state != "Z" and not keep(pid, _cmdline(pid)):
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
