"""The stdio MCP test server (tests/servers/mcp_test_server.py) behaves as the e2e tests expect."""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import TextIO

import jsonschema
import mcp_types as types
import pytest
import trio
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.servers.mcp_test_server import PARKED_LINE

SERVER = Path(__file__).resolve().parents[1] / "servers" / "mcp_test_server.py"
BASE_TOOLS = {
    "echo",
    "ask",
    "change_tools",
    "add",
    "slow",
    "crash",
    "fail",
    "raise_error",
    "image",
    "mixed",
    "empty",
    "stderr",
    "bad_schema",
    "env",
    "pid",
    "weird name/with.chars",
    "spawn",
    "flood_stderr",
    "garbage_stdout",
    "hang",
    "progress",
}
TEST_TIMEOUT = 20
MARKER_TIMEOUT = 10
ALIVE_WINDOW = 0.5
CLIENT_INFO = {"name": "raw", "version": "0"}
INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": CLIENT_INFO},
    }
).encode()


def _params(**env: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[str(SERVER)], env=env)


def _client(**env: str) -> Client:
    return Client(_params(**env))


def _quiet_client(errlog: TextIO, **env: str) -> Client:
    """A client whose server writes its stderr to ``errlog`` instead of the test's stderr."""
    return Client(stdio_client(_params(**env), errlog=errlog))


def _proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, session) from /proc/<pid>/stat, None once the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    state, ppid, pgrp, session = raw[raw.rindex(")") + 2 :].split()[:4]
    return state, int(ppid), int(pgrp), int(session)


def _is_gone(pid: int) -> bool:
    """Dead: no /proc entry, or a zombie nobody has reaped yet."""
    stat = _proc_stat(pid)
    return stat is None or stat[0] == "Z"


def _fd_targets(pid: int) -> dict[int, str]:
    fd_dir = Path(f"/proc/{pid}/fd")
    return {int(fd.name): os.readlink(fd) for fd in fd_dir.iterdir()}


