"""Fault injection with real processes: each fault, then what must hold afterwards.

Every test ends with a census: no worker, server or escaped child left alive,
and no zombie among the supervisor's children.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import trio
import zmq

from supervisor.client import AsyncSupervisorClient, SupervisorClient
from supervisor.client.errors import (
    ServerUnavailableError,
    SupervisorError,
    SupervisorUnreachableError,
    ToolTimeoutError,
    WorkerCrashedError,
)
from supervisor.protocol import InvokeResult, ServerStatus, ToolResult, encode
from supervisor.shared.processes import children
from tests.e2e.harness import SupervisorProcess, alive, poll, stdio_test_server

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
FAST_RESTARTS = {"maxRestarts": 100, "backoffInitial": 0.05, "backoffMax": 0.2}
REPLY_MARGIN = 2.0  # seconds past a call's deadline within which its one reply must come


def census(sup: SupervisorProcess, pids: list[int | None]) -> None:
    """Stop the supervisor; nothing it started may survive it, and no zombie may remain."""
    supervisor_pid = sup.process.pid
    if sup.process.poll() is None:  # adopted processes are reaped when their SIGCHLD is handled
        poll("no zombie children of the supervisor", lambda: "Z" not in children(supervisor_pid).values(), 5)
        pids = [*pids, *children(supervisor_pid)]  # the zygote too
    assert sup.stop() == 0
    poll("every process to be gone", lambda: not [pid for pid in pids if alive(pid)], 5)


def all_pids(sup: SupervisorProcess) -> list[int | None]:
    return [pid for row in sup.status().values() for pid in (row.worker_pid, row.server_pid)]


def test_kill_9_of_a_worker_during_50_concurrent_calls_repeated_20_times(start_supervisor: Start) -> None:
    sup = start_supervisor(
        {
            "test": {**stdio_test_server(TEST_SERVER_STATE_DIR="{state}"), **FAST_RESTARTS},
            "other": stdio_test_server(),
        }
    )
    other_worker = sup.status()["other"].worker_pid
    seen: list[int | None] = []
    outcomes: dict[str, int] = {}

    async def round_of_calls(worker_pid: int, round: int) -> None:
        async def one(sup_client: AsyncSupervisorClient, i: int) -> None:
            started = trio.current_time()
            try:
                await sup_client.call_tool(
                    "mcp_test_slow", {"seconds": 0.5, "tag": f"r{round}_{i}"}, timeout=5
                )
                kind = "result"
            except SupervisorError as exc:
                kind = exc.code
            assert trio.current_time() - started < 5 + REPLY_MARGIN
            outcomes[kind] = outcomes.get(kind, 0) + 1

        with trio.fail_after(30):
            async with AsyncSupervisorClient(sup.endpoint) as client, trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(one, client, i)
                marker = sup.state_dir / f"r{round}_0.started"
                while not marker.exists():  # noqa: ASYNC110 - a file, not a trio event; fail_after bounds it
                    await trio.sleep(0.01)
                os.kill(worker_pid, signal.SIGKILL)

    for round in range(20):
        row = sup.wait_states(test="ready")["test"]
        seen += [row.worker_pid, row.server_pid]
        assert row.worker_pid is not None
        trio.run(round_of_calls, row.worker_pid, round)
    assert sum(outcomes.values()) == 20 * 50  # exactly one reply each
    assert set(outcomes) <= {"result", "WORKER_CRASHED", "UNAVAILABLE"}, outcomes
    assert outcomes.get("WORKER_CRASHED", 0) > 0
    rows = sup.wait_states(test="ready")
    assert rows["test"].restarts == 20
    assert rows["other"].worker_pid == other_worker and rows["other"].restarts == 0
    assert sup.client.call_tool("mcp_test_echo", {"text": "after"}).text == "after"
    census(sup, [*seen, *all_pids(sup)])


def test_crash_loop_backs_off_on_schedule_and_ends_failed(start_supervisor: Start) -> None:
    exits = "import sys; sys.exit(1)"
    sup = start_supervisor({"loop": {"command": sys.executable, "args": ["-c", exits]}}, wait=False)
    row = sup.wait_states(timeout=90, loop="failed")["loop"]
    assert row.restarts == 5
    delays = [
        float(line.split("restarting in ")[1].split(" s")[0])
        for line in sup.log.splitlines()
        if "server 'loop': restarting in" in line
    ]
    # first restart at once, then 0.5 s doubling, +/- 10 % jitter
    assert len(delays) == 4
    for delay, expected in zip(delays, [0.5, 1, 2, 4], strict=True):
        assert expected * 0.9 <= delay <= expected * 1.1, delays
    census(sup, [])


def test_sigstopped_worker_is_declared_dead_and_replaced(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server(TEST_SERVER_STATE_DIR="{state}")})
    before = sup.status()["test"]
    outcome: dict[str, object] = {}

    def call() -> None:
        try:
            sup.client.call_tool("mcp_test_slow", {"seconds": 60, "tag": "stopped"}, timeout=60)
        except SupervisorError as exc:
            outcome["error"], outcome["at"] = exc, time.monotonic()

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    poll("the call to reach the server", (sup.state_dir / "stopped.started").exists, 20)
    stopped_at = time.monotonic()
    os.kill(before.worker_pid, signal.SIGSTOP)
    thread.join(15)
    assert isinstance(outcome.get("error"), WorkerCrashedError), outcome
    assert "stopped answering heartbeats" in str(outcome["error"])
    assert outcome["at"] - stopped_at < 3 + REPLY_MARGIN  # declared dead within 3 s (plus a margin)
    after = sup.wait_states(test="ready")["test"]
    assert after.worker_pid != before.worker_pid and after.restarts == 1
    assert not alive(before.worker_pid) and not alive(before.server_pid)
    assert sup.client.call_tool("mcp_test_echo", {"text": "back"}).text == "back"
    census(sup, [before.worker_pid, before.server_pid, *all_pids(sup)])


def test_a_starved_supervisor_reads_its_queue_before_declaring_workers_dead(start_supervisor: Start) -> None:
    """Stopped (as if starved of CPU) for longer than the heartbeat timeout, the supervisor wakes with
    every heartbeat timer expired and the workers' answers still queued: it must read them first."""
    sup = start_supervisor({"a": stdio_test_server(), "b": stdio_test_server()})
    before = sup.status()
    os.kill(sup.process.pid, signal.SIGSTOP)
    try:
        time.sleep(4.5)  # the fault itself: longer than the 3 s heartbeat timeout (not a wait for state)
    finally:
        os.kill(sup.process.pid, signal.SIGCONT)
    # The expired heartbeat timers fire as it wakes, before this call is even read: a worker wrongly
    # judged dead would fail it, and show in the status.
    assert sup.client.call_tool("mcp_a_echo", {"text": "awake"}).text == "awake"
    assert sup.client.call_tool("mcp_b_echo", {"text": "awake"}).text == "awake"
    after = sup.status()
    assert [after[n].worker_pid for n in "ab"] == [before[n].worker_pid for n in "ab"]
    assert all(after[n].restarts == 0 for n in "ab")
    assert "stopped answering heartbeats" not in sup.log


