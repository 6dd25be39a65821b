"""The systemd notify protocol (``supervisor.ops.sdnotify``) and what the service says when
(``supervisor.ops.service``), on a fake supervisor and trio's virtual clock; the datagrams go through a
real ``AF_UNIX`` socket bound by the test."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
import trio.testing

from supervisor.config.restart_policy import RestartPolicy
from supervisor.ops.sdnotify import Notifier, watchdog_interval
from supervisor.ops.service import READY_MARGIN, STATUS_INTERVAL, Service, status_line
from supervisor.protocol import Event, RegistryVersion, StateChanged, WorkerState


class Receiver:
    """The service manager's end: a datagram socket read without waiting."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind("\0" + address[1:] if address.startswith("@") else address)
        self.socket.setblocking(False)

    def take(self) -> list[dict[str, str]]:
        """Every message sent so far and not taken yet, as ``KEY: VALUE``."""
        messages: list[dict[str, str]] = []
        while True:
            try:
                data = self.socket.recv(4096)
            except BlockingIOError:
                return messages
            messages.append(dict(line.split("=", 1) for line in data.decode().splitlines()))


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    end = Receiver(str(tmp_path / "notify.sock"))
    yield end
    end.socket.close()


# ------------------------------------------------------------------ the protocol


def test_a_message_is_one_datagram_of_single_lines(receiver: Receiver) -> None:
    notifier = Notifier(receiver.address)
    assert notifier.send("READY=1", "STATUS=two\nlines")
    assert receiver.socket.recv(4096) == b"READY=1\nSTATUS=two lines"
    notifier.close()
    assert not notifier.send("WATCHDOG=1")  # closed: nothing, no error


def test_an_address_starting_with_at_is_an_abstract_socket(tmp_path: Path) -> None:
    end = Receiver(f"@mcp-supervisor-unit-{os.getpid()}-{tmp_path.name}")
    try:
        notifier = Notifier(end.address)
        assert notifier.send("READY=1")
        assert end.take() == [{"READY": "1"}]
        notifier.close()
    finally:
        end.socket.close()


def test_a_socket_that_is_not_there_is_said_once_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = Notifier(str(tmp_path / "nobody-here.sock"))
    with caplog.at_level(logging.WARNING, logger="mcp_supervisor"):
        assert not notifier.send("READY=1")
        assert not notifier.send("WATCHDOG=1")
    assert len(caplog.records) == 1
    assert "cannot notify systemd" in caplog.records[0].getMessage()
    assert "nobody-here.sock" in caplog.records[0].getMessage()
    notifier.close()


@pytest.mark.parametrize("address", ["relative/notify.sock", "@", "vsock:2:1234", "notify"])
def test_an_address_that_is_neither_path_nor_abstract_gives_no_notifier(
    address: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="mcp_supervisor"):
        assert Notifier.from_environ({"NOTIFY_SOCKET": address}) is None
    assert f"NOTIFY_SOCKET={address!r} is neither a path nor an abstract socket name" in caplog.text


def test_no_notify_socket_no_notifier() -> None:
    assert Notifier.from_environ({}) is None
    assert Notifier.from_environ({"NOTIFY_SOCKET": ""}) is None


@pytest.mark.parametrize(
    ("env", "interval"),
    [
        ({}, None),
        ({"WATCHDOG_USEC": "200000"}, 0.1),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4242"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4243"}, None),  # another process pings
        ({"WATCHDOG_PID": "4242"}, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec_for_our_pid(
    env: dict[str, str], interval: float | None
) -> None:
    assert watchdog_interval(env, pid=4242) == interval


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"WATCHDOG_USEC": "soon"}, "WATCHDOG_USEC='soon'"),
        ({"WATCHDOG_USEC": "0"}, "WATCHDOG_USEC='0'"),
        ({"WATCHDOG_USEC": "-5"}, "WATCHDOG_USEC='-5'"),
        ({"WATCHDOG_USEC": "1e6"}, "WATCHDOG_USEC='1e6'"),
        ({"WATCHDOG_USEC": "200000", "WATCHDOG_PID": "me"}, "WATCHDOG_PID='me'"),
    ],
)
def test_garbage_watchdog_variables_mean_no_pings_and_say_which(
    env: dict[str, str], named: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="mcp_supervisor"):
        assert watchdog_interval(env, pid=4242) is None
    assert f"{named} is not a positive integer" in caplog.text


