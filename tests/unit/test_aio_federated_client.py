"""The async federated client's merging and routing (``supervisor.client.aio_federated``), over fake
members: the same rules as the blocking one's, and a member that cannot be connected to is a failure."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import pytest
import trio

from supervisor.client.aio import AsyncSupervisorClient
from supervisor.client.aio_federated import AsyncFederatedClient
from supervisor.client.errors import SupervisorError, SupervisorUnreachableError, UnknownToolError
from supervisor.client.federated import Listing
from supervisor.shared.federation import Member
from tests.unit.test_federated_client import A, B, FakeSupervisor

WAIT = 5


class AsyncFake:
    """A ``FakeSupervisor`` as an async client: each of its methods awaited, after a checkpoint; or,
    with ``refuses``, one that cannot be entered."""

    def __init__(self, fake: FakeSupervisor, *, refuses: bool = False) -> None:
        self.fake, self.refuses, self.entered, self.exited = fake, refuses, False, False

    async def __aenter__(self) -> AsyncFake:
        if self.refuses:
            raise SupervisorUnreachableError(f"no supervisor at {self.fake.member.endpoint}")
        self.entered = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.exited = True

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self.fake, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            await trio.lowlevel.checkpoint()
            return method(*args, **kwargs)

        return call


def federation(*fakes: AsyncFake) -> AsyncFederatedClient:
    by_member = {fake.fake.member: fake for fake in fakes}

    def connect(member: Member) -> AbstractAsyncContextManager[AsyncSupervisorClient]:
        return cast(AbstractAsyncContextManager[AsyncSupervisorClient], by_member[member])

    return AsyncFederatedClient([fake.fake.member for fake in fakes], connect=connect)


async def test_tools_merge_and_calls_go_to_each_owner() -> None:
    a = AsyncFake(FakeSupervisor(A, {"files": ["read"], "time": ["now"]}))
    b = AsyncFake(FakeSupervisor(B, {"gpu": ["run"], "time": ["now"]}))
    with trio.fail_after(WAIT):
        async with federation(a, b) as fed:
            listing: Listing[Any] = await fed.list_tools()
            assert [t.name for t in listing.entries] == ["mcp_files_read", "mcp_time_now", "mcp_gpu_run"]
            assert [(c.server, c.owner, c.left_out) for c in listing.clashes] == [("time", A, B)]
            assert (await fed.call_tool("mcp_gpu_run")).text == "b:mcp_gpu_run"
            assert (await fed.call_tool("mcp_time_now")).text == "a:mcp_time_now"
            assert await fed.restart("gpu") == B and (await fed.logs("files")).server == "files"
            status = await fed.status()
            assert [(r.member, r.status.server) for r in status.rows][-1] == (B, "time")
    assert a.entered and a.exited and b.exited
    assert [what for what, _ in a.fake.asked].count("list_tools") == 1


async def test_an_unknown_tool_is_listed_again_once_and_a_moved_one_followed() -> None:
    a = AsyncFake(FakeSupervisor(A, {"files": ["read"]}))
    b = AsyncFake(FakeSupervisor(B, {"gpu": ["run"]}))
    with trio.fail_after(WAIT):
        async with federation(a, b) as fed:
            await fed.list_tools()
            a.fake.servers["gpu"] = b.fake.servers.pop("gpu")
            assert (await fed.call_tool("mcp_gpu_run")).text == "a:mcp_gpu_run"
            with pytest.raises(UnknownToolError, match=r"'mcp_nobody_x'.*servers: files, gpu"):
                await fed.call_tool("mcp_nobody_x")


async def test_a_member_that_cannot_be_connected_to_is_a_failure_on_each_request() -> None:
    a = AsyncFake(FakeSupervisor(A, {"files": ["read"]}))
    b = AsyncFake(FakeSupervisor(B, {"gpu": ["run"]}), refuses=True)
    with trio.fail_after(WAIT):
        async with federation(a, b) as fed:
            listing = await fed.list_tools()
            assert [t.server for t in listing.entries] == ["files"]
            [failure] = listing.failures
            assert failure.member == B and failure.unreachable
            reloaded = await fed.reload()
            assert reloaded[0].value is not None and reloaded[1].failure is not None
            with pytest.raises(SupervisorUnreachableError, match=r"'mcp_gpu_run'.*b \(ipc:///tmp/b.sock\)"):
                await fed.call_tool("mcp_gpu_run")
    assert a.exited


async def test_an_owner_that_stops_answering_is_named() -> None:
    a = AsyncFake(FakeSupervisor(A, {"files": ["read"]}))
    b = AsyncFake(FakeSupervisor(B, {"gpu": ["run"]}))
    with trio.fail_after(WAIT):
        async with federation(a, b) as fed:
            await fed.list_tools()
            b.fake.down = True
            with pytest.raises(SupervisorUnreachableError, match=r"^UNREACHABLE: b \(ipc:///tmp/b.sock\)"):
                await fed.call_tool("mcp_gpu_run")


async def test_the_client_must_be_entered() -> None:
    fed = federation(AsyncFake(FakeSupervisor(A, {})))
    with pytest.raises(SupervisorError, match="async with"):
        await fed.list_tools()
