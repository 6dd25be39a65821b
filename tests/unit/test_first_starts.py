"""``ListTools`` with ``wait``: answered once every server's first start is over, or at its wait."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import trio
import trio.lowlevel

from supervisor.daemon.first_starts import SETTLE, FirstStarts
from supervisor.daemon.registry import Registry
from supervisor.protocol import ErrorReply, FrontReply, ListTools, ToolList, WorkerState, WorkerTool


@dataclass
class FakeServer:
    state: WorkerState = "starting"


class World:
    def __init__(self, **states: WorkerState) -> None:
        self.registry = Registry()
        self.servers = {name: FakeServer(state) for name, state in states.items()}
        self.replies: list[FrontReply] = []
        self.first = FirstStarts(
            self.registry, self.servers, lambda caller, reply: self.replies.append(reply)
        )

    def become(self, name: str, state: WorkerState, tools_change: bool = False) -> None:
        """As the supervisor does it: a ready server's tools first, its state, then its ``Ready``."""
        first = self.first.first_start(name)
        self.servers[name].state = state
        if state == "ready":
            self.registry.replace(name, [WorkerTool(name="echo", input_schema={"type": "object"})])
        self.first.state_changed(name, state)
        if state == "ready":
            self.first.ready(name, tools_change, first)

    def announce(self, name: str) -> None:
        """The server announced more tools just after it was ready (the worker listed them again)."""
        tools = [WorkerTool(name=tool, input_schema={"type": "object"}) for tool in ("echo", "later")]
        self.registry.replace(name, tools)
        self.first.tools_changed(name)


async def test_a_listing_that_waits_is_answered_when_every_first_start_is_over(
    autojump_clock: object,
) -> None:
    world = World(a="starting", b="starting", c="stopped")
    async with trio.open_nursery() as tasks:
        world.first.list_tools(b"x", ListTools(id=1, wait=60), tasks)
        world.first.list_tools(b"x", ListTools(id=2), tasks)  # no wait: at once
        await trio.sleep(1)
        [now] = world.replies
        assert isinstance(now, ToolList) and now.id == 2 and now.tools == [] and now.starting == ["a", "b"]
        world.become("a", "ready")
        await trio.sleep(1)
        assert len(world.replies) == 1  # b is still starting
        world.become("b", "restarting")  # its first start failed: over all the same
        await trio.lowlevel.checkpoint()
    [_, later] = world.replies
    assert isinstance(later, ToolList) and later.id == 1 and later.starting == []
    assert [tool.name for tool in later.tools] == ["mcp_a_echo"]
    assert trio.current_time() == pytest.approx(2)


async def test_a_listing_that_waits_is_answered_at_its_wait_and_says_who_is_still_starting(
    autojump_clock: object,
) -> None:
    world = World(a="starting")
    async with trio.open_nursery() as tasks:
        world.first.list_tools(b"x", ListTools(id=1, wait=5), tasks)
    [reply] = world.replies
    assert isinstance(reply, ToolList) and reply.starting == ["a"]
    assert trio.current_time() == pytest.approx(5)


async def test_a_server_that_restarts_later_does_not_hold_listings_back(autojump_clock: object) -> None:
    world = World(a="starting")
    world.become("a", "ready")
    world.become("a", "starting")  # a restart: its first start is long over
    async with trio.open_nursery() as tasks:
        world.first.list_tools(b"x", ListTools(id=1, wait=60), tasks)
    assert trio.current_time() == 0 and isinstance(world.replies[0], ToolList)


@pytest.mark.parametrize("wait", [-1.0, float("nan"), float("inf")])
async def test_a_wait_that_is_not_a_number_of_seconds_is_bad_request(wait: float) -> None:
    world = World(a="starting")
    async with trio.open_nursery() as tasks:
        world.first.list_tools(b"x", ListTools(id=1, wait=wait), tasks)
    [reply] = world.replies
    assert isinstance(reply, ErrorReply) and reply.code == "BAD_REQUEST" and "wait" in reply.message


async def test_a_server_that_says_its_tools_change_has_a_moment_to_announce_more(
    autojump_clock: object,
) -> None:
    world = World(a="starting", b="starting")
    async with trio.open_nursery() as tasks:
        world.first.list_tools(b"x", ListTools(id=1, wait=60), tasks)
        world.become("a", "ready", tools_change=True)
        world.become("b", "ready", tools_change=True)
        await trio.sleep(SETTLE / 2)
        assert world.replies == []  # both may still announce tools
        world.announce("a")  # a did: it is over; b has the rest of its moment
        await trio.lowlevel.checkpoint()
        assert world.replies == []
    [reply] = world.replies
    assert isinstance(reply, ToolList) and reply.starting == []
    assert sorted(tool.name for tool in reply.tools) == ["mcp_a_echo", "mcp_a_later", "mcp_b_echo"]
    assert trio.current_time() == pytest.approx(SETTLE)


async def test_only_a_first_start_of_a_server_whose_tools_change_waits_a_moment(
    autojump_clock: object,
) -> None:
    world = World(a="starting", b="starting")
    world.become("a", "ready")  # its tools do not change: over at once
    world.become("b", "ready", tools_change=True)
    world.become("b", "restarting")
    world.become("b", "ready", tools_change=True)  # not its first start: no moment
    async with trio.open_nursery() as tasks:
        world.first.list_tools(b"x", ListTools(id=1, wait=60), tasks)
    assert trio.current_time() == 0 and world.first.pending() == []


async def test_a_moment_that_passes_without_news_ends_the_wait(autojump_clock: object) -> None:
    world = World(a="starting", b="starting")
    async with trio.open_nursery() as tasks:
        world.first.list_tools(b"x", ListTools(id=1, wait=60), tasks)
        await trio.sleep(1)
        world.become("a", "ready", tools_change=True)  # and it announces nothing more
        await trio.sleep(SETTLE / 2)
        world.become("b", "ready")  # the last first start, while a's moment lasts
    [reply] = world.replies
    assert isinstance(reply, ToolList) and reply.starting == []
    assert trio.current_time() == pytest.approx(1 + SETTLE)
