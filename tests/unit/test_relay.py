"""The facade's relay: hosts' levels and subscriptions, and what servers say sent to those that want it
(pure logic: fake host sessions that record what they are sent)."""

from __future__ import annotations

from typing import Any, cast

import anyio
import msgspec
import pytest
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus

from supervisor.facade.relay import QUEUE, Relay
from supervisor.protocol import ResourceUpdated, ServerMessage


class FakeSession:
    def __init__(self, fail: bool = False) -> None:
        self.logs: list[tuple[str, Any, str | None]] = []
        self.updated: list[str] = []
        self.fail = fail
        self._more: anyio.Event | None = None

    async def send_log_message(self, level: str, data: Any, logger: str | None = None) -> None:
        if self.fail:
            raise anyio.BrokenResourceError
        self.logs.append((level, data, logger))
        if self._more is not None:
            self._more.set()

    async def sent(self, count: int) -> None:
        """Return once ``count`` log messages were sent."""
        while len(self.logs) < count:
            self._more = anyio.Event()
            await self._more.wait()

    async def send_resource_updated(self, uri: str) -> None:
        self.updated.append(uri)


class World:
    def __init__(self, single: str | None = None, **sessions: FakeSession) -> None:
        self.sessions = {index: session for index, session in enumerate(sessions.values())}
        self.forgotten: list[int] = []
        self.bus = InMemorySubscriptionBus()
        self.relay = Relay(
            lambda: cast(dict[int, ServerSession], self.sessions), self.forget, self.bus, single=single
        )

    def forget(self, key: int) -> None:
        self.forgotten.append(key)
        self.sessions.pop(key, None)

    async def deliver(self, *events: ServerMessage | ResourceUpdated) -> None:
        with anyio.fail_after(5):
            for event in events:
                await self.relay.send(event)
        self.relay.close()


def _log(level: str, text: str, server: str = "git", logger: str = "") -> ServerMessage:
    return ServerMessage(
        server=server, level=level, logger=logger, data=msgspec.Raw(msgspec.msgpack.encode(text))
    )


def test_the_level_asked_is_the_most_verbose_of_the_hosts() -> None:
    world = World()
    relay = world.relay
    world.relay.close()
    assert relay.set_level(1, "error") == "error"
    assert relay.set_level(2, "debug") == "debug"
    assert relay.set_level(1, "info") is None  # still debug
    assert relay.gone(2) == ("info", [])
    assert relay.gone(1) == ("", [])  # nobody asks any more


def test_the_facade_subscribes_for_the_first_host_and_unsubscribes_after_the_last() -> None:
    relay = World().relay
    relay.close()
    assert relay.subscribe(1, "git", "u:a") is True
    assert relay.subscribe(2, "git", "u:a") is False
    assert relay.unsubscribe(1, "git", "u:a") is False
    assert relay.unsubscribe(1, "git", "u:a") is False  # not subscribed (any more)
    assert relay.subscribe(2, "web", "u:b") is True
    assert relay.gone(2) == (None, [("git", "u:a"), ("web", "u:b")])


async def test_each_host_hears_log_messages_from_its_level_up_under_the_servers_name() -> None:
    quiet, chatty, unset = FakeSession(), FakeSession(), FakeSession()
    world = World(quiet=quiet, chatty=chatty, unset=unset)
    world.relay.set_level(0, "error")
    world.relay.set_level(1, "debug")
    await world.deliver(_log("debug", "d"), _log("info", "i", logger="db"), _log("critical", "c"))
    assert quiet.logs == [("critical", "c", "git")]
    assert chatty.logs == [("debug", "d", "git"), ("info", "i", "git.db"), ("critical", "c", "git")]
    assert unset.logs == [("info", "i", "git.db"), ("critical", "c", "git")]  # info until it sets one


async def test_a_one_server_facade_keeps_the_servers_logger() -> None:
    host = FakeSession()
    world = World(single="git", host=host)
    await world.deliver(_log("info", "i", logger="db"), _log("info", "j"))
    assert host.logs == [("info", "i", "db"), ("info", "j", None)]


async def test_updates_reach_only_the_hosts_subscribed_and_the_listen_streams() -> None:
    one, two = FakeSession(), FakeSession()
    world = World(one=one, two=two)
    world.relay.subscribe(0, "git", "u:a")
    heard: list[Any] = []
    world.bus.subscribe(heard.append)
    await world.deliver(ResourceUpdated(server="git", uri="u:a"), ResourceUpdated(server="web", uri="u:a"))
    assert one.updated == ["u:a"]  # web's u:a is another resource
    assert two.updated == []
    assert [event.uri for event in heard] == ["u:a", "u:a"]


async def test_a_host_that_fails_is_forgotten_and_the_others_served() -> None:
    broken, fine = FakeSession(fail=True), FakeSession()
    world = World(broken=broken, fine=fine)
    await world.deliver(_log("error", "e"))
    assert world.forgotten == [0]
    assert fine.logs == [("error", "e", "git")]


def test_a_flood_is_dropped_and_counted_never_waited_for(caplog: pytest.LogCaptureFixture) -> None:
    world = World(host=FakeSession())
    for n in range(QUEUE + 100):
        world.relay.heard(_log("info", str(n)))
    assert world.relay.dropped == 100
    assert "server messages dropped" in caplog.text
    world.relay.close()
    world.relay.heard(_log("info", "after"))  # a facade ending: nothing taken, nothing raised
    assert world.relay.dropped == 100


async def test_run_sends_what_was_heard_in_order_and_what_comes_later() -> None:
    host = FakeSession()
    world = World(host=host)
    for n in range(3):
        world.relay.heard(_log("info", str(n)))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            await tasks.start(world.relay.run)
            await host.sent(3)
            world.relay.heard(_log("info", "3"))  # while run waits for more
            await host.sent(4)
            tasks.cancel_scope.cancel()
    assert [data for _, data, _ in host.logs] == ["0", "1", "2", "3"]
