"""Routed calls through a real supervisor to the test server and to mcp-server-time (PyPI)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import msgspec
import pytest
import trio
import zmq

from supervisor.client import AsyncSupervisorClient, SupervisorClient
from supervisor.client.errors import (
    InvalidArgumentsError,
    ServerError,
    SupervisorUnreachableError,
    ToolExecutionError,
    ToolTimeoutError,
    UnknownToolError,
)
from supervisor.protocol import ErrorReply, Ping, decode_front_reply, encode
from tests.e2e.harness import SupervisorProcess, poll

pytestmark = pytest.mark.e2e


def test_every_tool_of_every_server_is_listed_under_its_prefixed_name(shared: SupervisorProcess) -> None:
    tools = {tool.name: tool for tool in shared.client.list_tools()}
    assert tools["mcp_test_echo"].server == "test"
    assert tools["mcp_test_echo"].original_name == "echo"
    assert tools["mcp_time_get_current_time"].original_name == "get_current_time"
    # the test server pages its listing 3 at a time: every page was followed
    assert {f"mcp_test_extra_{i}" for i in range(7)} <= tools.keys()
    assert tools["mcp_test_weird_name_with_chars"].original_name == "weird name/with.chars"
    assert tools["mcp_test_echo"].input_schema["properties"]["text"]["type"] == "string"
    assert all(len(name) <= 64 for name in tools)


def test_tool_with_invalid_input_schema_is_left_out_with_a_warning(shared: SupervisorProcess) -> None:
    names = {tool.name for tool in shared.client.list_tools()}
    assert "mcp_test_bad_schema" not in names
    assert "server 'test' tool 'bad_schema' left out: inputSchema is not valid JSON Schema" in shared.log


def test_openai_tools_are_function_definitions(shared: SupervisorProcess) -> None:
    functions = {tool["function"]["name"]: tool for tool in shared.client.openai_tools()}
    echo = functions["mcp_test_echo"]
    assert echo["type"] == "function"
    assert echo["function"]["parameters"]["required"] == ["text"]


def test_call_is_routed_to_its_server_and_returns_text(shared: SupervisorProcess) -> None:
    assert shared.client.call_tool("mcp_test_echo", {"text": "hello"}, timeout=10).text == "hello"
    now = shared.client.call_tool("mcp_time_get_current_time", {"timezone": "UTC"}, timeout=10)
    assert now.structured_content["timezone"] == "UTC"
    assert '"timezone": "UTC"' in now.text


def test_results_keep_every_content_kind_and_structured_content(shared: SupervisorProcess) -> None:
    added = shared.client.call_tool("mcp_test_add", {"a": 2, "b": 3.5})
    assert added.structured_content == {"sum": 5.5}
    image = shared.client.call_tool("mcp_test_image")
    assert [item["type"] for item in image.content] == ["image", "text"]
    assert image.content[0]["mimeType"] == "image/png"
    mixed = shared.client.call_tool("mcp_test_mixed")
    assert [item["type"] for item in mixed.content] == ["text", "audio", "resource_link", "resource"]
    assert mixed.content[2]["uri"] == "test://doc/1"
    assert mixed.content[3]["resource"]["uri"] == "test://doc/2"
    assert "[resource link test://doc/1]" in mixed.text
    assert shared.client.call_tool("mcp_test_empty").text == "No output returned."


def test_unknown_tool_is_an_unknown_tool_error(shared: SupervisorProcess) -> None:
    with pytest.raises(UnknownToolError, match="mcp_nobody_nothing"):
        shared.client.call_tool("mcp_nobody_nothing", {})


def test_arguments_the_server_rejects_are_invalid_arguments(shared: SupervisorProcess) -> None:
    with pytest.raises(InvalidArgumentsError, match="echo"):
        shared.client.call_tool("mcp_test_echo", {"text": 5}, timeout=10)


def test_is_error_result_raises_tool_execution_error_carrying_the_result(shared: SupervisorProcess) -> None:
    with pytest.raises(ToolExecutionError) as caught:
        shared.client.call_tool("mcp_test_fail", {"message": "it broke"}, timeout=10)
    assert caught.value.result.is_error
    assert caught.value.result.text == "it broke"
    result = shared.client.call_tool("mcp_test_fail", {"message": "again"}, raise_on_error=False)
    assert result.is_error and result.text == "again"


def test_json_rpc_error_from_the_server_is_a_server_error(shared: SupervisorProcess) -> None:
    with pytest.raises(ServerError, match="exploded"):
        shared.client.call_tool("mcp_test_raise_error", {"message": "exploded"}, timeout=10)


def test_call_past_deadline_returns_timeout_near_deadline_and_server_sees_cancellation(
    shared: SupervisorProcess,
) -> None:
    started = time.monotonic()
    with pytest.raises(ToolTimeoutError, match="budget"):
        shared.client.call_tool("mcp_test_slow", {"seconds": 60, "tag": "deadline"}, timeout=1.0)
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 2.5, elapsed
    poll("the server's .cancelled marker", (shared.state_dir / "deadline.cancelled").exists, 10)
    # the session is still usable
    assert shared.client.call_tool("mcp_test_echo", {"text": "after"}, timeout=10).text == "after"


def test_server_environment_comes_from_config_and_secrets_never_reach_logs_or_status(
    shared: SupervisorProcess,
) -> None:
    assert shared.client.call_tool("mcp_test_env", {"name": "SECRET_TOKEN"}).text == "s3cr3t-d0-not-log"
    status = msgspec.json.encode(shared.client.status()).decode()
    assert "s3cr3t" not in status
    assert "s3cr3t" not in shared.log


def test_log_has_ready_lines_calls_at_debug_and_server_stderr_prefixed(shared: SupervisorProcess) -> None:
    shared.client.call_tool("mcp_test_echo", {"text": "logged"})
    log = shared.log
    listed = sum(tool.server == "test" for tool in shared.client.list_tools())
    assert f"server 'test' ready: {listed} tools" in log
    assert "server 'time' ready: 2 tools" in log
    assert "[test] test server says hello" in log
    assert "DEBUG   [test] call echo" in log


async def test_many_concurrent_calls_on_one_async_client_are_multiplexed(shared: SupervisorProcess) -> None:
    results: dict[int, str] = {}

    async def one(sup: AsyncSupervisorClient, i: int) -> None:
        results[i] = (await sup.call_tool("mcp_test_echo", {"text": f"call {i}"}, timeout=20)).text

    with trio.fail_after(60):
        async with AsyncSupervisorClient(shared.endpoint) as sup, trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(one, sup, i)
    assert results == {i: f"call {i}" for i in range(200)}


def test_blocking_client_is_shared_by_threads(shared: SupervisorProcess) -> None:
    errors: list[BaseException] = []
    results: dict[tuple[int, int], str] = {}

    def worker(t: int) -> None:
        try:
            for i in range(20):
                results[t, i] = shared.client.call_tool(
                    "mcp_test_echo", {"text": f"{t}/{i}"}, timeout=20
                ).text
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert results == {(t, i): f"{t}/{i}" for t in range(8) for i in range(20)}


def test_async_client_works_under_asyncio(shared: SupervisorProcess) -> None:
    async def main() -> list[str]:
        async with AsyncSupervisorClient(shared.endpoint) as sup:
            calls = [sup.call_tool("mcp_test_echo", {"text": str(i)}, timeout=20) for i in range(20)]
            results = await asyncio.wait_for(asyncio.gather(*calls), 60)
            assert "mcp_test_echo" in {tool.name for tool in await sup.list_tools()}
            return [result.text for result in results]

    assert asyncio.run(main()) == [str(i) for i in range(20)]


def test_garbage_frame_gets_bad_request_and_harms_nothing(shared: SupervisorProcess) -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(shared.endpoint)
    try:
        sock.send(b"\xc1 this is not msgpack")
        assert sock.poll(5000), "no reply to a garbage frame"
        reply = decode_front_reply(sock.recv())
        assert isinstance(reply, ErrorReply) and reply.code == "BAD_REQUEST"
        sock.send_multipart([b"", b"two frames"])  # a multi-frame message: dropped, not fatal
        sock.send(encode(Ping(id=7)))
        assert sock.poll(5000)
        assert decode_front_reply(sock.recv()).id == 7
    finally:
        sock.close()
        ctx.term()
    assert shared.client.call_tool("mcp_test_echo", {"text": "still fine"}).text == "still fine"


def test_client_without_a_supervisor_fails_fast_naming_the_endpoint(tmp_path: Path) -> None:
    with (
        SupervisorClient(f"ipc://{tmp_path}/nobody.sock") as sup,
        pytest.raises(SupervisorUnreachableError, match=r"nobody\.sock does not exist"),
    ):
        sup.status()
