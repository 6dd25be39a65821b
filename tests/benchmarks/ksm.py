"""The kernel's same-page merging (KSM), as a memory benchmark needs it: whether it runs, and waiting
until it has scanned everything that is there now.

Workers offer their memory to KSM (``supervisor.shared.processes.merge_identical_pages``); where it
runs, what they copied alike is folded back into one page, but only once ksmd has scanned the
pages twice (once to see them, once to see them unchanged). A figure read before that is
neither the one with KSM nor the one without.
"""

from __future__ import annotations

import time
from pathlib import Path

KSM = Path("/sys/kernel/mm/ksm")


def read(name: str) -> int | None:
    try:
        return int((KSM / name).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def running() -> bool:
    return read("run") == 1


def describe() -> str:
    """One line for a benchmark's header: off, or on with its rate and what it saves now."""
    if not running():
        return "off" if KSM.exists() else "not in this kernel"
    return (
        f"on (pages_to_scan {read('pages_to_scan')}, sleep_millisecs {read('sleep_millisecs')}; "
        f"pages_sharing {read('pages_sharing')}, pages_shared {read('pages_shared')})"
    )


def settle(timeout: float) -> str:
    """Where KSM runs, wait (at most ``timeout`` seconds) until ksmd has finished two full scans
    begun after now; what happened, for the report."""
    if not running():
        return "KSM off: nothing to wait for"
    start = read("full_scans") or 0
    began = time.monotonic()
    deadline = began + timeout
    while time.monotonic() < deadline:
        scans = read("full_scans") or 0
        if scans >= start + 3:  # the one under way when we began may have seen none of the new pages
            return f"KSM settled: {scans - start} full scans in {time.monotonic() - began:.0f} s"
        time.sleep(0.5)  # polling ksmd's counter: there is no event to wait on
    return f"KSM not settled after {timeout:.0f} s ({(read('full_scans') or 0) - start} full scans)"
