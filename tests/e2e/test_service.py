"""The supervisor under a service manager: the systemd notify protocol with a real supervisor process.

Each test binds the service manager's end, an ``AF_UNIX`` datagram socket, and starts
``mcp-supervisor run`` with ``$NOTIFY_SOCKET`` pointing at it, then reads what it is told: ``READY=1``
once every server had its first chance, ``WATCHDOG=1`` pings, ``STATUS=`` lines, ``RELOADING=1`` /
``READY=1`` around a reload and ``STOPPING=1`` on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import START_TIMEOUT, STOP_TIMEOUT, SupervisorProcess, stdio_test_server

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
WATCHDOG_USEC = 200_000  # systemd's WatchdogSec in microseconds: pings every 0.1 s
SLOW_START = 3  # seconds the slow server sleeps before it serves


class Message(dict[str, str]):
    """One notification: its ``KEY=VALUE`` lines, and when it came (``time.monotonic``)."""

    def __init__(self, data: bytes) -> None:
        super().__init__(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
        self.at = time.monotonic()


class ServiceManager:
    """The service manager's end of ``$NOTIFY_SOCKET``: a thread reads every message as it comes (as
    systemd does: a full queue would refuse the supervisor's sends) and keeps them, in order."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind("\0" + address[1:] if address.startswith("@") else address)
        self.socket.settimeout(0.1)
        self.messages: list[Message] = []
        self.supervisor: SupervisorProcess | None = None  # the one notifying: waits end if it exits
        self._came = threading.Condition()
        self._read = 0  # messages that ``wait_for`` has looked at
        self._closed = False
        self._reader = threading.Thread(target=self._receive, daemon=True)
        self._reader.start()

    def _receive(self) -> None:
        while not self._closed:
            try:
                data = self.socket.recv(4096)
            except TimeoutError:
                continue
            with self._came:
                self.messages.append(Message(data))
                self._came.notify_all()

    def wait_for(
        self, what: str, check: Callable[[Message], bool], timeout: float = START_TIMEOUT
    ) -> Message:
        """The first message not looked at yet that ``check`` accepts; fail naming ``what`` after
        ``timeout`` s, or at once if the supervisor exits."""
        deadline = time.monotonic() + timeout
        with self._came:
            while True:
                while self._read < len(self.messages):
                    message = self.messages[self._read]
                    self._read += 1
                    if check(message):
                        return message
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = "\n".join(str(dict(m)) for m in self.messages[-20:])
                    pytest.fail(f"no message {what} within {timeout} s; the last ones:\n{seen}")
                sup = self.supervisor
                if sup is not None and sup.process.poll() is not None:
                    pytest.fail(f"the supervisor exited ({sup.process.returncode}) before {what}:\n{sup.log}")
                self._came.wait(min(left, 0.5))

    def gather(self, seconds: float) -> list[Message]:
        """Every message of the next ``seconds`` seconds (and those not looked at yet)."""
        time.sleep(seconds)  # a window to count messages in, not a wait for a state
        with self._came:
            new, self._read = self.messages[self._read :], len(self.messages)
        return new

    def close(self) -> None:
        self._closed = True
        self._reader.join(5)
        self.socket.close()


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[ServiceManager]:
    end = ServiceManager(str(tmp_path / "notify.sock"))
    yield end
    end.close()


def start_notifying(
    start: Start, manager: ServiceManager, servers: dict[str, Any], **kwargs: Any
) -> SupervisorProcess:
    """A supervisor started with ``start_supervisor``'s ``kwargs``, telling ``manager``."""
    manager.supervisor = sup = start(servers, **kwargs)
    return sup


def service_env(manager: ServiceManager, **extra: str) -> dict[str, str]:
    return {"NOTIFY_SOCKET": manager.address, "WATCHDOG_USEC": str(WATCHDOG_USEC), **extra}


def sigterm_and_wait(sup: SupervisorProcess, *, signalled: bool = False) -> int:
    """Send SIGTERM (unless ``signalled``: sent already), wait (bounded) for the exit; its status."""
    if not signalled:
        sup.process.send_signal(signal.SIGTERM)
    try:
        sup.process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the supervisor did not exit within {STOP_TIMEOUT} s of SIGTERM")
    return sup.stop()  # it has exited: no signal, the log closed


def ready(message: Message) -> bool:
    return message.get("READY") == "1"


