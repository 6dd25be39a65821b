"""A caller cancels a call in flight: its server gets ``notifications/cancelled`` for that call, the
supervisor forgets it, and the tool serves on.

Through the async client (the waiting task cancelled, on trio and on asyncio) and through a raw DEALER
that sends ``Cancel`` itself, which gets exactly one reply for the cancelled request (``CANCELLED``) and
none for the ``Cancel``. The test server's ``slow`` tool writes ``<tag>.started`` when it begins and
``<tag>.cancelled`` when its handler is cancelled, which the SDK's server does only on a
``notifications/cancelled`` naming that request's id (or, on the 2026-07-28 streamable HTTP, when the
request's stream is closed); the hand-written legacy server records the ``requestId`` of every
cancellation it reads, so the id itself is checked on the stdio hot path.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio

from supervisor.client import AsyncSupervisorClient
from supervisor.protocol import (
    Cancel,
    Done,
    ErrorReply,
    GetStatus,
    Listing,
    ListResources,
    Ping,
    ReadResource,
    StatusReply,
)
from tests.e2e.harness import (
    SupervisorProcess,
    http_test_server,
    poll,
    raw_call,
    raw_client,
    stdio_test_server,
)

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
LEGACY_SERVER = Path(__file__).parent.parent / "servers" / "legacy_server.py"
OWN_IDS = 1 << 40  # the worker's own requests have ids above this (workers/own_requests.py)
WAIT = 30.0  # seconds any one test's exchanges may take
SEEN = 15.0  # seconds for a server to start a call, or to see its cancellation
LEGACY_SLEEP = 5  # seconds the legacy server blocks in `sleep` (it reads nothing meanwhile)
ABORTED = re.compile(r"\[old\] call \d+ aborted")  # the worker's debug line as it takes an Abort


@pytest.fixture(scope="module")
def sup(start_module_supervisor: Start) -> SupervisorProcess:
    """The test server (resources on, resources/list slowed to 1 s) and the legacy server, over stdio."""
    return start_module_supervisor(
        {
            "test": stdio_test_server(
                TEST_SERVER_STATE_DIR="{state}", TEST_SERVER_RESOURCES=1, TEST_SERVER_LIST_DELAY=1
            ),
            "old": {"command": sys.executable, "args": [str(LEGACY_SERVER)]},
        },
    )


async def until(what: str, check: Callable[[], Any], timeout: float = SEEN) -> None:
    """Poll ``check`` until it is true, on trio or asyncio; fail naming ``what`` after ``timeout`` s."""
    try:
        with anyio.fail_after(timeout):
            while not check():  # noqa: ASYNC110 - a file or a log, not an event; fail_after bounds it
                await anyio.sleep(0.02)
    except TimeoutError:
        pytest.fail(f"timed out after {timeout} s waiting for {what}")


async def cancel_a_slow_call(client: AsyncSupervisorClient, tool: str, marker: Path) -> None:
    """Start ``tool`` (the test server's ``slow``) in a nursery, wait until its server has it, then
    cancel the nursery: the waiting task is cancelled, and the call with it."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.call_tool, tool, {"seconds": 600, "tag": marker.name}, 600)
        await until(f"the server to start {marker.name}", marker.with_suffix(".started").exists)
        nursery.cancel_scope.cancel()


async def test_cancelling_the_waiting_task_cancels_the_call_on_the_server(sup: SupervisorProcess) -> None:
    before = sup.status()["test"]
    marker = sup.state_dir / "trio"
    with trio.fail_after(WAIT):
        async with AsyncSupervisorClient(sup.endpoint) as client:
            await cancel_a_slow_call(client, "mcp_test_slow", marker)
            assert (await client.front_stats()).in_flight == 0  # the Cancel came first on this connection
            await until("the server to see the cancellation", marker.with_suffix(".cancelled").exists)
            done = await client.call_tool("mcp_test_slow", {"seconds": 0, "tag": "after-trio"})
            assert done.text == "done after-trio"
    after = sup.status()["test"]
    assert (after.worker_pid, after.server_pid, after.restarts) == (
        before.worker_pid,
        before.server_pid,
        before.restarts,
    )


def test_cancelling_an_asyncio_task_cancels_the_call_on_the_server(sup: SupervisorProcess) -> None:
    marker = sup.state_dir / "asyncio"

    async def main() -> str:
        async with AsyncSupervisorClient(sup.endpoint) as client:
            task = asyncio.create_task(client.call_tool("mcp_test_slow", {"seconds": 600, "tag": "asyncio"}))
            await until("the server to start the call", marker.with_suffix(".started").exists)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await until("the server to see the cancellation", marker.with_suffix(".cancelled").exists)
            assert (await client.front_stats()).in_flight == 0
            return (await client.call_tool("mcp_test_echo", {"text": "after"})).text

    assert asyncio.run(asyncio.wait_for(main(), WAIT)) == "after"


async def test_the_stdio_server_is_sent_the_cancellation_of_that_very_request_id(
    sup: SupervisorProcess,
) -> None:
    written = sup.log.count("call sleep ")  # the worker's debug line, just before it writes the request
    aborted = len(ABORTED.findall(sup.log))
    with trio.fail_after(WAIT):
        async with AsyncSupervisorClient(sup.endpoint) as client:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.call_tool, "mcp_old_sleep", {"seconds": LEGACY_SLEEP})
                await until("the worker to write the call", lambda: sup.log.count("call sleep ") > written)
                nursery.cancel_scope.cancel()
            # Once the worker has taken the Abort, the cancellation goes out before any later request
            # (sent together, the two may go out in either order: both are on their way at once).
            await until("the worker to abort the call", lambda: len(ABORTED.findall(sup.log)) > aborted)
            # The server reads the cancellation once its sleep is over, before this call.
            cancelled = json.loads((await client.call_tool("mcp_old_cancelled", {})).text)
            ids = json.loads((await client.call_tool("mcp_old_ids", {})).text)
    assert all(isinstance(id_, int) and id_ > OWN_IDS for id_ in ids), ids
    assert cancelled == [ids[0]]  # the sleep: the first call, cancelled by its own id
    assert sup.status()["old"].restarts == 0


