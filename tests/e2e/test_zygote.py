"""Workers forked from the zygote, and the exec fallback, with real processes."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from supervisor.shared.processes import children
from tests.e2e.harness import SupervisorProcess, alive, poll, stdio_test_server

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
ZYGOTE_CMDLINE = b"\0-m\0workers\0--zygote\0"


def cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def zygotes(sup: SupervisorProcess) -> list[int]:
    return [pid for pid in children(sup.process.pid) if comm(pid) == "mcp-zygote"]


def test_workers_are_forked_from_one_zygote_and_adopted_by_the_supervisor(start_supervisor: Start) -> None:
    sup = start_supervisor(
        {"a": stdio_test_server(), "b": stdio_test_server(), "time": {"command": "mcp-server-time"}}
    )
    (zygote,) = zygotes(sup)
    assert ZYGOTE_CMDLINE in cmdline(zygote)
    for name, row in sup.status().items():
        assert row.worker_pid is not None
        assert parent(row.worker_pid) == sup.process.pid  # re-parented: the supervisor reaps it
        assert ZYGOTE_CMDLINE in cmdline(row.worker_pid)  # a fork, not an exec
        assert comm(row.worker_pid) == f"mcp-w {name}"[:15]
    assert sup.client.call_tool("mcp_a_echo", {"text": "forked"}).text == "forked"
    # a restart forks again from the same zygote
    before = sup.status()["a"].worker_pid
    sup.client.restart("a")
    poll("a new worker for 'a'", lambda: sup.status()["a"].worker_pid not in (None, before), 20)
    sup.wait_states(a="ready")
    assert zygotes(sup) == [zygote]
    assert sup.client.call_tool("mcp_a_echo", {"text": "again"}).text == "again"


def test_a_worker_exit_status_is_read_as_for_an_exec_worker(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server()}, settings={"backoffInitial": 0.05})
    row = sup.status()["test"]
    assert row.server_pid is not None
    os.kill(row.server_pid, signal.SIGKILL)
    poll("the restart", lambda: sup.status()["test"].restarts == 1, 20)
    sup.wait_states(test="ready")
    assert "worker exited with code 3" in sup.log  # WorkerExit.SERVER_DIED, from the forked worker's status
    worker = sup.status()["test"].worker_pid
    assert worker is not None
    os.kill(worker, signal.SIGKILL)
    poll("the second restart", lambda: sup.status()["test"].restarts == 2, 20)
    assert "worker was killed by SIGKILL" in sup.log
    sup.wait_states(test="ready")
    assert not alive(worker)
    assert "Z" not in children(sup.process.pid).values()


def test_a_killed_zygote_is_replaced_at_the_next_spawn_and_workers_carry_on(start_supervisor: Start) -> None:
    sup = start_supervisor({"a": stdio_test_server(), "b": stdio_test_server()})
    (zygote,) = zygotes(sup)
    os.kill(zygote, signal.SIGKILL)
    poll("the zygote to be reaped", lambda: not alive(zygote), 5)
    assert sup.client.call_tool("mcp_b_echo", {"text": "still here"}).text == "still here"
    sup.client.restart("a")
    sup.wait_states(a="ready")
    (new,) = zygotes(sup)
    assert new != zygote
    assert ZYGOTE_CMDLINE in cmdline(sup.status()["a"].worker_pid or 0)
    assert sup.client.call_tool("mcp_a_echo", {"text": "reforked"}).text == "reforked"
    assert "starting workers with exec" not in sup.log  # a dead zygote is no failure: just start another


def ksm_offer(pid: int) -> bool:
    """Whether a process's memory is offered to same-page merging (``/proc/PID/ksm_stat``)."""
    stat = dict(
        line.split(": ") for line in Path(f"/proc/{pid}/ksm_stat").read_text().splitlines() if ": " in line
    )
    return stat.get("ksm_mergeable") == "yes"


