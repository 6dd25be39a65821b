"""The client stubs cancel what they stop waiting for: a ``Cancel`` for the request's id follows it on the
same connection. Against a ROUTER that plays the supervisor (it answers only what a test tells it to).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import trio
import zmq

from supervisor.client import AsyncSupervisorClient, SupervisorClient
from supervisor.client.exchanges import Requests
from supervisor.protocol import (
    CallProgress,
    CallResult,
    CallTool,
    Cancel,
    Done,
    FrontReply,
    FrontRequest,
    Ping,
    ToolResult,
    decode_front_request,
    encode,
)

WAIT = 10.0  # seconds for any one message


class PlayedSupervisor:
    """A ROUTER bound where the client looks for its supervisor."""

    def __init__(self, tmp: Path) -> None:
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.endpoint = f"ipc://{tmp / 'played.sock'}"
        self.router.bind(self.endpoint)

    def receive(self) -> tuple[bytes, FrontRequest]:
        assert self.router.poll(int(WAIT * 1000)), f"the client sent nothing within {WAIT} s"
        peer, payload = self.router.recv_multipart()
        return peer, decode_front_request(payload)

    def reply(self, peer: bytes, reply: FrontReply) -> None:
        self.router.send_multipart([peer, encode(reply)])

    def close(self) -> None:
        self.router.close()
        self.ctx.term()


@pytest.fixture
def played(tmp_path: Path) -> Iterator[PlayedSupervisor]:
    supervisor = PlayedSupervisor(tmp_path)
    try:
        yield supervisor
    finally:
        supervisor.close()


def test_the_cancel_message_is_built_in_the_shared_core() -> None:
    assert Requests.cancel(12) == Cancel(id=12)


async def test_a_trio_task_cancelled_while_its_call_is_in_flight_cancels_it(played: PlayedSupervisor) -> None:
    with trio.fail_after(WAIT):
        async with AsyncSupervisorClient(played.endpoint) as client:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.call_tool, "mcp_x_slow", {})
                peer, request = await trio.to_thread.run_sync(played.receive)
                assert isinstance(request, CallTool)
                nursery.cancel_scope.cancel()
            assert await trio.to_thread.run_sync(played.receive) == (peer, Cancel(id=request.id))
            # The client still works, and a later reply to the cancelled request reaches nobody.
            played.reply(peer, CallResult(id=request.id, result=_result("late")))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_answer_next, played, "fresh")
                assert (await client.call_tool("mcp_x_echo", {})).text == "fresh"


def test_an_asyncio_task_cancelled_while_its_call_is_in_flight_cancels_it(played: PlayedSupervisor) -> None:
    async def main() -> tuple[int, FrontRequest]:
        async with AsyncSupervisorClient(played.endpoint) as client:
            task = asyncio.create_task(client.call_tool("mcp_x_slow", {}))
            _, request = await asyncio.to_thread(played.receive)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            _, cancel = await asyncio.to_thread(played.receive)
            return request.id, cancel

    id, cancel = asyncio.run(asyncio.wait_for(main(), WAIT))
    assert cancel == Cancel(id=id)


async def test_a_call_answered_in_time_sends_no_cancel(played: PlayedSupervisor) -> None:
    with trio.fail_after(WAIT):
        async with AsyncSupervisorClient(played.endpoint) as client:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_answer_next, played, "ok")
                assert (await client.call_tool("mcp_x_echo", {})).text == "ok"
            async with trio.open_nursery() as nursery:  # the next message after the call: this ping
                nursery.start_soon(_answer_ping, played)
                await client.ping()


def test_a_blocking_call_whose_progress_callback_raises_is_cancelled(played: PlayedSupervisor) -> None:
    client = SupervisorClient(played.endpoint)
    errors: list[BaseException] = []

    def stop(progress: float, total: float | None, message: str | None) -> None:
        raise KeyboardInterrupt  # as Ctrl-C in the middle of a wait would

    def caller() -> None:
        try:
            client.call_tool("mcp_x_slow", {}, progress=stop)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=caller)
    thread.start()
    try:
        peer, request = played.receive()
        played.reply(peer, CallProgress(id=request.id, progress=1.0))
        assert played.receive() == (peer, Cancel(id=request.id))
    finally:
        thread.join(WAIT)
        client.close()
    assert not thread.is_alive() and [type(exc) for exc in errors] == [KeyboardInterrupt]


async def _answer_ping(played: PlayedSupervisor) -> None:
    peer, request = await trio.to_thread.run_sync(played.receive)
    assert isinstance(request, Ping), request
    played.reply(peer, Done(id=request.id))


async def _answer_next(played: PlayedSupervisor, text: str) -> None:
    peer, request = await trio.to_thread.run_sync(played.receive)
    assert isinstance(request, CallTool)
    played.reply(peer, CallResult(id=request.id, result=_result(text)))


def _result(text: str) -> msgspec.Raw:
    return msgspec.Raw(encode(ToolResult(content=[{"type": "text", "text": text}], text=text)))