def test_a_raw_cancel_gets_one_reply_for_the_cancelled_call_and_none_of_its_own(
    sup: SupervisorProcess,
) -> None:
    marker = sup.state_dir / "raw"
    with raw_client(sup.endpoint) as raw:
        raw.send(raw_call(1, "mcp_test_slow", {"seconds": 600, "tag": "raw"}, timeout=600))
        poll("the server to start the call", marker.with_suffix(".started").exists, SEEN)
        raw.send(Cancel(id=1))
        reply = raw.recv()
        assert isinstance(reply, ErrorReply) and (reply.id, reply.code) == (1, "CANCELLED"), reply
        assert "cancelled by the caller" in reply.message and "'test'" in reply.message
        poll("the server to see the cancellation", marker.with_suffix(".cancelled").exists, SEEN)
        raw.send(Cancel(id=1))  # answered already: ignored
        raw.send(Cancel(id=77))  # never sent: ignored
        raw.send(Ping(id=2))
        assert raw.recv() == Done(id=2)  # the next reply on this connection: nothing came before it
        raw.send(GetStatus(id=3))
        status = raw.recv()
        assert isinstance(status, StatusReply) and status.front is not None
        assert status.front.in_flight == 0 and status.front.malformed == 0


def test_a_resource_read_is_cancellable_and_a_gathered_listing_is_not(sup: SupervisorProcess) -> None:
    with raw_client(sup.endpoint) as raw:
        raw.send(ReadResource(id=4, server="test", uri="test://slow/600", timeout=600))
        raw.send(Cancel(id=4))
        reply = raw.recv()
        assert isinstance(reply, ErrorReply) and (reply.id, reply.code) == (4, "CANCELLED"), reply
        assert "resources/read test://slow/600" in reply.message
        raw.send(ListResources(id=5))  # every ready server's: a gather, answered after 1 s
        raw.send(Cancel(id=5))
        listing = raw.recv()
        assert isinstance(listing, Listing) and listing.id == 5 and listing.parts, listing
        raw.send(Ping(id=6))
        assert raw.recv() == Done(id=6)
    assert sup.client.read_resource("test", "test://doc/1").text == "document 1"


# ------------------------------------------------------------------ a remote server


@pytest.fixture
def http_state(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The test server over streamable HTTP; its URL and its state directory."""
    state = tmp_path / "http-state"
    state.mkdir()
    with http_test_server(TEST_SERVER_STATE_DIR=str(state)) as url:
        yield url, state


async def test_a_remote_call_cancelled_by_its_caller_is_cancelled_on_the_server(
    start_supervisor: Start, http_state: tuple[str, Path]
) -> None:
    url, state = http_state
    sup = start_supervisor({"remote": {"url": url}})
    with trio.fail_after(WAIT):
        async with AsyncSupervisorClient(sup.endpoint) as client:
            await cancel_a_slow_call(client, "mcp_remote_slow", state / "remote")
            assert (await client.front_stats()).in_flight == 0
            await until("the remote server to see the cancellation", (state / "remote.cancelled").exists)
            done = await client.call_tool("mcp_remote_slow", {"seconds": 0, "tag": "again"})
            assert done.text == "done again"
    assert sup.status()["remote"].restarts == 0
