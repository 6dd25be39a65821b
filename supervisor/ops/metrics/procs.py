"""Resident memory of processes and of their descendants, read from ``/proc`` when asked.

Above: the Prometheus collector (``supervisor.ops.metrics.collector``), at scrape time: a worker's own
memory, and its server's (the worker's descendants: a stdio server, and whatever that started, such
as ``npx`` and its ``node``). Below: ``/proc/<pid>/statm`` and ``/proc/<pid>/task/*/children``. A
process that is gone counts 0; nothing here raises.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

__all__ = ["MAX_DESCENDANTS", "PAGE_SIZE", "children", "descendants", "rss_bytes"]

PAGE_SIZE: Final = os.sysconf("SC_PAGE_SIZE")
MAX_DESCENDANTS: Final = 256  # processes followed below one worker, at most (a fork bomb stays cheap)


def rss_bytes(pid: int) -> int:
    """``pid``'s resident set size in bytes (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/statm").read_bytes().split()
        return int(fields[1]) * PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return 0


def children(pid: int) -> list[int]:
    """The children of ``pid`` (every thread's); none when it is gone."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(child) for child in (task / "children").read_bytes().split()]
        except (OSError, ValueError):
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, theirs, ...), at most ``MAX_DESCENDANTS``."""
    found: list[int] = []
    seen = {pid}
    queue = [pid]
    while queue and len(found) < MAX_DESCENDANTS:
        for child in children(queue.pop()):
            if child not in seen and len(found) < MAX_DESCENDANTS:
                seen.add(child)
                found.append(child)
                queue.append(child)
    return found