def _started(sup: SupervisorProcess, name: str) -> ServerStatus | None:
    """The server's status once its worker reported the server process started."""
    try:
        row = sup.status().get(name)
    except SupervisorUnreachableError:  # not listening yet
        return None
    return row if row is not None and row.server_pid is not None else None


def test_a_worker_starved_while_starting_is_watched_by_the_start_timeout_not_by_heartbeats(
    start_supervisor: Start,
) -> None:
    """Among many workers starting at once on few cores, one may not run for seconds: it is slow,
    not hung, and only the start timeout judges it until it is ready."""
    slow = {**stdio_test_server(TEST_SERVER_INIT_DELAY=6), "startTimeout": 30}
    sup = start_supervisor({"slow": slow}, wait=False)
    row = poll("the worker to start its server", lambda: _started(sup, "slow"), 30, 0.02)
    assert row.state == "starting"
    os.kill(row.worker_pid, signal.SIGSTOP)
    try:
        time.sleep(4.5)  # the fault itself: longer than the 3 s heartbeat timeout (not a wait for state)
    finally:
        os.kill(row.worker_pid, signal.SIGCONT)
    ready = sup.wait_states(timeout=30, slow="ready")["slow"]
    assert (ready.worker_pid, ready.restarts) == (row.worker_pid, 0)
    assert "stopped answering heartbeats" not in sup.log


