"""Crashes, restarts and shutdown, with real supervisor, worker and server processes."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import (
    ServerUnavailableError,
    SupervisorError,
    ToolTimeoutError,
    WorkerCrashedError,
)
from tests.e2e.harness import SupervisorProcess, alive, call_in_thread, poll, stdio_test_server, wait_started

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]


def test_kill_9_of_the_server_fails_inflight_calls_at_once_and_recovers(start_supervisor: Start) -> None:
    sup = start_supervisor(
        {"test": stdio_test_server(TEST_SERVER_STATE_DIR="{state}"), "other": stdio_test_server()}
    )
    before = sup.status()
    call = call_in_thread(sup, "mcp_test_slow", {"seconds": 60, "tag": "inflight"}, timeout=60)
    wait_started(sup.state_dir, "inflight")
    killed_at = time.monotonic()
    os.kill(before["test"].server_pid, signal.SIGKILL)
    call["thread"].join(10)
    assert isinstance(call.get("error"), WorkerCrashedError), call
    assert call["at"] - killed_at < 5  # at once, not at the 60 s deadline
    assert "test" in str(call["error"])
    after = sup.wait_states(test="ready")
    assert after["test"].restarts == 1
    assert after["test"].server_pid != before["test"].server_pid
    assert sup.client.call_tool("mcp_test_echo", {"text": "back"}, timeout=10).text == "back"
    # the other server never noticed
    assert after["other"].worker_pid == before["other"].worker_pid
    assert after["other"].restarts == 0


def test_with_retry_idempotent_a_read_only_call_in_flight_survives_kill_9_and_others_do_not(
    start_supervisor: Start,
) -> None:
    """``retryIdempotent``: the calls in flight to a tool annotated readOnlyHint run once more on the new
    server (within their deadline); a tool without the hint still fails WORKER_CRASHED (running it
    twice might do harm)."""
    env = {"TEST_SERVER_STATE_DIR": "{state}", "TEST_SERVER_READ_ONLY": "slow"}
    sup = start_supervisor({"test": {**stdio_test_server(**env), "retryIdempotent": True}})
    [slow] = [tool for tool in sup.client.list_tools() if tool.name == "mcp_test_slow"]
    assert slow.annotations == {"readOnlyHint": True}
    before = sup.status()["test"]
    read_only = call_in_thread(sup, "mcp_test_slow", {"seconds": 3, "tag": "again"}, timeout=60)
    wait_started(sup.state_dir, "again")
    other = call_in_thread(sup, "mcp_test_crash", {"code": 3}, timeout=60)  # not annotated: not retried
    read_only["thread"].join(60)
    other["thread"].join(60)
    result = read_only.get("result")
    assert result is not None and result.text == "done again", read_only  # type: ignore[attr-defined]
    assert isinstance(other.get("error"), WorkerCrashedError), other
    after = sup.status()["test"]
    assert after.restarts >= 1 and after.server_pid != before.server_pid


def test_calls_waiting_for_a_server_that_fails_to_start_fail_at_once_with_why(
    start_supervisor: Start,
) -> None:
    """A server that keeps failing ends ``failed``: the calls that waited for it fail then, UNAVAILABLE
    and saying why, not at their deadline."""
    broken = {"command": sys.executable, "args": ["-c", "import sys; sys.exit(7)"]}
    sup = start_supervisor(
        {"broken": {**broken, "maxRestarts": 2, "backoffInitial": 0.3}, "test": stdio_test_server()},
        wait=False,
    )
    sup.wait_states(test="ready")
    with pytest.raises(ServerUnavailableError, match="'broken' is failed"):
        sup.client.call_tool("mcp_broken_anything", {}, timeout=120)
    assert sup.status()["broken"].state == "failed"
    with pytest.raises(ServerUnavailableError, match="'broken' is failed"):  # failed: answered at once
        sup.client.call_tool("mcp_broken_anything", {}, timeout=120)


def test_kill_9_of_the_worker_recovers_and_takes_its_server_with_it(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server(), "other": stdio_test_server()})
    before = sup.status()
    os.kill(before["test"].worker_pid, signal.SIGKILL)
    poll("the orphaned server to be killed", lambda: not alive(before["test"].server_pid), 10)
    after = sup.wait_states(test="ready", other="ready")
    assert after["test"].worker_pid != before["test"].worker_pid
    assert "SIGKILL" in (sup.log)
    assert sup.client.call_tool("mcp_test_echo", {"text": "back"}, timeout=10).text == "back"
    assert after["other"].worker_pid == before["other"].worker_pid


def test_crash_mid_call_reports_the_server_stderr_tail(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server()})
    with pytest.raises(WorkerCrashedError, match="crashing with 7"):
        sup.client.call_tool("mcp_test_crash", {"code": 7}, timeout=10)
    assert "crashing with 7" in (sup.wait_states(test="ready")["test"].last_error or "")
    assert sup.client.call_tool("mcp_test_echo", {"text": "back"}, timeout=10).text == "back"


def test_server_that_keeps_crashing_ends_failed_and_calls_fail_at_once(start_supervisor: Start) -> None:
    exits = "import sys; sys.stderr.write('boom: no API key\\n'); sys.exit(1)"
    sup = start_supervisor(
        {
            "broken": {"command": "mcp-no-such-command-anywhere"},
            "exits": {"command": sys.executable, "args": ["-c", exits]},
            "test": stdio_test_server(),
        },
        wait=False,
    )
    rows = sup.wait_states(timeout=60, broken="failed", exits="failed", test="ready")
    assert rows["broken"].restarts == 5
    assert "not found" in (rows["broken"].last_error or "")
    assert "boom: no API key" in (rows["exits"].last_error or "")
    assert rows["broken"].worker_pid is None
    started = time.monotonic()
    with pytest.raises(ServerUnavailableError, match="broken"):
        sup.client.call_tool("mcp_broken_anything", {})
    assert time.monotonic() - started < 1
    assert sup.client.call_tool("mcp_test_echo", {"text": "fine"}).text == "fine"
    waited = subprocess.run(
        [sys.executable, "-m", "supervisor", "wait", "--timeout", "10", "--endpoint", sup.endpoint],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert waited.returncode == 1 and "broken: " in waited.stderr
    # an operator's restart resets the policy: it tries again (and fails again)
    sup.client.restart("broken")
    poll("the restarted server to be tried again", lambda: sup.status()["broken"].state != "failed", 10)


def test_slow_server_never_delays_the_others(start_supervisor: Start) -> None:
    sup = start_supervisor(
        {"slow": stdio_test_server(TEST_SERVER_INIT_DELAY=30), "fast": stdio_test_server()}, wait=False
    )
    rows = sup.wait_states(fast="ready")
    assert rows["slow"].state == "starting"
    assert sup.client.call_tool("mcp_fast_echo", {"text": "now"}).text == "now"
    # a call for a server still starting waits for it, within its own deadline, and says why it timed out
    with pytest.raises(ToolTimeoutError, match="'slow' is starting: not ready within the deadline"):
        sup.client.call_tool("mcp_slow_echo", {"text": "now"}, timeout=0.5)
    assert sup.client.call_tool("mcp_fast_echo", {"text": "still"}).text == "still"


def test_restart_replaces_one_worker_and_the_others_never_notice(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server(), "other": stdio_test_server()})
    before = sup.status()
    sup.client.restart("test")
    poll("a new worker", lambda: sup.status()["test"].worker_pid not in (None, before["test"].worker_pid), 20)
    # while it restarts, the other server answers
    assert sup.client.call_tool("mcp_other_echo", {"text": "during"}).text == "during"
    after = sup.wait_states(test="ready")
    assert not alive(before["test"].worker_pid)
    assert not alive(before["test"].server_pid)
    assert after["test"].restarts == 0  # an operator's restart is not a failure
    assert after["other"].worker_pid == before["other"].worker_pid
    assert sup.client.call_tool("mcp_test_echo", {"text": "after"}).text == "after"
    with pytest.raises(SupervisorError, match="no server named 'nobody'"):
        sup.client.restart("nobody")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_run_leaves_no_worker_or_server_behind(
    start_supervisor: Start, sig: signal.Signals
) -> None:
    sup = start_supervisor({"test": stdio_test_server(), "time": {"command": "mcp-server-time"}})
    pids = [pid for row in sup.status().values() for pid in (row.worker_pid, row.server_pid)]
    assert all(alive(pid) for pid in pids)
    assert sup.stop(sig) == 0
    assert [pid for pid in pids if alive(pid)] == []
    assert not Path(sup.endpoint.removeprefix("ipc://")).exists()


def test_a_second_supervisor_on_the_same_endpoint_is_refused(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server()})
    second = start_supervisor({}, wait=False, endpoint=sup.endpoint)
    assert second.process.wait(30) == 1
    second.stop()
    assert "already running" in second.log
    assert sup.client.call_tool("mcp_test_echo", {"text": "still"}).text == "still"


def test_kill_9_of_the_supervisor_leaves_no_worker_or_server_behind(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server(), "time": {"command": "mcp-server-time"}})
    pids = [pid for row in sup.status().values() for pid in (row.worker_pid, row.server_pid)]
    sup.process.kill()
    sup.process.wait(10)
    poll("every worker and server to exit", lambda: not any(alive(pid) for pid in pids), 10)


async def test_after_kill_9_of_the_supervisor_calls_without_a_timeout_are_unreachable_in_seconds(
    start_supervisor: Start,
) -> None:
    """Its socket file stays and ZeroMQ would queue a request for ever: a call in flight, a new call
    (blocking stub, async stub, the CLI), none with a timeout, each ends UNREACHABLE within seconds
    (the stubs ping a supervisor that falls silent during a long wait), not at the hour."""
    from supervisor.client.aio import AsyncSupervisorClient
    from supervisor.client.errors import SupervisorUnreachableError

    sup = start_supervisor({"test": stdio_test_server(TEST_SERVER_STATE_DIR="{state}")})
    inflight = call_in_thread(sup, "mcp_test_slow", {"seconds": 3000, "tag": "stale"}, timeout=None)
    wait_started(sup.state_dir, "stale")
    sup.process.kill()
    sup.process.wait(10)
    # After the kill, all at once: each finds out on its own, in seconds.
    fresh = call_in_thread(sup, "mcp_test_echo", {"text": "x"}, timeout=None)
    cli: list[subprocess.CompletedProcess[str]] = []

    async def by_the_async_stub() -> None:
        async with AsyncSupervisorClient(sup.endpoint) as client:
            with pytest.raises(SupervisorUnreachableError, match="stopped answering"):
                await client.call_tool("mcp_test_echo", {"text": "x"})

    async def by_the_cli() -> None:
        argv = [sys.executable, "-m", "supervisor", "call", "mcp_test_echo", "{}", "--endpoint", sup.endpoint]
        run = functools.partial(subprocess.run, argv, capture_output=True, text=True, timeout=60, check=False)
        cli.append(await trio.to_thread.run_sync(run))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(by_the_async_stub)
            nursery.start_soon(by_the_cli)
    inflight["thread"].join(60)
    assert isinstance(inflight.get("error"), SupervisorUnreachableError), inflight
    assert "stopped answering" in str(inflight["error"])
    fresh["thread"].join(60)
    assert isinstance(fresh.get("error"), SupervisorUnreachableError), fresh
    [done] = cli
    assert done.returncode == 3, done.stderr
    assert "stopped answering" in done.stderr


def test_invalid_entries_are_skipped_and_the_rest_start(start_supervisor: Start) -> None:
    sup = start_supervisor(
        {
            "typo": {"comand": "mcp-server-time"},
            "needs_var": {"command": "mcp-server-time", "env": {"TOKEN": "${MCP_SUPERVISOR_UNSET_VARIABLE}"}},
            "test": stdio_test_server(),
        }
    )
    assert set(sup.status()) == {"test"}
    assert "server 'typo': unknown field 'comand'" in sup.log
    assert "MCP_SUPERVISOR_UNSET_VARIABLE" in sup.log
    assert sup.client.call_tool("mcp_test_echo", {"text": "fine"}).text == "fine"


def test_disabled_server_is_stopped_until_an_operator_starts_it(start_supervisor: Start) -> None:
    sup = start_supervisor({"later": {**stdio_test_server(), "disabled": True}, "test": stdio_test_server()})
    rows = sup.status()
    assert rows["later"].state == "stopped" and rows["later"].worker_pid is None
    with pytest.raises(ServerUnavailableError, match="'later' is stopped"):
        sup.client.call_tool("mcp_later_echo", {"text": "x"})
    sup.client.restart("later")
    sup.wait_states(later="ready")
    assert sup.client.call_tool("mcp_later_echo", {"text": "x"}).text == "x"


def test_shutdown_takes_no_exiting_worker_for_an_escaped_process(start_supervisor: Start) -> None:
    """Workers exit together at shutdown; one keeper's sweep for escaped processes must not take another
    keeper's exiting worker (its /proc cmdline already empty) for one and SIGKILL it."""
    sup = start_supervisor({f"s{i}": stdio_test_server() for i in range(8)})
    stop = threading.Event()
    client = SupervisorClient(sup.endpoint, request_timeout=5.0)  # the harness closes its own at stop

    def caller(name: str) -> None:
        while not stop.is_set():
            try:
                client.call_tool(name, {"text": "hi"}, timeout=5)
            except SupervisorError:
                return  # the supervisor is shutting down

    threads = [threading.Thread(target=caller, args=(f"mcp_s{i % 8}_echo",)) for i in range(32)]
    for thread in threads:
        thread.start()
    try:
        poll("calls on every server", lambda: all(r.state == "ready" for r in sup.status().values()), 5)
        assert sup.stop(signal.SIGINT) == 0
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
        client.close()
    assert "escaped their server's process group" not in sup.log
