"""Tolerant listing with real processes: one bad entry in a server's tools/list (prompts/list,
resources/list, resources/templates/list) costs only that entry, never the server; and a worker
that gives up says why, in ``status`` and in the log.

Against ``tests/servers/hostile_server.py``, which serves the pages a test writes to a JSON file
(read again for every listing request), over stdio or plain HTTP.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor.client.errors import ServerError
from supervisor.protocol import ToolInfo
from tests.e2e.harness import SupervisorProcess, free_port, poll

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
HOSTILE_SERVER = Path(__file__).parent.parent / "servers" / "hostile_server.py"
NO_ARGUMENTS = {"type": "object", "properties": {}}
ECHO = {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
CONTROL = {"hostile_changed", "hostile_garbage"}  # always listed by the hostile server
RELIST_TIMEOUT = 20.0  # seconds for a list_changed to reach the registry


def deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


BAD_TOOLS: list[tuple[Any, str]] = [  # (entry, what the warning says); each listed after ECHO and BARE
    (
        {"name": "type5", "inputSchema": {"type": 5}},
        "server 'h' tool 'type5' left out: inputSchema has type 5",
    ),
    (
        {"name": "str", "inputSchema": {"type": "string"}},
        "tool 'str' left out: inputSchema has type 'string'",
    ),
    ({"name": "number", "inputSchema": 5}, "tool 'number' left out: inputSchema is int, not an object"),
    (
        {"name": "badprops", "inputSchema": {"type": "object", "properties": 5}},
        "tool 'badprops' left out: inputSchema is not valid JSON Schema at properties",
    ),
    (
        {"name": "deep", "inputSchema": deep_schema(100)},
        "tools/list entry 7 ('deep') left out: its fields are nested deeper than 64 levels",
    ),
    (5, "server 'h' tools/list entry 8 left out: it is int, not an object"),
    ({"description": "no name"}, "tools/list entry 9 left out: it has no name"),
    ({"name": 7}, "tools/list entry 10 left out: its name is int, not a string"),
    ({"name": "echo", "description": "again"}, "server 'h' tool 'echo' listed twice; keeping the first"),
    # JSON allows any integer; the wire to the supervisor (msgpack) does not. It ended the worker.
    (
        {"name": "huge", "inputSchema": {"type": "object", "properties": {"n": {"maximum": 2**70}}}},
        "tools/list entry 12 ('huge') left out: its fields/inputSchema/properties/n/maximum: the integer "
        "1180591620717411303424 does not fit in 64 bits",
    ),
    (
        {"name": "hugeout", "outputSchema": {"type": "object", "x": -(2**64)}},
        "tools/list entry 13 ('hugeout') left out: its fields/outputSchema/x: the integer "
        "-18446744073709551616 does not fit in 64 bits",
    ),
]


def write_pages(path: Path, **pages: Any) -> None:
    path.write_text(json.dumps(pages))


def hostile(pages: Path, **spec: Any) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": [str(HOSTILE_SERVER)],
        "env": {"HOSTILE_PAGES": str(pages)},
        **spec,
    }


def tools_of(sup: SupervisorProcess, server: str = "h") -> dict[str, ToolInfo]:
    return {tool.original_name: tool for tool in sup.client.list_tools() if tool.server == server}


def relist(sup: SupervisorProcess, server: str = "h") -> None:
    """Have the server announce a tools change; wait until the registry moved."""
    version = sup.client.tool_list().version
    sup.client.call_tool(f"mcp_{server}_hostile_changed", {})
    poll("the registry to change", lambda: sup.client.tool_list().version > version, RELIST_TIMEOUT)


@pytest.fixture
def pages(tmp_path: Path) -> Path:
    return tmp_path / "pages.json"


def test_a_tool_without_an_input_schema_or_with_an_empty_one_is_served_and_takes_arguments(
    start_supervisor: Start, pages: Path
) -> None:
    write_pages(pages, tools=[{"name": "bare"}, {"name": "empty", "inputSchema": {}}, ECHO])
    sup = start_supervisor({"h": hostile(pages)})
    tools = tools_of(sup)
    assert tools.keys() == {"bare", "empty", "echo", *CONTROL}
    assert tools["bare"].input_schema == tools["empty"].input_schema == NO_ARGUMENTS
    assert sup.client.call_tool("mcp_h_bare", {}).text == "{}"
    assert sup.client.call_tool("mcp_h_empty", {"x": 1}).text == '{"x": 1}'


def test_each_unusable_tool_is_left_out_with_one_warning_and_the_rest_are_served(
    start_supervisor: Start, pages: Path
) -> None:
    listed = [ECHO, {"name": "bare"}, *(entry for entry, _ in BAD_TOOLS)]
    write_pages(pages, tools=listed)
    sup = start_supervisor({"h": hostile(pages)})
    assert tools_of(sup).keys() == {"echo", "bare", *CONTROL}
    assert tools_of(sup)["echo"].description == ""  # the first of the two
    for _, warning in BAD_TOOLS:
        assert sup.log.count(warning) == 1, warning
    # Listed again (one tool more): nothing new to say about the bad ones.
    write_pages(pages, tools=[*listed, {"name": "later"}])
    relist(sup)
    assert tools_of(sup).keys() == {"echo", "bare", "later", *CONTROL}
    for _, warning in BAD_TOOLS:
        assert sup.log.count(warning) == 1, warning
    assert sup.client.call_tool("mcp_h_later", {"y": "z"}).text == '{"y": "z"}'
    status = sup.status()["h"]
    assert (status.state, status.restarts, status.tools) == ("ready", 0, 5)


def test_a_tool_fixed_by_the_server_is_served_on_the_next_listing(
    start_supervisor: Start, pages: Path
) -> None:
    write_pages(pages, tools=[ECHO, {"name": "flaky", "inputSchema": {"type": 5}}])
    sup = start_supervisor({"h": hostile(pages)})
    assert "flaky" not in tools_of(sup)
    write_pages(pages, tools=[ECHO, {"name": "flaky", "inputSchema": {"type": "object"}}])
    relist(sup)
    assert sup.client.call_tool("mcp_h_flaky", {}).text == "{}"


def test_a_tool_whose_description_is_not_utf8_is_left_out_and_the_rest_served(
    start_supervisor: Start, pages: Path
) -> None:
    write_pages(pages, tools=[ECHO, {"name": "latin", "description": "café"}, {"name": "bare"}], latin1=True)
    sup = start_supervisor({"h": hostile(pages)})
    assert tools_of(sup).keys() == {"echo", "bare", *CONTROL}
    assert (
        "server 'h' tools/list entry 2 left out: it does not decode: a string is not valid UTF-8" in sup.log
    )
    assert sup.client.call_tool("mcp_h_bare", {}).text == "{}"


def test_bad_entries_on_any_page_of_a_paginated_listing_cost_only_themselves(
    start_supervisor: Start, pages: Path
) -> None:
    tools = [{"name": f"t{i}"} if i % 3 else {"name": f"t{i}", "inputSchema": []} for i in range(12)]
    write_pages(pages, tools=tools, pageSize=2)
    sup = start_supervisor({"h": hostile(pages)})
    assert tools_of(sup).keys() == {f"t{i}" for i in range(12) if i % 3} | CONTROL


def test_a_cursor_that_is_not_a_string_ends_the_listing_with_a_warning(
    start_supervisor: Start, pages: Path
) -> None:
    write_pages(pages, tools=[ECHO, {"name": "second"}, {"name": "third"}], pageSize=2, cursor=5)
    sup = start_supervisor({"h": hostile(pages)})
    assert tools_of(sup).keys() == {"echo", "second"}
    assert "server 'h' tools/list: nextCursor is int, not a string; listing ends here" in sup.log


def test_prompts_resources_and_templates_skip_a_bad_entry_with_a_warning_and_serve_the_rest(
    start_supervisor: Start, pages: Path
) -> None:
    write_pages(
        pages,
        tools=[ECHO],
        prompts=[{"name": "greet", "arguments": [{"name": "who"}]}, {"name": 5}, "x", {"name": "bye"}],
        resources=[{"uri": "memo://a", "name": "a"}, {"name": "no uri"}, {"uri": "memo://b", "name": "b"}],
        resourceTemplates=[{"uriTemplate": 7}, {"uriTemplate": "memo://{x}", "name": "x"}],
    )
    sup = start_supervisor({"h": hostile(pages)})
    assert [prompt.original_name for prompt in sup.client.list_prompts("h")] == ["greet", "bye"]
    assert [resource.uri for resource in sup.client.list_resources("h")] == ["memo://a", "memo://b"]
    assert [template.uri_template for template in sup.client.list_resource_templates("h")] == ["memo://{x}"]
    assert "who" in sup.client.get_prompt("mcp_h_greet", {"who": "you"}).text
    log = sup.log
    assert "server 'h' prompts/list entry 2 left out" in log
    assert "server 'h' prompts/list entry 3 left out: it is str, not an object" in log
    assert "server 'h' resources/list entry 2 left out" in log
    assert "server 'h' resources/templates/list entry 1 left out" in log
    sup.client.list_prompts("h")
    assert sup.log.count("server 'h' prompts/list entry 3 left out") == 1  # said once


@pytest.mark.parametrize("answer", [5, {"tools": 5}, {"tools": {"echo": ECHO}}])
def test_a_tools_list_answer_that_is_no_listing_fails_start_up_naming_it_not_the_servers_exit(
    start_supervisor: Start, pages: Path, answer: Any
) -> None:
    write_pages(pages, results={"tools/list": answer})
    sup = start_supervisor({"h": hostile(pages, restart="temporary")}, wait=False)
    row = sup.wait_states(h="failed")["h"]
    assert (row.last_error or "").startswith("start-up failed: tools/list: "), row.last_error
    assert "status 0" not in (row.last_error or "")
    assert f"server 'h': {row.last_error}" in sup.log


def test_a_tools_list_answer_nested_too_deeply_to_decode_fails_start_up_at_once_naming_it(
    start_supervisor: Start, pages: Path
) -> None:
    write_pages(pages, rawResults={"tools/list": '{"tools": [' + "[" * 1000 + "]" * 1000 + "]}"})
    sup = start_supervisor({"h": hostile(pages, restart="temporary", startTimeout=60)}, wait=False)
    row = sup.wait_states(timeout=20, h="failed")["h"]
    assert (row.last_error or "").startswith(
        "start-up failed: tools/list: MCPError: the server's answer does not decode: nested too deeply"
    ), row.last_error


def test_an_initialize_answer_the_sdk_rejects_fails_start_up_naming_it(
    start_supervisor: Start, pages: Path
) -> None:
    write_pages(pages, tools=[ECHO], protocolVersion="1999-01-01")
    sup = start_supervisor({"h": hostile(pages, restart="temporary")}, wait=False)
    row = sup.wait_states(h="failed")["h"]
    assert (row.last_error or "").startswith("start-up failed: initialize: "), row.last_error
    assert "1999-01-01" in (row.last_error or "")


def test_a_relisting_that_fails_keeps_the_tools_and_warns(start_supervisor: Start, pages: Path) -> None:
    write_pages(pages, tools=[ECHO])
    sup = start_supervisor({"h": hostile(pages)})
    write_pages(pages, results={"tools/list": {"tools": 5}})
    sup.client.call_tool("mcp_h_hostile_changed", {})
    poll("the warning", lambda: "listing the tools again failed: tools/list: " in sup.log, RELIST_TIMEOUT)
    assert sup.client.call_tool("mcp_h_echo", {"text": "kept"}).text == '{"text": "kept"}'
    assert sup.status()["h"].restarts == 0


def test_ten_thousand_tools_on_one_page_are_all_served(start_supervisor: Start, pages: Path) -> None:
    tools = [
        {
            "name": f"tool_{i}",
            "inputSchema": {"type": "object", "properties": {f"p{i % 10}": {"type": "string"}}},
        }
        for i in range(10_000)
    ]
    write_pages(pages, tools=tools)
    sup = start_supervisor({"h": hostile(pages)})
    assert sup.status()["h"].tools == 10_000 + len(CONTROL)
    assert sup.client.call_tool("mcp_h_tool_9999", {"p9": "x"}).text == '{"p9": "x"}'


# --- a remote server -------------------------------------------------------------------------------


@pytest.fixture
def http_hostile(pages: Path) -> Iterator[str]:
    """The hostile server over plain JSON-over-HTTP (streamable HTTP without streams); yields its URL."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(HOSTILE_SERVER), "--http", str(port)],
        env={"HOSTILE_PAGES": str(pages), "PATH": ""},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        assert server.poll() is None, f"the HTTP hostile server exited with {server.returncode}"
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    try:
        poll("the HTTP hostile server to listen", listening, 30)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.kill()
        server.wait(10)


def test_a_remote_server_s_bad_tools_cost_only_themselves_and_its_output_schemas_still_check(
    start_supervisor: Start, pages: Path, http_hostile: str
) -> None:
    checked = {
        "name": "checked",
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    }
    write_pages(
        pages, tools=[ECHO, {"name": "bare"}, {"name": "type5", "inputSchema": {"type": 5}}, 5, checked]
    )
    sup = start_supervisor({"r": {"url": http_hostile}})
    assert tools_of(sup, "r").keys() == {"echo", "bare", "checked", *CONTROL}
    assert "server 'r' tool 'type5' left out: inputSchema has type 5" in sup.log
    assert sup.client.call_tool("mcp_r_bare", {}).text == "{}"
    assert sup.client.call_tool("mcp_r_checked", {"n": 3}).structured_content == {"n": 3}
    with pytest.raises(ServerError, match="structuredContent does not match the outputSchema: n: "):
        sup.client.call_tool("mcp_r_checked", {"n": "three"})