def test_a_starved_supervisor_reads_a_queued_ready_before_the_start_timeout_judges(
    start_supervisor: Start,
) -> None:
    """Stopped across a worker's start deadline while the worker became ready, the supervisor wakes
    with the start timer expired and the worker's Ready still queued: it must read it first."""
    sup = start_supervisor({"quick": {**stdio_test_server(), "startTimeout": 5}}, wait=False)
    row = poll("the worker to start its server", lambda: _started(sup, "quick"), 30, 0.02)
    assert row.state == "starting"
    os.kill(sup.process.pid, signal.SIGSTOP)
    try:
        time.sleep(8)  # the fault itself: past the 5 s start timeout; the server is ready in ~1-2 s
    finally:
        os.kill(sup.process.pid, signal.SIGCONT)
    ready = sup.wait_states(timeout=30, quick="ready")["quick"]
    assert (ready.worker_pid, ready.restarts) == (row.worker_pid, 0)
    assert "did not finish starting" not in sup.log
    assert sup.client.call_tool("mcp_quick_echo", {"text": "on time"}).text == "on time"


def test_hung_initialize_is_killed_at_the_start_timeout_and_counted(start_supervisor: Start) -> None:
    hung = {**stdio_test_server(TEST_SERVER_HANG_INIT=1), "startTimeout": 2, "maxRestarts": 1}
    sup = start_supervisor({"hung": hung, "test": stdio_test_server()}, wait=False)
    row = sup.wait_states(timeout=60, hung="failed", test="ready")["hung"]
    assert "did not finish starting (initialize and tools/list) within 2 s" in (row.last_error or "")
    assert row.restarts == 1
    census(sup, all_pids(sup))


def test_tool_slower_than_its_deadline_is_cancelled_not_restarted(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server(TEST_SERVER_STATE_DIR="{state}")})
    before = sup.status()["test"]
    with pytest.raises(ToolTimeoutError):
        sup.client.call_tool("mcp_test_slow", {"seconds": 30, "tag": "late"}, timeout=0.5)
    poll("the server's cancellation marker", (sup.state_dir / "late.cancelled").exists, 10)
    after = sup.status()["test"]
    assert (after.worker_pid, after.server_pid, after.restarts) == (before.worker_pid, before.server_pid, 0)
    census(sup, all_pids(sup))


def test_kill_9_of_the_supervisor_leaves_nothing_within_2_s(start_supervisor: Start) -> None:
    sup = start_supervisor(
        {
            "test": stdio_test_server(),
            "stubborn": stdio_test_server(TEST_SERVER_IGNORE_SIGTERM=1),
            "time": {"command": "mcp-server-time"},
        }
    )
    pids = all_pids(sup)
    escaped = json.loads(sup.client.call_tool("mcp_test_spawn", {"count": 2, "detach": True}).text)
    pids += children(sup.process.pid)  # the zygote too
    sup.process.kill()
    sup.process.wait(10)
    poll("workers, servers and escaped children to exit", lambda: not any(map(alive, [*pids, *escaped])), 2)


