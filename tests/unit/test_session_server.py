"""The session test server (tests/servers/session_server.py) behaves as the session, pool and request
tests expect.

Each test starts the server as a subprocess through the SDK's own client. ``sample`` and ``elicit`` are
driven in both protocol eras: mode "legacy" (2025-11-25: the server sends a request during the call) and
"2026-07-28" (an ``input_required`` result, answered by the client's retry).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext

SERVER = Path(__file__).resolve().parents[1] / "servers" / "session_server.py"
TEST_TIMEOUT = 20
MODES = ["legacy", "2026-07-28"]
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _client(mode: str = "auto", cwd: Path | None = None, **callbacks: Any) -> Client:
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)], cwd=cwd)
    return Client(params, mode=mode, **callbacks)


def _proc(pid: int) -> tuple[list[str], int]:
    """The command line and parent pid of a running process, from /proc."""
    argv = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return argv, ppid


def _text_of(result: types.CallToolResult, *, error: bool = False) -> str:
    assert result.is_error is error, result
    [item] = result.content
    assert isinstance(item, types.TextContent)
    return item.text


async def test_the_counter_is_kept_per_process() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as one, _client() as two:
            assert one.server_info is not None and one.server_info.name == "session-server"
            first = await one.call_tool("counter_add", {})
            assert (_text_of(first), first.structured_content) == ("1", {"value": 1})
            added = await one.call_tool("counter_add", {"n": 4})
            assert (_text_of(added), added.structured_content) == ("5", {"value": 5})
            got = await one.call_tool("counter_get", {})
            assert (_text_of(got), got.structured_content) == ("5", {"value": 5})
            other = await two.call_tool("counter_get", {})
            assert (_text_of(other), other.structured_content) == ("0", {"value": 0})


async def test_cd_changes_the_working_directory_and_a_bad_path_is_an_error_result(tmp_path: Path) -> None:
    target = tmp_path / "sub"
    target.mkdir()
    with trio.fail_after(TEST_TIMEOUT):
        async with _client(cwd=tmp_path) as client:
            assert _text_of(await client.call_tool("pwd", {})) == str(tmp_path)
            assert _text_of(await client.call_tool("cd", {"path": "sub"})) == str(target)
            assert _text_of(await client.call_tool("pwd", {})) == str(target)
            missing = str(tmp_path / "missing")
            assert missing in _text_of(await client.call_tool("cd", {"path": missing}), error=True)
            assert _text_of(await client.call_tool("pwd", {})) == str(target)


async def test_whoami_is_the_pid_of_the_child_process() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            result = await client.call_tool("whoami", {})
            pid = int(_text_of(result))
            assert result.structured_content == {"pid": pid}
            argv, ppid = _proc(pid)
            assert str(SERVER) in argv and ppid == os.getpid()


async def test_burn_spins_and_sleep_sleeps() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            assert int(_text_of(await client.call_tool("burn", {"ms": 20}))) > 0
            assert _text_of(await client.call_tool("sleep", {"seconds": 0.01})) == "slept"


@pytest.mark.parametrize("mode", MODES)
async def test_sample_is_answered_by_the_clients_sampling_callback(mode: str) -> None:
    asked: list[types.CreateMessageRequestParams] = []

    async def sampling(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        asked.append(params)
        [message] = params.messages
        assert isinstance(message.content, types.TextContent)
        answer = types.TextContent(type="text", text=f"you said {message.content.text}")
        return types.CreateMessageResult(role="assistant", content=answer, model="test-model")

    with trio.fail_after(TEST_TIMEOUT):
        async with _client(mode, sampling_callback=sampling) as client:
            result = await client.call_tool("sample", {"prompt": "hi"})
    assert _text_of(result) == "test-model: you said hi"
    assert result.structured_content == {"model": "test-model", "text": "you said hi"}
    [params] = asked
    assert params.max_tokens == 50 and params.messages[0].role == "user"


@pytest.mark.parametrize("mode", MODES)
async def test_sample_without_a_sampling_client_is_an_error_result(mode: str) -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client(mode) as client:
            result = await client.call_tool("sample", {"prompt": "hi"})
    assert "sampling/createMessage failed" in _text_of(result, error=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("answer", "text", "structured"),
    [
        (
            types.ElicitResult(action="accept", content={"name": "Ada"}),
            "accept: {'name': 'Ada'}",
            {"action": "accept", "content": {"name": "Ada"}},
        ),
        (types.ElicitResult(action="decline"), "decline: None", {"action": "decline", "content": None}),
    ],
)
async def test_elicit_returns_the_clients_answer(
    mode: str, answer: types.ElicitResult, text: str, structured: dict[str, Any]
) -> None:
    asked: list[types.ElicitRequestParams] = []

    async def elicitation(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params)
        return answer

    with trio.fail_after(TEST_TIMEOUT):
        async with _client(mode, elicitation_callback=elicitation) as client:
            result = await client.call_tool("elicit", {"message": "Who are you?"})
    assert _text_of(result) == text
    assert result.structured_content == structured
    [params] = asked
    assert isinstance(params, types.ElicitRequestFormParams)
    assert params.message == "Who are you?" and params.requested_schema == NAME_SCHEMA
