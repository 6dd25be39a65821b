"""Progress notifications reach the caller that asked for them, and only that caller.

server-everything's ``trigger-long-running-operation {duration, steps}`` sends progress ``i`` of
``steps`` after each step when the request carries a progressToken; the test server's ``progress``
tool floods as many as it is asked for. Raw DEALER sockets check the wire: every ``CallProgress``
comes before the call's one terminal reply, and nothing comes after it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
import trio
import zmq

from supervisor.client import AsyncSupervisorClient
from supervisor.client.errors import ServerError, ToolExecutionError, ToolTimeoutError, WorkerCrashedError
from supervisor.protocol import (
    CallProgress,
    CallResult,
    CallTool,
    Done,
    ErrorReply,
    FrontReply,
    Ping,
    decode_front_reply,
    encode,
)
from tests.e2e.harness import (
    EVERYTHING,
    NODE,
    NodeHttpServer,
    SupervisorProcess,
    npm_package,
    stdio_test_server,
)
from workers.progress import PROGRESS_BURST, PROGRESS_INTERVAL

pytestmark = pytest.mark.e2e

LONG = "trigger-long-running-operation"
REPLY_TIMEOUT = 30.0  # seconds to wait for any one reply on a raw socket
CLI_TIMEOUT = 60  # seconds for one CLI command

Note = tuple[float, float | None, str | None]


# Its own fixture, not start_module_supervisor: the HTTP server starts before the supervisor and
# stops after it.
@pytest.fixture(scope="module")
def sup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SupervisorProcess]:
    """server-everything over stdio (``ev_stdio``) and streamable HTTP (``ev_http``), and the test server."""
    tmp = tmp_path_factory.mktemp("progress")
    http = NodeHttpServer(tmp, EVERYTHING, "streamableHttp")
    process = SupervisorProcess(
        tmp,
        {
            "ev_stdio": {"command": str(NODE), "args": [str(npm_package(EVERYTHING)), "stdio"]},
            "ev_http": {"url": f"http://127.0.0.1:{http.port}/mcp"},
            "test": stdio_test_server(),
        },
    )
    try:
        process.wait_states()
        yield process
    finally:
        process.stop()
        http.stop()


def _recorder() -> tuple[list[Note], Any]:
    notes: list[Note] = []

    def record(progress: float, total: float | None, message: str | None) -> None:
        notes.append((progress, total, message))

    return notes, record


def _assert_increasing_to(notes: list[Note], last: float, total: float | None) -> None:
    values = [progress for progress, _, _ in notes]
    assert values == sorted(set(values)), f"not strictly increasing: {values}"
    assert notes[-1][0] == last  # the last one always arrives before the result
    assert {note_total for _, note_total, _ in notes} == {total}


# --- the client stubs ------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_progress_callback_gets_increasing_progress_with_its_total_in_the_calling_thread(
    sup: SupervisorProcess, transport: str
) -> None:
    notes: list[Note] = []
    threads: set[int] = set()

    def record(progress: float, total: float | None, message: str | None) -> None:
        notes.append((progress, total, message))
        threads.add(threading.get_ident())

    result = sup.client.call_tool(
        f"mcp_ev_{transport}_{LONG}", {"duration": 1, "steps": 5}, timeout=20, progress=record
    )
    assert "completed" in result.text.lower()
    _assert_increasing_to(notes, 5, 5)
    assert threads == {threading.get_ident()}


def test_async_client_on_asyncio_relays_progress_only_to_the_call_that_asked(sup: SupervisorProcess) -> None:
    sync_notes, record = _recorder()
    async_notes: list[Note] = []

    async def record_async(progress: float, total: float | None, message: str | None) -> None:
        await asyncio.sleep(0)
        async_notes.append((progress, total, message))

    async def main() -> list[str]:
        async with AsyncSupervisorClient(sup.endpoint) as client:
            results = await asyncio.gather(
                client.call_tool(f"mcp_ev_stdio_{LONG}", {"duration": 0.8, "steps": 4}, progress=record),
                client.call_tool(f"mcp_ev_http_{LONG}", {"duration": 0.6, "steps": 3}, progress=record_async),
                client.call_tool(f"mcp_ev_stdio_{LONG}", {"duration": 0.4, "steps": 2}),
            )
            return [result.text for result in results]

    texts = asyncio.run(asyncio.wait_for(main(), REPLY_TIMEOUT))
    assert [text.split(". ", 1)[1] for text in texts] == [
        "Duration: 0.8 seconds, Steps: 4.",
        "Duration: 0.6 seconds, Steps: 3.",
        "Duration: 0.4 seconds, Steps: 2.",
    ]
    _assert_increasing_to(sync_notes, 4, 4)
    _assert_increasing_to(async_notes, 3, 3)


async def test_async_client_on_trio_relays_progress(sup: SupervisorProcess) -> None:
    notes, record = _recorder()
    with trio.fail_after(REPLY_TIMEOUT):
        async with AsyncSupervisorClient(sup.endpoint) as client:
            result = await client.call_tool(
                f"mcp_ev_http_{LONG}", {"duration": 0.6, "steps": 3}, progress=record
            )
    assert "completed" in result.text.lower()
    _assert_increasing_to(notes, 3, 3)


def test_progress_before_a_timeout_then_the_timeout(sup: SupervisorProcess) -> None:
    notes, record = _recorder()
    with pytest.raises(ToolTimeoutError):
        sup.client.call_tool(
            f"mcp_ev_stdio_{LONG}", {"duration": 60, "steps": 120}, timeout=1.8, progress=record
        )
    values = [progress for progress, _, _ in notes]
    assert values and values == sorted(set(values)) and all(total == 120 for _, total, _ in notes)
    assert sup.client.call_tool("mcp_ev_stdio_echo", {"message": "after"}).text == "Echo: after"


def test_a_progress_flood_is_coalesced_and_its_last_notification_still_arrives(
    sup: SupervisorProcess,
) -> None:
    count = 2000
    notes, record = _recorder()
    restarts = sup.status()["test"].restarts
    started = time.monotonic()
    result = sup.client.call_tool("mcp_test_progress", {"count": count, "message": "step"}, progress=record)
    elapsed = time.monotonic() - started
    assert result.text == f"sent {count}"
    _assert_increasing_to(notes, count, count)
    assert notes[-1] == (count, count, f"step {count}")
    # The bucket's burst, then at most one per interval while the call ran, and the last one
    # flushed before the result.
    assert len(notes) <= PROGRESS_BURST + elapsed / PROGRESS_INTERVAL + 2, (len(notes), elapsed)
    assert len(notes) < count
    assert sup.client.call_tool("mcp_test_echo", {"text": "alive"}).text == "alive"
    assert sup.status()["test"].restarts == restarts


def test_a_few_quick_steps_all_reach_the_caller(sup: SupervisorProcess) -> None:
    """A server that sends three updates at once: the caller gets three, not one."""
    notes, record = _recorder()
    result = sup.client.call_tool("mcp_test_progress", {"count": 3, "message": "step"}, progress=record)
    assert result.text == "sent 3"
    assert notes == [(i, 3, f"step {i}") for i in (1, 2, 3)]


def test_a_call_that_asks_for_progress_fails_with_the_same_codes_as_one_that_does_not(
    sup: SupervisorProcess,
) -> None:
    notes, record = _recorder()
    with pytest.raises(ServerError, match="kaboom"):
        sup.client.call_tool("mcp_test_raise_error", {"message": "kaboom"}, progress=record)
    with pytest.raises(ToolExecutionError, match="it broke"):
        sup.client.call_tool("mcp_test_fail", {"message": "it broke"}, progress=record)
    with pytest.raises(WorkerCrashedError):
        sup.client.call_tool("mcp_test_crash", {"code": 3}, progress=record)
    assert notes == []
    sup.wait_states(test="ready")


# --- the wire --------------------------------------------------------------------------------


def _exchange(endpoint: str, request: CallTool) -> list[FrontReply]:
    """Every reply to ``request`` up to its terminal one; then a ping's ``Done`` must be the very next
    message, which proves nothing (no late progress, no second reply) came after the terminal one."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)

    def receive() -> FrontReply:
        if not sock.poll(int(REPLY_TIMEOUT * 1000)):
            pytest.fail(f"no reply within {REPLY_TIMEOUT} s")
        reply: FrontReply = decode_front_reply(sock.recv())
        return reply

    try:
        sock.send(encode(request))
        replies = [receive()]
        while isinstance(replies[-1], CallProgress):
            replies.append(receive())
        sock.send(encode(Ping(id=request.id + 1)))
        assert receive() == Done(id=request.id + 1)
        return replies
    finally:
        sock.close(linger=0)
        ctx.destroy(linger=0)