def test_double_forked_children_do_not_escape_a_restart_or_a_killed_worker(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": {**stdio_test_server(), **FAST_RESTARTS}})
    first = json.loads(sup.client.call_tool("mcp_test_spawn", {"count": 2, "detach": True}).text)
    assert all(alive(pid) for pid in first)
    sup.client.restart("test")  # an orderly stop of the worker
    poll("the first escaped children to be killed", lambda: not any(map(alive, first)), 10)
    sup.wait_states(test="ready")
    second = json.loads(sup.client.call_tool("mcp_test_spawn", {"count": 2, "detach": True}).text)
    row = sup.status()["test"]
    os.kill(row.worker_pid, signal.SIGKILL)  # no orderly stop: the supervisor must find them
    poll("the second escaped children to be killed", lambda: not any(map(alive, second)), 10)
    sup.wait_states(test="ready")
    poll("no zombie children", lambda: "Z" not in children(sup.process.pid).values(), 5)
    census(sup, [*first, *second, row.worker_pid, row.server_pid, *all_pids(sup)])


def test_stderr_flood_and_garbage_on_stdout_harm_nothing(start_supervisor: Start) -> None:
    sup = start_supervisor({"noisy": stdio_test_server(), "quiet": stdio_test_server()})
    before = sup.status()["noisy"]
    result = sup.client.call_tool("mcp_noisy_flood_stderr", {"megabytes": 20}, timeout=60)
    assert result.text == "flooded"
    garbage = {"lines": 1000, "huge_bytes": 20_000_000}  # past the 16 MiB line limit
    assert sup.client.call_tool("mcp_noisy_garbage_stdout", garbage, timeout=60).text == "garbage sent"
    assert sup.client.call_tool("mcp_noisy_echo", {"text": "still"}).text == "still"
    assert sup.client.call_tool("mcp_quiet_echo", {"text": "fine"}).text == "fine"
    assert sup.status()["noisy"].worker_pid == before.worker_pid
    poll("the flood's summary line", lambda: "server stderr lines not logged (rate limit)" in sup.log, 5)
    log = sup.log
    assert "dropping it" in log
    assert log.count("not JSON-RPC on stdout") < 50  # 1000 garbage lines, warned about a few times
    assert sup.log_path.stat().st_size < 5_000_000  # 20 MB of stderr did not reach the log
    rss_kb = int(
        next(
            line
            for line in Path(f"/proc/{before.worker_pid}/status").read_text().splitlines()
            if line.startswith("VmRSS")
        ).split()[1]
    )
    assert rss_kb < 200_000, f"worker RSS {rss_kb} kB after the flood"
    census(sup, all_pids(sup))


def test_twenty_concurrent_restarts_make_exactly_one(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server()})
    before = sup.status()["test"].worker_pid
    barrier = threading.Barrier(20)

    def restart() -> None:
        with SupervisorClient(sup.endpoint) as client:
            barrier.wait(10)
            client.restart("test")

    threads = [threading.Thread(target=restart) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    poll("a new worker", lambda: sup.status()["test"].worker_pid not in (None, before), 20)
    sup.wait_states(test="ready")
    assert sup.log.count("server 'test' ready") == 2  # the first start, and one restart
    assert sup.log.count("operator restart of server 'test'\n") == 1
    census(sup, all_pids(sup))


def test_shutdown_drains_calls_in_flight(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server()})
    pids = all_pids(sup)
    outcome: dict[str, object] = {}

    def call() -> None:
        outcome["text"] = sup.client.call_tool("mcp_test_slow", {"seconds": 1.5, "tag": "drain"}).text

    thread = threading.Thread(target=call)
    thread.start()
    poll("the call to be in flight", lambda: "call slow" in sup.log, 10)
    sup.process.send_signal(signal.SIGTERM)
    thread.join(20)
    assert outcome.get("text") == "done drain"
    assert sup.process.wait(20) == 0
    census(sup, pids)


def test_twenty_servers_stop_within_15_s_even_when_some_ignore_sigterm(start_supervisor: Start) -> None:
    servers = {
        f"s{i}": stdio_test_server(**({"TEST_SERVER_IGNORE_SIGTERM": 1} if i % 4 == 0 else {}))
        for i in range(20)
    }
    sup = start_supervisor(servers, log_level="info")
    pids = all_pids(sup)
    started = time.monotonic()
    sup.process.send_signal(signal.SIGTERM)
    sup.process.wait(30)
    took = time.monotonic() - started
    assert took < 15, f"20 servers took {took:.1f} s to stop"
    census(sup, pids)


