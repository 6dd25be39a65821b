"""The adapters against a real supervisor and real servers: tools in Anthropic's and OpenAI's formats,
results handed back to a model, LangChain tools (blocking and awaited, over both clients) and the
registry-style tool sets, which follow the live registry as servers come and go.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, ToolException

from supervisor.adapters import (
    AsyncToolRegistry,
    ToolRegistry,
    anthropic_tool_result,
    openai_tool_message,
)
from supervisor.adapters.langchain import SupervisorTool, SupervisorToolkit
from supervisor.client import AsyncSupervisorClient
from supervisor.client.errors import (
    InvalidArgumentsError,
    ToolExecutionError,
    ToolTimeoutError,
    UnknownToolError,
)
from supervisor.protocol import ToolResult
from tests.e2e.harness import SupervisorProcess, poll, stdio_test_server

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
CHANGE_TIMEOUT = 30.0  # seconds for a registry change (a reload starts a worker: ~1 s) to reach a tool set


def by_name(tools: list[BaseTool]) -> dict[str, BaseTool]:
    return {tool.name: tool for tool in tools}


def tool_call(name: str, args: dict[str, Any], id: str = "call_1") -> dict[str, Any]:
    return {"type": "tool_call", "id": id, "name": name, "args": args}


def write_config(sup: SupervisorProcess, servers: dict[str, Any]) -> None:
    sup.config.write_text(json.dumps({"mcpServers": servers}))


# ---------------------------------------------------------------- formats


def test_every_real_tool_is_listed_in_anthropic_and_openai_formats(shared: SupervisorProcess) -> None:
    listed = shared.client.list_tools()
    anthropic, openai = shared.client.anthropic_tools(), shared.client.openai_tools()
    assert [tool["name"] for tool in anthropic] == [tool["function"]["name"] for tool in openai]
    assert [tool["name"] for tool in anthropic] == [tool.name for tool in listed]
    for tool in anthropic:
        assert NAME.fullmatch(tool["name"]) and tool["input_schema"]["type"] == "object"
        assert isinstance(tool["input_schema"]["properties"], dict)
    echo = next(tool for tool in anthropic if tool["name"] == "mcp_test_echo")
    assert echo == {
        "name": "mcp_test_echo",
        "description": "Echo the text back.",
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    }

    async def listed_async() -> list[dict[str, Any]]:
        async with AsyncSupervisorClient(shared.endpoint) as client:
            return await client.anthropic_tools()

    assert asyncio.run(listed_async()) == anthropic


def test_real_results_are_handed_back_as_anthropic_blocks_and_openai_messages(
    shared: SupervisorProcess,
) -> None:
    image = shared.client.call_tool("mcp_test_image", timeout=10)
    png = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_1X1}}
    assert anthropic_tool_result(image, "toolu_1") == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [png, {"type": "text", "text": "a 1x1 png"}],
    }
    assert openai_tool_message(image, "call_1") == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "[image image/png, 70 bytes]\na 1x1 png",
    }

    mixed = anthropic_tool_result(shared.client.call_tool("mcp_test_mixed", timeout=10), "toolu_2")
    assert [block["text"] for block in mixed["content"]] == [
        "mixed content",
        "[audio audio/wav, 52 bytes]",
        "[resource link test://doc/1]",
        "embedded document 2",
    ]

    failed = shared.client.call_tool(
        "mcp_test_fail", {"message": "no disk"}, timeout=10, raise_on_error=False
    )
    assert anthropic_tool_result(failed, "toolu_3")["is_error"] is True
    assert openai_tool_message(failed, "call_3")["content"] == "Error: no disk"
    with pytest.raises(ToolTimeoutError) as timeout:
        shared.client.call_tool("mcp_test_slow", {"seconds": 30, "tag": "formats"}, timeout=0.3)
    assert anthropic_tool_result(timeout.value, "toolu_4")["content"][0]["text"].startswith("TIMEOUT: ")
    assert shared.client.call_tool("mcp_test_echo", {"text": "still here"}).text == "still here"


# ---------------------------------------------------------------- LangChain


def test_langchain_tools_call_real_tools_blocking_and_awaited(shared: SupervisorProcess) -> None:
    with SupervisorToolkit(shared.client, timeout=10) as toolkit:
        tools = by_name(toolkit.get_tools())
        assert set(tools) == {tool.name for tool in shared.client.list_tools()}
        assert all(isinstance(tool, SupervisorTool) for tool in tools.values())
        assert tools["mcp_test_echo"].invoke({"text": "hello"}) == "hello"
        message = tools["mcp_test_add"].invoke(tool_call("mcp_test_add", {"a": 2, "b": 3}))
        assert isinstance(message, ToolMessage) and message.status == "success"
        assert (message.content, message.tool_call_id) == ("5", "call_1")
        assert isinstance(message.artifact, ToolResult) and message.artifact.structured_content == {"sum": 5}
        assert "UTC" in tools["mcp_time_get_current_time"].invoke({"timezone": "UTC"})
        assert asyncio.run(tools["mcp_test_echo"].ainvoke({"text": "awaited"})) == "awaited"
        assert toolkit.get_tools()[0] is tools[toolkit.get_tools()[0].name]  # no change, the same tools


def test_langchain_tools_over_the_async_client_run_awaited(shared: SupervisorProcess) -> None:
    async def main() -> tuple[str, ToolMessage, list[BaseTool], SupervisorToolkit]:
        async with (
            AsyncSupervisorClient(shared.endpoint) as client,
            await SupervisorToolkit.aopen(client, timeout=10) as toolkit,
        ):
            tools = by_name(await toolkit.aget_tools())
            echoed = await tools["mcp_test_echo"].ainvoke({"text": "async"})
            failed = await tools["mcp_test_fail"].ainvoke(tool_call("mcp_test_fail", {"message": "nope"}))
            return echoed, failed, toolkit.get_tools(), toolkit

    echoed, failed, tools, toolkit = asyncio.run(main())
    assert echoed == "async"
    assert (
        failed.status == "error"
        and failed.content == "TOOL_ERROR: tool 'mcp_test_fail' reported an error: nope"
    )
    assert {tool.name for tool in tools} == {tool.name for tool in shared.client.list_tools()}
    with pytest.raises(NotImplementedError, match="made over an AsyncSupervisorClient: call it with ainvoke"):
        by_name(tools)["mcp_test_echo"].invoke({"text": "blocking"})
    assert toolkit.version == shared.client.tool_list().version


def test_failed_calls_become_tool_exceptions_naming_the_code(shared: SupervisorProcess) -> None:
    with SupervisorToolkit(shared.client, timeout=10, handle_tool_error=False) as toolkit:
        tools = by_name(toolkit.get_tools())
        failures = [
            (
                "mcp_test_fail",
                {"message": "disk full"},
                "TOOL_ERROR: tool 'mcp_test_fail' reported an error: disk full",
            ),
            ("mcp_test_raise_error", {"message": "broken"}, "SERVER_ERROR: "),
            ("mcp_test_echo", {"text": 5}, "INVALID_ARGUMENTS: "),
            ("mcp_test_echo", {}, "INVALID_ARGUMENTS: "),
        ]
        for name, arguments, message in failures:
            with pytest.raises(ToolException) as caught:
                tools[name].invoke(arguments)
            assert str(caught.value).startswith(message), (name, arguments, caught.value)
        assert tools["mcp_test_echo"].invoke({"text": "unharmed"}) == "unharmed"

    with SupervisorToolkit(shared.client, timeout=0.3, handle_tool_error=False) as hurried:
        slow = by_name(hurried.get_tools())["mcp_test_slow"]
        with pytest.raises(ToolException, match=r"^TIMEOUT: "):
            slow.invoke({"seconds": 30, "tag": "langchain"})

    with SupervisorToolkit(shared.client, timeout=10) as toolkit:  # handle_tool_error: the model reads it
        handled = by_name(toolkit.get_tools())["mcp_test_echo"].invoke(
            tool_call("mcp_test_echo", {"text": [1]})
        )
        assert handled.status == "error" and handled.content.startswith("INVALID_ARGUMENTS: ")


def test_a_server_added_by_a_reload_joins_the_toolkit_and_leaves_it_when_removed(
    start_supervisor: Start,
) -> None:
    first = stdio_test_server()
    sup = start_supervisor({"first": first})
    with SupervisorToolkit(sup.client, timeout=10) as toolkit:
        before = by_name(toolkit.get_tools())
        assert "mcp_first_echo" in before and not any(name.startswith("mcp_second_") for name in before)

        write_config(sup, {"first": first, "second": stdio_test_server()})
        assert sup.client.reload().added == ["second"]
        tools = poll(
            "the reloaded server's tools in the toolkit",
            lambda: (found := by_name(toolkit.get_tools())).get("mcp_second_echo") and found,
            CHANGE_TIMEOUT,
        )
        assert tools["mcp_second_echo"].invoke({"text": "new server"}) == "new server"
        assert tools["mcp_first_echo"] is before["mcp_first_echo"]  # unchanged tools are kept

        write_config(sup, {"first": first})
        assert sup.client.reload().removed == ["second"]
        poll(
            "the removed server's tools to leave the toolkit",
            lambda: not any(tool.name.startswith("mcp_second_") for tool in toolkit.get_tools()),
            CHANGE_TIMEOUT,
        )
        # a tool the agent still holds gives its model a clear error, nothing worse
        assert tools["mcp_second_echo"].invoke({"text": "gone"}).startswith("UNKNOWN_TOOL: ")
        assert toolkit.version == sup.client.tool_list().version


def test_a_tool_a_server_adds_while_running_joins_the_async_toolkit(start_supervisor: Start) -> None:
    sup = start_supervisor({"live": stdio_test_server()})

    async def main() -> tuple[str, set[str]]:
        async with (
            AsyncSupervisorClient(sup.endpoint) as client,
            await SupervisorToolkit.aopen(client, timeout=10) as toolkit,
        ):
            await client.call_tool("mcp_live_change_tools", {"add": ["fresh"], "remove": ["pid"]})
            with anyio.fail_after(CHANGE_TIMEOUT):
                tools = by_name(await toolkit.aget_tools())
                while "mcp_live_fresh" not in tools:
                    tools = by_name(await toolkit.aget_tools(wait=0.5))
            assert by_name(toolkit.get_tools()) == tools  # as aget_tools last found them
            return await tools["mcp_live_fresh"].ainvoke({"text": "fresh"}), set(tools)

    echoed, names = asyncio.run(main())
    assert echoed == "fresh" and "mcp_live_pid" not in names and "mcp_live_echo" in names


# ---------------------------------------------------------------- the registry-style tool set


def test_the_tool_registry_calls_through_and_follows_the_live_registry(start_supervisor: Start) -> None:
    sup = start_supervisor({"live": stdio_test_server()})
    with ToolRegistry(sup.client, timeout=10) as registry:
        echo = registry.get("mcp_live_echo")
        assert echo is not None and echo.description == "Echo the text back."
        assert echo.input_schema["properties"] == {"text": {"type": "string"}}
        assert (echo.info.server, echo.info.original_name) == ("live", "echo")
        assert echo.call({"text": "through"}).text == "through"
        assert registry.call("mcp_live_add", {"a": 1, "b": 2}).structured_content == {"sum": 3}
        assert registry.get("mcp_live_nothing") is None

        registry.call("mcp_live_change_tools", {"add": ["fresh"], "remove": ["pid"]})
        poll(
            "the registry adapter to see the new tool",
            lambda: "mcp_live_fresh" in {d.name for d in registry.list(wait=0.5)},
            CHANGE_TIMEOUT,
        )
        assert registry.get("mcp_live_pid") is None
        assert registry.get("mcp_live_echo") is echo  # unchanged: the same definition
        assert registry.version == sup.client.tool_list().version

        with pytest.raises(UnknownToolError, match="mcp_live_pid"):
            registry.call("mcp_live_pid")
        with pytest.raises(InvalidArgumentsError):
            registry.call("mcp_live_echo", {"text": {"not": "a string"}})
        with pytest.raises(ToolExecutionError, match="reported an error: no"):
            registry.call("mcp_live_fail", {"message": "no"})
        assert registry.call("mcp_live_fresh", {"text": "still serving"}).text == "still serving"

    with ToolRegistry(sup.client, raise_on_error=False) as lenient:
        assert lenient.call("mcp_live_fail", {"message": "no"}).is_error


async def _async_registry(endpoint: str) -> tuple[str, set[str], bool]:
    async with (
        AsyncSupervisorClient(endpoint) as client,
        await AsyncToolRegistry.open(client, timeout=10) as registry,
    ):
        echo = await registry.get("mcp_live_echo")
        assert echo is not None
        echoed = (await echo.call({"text": "awaited"})).text
        await registry.call("mcp_live_change_tools", {"add": ["late"]})
        with anyio.fail_after(CHANGE_TIMEOUT):
            names = {d.name for d in await registry.list()}
            while "mcp_live_late" not in names:
                names = {d.name for d in await registry.list(wait=0.5)}
        return echoed, names, await registry.get("mcp_live_echo") is echo


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_async_tool_registry_calls_through_and_follows_on_asyncio_and_trio(
    start_supervisor: Start, backend: str
) -> None:
    sup = start_supervisor({"live": stdio_test_server()})
    echoed, names, same = anyio.run(_async_registry, sup.endpoint, backend=backend)
    assert echoed == "awaited" and "mcp_live_late" in names and same
    assert names == {tool.name for tool in sup.client.list_tools()}