def test_ready_comes_once_every_server_had_its_first_chance_then_watchdog_status_reload_stopping(
    start_supervisor: Start, manager: ServiceManager
) -> None:
    servers: dict[str, Any] = {
        "fast": stdio_test_server(),
        "broken": {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]},
        "slow": stdio_test_server(TEST_SERVER_INIT_DELAY=SLOW_START),
        "hung": stdio_test_server(TEST_SERVER_HANG_INIT=1) | {"startTimeout": 2},
        "off": stdio_test_server() | {"disabled": True},
    }
    started = time.monotonic()
    sup = start_notifying(start_supervisor, manager, servers, wait=False, env=service_env(manager))

    first = manager.wait_for("READY=1", ready)
    status = sup.status()
    # No READY before the slow server was ready and the hung one had been given up on once.
    assert first.at - started >= SLOW_START
    assert status["fast"].state == "ready"
    assert status["slow"].state == "ready"
    assert status["broken"].restarts >= 1 or status["broken"].state == "failed"
    assert status["hung"].restarts >= 1
    assert first["STATUS"].startswith("5 servers: 2 ready, ")
    assert "1 stopped" in first["STATUS"]
    assert "WATCHDOG" not in first

    # Pings every WATCHDOG_USEC/2 = 0.1 s: about 20 in 2 s.
    pings = [m for m in manager.gather(2.0) if m.get("WATCHDOG") == "1"]
    assert 5 <= len(pings) <= 60, len(pings)

    # A state change is told in a STATUS line.
    sup.client.stop("fast")
    manager.wait_for("STATUS with fast stopped", lambda m: "2 stopped" in m.get("STATUS", ""), 10)

    assert [m for m in manager.messages if ready(m)] == [first]  # said once

    # A reload (SIGHUP): RELOADING=1 with the monotonic clock, then READY=1.
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    sup.process.send_signal(signal.SIGHUP)
    reloading = manager.wait_for("RELOADING=1", lambda m: m.get("RELOADING") == "1", 30)
    assert before <= int(reloading["MONOTONIC_USEC"]) <= time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert manager.wait_for("READY=1 after the reload", ready, 30)["STATUS"].startswith("5 servers: ")

    # A file the reload rejects still ends the reload, saying so.
    sup.config.write_text("{not json")
    sup.process.send_signal(signal.SIGHUP)
    manager.wait_for("RELOADING=1", lambda m: m.get("RELOADING") == "1", 30)
    rejected = manager.wait_for("READY=1 after the rejected reload", ready, 30)
    assert rejected["STATUS"].startswith("reload rejected (see the log); 5 servers: ")

    # SIGTERM: STOPPING=1 when draining starts, and a clean exit.
    sup.process.send_signal(signal.SIGTERM)
    stopping = manager.wait_for("STOPPING=1", lambda m: m.get("STOPPING") == "1", STOP_TIMEOUT)
    assert stopping["STATUS"].startswith("stopping; ")
    assert sigterm_and_wait(sup, signalled=True) == 0
    assert not [m for m in manager.messages if ready(m) and m.at > stopping.at]


def test_workers_do_not_inherit_what_systemd_told_the_supervisor(
    start_supervisor: Start, manager: ServiceManager
) -> None:
    sup = start_notifying(start_supervisor, manager, {"echo": stdio_test_server()}, env=service_env(manager))
    manager.wait_for("READY=1", ready)
    worker = sup.status()["echo"].worker_pid
    assert worker is not None
    names = {entry.split(b"=", 1)[0] for entry in Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")}
    assert not names & {b"NOTIFY_SOCKET", b"WATCHDOG_USEC", b"WATCHDOG_PID"}
    assert sigterm_and_wait(sup) == 0


def test_an_abstract_socket_with_an_empty_config_is_told_ready_at_once_and_stopping_on_shutdown(
    start_supervisor: Start, tmp_path: Path
) -> None:
    manager = ServiceManager(f"@mcp-supervisor-test-{os.getpid()}-{tmp_path.name}")
    try:
        sup = start_notifying(
            start_supervisor, manager, {}, wait=False, env={"NOTIFY_SOCKET": manager.address}
        )
        first = manager.wait_for("READY=1", ready)
        assert first["STATUS"] == "0 servers"
        assert not [m for m in manager.gather(0.5) if "WATCHDOG" in m]  # no WATCHDOG_USEC: no pings
        sup.client.shutdown()  # `mcp-supervisor shutdown`: stops as SIGTERM does
        assert manager.wait_for("STOPPING=1", lambda m: m.get("STOPPING") == "1", STOP_TIMEOUT)
        assert sigterm_and_wait(sup, signalled=True) == 0
    finally:
        manager.close()


def test_watchdog_pid_of_another_process_means_no_pings(
    start_supervisor: Start, manager: ServiceManager
) -> None:
    sup = start_notifying(
        start_supervisor, manager, {}, wait=False, env=service_env(manager, WATCHDOG_PID=str(os.getpid()))
    )
    manager.wait_for("READY=1", ready)
    assert not [m for m in manager.gather(1.5) if "WATCHDOG" in m]  # 15 pings if it were ours
    assert sigterm_and_wait(sup) == 0


@pytest.mark.parametrize(
    ("env", "warning"),
    [
        ({"WATCHDOG_USEC": "soon"}, "WATCHDOG_USEC='soon' is not a positive integer"),
        ({"WATCHDOG_USEC": "200000", "WATCHDOG_PID": "me"}, "WATCHDOG_PID='me' is not a positive integer"),
    ],
)
def test_garbage_watchdog_variables_are_said_and_the_rest_works(
    start_supervisor: Start, manager: ServiceManager, env: dict[str, str], warning: str
) -> None:
    sup = start_notifying(
        start_supervisor,
        manager,
        {"echo": stdio_test_server()},
        env={"NOTIFY_SOCKET": manager.address, **env},
    )
    assert manager.wait_for("READY=1", ready)["STATUS"] == "1 server: 1 ready"
    assert not [m for m in manager.gather(0.5) if "WATCHDOG" in m]
    assert warning in sup.log
    assert sigterm_and_wait(sup) == 0


@pytest.mark.parametrize("address", ["{tmp}/no/such/notify.sock", "relative/notify.sock", "@"])
def test_a_notify_socket_that_cannot_be_used_is_said_once_and_the_supervisor_runs(
    start_supervisor: Start, tmp_path: Path, address: str
) -> None:
    env = {"NOTIFY_SOCKET": address.replace("{tmp}", str(tmp_path)), "WATCHDOG_USEC": str(WATCHDOG_USEC)}
    sup = start_supervisor({"echo": stdio_test_server()}, env=env)  # waits until ready
    assert sup.client.call_tool("mcp_echo_echo", {"text": "still here"}, timeout=10).text == "still here"
    sup.client.stop("echo")  # a state change: a STATUS the socket cannot take
    sup.wait_states(echo="stopped")
    assert sigterm_and_wait(sup) == 0
    said = [line for line in sup.log.splitlines() if "notif" in line and "systemd" in line]
    assert len(said) == 1, said