def test_operator_stop_holds_until_start_and_is_never_a_failure(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server(), "other": stdio_test_server()})
    before = sup.status()
    sup.client.stop("test")
    rows = sup.wait_states(test="stopped")
    # the keeper reports no worker once it has reaped it (and killed what the worker left)
    poll("the stopped worker to be reaped", lambda: sup.status()["test"].worker_pid is None, 15)
    assert not alive(before["test"].worker_pid)
    assert not alive(before["test"].server_pid)
    with pytest.raises(ServerUnavailableError, match="'test' is stopped"):
        sup.client.call_tool("mcp_test_echo", {"text": "x"})
    # the policy never undoes it: still stopped after several heartbeat periods and backoff steps
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        row = sup.status()["test"]
        assert (row.state, row.worker_pid, row.restarts) == ("stopped", None, 0)
        time.sleep(0.2)
    assert rows["other"].worker_pid == before["other"].worker_pid
    sup.client.start("test")
    sup.wait_states(test="ready")
    assert sup.client.call_tool("mcp_test_echo", {"text": "back"}).text == "back"
    assert sup.status()["test"].restarts == 0
    census(sup, [before["test"].worker_pid, before["test"].server_pid, *all_pids(sup)])


def test_restart_types_decide_what_an_exit_means(start_supervisor: Start) -> None:
    sup = start_supervisor(
        {
            "transient": {**stdio_test_server(), "restart": "transient"},
            "temporary": {**stdio_test_server(), "restart": "temporary"},
            "permanent": stdio_test_server(),
        }
    )
    # a transient server that exits cleanly stays stopped; a crash would be restarted
    with pytest.raises(WorkerCrashedError):
        sup.client.call_tool("mcp_transient_crash", {"code": 0})
    row = sup.wait_states(transient="stopped")["transient"]
    assert "server exited with status 0" in (row.last_error or "") and row.restarts == 0
    # a temporary server is never restarted: a crash leaves it failed
    with pytest.raises(WorkerCrashedError):
        sup.client.call_tool("mcp_temporary_crash", {"code": 3})
    assert sup.wait_states(temporary="failed")["temporary"].restarts == 0
    # a permanent server comes back even after a clean exit
    with pytest.raises(WorkerCrashedError):
        sup.client.call_tool("mcp_permanent_crash", {"code": 0})
    assert sup.wait_states(permanent="ready")["permanent"].restarts == 1
    census(sup, all_pids(sup))


def test_replies_from_an_unknown_worker_incarnation_are_dropped(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server(TEST_SERVER_STATE_DIR="{state}")})
    outcome: dict[str, str] = {}

    def call() -> None:
        outcome["text"] = sup.client.call_tool(
            "mcp_test_slow", {"seconds": 1, "tag": "real"}, timeout=10
        ).text

    thread = threading.Thread(target=call)
    thread.start()
    poll("the call to reach the server", (sup.state_dir / "real.started").exists, 10)
    ctx = zmq.Context()
    impostor = ctx.socket(zmq.DEALER)
    impostor.setsockopt(zmq.ROUTING_ID, b"test/1/00000000")  # the right server, not a live incarnation
    impostor.setsockopt(zmq.LINGER, 0)
    impostor.connect(sup.worker_endpoint)
    forged = msgspec.Raw(encode(ToolResult(text="forged")))
    for call_id in range(1, 100):
        impostor.send(encode(InvokeResult(call=call_id, result=forged)))
    thread.join(20)
    impostor.close()
    ctx.term()
    assert outcome.get("text") == "done real"
    census(sup, all_pids(sup))


def test_a_server_that_stops_answering_pings_is_replaced(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": {**stdio_test_server(), "pingInterval": 1}})
    before = sup.status()["test"]
    started = time.monotonic()
    with pytest.raises(WorkerCrashedError, match="did not answer a ping within 1 s"):
        sup.client.call_tool("mcp_test_hang", {}, timeout=30)  # blocks the server's whole event loop
    assert time.monotonic() - started < 2 * 1 + REPLY_MARGIN
    after = sup.wait_states(test="ready")["test"]
    assert after.restarts == 1 and after.server_pid != before.server_pid
    assert not alive(before.server_pid)
    census(sup, [before.worker_pid, before.server_pid, *all_pids(sup)])
