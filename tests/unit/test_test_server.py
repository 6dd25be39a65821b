"""The stdio MCP test server (tests/servers/mcp_test_server.py) behaves as the e2e tests expect."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import jsonschema
import mcp_types as types
import pytest
import trio
from mcp import Client, MCPError, StdioServerParameters

SERVER = Path(__file__).resolve().parents[1] / "servers" / "mcp_test_server.py"
BASE_TOOLS = {
    "echo",
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
}
TEST_TIMEOUT = 20
MARKER_TIMEOUT = 10


def _client(**env: str) -> Client:
    return Client(StdioServerParameters(command=sys.executable, args=[str(SERVER)], env=env))


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
    assert len(pages) == 7
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
