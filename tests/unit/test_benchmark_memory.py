"""The memory benchmark's sorting of a peer's processes and its sums (tests/benchmarks/memory*.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.benchmarks.fleet import Memory
from tests.benchmarks.memory import MB, totals
from tests.benchmarks.memory_peers import sort_tree, tracebacks
from tests.benchmarks.peer_processes import SERVER_ENV


def test_a_peers_processes_are_sorted_by_the_servers_marker() -> None:
    # sh (the peer) starts a marked sleep (a server) and an unmarked one (a helper of the peer's).
    script = f"{SERVER_ENV}=s0 sleep 30 & sleep 30 & wait"
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + 10.0
        found = sort_tree([proc.pid])
        while (len(found["server"]), len(found["peer"])) != (1, 2) and time.monotonic() < deadline:
            time.sleep(0.01)  # a poll, bounded, for both children to have exec'd sleep
            found = sort_tree([proc.pid])
        assert len(found["server"]) == 1
        assert proc.pid in found["peer"] and len(found["peer"]) == 2
        assert not set(found["server"]) & set(found["peer"])
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_supervision_sums_every_role_but_the_servers_and_the_facade() -> None:
    one = Memory(rss=10.0, pss=4.0, uss=2.0)  # MiB
    ours = {"supervisor": [one], "worker": [one, one], "other": [one], "facade": [one], "server": [one] * 2}
    figures = totals(ours, 2)
    assert figures["supervision_pss_mb"] == 4 * 4.0 * MB
    assert figures["supervision_uss_per_server_mb"] == 4 * 2.0 * MB / 2
    assert figures["servers_pss_mb"] == 2 * 4.0 * MB and figures["facades_uss_mb"] == 2.0 * MB
    assert (figures["own_procs"], figures["server_procs"]) == (4, 2)
    peer = totals({"peer": [one], "server": []}, 2)
    assert peer["supervision_pss_mb"] == 4.0 * MB and peer["facades_pss_mb"] == 0


def test_tracebacks_are_counted_up_to_the_end_of_the_measurement(tmp_path: Path) -> None:
    log = tmp_path / "peer.stderr"
    mark = "Traceback (most recent call last):\n"
    log.write_text(f"ok\n{mark}x\n{mark}")
    assert tracebacks(log, None) == 2
    assert tracebacks(log, len(f"ok\n{mark}")) == 1
    assert tracebacks(tmp_path / "missing", None) == 0