def test_status_line_counts_states_in_a_fixed_order() -> None:
    assert status_line([]) == "0 servers"
    assert status_line(["ready"]) == "1 server: 1 ready"
    states: list[WorkerState] = [
        "stopped",
        "failed",
        "ready",
        "starting",
        "ready",
        "needs-login",
        "restarting",
    ]
    assert status_line(states) == (
        "7 servers: 2 ready, 1 starting, 1 restarting, 1 needs-login, 1 failed, 1 stopped"
    )


# ------------------------------------------------------------------ the service


@dataclass
class FakeSpec:
    disabled: bool = False
    policy: RestartPolicy = field(default_factory=RestartPolicy)


@dataclass
class FakeServer:
    name: str
    state: WorkerState = "starting"
    spec: FakeSpec = field(default_factory=FakeSpec)


class FakeSupervisor:
    """Servers whose states the test changes, and the events it publishes of it."""

    def __init__(self, *servers: FakeServer) -> None:
        self.servers = {server.name: server for server in servers}
        self.listeners: list[Callable[[Event], None]] = []
        self.watcher: Service | None = None

    def watch_events(self, listener: Callable[[Event], None]) -> None:
        self.listeners.append(listener)

    def watch_reloads(self, watcher: Service) -> None:
        self.watcher = watcher

    def change(self, name: str, state: WorkerState) -> None:
        server = self.servers[name]
        previous, server.state = server.state, state
        for listener in self.listeners:
            listener(RegistryVersion(version=1))  # published every second: nothing to say
            listener(StateChanged(server=name, state=state, previous=previous))


def server(name: str, start_timeout: float = 30.0, disabled: bool = False) -> FakeServer:
    policy = RestartPolicy(start_timeout=start_timeout)
    return FakeServer(name, "stopped" if disabled else "starting", FakeSpec(disabled, policy))


def readies(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    return [message for message in messages if message.get("READY") == "1"]


async def test_ready_waits_until_every_server_had_its_first_chance(
    receiver: Receiver, autojump_clock: trio.testing.MockClock
) -> None:
    sup = FakeSupervisor(server("a"), server("b"), server("c"), server("off", disabled=True))
    service = Service(Notifier(receiver.address), sup, watchdog=None)
    assert sup.watcher is service
    assert sup.listeners == [service.event]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.run)
        await trio.sleep(1)
        sup.change("a", "ready")
        sup.change("b", "restarting")  # its first start failed: that was its chance
        await trio.sleep(1)
        assert not readies(receiver.take())
        assert not service.ready
        sup.change("b", "starting")  # starting again does not count twice
        sup.change("c", "failed")
        await trio.testing.wait_all_tasks_blocked()
        assert service.ready
        assert readies(receiver.take()) == [
            {"READY": "1", "STATUS": "4 servers: 1 ready, 1 starting, 1 failed, 1 stopped"}
        ]
        nursery.cancel_scope.cancel()


async def test_a_first_start_that_hangs_holds_ready_back_for_its_start_timeout_at_most(
    receiver: Receiver, autojump_clock: trio.testing.MockClock
) -> None:
    sup = FakeSupervisor(server("quick", start_timeout=5), server("stuck", start_timeout=20))
    service = Service(Notifier(receiver.address), sup, watchdog=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.run)
        sup.change("quick", "ready")
        await trio.sleep(20 + READY_MARGIN - 0.01)
        assert not service.ready
        await trio.sleep(0.02)
        assert service.ready
        assert readies(receiver.take()) == [{"READY": "1", "STATUS": "2 servers: 1 ready, 1 starting"}]
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("servers", [(), (server("off", disabled=True),)])
async def test_nothing_to_start_is_ready_at_once(
    receiver: Receiver, autojump_clock: trio.testing.MockClock, servers: tuple[FakeServer, ...]
) -> None:
    service = Service(Notifier(receiver.address), FakeSupervisor(*servers), watchdog=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.run)
        await trio.testing.wait_all_tasks_blocked()
        assert service.ready
        assert trio.current_time() == 0
        nursery.cancel_scope.cancel()


