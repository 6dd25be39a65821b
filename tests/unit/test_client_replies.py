"""How the async stub hands each reply to the request waiting for it: on asyncio, the event loop reads
the socket (no reader task); on trio, a task does; either way, replies that come in any order reach
their requests, progress before results. And one request's queue of replies, alone. Against a ROUTER
that plays the supervisor (``tests.unit.test_client_cancel``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest
import trio

from supervisor.client import AsyncSupervisorClient, SupervisorUnreachableError
from supervisor.client.replies import Replies
from supervisor.protocol import CallProgress, CallResult, CallTool, Done, GetStatus
from tests.unit.test_client_cancel import WAIT, PlayedSupervisor, _result

CALLS = 20


@pytest.fixture
def played(tmp_path: Path) -> Iterator[PlayedSupervisor]:
    supervisor = PlayedSupervisor(tmp_path)
    try:
        yield supervisor
    finally:
        supervisor.close()


def answer_backwards(played: PlayedSupervisor) -> None:
    """Take ``CALLS`` calls, then answer them last first, each after a progress notification."""
    received = [played.receive() for _ in range(CALLS)]
    for peer, request in reversed(received):
        assert isinstance(request, CallTool)
        played.reply(peer, CallProgress(id=request.id, progress=0.5))
        i = msgspec.msgpack.decode(request.arguments)["i"]
        played.reply(peer, CallResult(id=request.id, result=_result(str(i))))


async def calls(client: AsyncSupervisorClient) -> list[str]:
    heard: list[float] = []

    async def one(i: int) -> str:
        result = await client.call_tool("mcp_x_echo", {"i": i}, progress=lambda p, t, m: heard.append(p))
        return result.text

    async with anyio.create_task_group() as tasks:
        results: list[str] = [""] * CALLS

        async def into(i: int) -> None:
            results[i] = await one(i)

        for i in range(CALLS):
            tasks.start_soon(into, i)
    assert heard == [0.5] * CALLS
    return results


def test_on_asyncio_the_event_loop_reads_the_replies_without_a_task(played: PlayedSupervisor) -> None:
    async def main() -> tuple[int, list[str]]:
        before = len(asyncio.all_tasks())
        async with AsyncSupervisorClient(played.endpoint) as client:
            tasks_of_the_client = len(asyncio.all_tasks()) - before
            answering = threading.Thread(target=answer_backwards, args=(played,))
            answering.start()
            try:
                return tasks_of_the_client, await calls(client)
            finally:
                await asyncio.to_thread(answering.join, WAIT)

    tasks_of_the_client, results = asyncio.run(asyncio.wait_for(main(), WAIT))
    assert tasks_of_the_client == 0
    assert results == [str(i) for i in range(CALLS)]


async def test_on_trio_a_task_reads_the_replies_in_any_order(played: PlayedSupervisor) -> None:
    with trio.fail_after(WAIT):
        async with AsyncSupervisorClient(played.endpoint) as client, trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, answer_backwards, played)
            assert await calls(client) == [str(i) for i in range(CALLS)]


def test_an_asyncio_client_twin_shares_the_loops_reader(played: PlayedSupervisor) -> None:
    async def main() -> list[str]:
        async with AsyncSupervisorClient(played.endpoint) as client:
            twin = client.as_client("twin")
            answering = threading.Thread(target=answer_backwards, args=(played,))
            answering.start()
            try:
                return await calls(twin)
            finally:
                await asyncio.to_thread(answering.join, WAIT)

    assert asyncio.run(asyncio.wait_for(main(), WAIT)) == [str(i) for i in range(CALLS)]


async def test_a_requests_replies_come_in_order_and_a_close_ends_the_wait_after_them() -> None:
    replies = Replies()
    replies.send_nowait(Done(id=1))
    replies.send_nowait(Done(id=2))
    assert replies.pending
    assert [await replies.receive(), replies.receive_nowait()] == [Done(id=1), Done(id=2)]
    assert not replies.pending
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _later(replies))
        with trio.fail_after(WAIT):
            assert await replies.receive() == Done(id=3)  # waited for
            with pytest.raises(anyio.EndOfStream):
                await replies.receive()


async def _later(replies: Replies) -> None:
    await trio.lowlevel.checkpoint()
    replies.send_nowait(Done(id=3))
    await trio.lowlevel.checkpoint()
    replies.close()


async def test_a_wait_cancelled_leaves_the_queue_usable() -> None:
    replies = Replies()
    with trio.move_on_after(0):
        await replies.receive()
    replies.send_nowait(Done(id=9))
    with trio.fail_after(WAIT):
        assert await replies.receive() == Done(id=9)


def test_on_asyncio_a_request_nobody_answers_ends_unreachable_when_its_wait_is_over(
    played: PlayedSupervisor,
) -> None:
    async def main() -> str:
        async with AsyncSupervisorClient(played.endpoint, request_timeout=0.3) as client:
            with pytest.raises(SupervisorUnreachableError) as failed:
                await client.status()
            return str(failed.value)

    said = asyncio.run(asyncio.wait_for(main(), WAIT))
    assert said == f"UNREACHABLE: no answer from the supervisor at {played.endpoint} within 0.3 s"
    assert isinstance(played.receive()[1], GetStatus)  # it was sent, and left unanswered


def test_on_asyncio_a_wait_for_a_reply_ends_at_its_time_or_with_the_reply_or_the_close() -> None:
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        replies = Replies(loop.create_future)
        seen: list[object] = [await replies.receive_before(loop, loop.time() + 0.01)]  # none came: None
        loop.call_soon(replies.send_nowait, Done(id=1))
        seen.append(await replies.receive_before(loop, loop.time() + WAIT))
        replies.send_nowait(Done(id=2))
        seen.append(await replies.receive_before(loop, loop.time()))  # queued: no wait at all
        loop.call_soon(replies.close)
        with pytest.raises(anyio.EndOfStream):
            await replies.receive_before(loop, loop.time() + WAIT)
        return seen

    assert asyncio.run(asyncio.wait_for(main(), WAIT)) == [None, Done(id=1), Done(id=2)]
