"""Ending a worker process for good: its lifeline closed, the worker and its server reaped, strays killed.

Above: a keeper, at the end of each worker incarnation (its shielded clean-up). Below: the worker
process (``WorkerProcess``), its server's process group, and what escaped that group and was
re-parented to us (the supervisor is a child subreaper; ``supervisor.shared.processes``). Every wait is
bounded: a worker that does not stop in order is killed, one that is not reaped is left.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Final

import trio

from supervisor.daemon.servers.spawn import WorkerProcess
from supervisor.shared.boot import STOP_LINE, is_worker_cmdline
from supervisor.shared.processes import kill_adopted, kill_group

__all__ = ["close_lifeline", "reap"]

log = logging.getLogger("mcp_supervisor.keeper")

WORKER_STOP_TIMEOUT: Final = 8.0  # seconds a worker gets to close its session after its lifeline closes
KILL_REAP_TIMEOUT: Final = 2.0  # seconds for a SIGKILLed worker to be reaped


async def reap(
    process: WorkerProcess, name: str, server_pid: int | None, own_children: Callable[[], set[int]]
) -> None:
    """Make sure server ``name``'s worker and its server are gone; every wait bounded.
    ``own_children``: the pids of every live worker (another keeper's worker is never a stray)."""
    assert process.stdin is not None
    await close_lifeline(process.stdin)
    with trio.move_on_after(WORKER_STOP_TIMEOUT):
        await process.wait()
    if process.returncode is None:
        log.warning("worker of %r did not stop within %g s; killing it", name, WORKER_STOP_TIMEOUT)
        process.kill()
        with trio.move_on_after(KILL_REAP_TIMEOUT):
            await process.wait()
    if server_pid is not None:  # the worker may have died without stopping its server
        kill_group(server_pid, signal.SIGKILL)
    # what escaped that group was re-parented to the worker, and now to us (a subreaper)
    # Another keeper's worker may be exiting (its cmdline already empty): known pids are kept too.
    ours = own_children()
    kill_adopted(keep=lambda pid, cmdline: pid == server_pid or pid in ours or _is_ours(pid, cmdline))


_OWN_CMDLINE: Final = Path("/proc/self/cmdline").read_bytes()


def _is_ours(pid: int, cmdline: bytes) -> bool:
    """A worker (or a child being forked into one): never taken for an adopted orphan."""
    return is_worker_cmdline(cmdline) or cmdline == _OWN_CMDLINE


async def close_lifeline(stream: trio.abc.SendStream) -> None:
    """Tell a worker to stop in order (end-of-file alone would mean that we died)."""
    with suppress(trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
        await stream.send_all(STOP_LINE)
    with suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await stream.aclose()
