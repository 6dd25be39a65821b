"""The supervisor's ``Interests``: log level wishes and subscriptions per connection, each server's
told to its serving workers (pure logic: fake servers, the workers' payloads decoded back)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.daemon.wishes import MAX_SUBSCRIPTIONS, MAX_URI, MAX_WISHES, Interests
from supervisor.protocol import (
    LOG_LEVELS,
    Done,
    ErrorReply,
    Event,
    Interest,
    Logged,
    ResourceUpdated,
    ServerMessage,
    SetLogLevel,
    Subscribe,
    Unsubscribe,
    decode_worker_command,
)

A, B = b"caller-a", b"caller-b"


@dataclass
class FakeKeeper:
    identity: bytes | None
    serving: bool = True


@dataclass
class FakeServer:
    workers: list[FakeKeeper] = field(default_factory=list)

    def keepers(self) -> list[FakeKeeper]:
        return self.workers


class World:
    def __init__(self, **workers: int) -> None:
        self.servers: dict[str, Any] = {
            name: FakeServer([FakeKeeper(f"{name}/{i}".encode()) for i in range(count)])
            for name, count in workers.items()
        }
        self.sent: list[tuple[bytes, Interest]] = []
        self.events: list[Event] = []
        self.interests = Interests(self.servers, self._send, self.events.append)

    def _send(self, worker: bytes, payload: bytes) -> bool:
        command = decode_worker_command(payload)
        assert isinstance(command, Interest)
        self.sent.append((worker, command))
        return True

    def last_to(self, worker: bytes) -> Interest | None:
        told = [interest for to, interest in self.sent if to == worker]
        return told[-1] if told else None


def test_a_server_gets_the_most_verbose_level_its_connections_ask_for() -> None:
    world = World(git=1, web=1)
    assert world.interests.set_level(A, SetLogLevel(id=1, level="warning")) == Done(id=1)
    assert world.last_to(b"git/0") == Interest(level="warning")
    assert world.last_to(b"web/0") == Interest(level="warning")
    world.interests.set_level(B, SetLogLevel(id=2, level="debug", server="git"))
    assert world.last_to(b"git/0") == Interest(level="debug")
    assert world.last_to(b"web/0") == Interest(level="warning")  # B asked git only
    world.interests.set_level(B, SetLogLevel(id=3, level="", server="git"))  # withdrawn
    assert world.last_to(b"git/0") == Interest(level="warning")
    world.interests.set_level(A, SetLogLevel(id=4, level=""))
    assert world.last_to(b"git/0") == Interest(level="")  # nobody asks: the server keeps its own


def test_a_resource_stays_subscribed_while_any_connection_wants_it() -> None:
    world = World(git=2)
    world.interests.subscribe(A, Subscribe(id=1, server="git", uri="file:///a"))
    world.interests.subscribe(B, Subscribe(id=2, server="git", uri="file:///a"))
    world.interests.subscribe(B, Subscribe(id=3, server="git", uri="file:///b"))
    for worker in (b"git/0", b"git/1"):  # every serving worker of the server is told
        assert world.last_to(worker) == Interest(uris=["file:///a", "file:///b"])
    told = len(world.sent)
    world.interests.unsubscribe(A, Unsubscribe(id=4, server="git", uri="file:///a"))
    assert len(world.sent) == told  # B still wants it: nothing changes for the server
    world.interests.unsubscribe(B, Unsubscribe(id=5, server="git", uri="file:///a"))
    assert world.last_to(b"git/0") == Interest(uris=["file:///b"])
    assert world.interests.unsubscribe(A, Unsubscribe(id=6, server="git", uri="file:///zzz")) == Done(id=6)


def test_a_worker_that_becomes_ready_is_told_everything_wanted_and_only_then() -> None:
    world = World(git=1)
    world.interests.worker_ready("git", b"git/7")
    assert world.sent == []  # nothing wanted: nothing sent
    world.servers["git"].workers[0].serving = False  # restarting: not told now...
    world.interests.set_level(A, SetLogLevel(id=1, level="info"))
    world.interests.subscribe(A, Subscribe(id=2, server="git", uri="mem://x"))
    assert world.sent == []
    world.interests.worker_ready("git", b"git/8")  # ...but once ready
    assert world.sent == [(b"git/8", Interest(level="info", uris=["mem://x"]))]


def test_what_servers_say_is_published_naming_the_server() -> None:
    world = World(git=1)
    data = msgspec.Raw(msgspec.msgpack.encode({"n": 1}))
    world.interests.logged("git", Logged(level="error", logger="db", data=data))
    world.interests.updated("git", "file:///a")
    assert world.events == [
        ServerMessage(server="git", level="error", logger="db", data=data),
        ResourceUpdated(server="git", uri="file:///a"),
    ]


def test_bad_wishes_are_refused_naming_what_is_wrong() -> None:
    world = World(git=1)
    wrong = world.interests.set_level(A, SetLogLevel(id=1, level="LOUD"))
    assert isinstance(wrong, ErrorReply) and wrong.code == "BAD_REQUEST" and "debug, info" in wrong.message
    unknown = world.interests.set_level(A, SetLogLevel(id=2, level="info", server="nope"))
    assert (
        isinstance(unknown, ErrorReply)
        and unknown.code == "UNKNOWN_TOOL"
        and "servers: git" in unknown.message
    )
    for request in (
        Subscribe(id=3, server="git", uri=""),
        Subscribe(id=4, server="git", uri="x" * (MAX_URI + 1)),
    ):
        refused = world.interests.subscribe(A, request)
        assert isinstance(refused, ErrorReply) and refused.code == "BAD_REQUEST"
    assert world.sent == []


def test_wishes_and_subscriptions_are_bounded() -> None:
    world = World(git=0)
    for n in range(MAX_WISHES + 10):
        world.interests.set_level(n.to_bytes(4, "big"), SetLogLevel(id=n, level="error"))
    assert len(world.interests._levels) == MAX_WISHES  # the oldest dropped
    for n in range(MAX_SUBSCRIPTIONS):
        assert world.interests.subscribe(A, Subscribe(id=n, server="git", uri=f"u:{n}")) == Done(id=n)
    over = world.interests.subscribe(A, Subscribe(id=-1, server="git", uri="u:over"))
    assert isinstance(over, ErrorReply) and over.code == "OVERLOADED"
    assert world.interests.subscribe(B, Subscribe(id=-2, server="git", uri="u:0")) == Done(id=-2)  # known


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from([A, B, b"c"]), st.sampled_from(["", *LOG_LEVELS])), max_size=30))
def test_the_level_told_is_always_the_most_verbose_wish_left(wishes: list[tuple[bytes, str]]) -> None:
    world = World(git=1)
    left: dict[bytes, str] = {}
    for n, (caller, level) in enumerate(wishes):
        world.interests.set_level(caller, SetLogLevel(id=n, level=level))
        if level:
            left[caller] = level
        else:
            left.pop(caller, None)
        expected = min(left.values(), key=LOG_LEVELS.index) if left else ""
        assert world.interests.wanted("git").level == expected