async def test_watchdog_pings_every_interval_from_the_start(
    receiver: Receiver, autojump_clock: trio.testing.MockClock
) -> None:
    service = Service(Notifier(receiver.address), FakeSupervisor(server("a")), watchdog=0.1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.run)
        await trio.sleep(1.05)
        pings = [message for message in receiver.take() if message == {"WATCHDOG": "1"}]
        assert len(pings) == 11  # at 0, 0.1, ..., 1.0
        nursery.cancel_scope.cancel()


async def test_status_follows_state_changes_at_most_once_a_second(
    receiver: Receiver, autojump_clock: trio.testing.MockClock
) -> None:
    sup = FakeSupervisor(server("a"))
    service = Service(Notifier(receiver.address), sup, watchdog=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.run)
        sup.change("a", "ready")
        await trio.sleep(0.1)
        receiver.take()  # READY, and the first STATUS
        for state in ("restarting", "starting", "ready", "restarting", "starting"):
            sup.change("a", state)
        await trio.sleep(STATUS_INTERVAL - 0.2)
        assert receiver.take() == []
        await trio.sleep(0.2)
        assert receiver.take() == [{"STATUS": "1 server: 1 starting"}]  # the latest, once
        await trio.sleep(5)
        assert receiver.take() == []  # nothing changed
        nursery.cancel_scope.cancel()


async def test_reload_and_stop_messages(receiver: Receiver, autojump_clock: trio.testing.MockClock) -> None:
    sup = FakeSupervisor(server("a"))
    service = Service(Notifier(receiver.address), sup, watchdog=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.run)
        service.reloading()  # before READY: nothing to say (READY will come)
        service.reloaded(None)
        await trio.testing.wait_all_tasks_blocked()
        assert receiver.take() == []
        sup.change("a", "ready")
        await trio.testing.wait_all_tasks_blocked()
        receiver.take()
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        service.reloading()
        (message,) = receiver.take()
        assert message["RELOADING"] == "1"
        assert before <= int(message["MONOTONIC_USEC"]) <= time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        assert message["STATUS"] == "reloading the config"
        service.reloaded("config rejected")
        assert receiver.take() == [
            {"READY": "1", "STATUS": "reload rejected (see the log); 1 server: 1 ready"}
        ]
        service.reloaded(None)  # no reload under way: nothing
        service.stopping()
        service.stopping()  # said once
        service.reloading()  # stopping: no more reloads said
        service.reloaded(None)
        assert receiver.take() == [{"STOPPING": "1", "STATUS": "stopping; 1 server: 1 ready"}]
        nursery.cancel_scope.cancel()


async def test_stopping_before_ready_means_ready_is_never_said(
    receiver: Receiver, autojump_clock: trio.testing.MockClock
) -> None:
    sup = FakeSupervisor(server("a"))
    service = Service(Notifier(receiver.address), sup, watchdog=None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.run)
        service.stopping()
        sup.change("a", "stopped")
        await trio.sleep(5)
        assert not readies(receiver.take())
        nursery.cancel_scope.cancel()


async def test_open_takes_systemds_variables_out_of_the_environment(receiver: Receiver) -> None:
    env = {
        "NOTIFY_SOCKET": receiver.address,
        "WATCHDOG_USEC": "2000000",
        "WATCHDOG_PID": "4242",
        "HOME": "/h",
    }
    service = Service.open(FakeSupervisor(), env, pid=4242)
    assert service is not None
    service.close()
    assert service.watchdog == 1.0
    assert env == {"HOME": "/h"}


async def test_open_without_notify_socket_is_none_and_touches_nothing() -> None:
    env = {"WATCHDOG_USEC": "2000000", "HOME": "/h"}
    assert Service.open(FakeSupervisor(), env) is None
    assert env == {"WATCHDOG_USEC": "2000000", "HOME": "/h"}


async def test_open_with_an_unusable_address_is_none_and_still_clears_the_environment() -> None:
    env = {"NOTIFY_SOCKET": "not-absolute", "WATCHDOG_USEC": "2000000"}
    assert Service.open(FakeSupervisor(), env) is None
    assert env == {}