needs_ksm_stat = pytest.mark.skipif(
    not Path("/proc/self/ksm_stat").exists()
    or "ksm_mergeable" not in Path("/proc/self/ksm_stat").read_text(),
    reason="this kernel's /proc/PID/ksm_stat does not say whether a process offers memory to KSM",
)


@needs_ksm_stat
@pytest.mark.parametrize("spawn", ["zygote", "exec"])
def test_workers_offer_their_memory_to_same_page_merging_and_their_servers_do_not(
    start_supervisor: Start, spawn: str
) -> None:
    sup = start_supervisor(
        {"kept": stdio_test_server(), "out": stdio_test_server()},
        settings={"workerSpawn": spawn},
    )
    rows = sup.status()
    for name in ("kept", "out"):
        worker, server = rows[name].worker_pid, rows[name].server_pid
        assert worker is not None and server is not None
        assert ksm_offer(worker), f"{name}'s worker ({spawn})"
        assert not ksm_offer(server), f"{name}'s server: an exec'd program is never included"


@needs_ksm_stat
def test_memory_merge_false_keeps_forked_workers_out(start_supervisor: Start) -> None:
    sup = start_supervisor({"a": stdio_test_server()}, settings={"memoryMerge": False})
    (zygote,) = zygotes(sup)
    assert ksm_offer(zygote)  # the zygote offers its own pages whatever the setting
    worker = sup.status()["a"].worker_pid
    assert worker is not None and not ksm_offer(worker)
    assert sup.client.call_tool("mcp_a_echo", {"text": "kept out"}).text == "kept out"


@pytest.mark.skipif(not Path("/sys/kernel/mm/ksm/run").exists(), reason="this kernel has no KSM")
@pytest.mark.parametrize("merge", [True, False])
def test_the_supervisor_says_whether_same_page_merging_is_on(start_supervisor: Start, merge: bool) -> None:
    sup = start_supervisor({"a": stdio_test_server()}, settings={"memoryMerge": merge})
    running = Path("/sys/kernel/mm/ksm/run").read_text().strip() == "1"
    said = {state: f"same-page merging (KSM) is {state}" in sup.log for state in ("on", "off")}
    assert said == ({"on": running, "off": not running} if merge else {"on": False, "off": False})


def test_exec_mode_starts_each_worker_as_its_own_interpreter(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server()}, settings={"workerSpawn": "exec"})
    worker = sup.status()["test"].worker_pid
    assert worker is not None
    assert cmdline(worker).endswith(b"\0-m\0workers\0test\0")
    assert zygotes(sup) == []
    assert sup.client.call_tool("mcp_test_echo", {"text": "exec"}).text == "exec"


def test_a_zygote_that_cannot_start_falls_back_to_exec(start_supervisor: Start, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    # Every interpreter started with --zygote dies at once; workers started with exec are unaffected.
    (site / "sitecustomize.py").write_text("import sys\nif '--zygote' in sys.orig_argv:\n    sys.exit(9)\n")
    pythonpath = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    sup = start_supervisor(
        {"test": stdio_test_server(), "other": stdio_test_server()}, env={"PYTHONPATH": pythonpath}
    )
    assert "the zygote did not start" in sup.log
    assert "starting workers with exec" in sup.log
    for row in sup.status().values():
        assert row.worker_pid is not None
        assert b"\0-m\0workers\0" + row.server.encode() + b"\0" in cmdline(row.worker_pid)
    assert sup.client.call_tool("mcp_other_echo", {"text": "fallback"}).text == "fallback"


def test_unknown_spawn_mode_is_a_config_error(tmp_path: Path) -> None:
    from supervisor.config.load import ConfigError, load_config

    path = tmp_path / "mcp.json"
    path.write_text('{"supervisor": {"workerSpawn": "vfork"}, "mcpServers": {}}')
    with pytest.raises(ConfigError, match="workerSpawn"):
        load_config(path)