def _kill_quietly(pid: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


async def _wait_until(predicate: Callable[[], bool]) -> None:
    with trio.fail_after(MARKER_TIMEOUT):
        while True:
            if predicate():
                return
            await trio.sleep(0.02)


async def _assert_stays_alive(process: trio.Process) -> None:
    """Poll for ALIVE_WINDOW seconds that the process has not exited (poll() also reaps a zombie)."""
    deadline = trio.current_time() + ALIVE_WINDOW
    while trio.current_time() < deadline:
        assert process.poll() is None, f"the server exited with {process.returncode}"
        await trio.sleep(0.02)


class _Lines:
    """Reads newline-terminated lines from a trio receive stream."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = b""

    async def readline(self) -> str:
        while b"\n" not in self._buffer:
            chunk = await self._stream.receive_some()
            if not chunk:
                pytest.fail(f"end of stream; unterminated rest: {self._buffer!r}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace")

    async def wait_for(self, expected: str) -> None:
        """Read lines until one equals ``expected`` (bounded by the caller's deadline)."""
        while await self.readline() != expected:
            pass


async def _open_raw_server(**env: str) -> trio.Process:
    return await trio.lowlevel.open_process(
        [sys.executable, str(SERVER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "TEST_SERVER_STARTUP_STDERR": "ready", **env},
    )


async def _close_raw_server(process: trio.Process) -> None:
    if process.returncode is None:
        process.kill()
    with trio.CancelScope(shield=True), trio.fail_after(MARKER_TIMEOUT):
        await process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                await stream.aclose()


async def _wait_for_file(path: Path) -> None:
    """Poll for a marker file the server writes, for at most MARKER_TIMEOUT seconds."""
    with trio.fail_after(MARKER_TIMEOUT):
        while True:
            if await trio.Path(path).exists():
                return
            await trio.sleep(0.02)


def _text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1
    item = result.content[0]
    assert isinstance(item, types.TextContent)
    return item.text


async def test_tool_listing_is_paginated_and_following_cursors_yields_every_tool() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client(TEST_SERVER_PAGE_SIZE="3", TEST_SERVER_EXTRA_TOOLS="7") as client:
            pages: list[list[str]] = []
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                pages.append([tool.name for tool in page.tools])
                cursor = page.next_cursor
                if cursor is None:
                    break
    names = [name for page in pages for name in page]
    assert len(pages) == -(-(len(BASE_TOOLS) + 7) // 3)
    assert all(len(page) <= 3 for page in pages)
    assert len(names) == len(set(names))
    assert set(names) == BASE_TOOLS | {f"extra_{i}" for i in range(7)}


async def test_unpaginated_listing_returns_every_tool_in_one_page() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            page = await client.list_tools()
    assert page.next_cursor is None
    assert {tool.name for tool in page.tools} == BASE_TOOLS


async def test_echo_returns_its_text() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            result = await client.call_tool("echo", {"text": "hello"})
    assert not result.is_error
    assert _text_of(result) == "hello"


async def test_progress_sends_every_notification_before_its_answer() -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            result = await client.call_tool(
                "progress", {"count": 3, "message": "step"}, progress_callback=on_progress
            )
            quiet = await client.call_tool("progress", {"count": 2})  # no progressToken: nothing sent
    assert _text_of(result) == "sent 3" and _text_of(quiet) == "sent 2"
    assert sorted(seen) == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_add_returns_the_sum_as_text_and_as_structured_content() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            result = await client.call_tool("add", {"a": 2, "b": 3.5})
    assert _text_of(result) == "5.5"
    assert result.structured_content == {"sum": 5.5}


async def test_fail_returns_an_error_result_rather_than_a_protocol_error() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            result = await client.call_tool("fail", {"message": "it broke"})
    assert result.is_error
    assert _text_of(result) == "it broke"


async def test_raise_error_and_unknown_tools_raise_mcp_errors() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            with pytest.raises(MCPError) as raised:
                await client.call_tool("raise_error", {"message": "kaboom"})
            with pytest.raises(MCPError) as unknown:
                await client.call_tool("no_such_tool", {})
    assert (raised.value.code, raised.value.message) == (types.INTERNAL_ERROR, "kaboom")
    assert unknown.value.code == types.INVALID_PARAMS


async def test_cancelling_a_slow_call_writes_the_cancelled_marker(tmp_path: Path) -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client(TEST_SERVER_STATE_DIR=str(tmp_path)) as client:
            call_scope = trio.CancelScope()

            async def call_slow() -> None:
                with call_scope:
                    await client.call_tool("slow", {"seconds": 60, "tag": "nap"})
                    pytest.fail("the slow call was expected to be cancelled")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call_slow)
                await _wait_for_file(tmp_path / "nap.started")
                call_scope.cancel()
            # Still connected, so the marker comes from notifications/cancelled, not from shutdown.
            await _wait_for_file(tmp_path / "nap.cancelled")
            assert _text_of(await client.call_tool("echo", {"text": "alive"})) == "alive"


async def test_slow_call_that_is_not_cancelled_finishes_with_its_tag() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            result = await client.call_tool("slow", {"seconds": 0.05, "tag": "quick"})
    assert _text_of(result) == "done quick"


async def test_bad_schema_is_advertised_with_a_schema_jsonschema_rejects_and_the_rest_are_valid() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            result = await client.call_tool("bad_schema", {})
    assert _text_of(result) == "bad"
    with pytest.raises(jsonschema.SchemaError):
        jsonschema.Draft202012Validator.check_schema(tools.pop("bad_schema").input_schema)
    for tool in tools.values():
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        assert tool.input_schema["type"] == "object"
    assert tools["add"].output_schema is not None


async def test_image_and_mixed_return_every_content_type() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            image = await client.call_tool("image", {})
            mixed = await client.call_tool("mixed", {})
            empty = await client.call_tool("empty", {})
    assert [type(item) for item in image.content] == [types.ImageContent, types.TextContent]
    assert isinstance(image.content[0], types.ImageContent)
    assert base64.b64decode(image.content[0].data).startswith(b"\x89PNG\r\n\x1a\n")
    kinds = [item.type for item in mixed.content]
    assert kinds == ["text", "audio", "resource_link", "resource"]
    link, embedded = mixed.content[2], mixed.content[3]
    assert isinstance(link, types.ResourceLink) and link.uri == "test://doc/1"
    assert isinstance(embedded, types.EmbeddedResource) and embedded.resource.uri == "test://doc/2"
    assert empty.content == []


async def test_env_name_and_pid_reflect_the_server_process_configuration() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client(TEST_SERVER_NAME="renamed", MY_SETTING="xyz") as client:
            assert client.server_info is not None and client.server_info.name == "renamed"
            assert _text_of(await client.call_tool("env", {"name": "MY_SETTING"})) == "xyz"
            assert _text_of(await client.call_tool("env", {"name": "UNSET_SETTING"})) == ""
            assert int(_text_of(await client.call_tool("pid", {}))) > 0
            assert _text_of(await client.call_tool("weird name/with.chars", {})) == "weird"


async def test_crash_kills_the_server_and_the_pending_call_fails_with_connection_closed() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            with pytest.raises(MCPError) as crashed:
                await client.call_tool("crash", {"code": 7})
    assert crashed.value.code == types.CONNECTION_CLOSED


async def test_spawn_children_are_quiet_sleepers_and_detached_ones_escape_the_process_group() -> None:
    spawned: list[int] = []
    try:
        with trio.fail_after(TEST_TIMEOUT):
            async with _client() as client:
                server_pid = int(_text_of(await client.call_tool("pid", {})))
                server_stat = _proc_stat(server_pid)
                assert server_stat is not None
                server_group = server_stat[2]
                attached = json.loads(_text_of(await client.call_tool("spawn", {"count": 2})))
                spawned += attached
                detached = json.loads(_text_of(await client.call_tool("spawn", {"count": 2, "detach": True})))
                spawned += detached
                assert len(set(spawned)) == 4 and server_pid not in spawned
                for pid in attached:
                    stat = _proc_stat(pid)
                    assert stat is not None and stat[0] != "Z"
                    assert (stat[1], stat[2]) == (server_pid, server_group)
                for pid in detached:
                    stat = _proc_stat(pid)
                    assert stat is not None and stat[0] != "Z"
                    # a session (and group) of its own, and no longer the server's child
                    assert stat[2] not in (server_group, os.getpgrp())
                    assert (stat[2], stat[3]) == (pid, pid)
                    assert stat[1] != server_pid
                for pid in spawned:
                    targets = _fd_targets(pid)
                    assert [targets[fd] for fd in (0, 1, 2)] == ["/dev/null"] * 3
                    assert not [t for t in targets.values() if t.startswith(("pipe:", "socket:"))], targets
                # What a supervisor does to stop a server: kill its process group.
                os.killpg(server_group, signal.SIGKILL)
                await _wait_until(lambda: all(_is_gone(pid) for pid in [server_pid, *attached]))
            assert not [pid for pid in detached if _is_gone(pid)]
    finally:
        for pid in spawned:
            _kill_quietly(pid)
    with trio.fail_after(TEST_TIMEOUT):
        await _wait_until(lambda: all(_is_gone(pid) for pid in spawned))


async def test_flood_stderr_writes_the_megabytes_as_lines_and_the_session_keeps_working(
    tmp_path: Path,
) -> None:
    log = tmp_path / "stderr.log"
    with log.open("w") as errlog, trio.fail_after(TEST_TIMEOUT):
        async with _quiet_client(errlog) as client:
            assert _text_of(await client.call_tool("flood_stderr", {"megabytes": 2})) == "flooded"
            assert _text_of(await client.call_tool("echo", {"text": "alive"})) == "alive"
            short = await client.call_tool("flood_stderr", {"megabytes": 0.001, "line_length": 50})
            assert _text_of(short) == "flooded"
    flood = [line for line in log.read_bytes().splitlines(keepends=True) if line.startswith(b"flood ")]
    big, small = flood[: -(-2 * 2**20 // 200)], flood[-(-2 * 2**20 // 200) :]
    assert sum(map(len, big)) == 2 * 2**20
    assert {len(line) for line in big[:-1]} == {200}
    assert sum(map(len, small)) == int(0.001 * 2**20)
    assert {len(line) for line in small[:-1]} == {50}


async def test_garbage_and_a_huge_line_on_the_protocol_stdout_do_not_stop_the_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            result = await client.call_tool("garbage_stdout", {"lines": 10, "huge_bytes": 1_000_000})
            assert _text_of(result) == "garbage sent"
            assert _text_of(await client.call_tool("echo", {"text": "alive"})) == "alive"
    # Proof the garbage went to the protocol stream (not to the diverted fd 1, i.e. stderr):
    # the SDK client logged one parse failure per garbage line, the huge one included.
    failures = [
        record
        for record in caplog.records
        if record.name == "mcp.client.stdio" and record.levelno == logging.ERROR
        if "Failed to parse JSONRPC message" in record.getMessage()
    ]
    assert len(failures) == 11


async def test_hang_blocks_the_whole_server_so_even_pings_go_unanswered() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            server_pid = int(_text_of(await client.call_tool("pid", {})))

            async def call_hang() -> None:
                with pytest.raises(MCPError) as killed:
                    await client.call_tool("hang", {})
                assert killed.value.code == types.CONNECTION_CLOSED

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call_hang)
                # Requests are answered until the hang handler runs, and then never again. (The
                # client's send_ping() raises MCPDeprecationWarning outside mode="legacy", an error
                # under filterwarnings=error, so a cheap tools/list stands in for the ping.)
                while True:
                    with trio.move_on_after(ALIVE_WINDOW) as probe_scope:
                        await client.list_tools()
                    if probe_scope.cancelled_caught:
                        break
                with trio.move_on_after(ALIVE_WINDOW) as echo_scope:
                    await client.call_tool("echo", {"text": "anyone?"})
                assert echo_scope.cancelled_caught
                os.kill(server_pid, signal.SIGKILL)


@pytest.mark.parametrize("hang", [False, True])
async def test_hang_init_never_answers_initialize(hang: bool) -> None:
    process = await _open_raw_server(**({"TEST_SERVER_HANG_INIT": "1"} if hang else {}))
    try:
        with trio.fail_after(TEST_TIMEOUT):
            assert process.stdin is not None and process.stdout is not None and process.stderr is not None
            await _Lines(process.stderr).wait_for("ready")
            await process.stdin.send_all(INITIALIZE + b"\n")
            if hang:
                with trio.move_on_after(1):
                    answer = await process.stdout.receive_some()
                    pytest.fail(f"the server answered initialize: {answer!r}")
                assert process.poll() is None
            else:  # the control: the same request is answered without TEST_SERVER_HANG_INIT
                reply = json.loads(await _Lines(process.stdout).readline())
                assert reply["id"] == 1 and "result" in reply
    finally:
        await _close_raw_server(process)


async def test_ignore_sigterm_survives_sigterm_and_stdin_eof_and_dies_only_on_sigkill() -> None:
    process = await _open_raw_server(TEST_SERVER_IGNORE_SIGTERM="1")
    try:
        with trio.fail_after(TEST_TIMEOUT):
            assert process.stdin is not None and process.stderr is not None
            stderr = _Lines(process.stderr)
            await stderr.wait_for("ready")  # written after SIG_IGN is in place
            os.kill(process.pid, signal.SIGTERM)
            await _assert_stays_alive(process)
            await process.stdin.aclose()
            await stderr.wait_for(PARKED_LINE)  # the stdio session is over
            await _assert_stays_alive(process)
            os.kill(process.pid, signal.SIGTERM)
            await _assert_stays_alive(process)
            os.kill(process.pid, signal.SIGKILL)
            assert await process.wait() == -signal.SIGKILL
    finally:
        await _close_raw_server(process)


async def test_resources_and_prompts_are_offered_only_when_asked_for() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with _client() as client:
            assert client.server_capabilities.resources is None and client.server_capabilities.prompts is None
        async with _client(TEST_SERVER_RESOURCES="1", TEST_SERVER_PAGE_SIZE="2") as client:
            first = await client.list_resources()
            assert first.next_cursor is not None
            rest = await client.list_resources(cursor=first.next_cursor)
            uris = [str(r.uri) for r in first.resources + rest.resources]
            assert uris == ["test://doc/1", "test://doc/2", "test://image/pixel.png"]
            doc = (await client.read_resource("test://doc/9")).contents[0]
            assert isinstance(doc, types.TextResourceContents) and doc.text == "document 9"
            pixel = (await client.read_resource("test://image/pixel.png")).contents[0]
            assert (
                isinstance(pixel, types.BlobResourceContents)
                and base64.b64decode(pixel.blob)[:4] == b"\x89PNG"
            )
            greeting = await client.get_prompt("greet", {"name": "Ann"})
            assert greeting.messages[0].content == types.TextContent(text="Hello, Ann!")
            assert [p.name for p in (await client.list_prompts()).prompts] == ["greet", "plain prompt/v1"]
            with pytest.raises(MCPError, match="Resource not found"):
                await client.read_resource("test://nothing")
