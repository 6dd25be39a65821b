"""Calls made while a server dies and restarts, with real supervisor, worker and server processes.

The server's call fails; every other call is answered by the next server: those made while it
restarts wait for it, and those the worker had written to the dead server's stdin, which it never
read, are sent again (the worker tells which: ``StdioServer.never_read``).
"""

from __future__ import annotations

import array
import fcntl
import os
import signal
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import SupervisorError, WorkerCrashedError
from tests.e2e.harness import SupervisorProcess, alive, call_in_thread, poll, stdio_test_server, wait_started

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]


def _stdin_pipe(server: int, worker: int) -> str:
    """The server's end of the pipe its worker writes requests to (the SDK's server moves it off
    fd 0): a read-only pipe of ``server`` that ``worker`` holds too."""
    held = {os.readlink(fd) for fd in Path(f"/proc/{worker}/fd").iterdir()}
    for fd in Path(f"/proc/{server}/fd").iterdir():
        link = os.readlink(fd)
        flags = Path(f"/proc/{server}/fdinfo/{fd.name}").read_text().split("flags:")[1].split()[0]
        if link.startswith("pipe:") and link in held and int(flags, 8) & os.O_ACCMODE == os.O_RDONLY:
            return str(fd)
    raise AssertionError(f"server {server} reads no pipe of worker {worker}")


def _unread(pipe: str) -> int:
    """How many bytes wait in ``pipe`` (read through a second reader of it, closed at once)."""
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    try:
        unread = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, unread)
        return unread[0]
    finally:
        os.close(fd)  # before any kill: a reader left open would hold the pipe


def test_calls_every_50_ms_through_a_kill_9_of_the_server_lose_only_the_call_in_flight(
    start_supervisor: Start,
) -> None:
    """The call the server had fails, naming the server's death first; every call made while it
    restarts waits for it (within its own deadline) and is answered by the new server."""
    sup = start_supervisor({"test": stdio_test_server(TEST_SERVER_STATE_DIR="{state}")})
    before = sup.status()["test"]
    inflight = call_in_thread(sup, "mcp_test_slow", {"seconds": 60, "tag": "inflight"}, timeout=60)
    wait_started(sup.state_dir, "inflight")
    answers: list[str] = []
    failures: list[SupervisorError] = []  # calls made once the kill was sent that failed
    lost: list[SupervisorError] = []  # calls sent before it: the server may have had one of them
    killed = threading.Event()

    def caller() -> None:
        with SupervisorClient(sup.endpoint) as client:
            i = 0
            while not killed.is_set() or len(answers) < 40:  # on until well past the restart
                before_kill = not killed.is_set()
                try:
                    answers.append(client.call_tool("mcp_test_echo", {"text": f"n{i}"}, timeout=20).text)
                except SupervisorError as exc:
                    (lost if before_kill else failures).append(exc)
                i += 1
                time.sleep(0.05)  # a host calling every 50 ms (pacing, not waiting for a state)

    thread = threading.Thread(target=caller, daemon=True)
    thread.start()
    poll("the first answers", lambda: len(answers) >= 3, 20)
    os.kill(before.server_pid or 0, signal.SIGKILL)
    killed.set()
    thread.join(60)
    assert not thread.is_alive(), "the caller did not finish"
    inflight["thread"].join(10)
    error = inflight.get("error")
    assert isinstance(error, WorkerCrashedError), inflight
    assert "server process was killed by SIGKILL (signal 9); its worker exited with code 3" in str(error)
    assert str(error).index("server process") < str(error).index("worker exited")
    # Not one call made once the server was killed is lost: those the worker wrote to the dying
    # server's stdin were never read, so they wait for the next server as the later ones do.
    assert failures == []
    # A busy machine may have the echo sent just before the kill still in the server: that call was
    # in flight too, and fails as the slow one does; no other call may.
    assert len(lost) <= 1 and all(isinstance(exc, WorkerCrashedError) for exc in lost), lost
    numbers = [int(text[1:]) for text in answers]  # every call answered in order, once, but the lost
    assert len(numbers) >= 40 and numbers == sorted(set(numbers))
    assert numbers[0] == 0 and numbers[-1] + 1 == len(numbers) + len(lost)
    after = sup.status()["test"]
    assert after.restarts == 1 and after.server_pid != before.server_pid