def _arguments(**arguments: Any) -> msgspec.Raw:
    return msgspec.Raw(msgspec.msgpack.encode(arguments))


def test_a_call_that_does_not_ask_gets_one_result_and_no_progress(sup: SupervisorProcess) -> None:
    request = CallTool(id=10, name=f"mcp_ev_stdio_{LONG}", arguments=_arguments(duration=0.5, steps=5))
    replies = _exchange(sup.endpoint, request)
    assert [type(reply) for reply in replies] == [CallResult]
    assert replies[0].id == 10


def test_a_call_that_asks_gets_progress_then_exactly_one_result(sup: SupervisorProcess) -> None:
    request = CallTool(
        id=20, name=f"mcp_ev_stdio_{LONG}", arguments=_arguments(duration=0.5, steps=5), progress=True
    )
    *progress, last = _exchange(sup.endpoint, request)
    assert isinstance(last, CallResult) and last.id == 20
    assert all(isinstance(reply, CallProgress) and reply.id == 20 for reply in progress)
    _assert_increasing_to(
        [(r.progress, r.total, r.message) for r in progress if isinstance(r, CallProgress)], 5, 5
    )


def test_a_call_that_times_out_gets_its_progress_then_one_timeout_and_nothing_after(
    sup: SupervisorProcess,
) -> None:
    request = CallTool(
        id=30,
        name=f"mcp_ev_stdio_{LONG}",
        arguments=_arguments(duration=60, steps=120),
        timeout=1.8,
        progress=True,
    )
    *progress, last = _exchange(sup.endpoint, request)
    assert isinstance(last, ErrorReply) and (last.id, last.code) == (30, "TIMEOUT")
    assert progress and all(isinstance(reply, CallProgress) and reply.id == 30 for reply in progress)


# --- the command line ------------------------------------------------------------------------


def _cli(sup: SupervisorProcess, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "supervisor", *args, "--endpoint", sup.endpoint]
    return subprocess.run(command, capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False)


def test_cli_call_prints_progress_lines_on_stderr_and_only_the_result_on_stdout(
    sup: SupervisorProcess,
) -> None:
    arguments = '{"duration": 1, "steps": 5}'
    done = _cli(sup, "call", f"mcp_ev_stdio_{LONG}", arguments, "--progress")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Long running operation completed. Duration: 1 seconds, Steps: 5.\n"
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith("progress ") and line.endswith("/5") for line in lines), lines
    assert lines[-1] == "progress 5/5"

    flood = _cli(sup, "call", "mcp_test_progress", '{"count": 3, "message": "step"}', "--progress")
    assert flood.returncode == 0, flood.stderr
    assert flood.stderr.splitlines()[-1] == "progress 3/3: step 3"

    quiet = _cli(sup, "call", f"mcp_ev_stdio_{LONG}", '{"duration": 0.3, "steps": 3}')  # stderr is a pipe
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert "completed" in quiet.stdout.lower()
