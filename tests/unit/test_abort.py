"""A worker's ``Abort``: the call's scope is cancelled, the server is sent ``notifications/cancelled`` for
the call's own request id, and nothing at all goes back to the supervisor (it answered the caller).

``workers.calls.Calls`` runs here against a fake link and a fake server: the stdio hot path through a
real ``OwnRequests`` whose lines are collected, and the remote path through a fake SDK client.
"""

from __future__ import annotations

from typing import Any, cast

import msgspec
import pytest
import trio
import trio.testing
from mcp import Client
from mcp_types import CallToolResult, TextContent

from supervisor.protocol import Abort, Invoke, InvokeFailed, InvokeResult, WorkerTool
from tests.call_fakes import FakeLink, FakeStdio
from workers.calls import Calls
from workers.catalog import Catalog
from workers.own_requests import OWN_IDS
from workers.stdio import StdioServer
from workers.uplink import Link

WAIT = 5.0  # seconds any one wait in these tests may take


class FakeClient:
    """The SDK's client for a remote server: ``call_tool`` waits until answered or cancelled."""

    def __init__(self) -> None:
        self.started = trio.Event()
        self.cancelled = trio.Event()
        self.answer = trio.Event()

    async def call_tool(self, name: str, arguments: dict[str, Any], **_: Any) -> CallToolResult:
        self.started.set()
        try:
            await self.answer.wait()
        except trio.Cancelled:
            self.cancelled.set()  # the SDK sends notifications/cancelled here
            raise
        return CallToolResult(content=[TextContent(text="answered")])


def invoke(call: int, budget: float = 60.0) -> Invoke:
    return Invoke(call=call, tool="slow", arguments=msgspec.Raw(msgspec.msgpack.encode({})), budget=budget)


async def _lost(during: str) -> None:
    raise AssertionError(f"the session was lost during {during}")


def calls_for(link: FakeLink, nursery: trio.Nursery, server: FakeStdio | None, client: object) -> Calls:
    calls = Calls(cast(Link, link), nursery, cast(StdioServer | None, server), cast(Catalog, None), _lost)
    calls.ready(cast(Client, client), [WorkerTool(name="slow", input_schema={"type": "object"})])
    return calls


async def test_an_aborted_stdio_call_cancels_its_own_request_id_and_sends_nothing() -> None:
    link, server = FakeLink(), FakeStdio()
    with trio.fail_after(WAIT):  # the nursery ends with its calls
        async with trio.open_nursery() as nursery:
            calls = calls_for(link, nursery, server, object())
            calls.invoke(invoke(7))
            await server.written.wait()
            [request] = server.lines
            assert request["method"] == "tools/call" and request["id"] > OWN_IDS
            assert calls.running == 1
            calls.abort(Abort(call=7))
            await trio.testing.wait_all_tasks_blocked()
    cancel = {"requestId": request["id"], "reason": "caller cancelled"}
    assert server.lines[1:] == [{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}]
    assert link.sent == []
    assert calls.running == 0


async def test_an_aborted_remote_call_is_cancelled_in_the_sdk_and_sends_nothing() -> None:
    link, client = FakeLink(), FakeClient()
    with trio.fail_after(WAIT):  # the nursery ends with its calls
        async with trio.open_nursery() as nursery:
            calls = calls_for(link, nursery, None, client)
            calls.invoke(invoke(3))
            await client.started.wait()
            calls.abort(Abort(call=3))
            await client.cancelled.wait()
            await trio.testing.wait_all_tasks_blocked()
    assert link.sent == []
    assert calls.running == 0


async def test_an_abort_that_comes_before_the_call_started_sends_the_server_nothing() -> None:
    link, server = FakeLink(), FakeStdio()
    with trio.fail_after(WAIT):  # the nursery ends with its calls
        async with trio.open_nursery() as nursery:
            calls = calls_for(link, nursery, server, object())
            calls.invoke(invoke(5))
            calls.abort(Abort(call=5))  # in the same batch of commands: its task has not run yet
            await trio.testing.wait_all_tasks_blocked()
    assert server.lines == [] and link.sent == [] and calls.running == 0


async def test_an_abort_of_a_call_not_running_changes_nothing() -> None:
    link, client = FakeLink(), FakeClient()
    with trio.fail_after(WAIT):  # the nursery ends with its calls
        async with trio.open_nursery() as nursery:
            calls = calls_for(link, nursery, None, client)
            calls.abort(Abort(call=99))  # never invoked
            calls.invoke(invoke(1))
            await client.started.wait()
            calls.abort(Abort(call=2))  # another call
            client.answer.set()
            await trio.testing.wait_all_tasks_blocked()
            calls.abort(Abort(call=1))  # answered already
    assert [type(event) for event in link.sent] == [InvokeResult]
    assert not client.cancelled.is_set() and calls.running == 0


@pytest.mark.parametrize("remote", [False, True], ids=["stdio", "remote"])
async def test_a_call_past_its_budget_is_still_a_timeout_and_forgotten(
    remote: bool, autojump_clock: trio.testing.MockClock
) -> None:
    link, server, client = FakeLink(), FakeStdio(), FakeClient()
    with trio.fail_after(WAIT):  # on the mock clock: the nursery ends with the call, at its budget
        async with trio.open_nursery() as nursery:
            calls = calls_for(link, nursery, None if remote else server, client)
            calls.invoke(invoke(4, budget=2.0))
    [failed] = link.sent
    assert isinstance(failed, InvokeFailed) and (failed.call, failed.code) == (4, "TIMEOUT")
    assert calls.running == 0