def test_calls_that_reach_a_worker_after_its_server_broke_run_on_the_next_server(
    start_supervisor: Start,
) -> None:
    """A server that closes its stdout and lives on (deaf) ends its worker, which takes a few seconds
    to stop it. Calls that reach the worker meanwhile never reach that server: they wait for the next
    one and are answered by it; only the call the server had fails."""
    sup = start_supervisor(
        {"test": stdio_test_server(TEST_SERVER_STATE_DIR="{state}", TEST_SERVER_CLOSE_STDOUT_TOOL=1)}
    )
    before = sup.status()["test"]
    broken = call_in_thread(sup, "mcp_test_close_stdout", {"tag": "deaf"}, timeout=60)
    poll("the server to close its stdout", (sup.state_dir / "deaf.closed").exists, 20)
    answers: dict[int, str] = {}
    errors: dict[int, SupervisorError] = {}

    def call(i: int) -> None:
        with SupervisorClient(sup.endpoint) as client:
            try:
                answers[i] = client.call_tool("mcp_test_echo", {"text": f"after {i}"}, timeout=30).text
            except SupervisorError as exc:
                errors[i] = exc

    callers = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(3)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(60)
        assert not caller.is_alive(), "a call made while the worker ended did not finish"
    broken["thread"].join(30)
    assert isinstance(broken.get("error"), WorkerCrashedError), broken
    assert "closed during a call to 'close_stdout'" in str(broken["error"])
    assert errors == {}
    assert answers == {i: f"after {i}" for i in range(3)}
    after = sup.status()["test"]
    assert after.restarts == 1 and after.server_pid != before.server_pid


def test_calls_queued_behind_a_stopped_server_are_answered_by_the_next_one_when_it_is_killed(
    start_supervisor: Start,
) -> None:
    """A server that stops reading (SIGSTOP) and is then killed had only the call it was serving:
    the three calls still in its stdin pipe never reached it, and the next server answers them."""
    sup = start_supervisor({"test": stdio_test_server(TEST_SERVER_STATE_DIR="{state}")})
    before = sup.status()["test"]
    pid = before.server_pid
    assert pid is not None and before.worker_pid is not None
    pipe = _stdin_pipe(pid, before.worker_pid)
    inflight = call_in_thread(sup, "mcp_test_slow", {"seconds": 60, "tag": "inflight"}, timeout=60)
    wait_started(sup.state_dir, "inflight")
    os.kill(pid, signal.SIGSTOP)
    queued = []
    for i in range(3):
        unread = _unread(pipe)
        queued.append(call_in_thread(sup, "mcp_test_echo", {"text": f"queued {i}"}, timeout=60))
        poll(f"call {i} to wait in the server's stdin", lambda: _unread(pipe) > unread, 20)  # noqa: B023
    os.kill(pid, signal.SIGKILL)
    for outcome in [inflight, *queued]:
        thread = outcome["thread"]
        assert isinstance(thread, threading.Thread)
        thread.join(60)
        assert not thread.is_alive(), "a call did not finish"
    assert isinstance(inflight.get("error"), WorkerCrashedError), inflight
    texts = [getattr(outcome.get("result"), "text", outcome.get("error")) for outcome in queued]
    assert texts == [f"queued {i}" for i in range(3)]
    after = sup.status()["test"]
    assert after.restarts == 1 and after.server_pid != pid


def test_calls_queued_at_a_frozen_worker_whose_server_dies_are_answered_by_the_next_server(
    start_supervisor: Start,
) -> None:
    """The worker is stopped (SIGSTOP) while calls reach it, and its server is killed meanwhile: when
    the worker runs again it ends, and the calls it never read go to the next server."""
    sup = start_supervisor({"test": stdio_test_server()})
    before = sup.status()["test"]
    assert before.worker_pid is not None and before.server_pid is not None
    os.kill(before.worker_pid, signal.SIGSTOP)
    try:
        queued = [call_in_thread(sup, "mcp_test_echo", {"text": f"queued {i}"}, timeout=60) for i in range(3)]
        poll("the calls to be in flight", lambda: sup.client.front_stats().in_flight >= 3, 20)
        os.kill(before.server_pid, signal.SIGKILL)
        # Dead, its files closed, before the worker runs: a server still dying may yet read (into the
        # kernel's copy for its blocked reader) what the worker writes, and then it may have run.
        poll("the server to die", lambda: not alive(before.server_pid), 20)
    finally:
        os.kill(before.worker_pid, signal.SIGCONT)
    for outcome in queued:
        thread = outcome["thread"]
        assert isinstance(thread, threading.Thread)
        thread.join(60)
        assert not thread.is_alive(), "a call did not finish"
    texts = [getattr(outcome.get("result"), "text", outcome.get("error")) for outcome in queued]
    assert texts == [f"queued {i}" for i in range(3)]
    after = sup.status()["test"]
    assert after.restarts == 1 and after.worker_pid != before.worker_pid
