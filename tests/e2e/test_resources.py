"""Resources and prompts through the supervisor, as MCP hosts offer them, with real processes.

One supervisor serves ``@modelcontextprotocol/server-everything`` over stdio (``ev``), the
repository's test server with its resources and prompts (``docs``, listing two per page), the
test server without them (``plain``), and one whose resources/list outlasts its 1 s budget
(``slowlist``: every aggregated resources listing leaves it out).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Callable

import pytest
import trio

from supervisor.client import AsyncSupervisorClient
from supervisor.client.errors import (
    BadRequestError,
    InvalidArgumentsError,
    ServerError,
    ServerUnavailableError,
    ToolTimeoutError,
    UnknownToolError,
)
from tests.e2e.harness import EVERYTHING, NODE, SupervisorProcess, npm_package, poll, stdio_test_server
from tests.servers.mcp_test_server import PNG_1X1

pytestmark = pytest.mark.e2e

CLI_TIMEOUT = 60  # seconds for one CLI command
EV_DOC = "demo://resource/static/document/features.md"


@pytest.fixture(scope="module")
def sup(start_module_supervisor: Callable[..., SupervisorProcess]) -> SupervisorProcess:
    return start_module_supervisor(
        {
            "ev": {"command": str(NODE), "args": [str(npm_package(EVERYTHING)), "stdio"], "toolTimeout": 20},
            "docs": stdio_test_server(TEST_SERVER_RESOURCES=1, TEST_SERVER_PAGE_SIZE=2),
            "plain": stdio_test_server(),
            "slowlist": {
                **stdio_test_server(TEST_SERVER_RESOURCES=1, TEST_SERVER_LIST_DELAY=60),
                "toolTimeout": 1,
            },
        },
    )


def cli(sup: SupervisorProcess, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "supervisor", *args, "--endpoint", sup.endpoint]
    return subprocess.run(command, capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False)


def test_listing_without_a_server_aggregates_every_ready_server(sup: SupervisorProcess) -> None:
    resources = sup.client.list_resources()
    by_server = {(r.server, r.uri) for r in resources}
    # every page of the test server's paginated listing (two per page), none from the plain server
    assert {uri for server, uri in by_server if server == "docs"} == {
        "test://doc/1",
        "test://doc/2",
        "test://image/pixel.png",
    }
    assert ("ev", EV_DOC) in by_server
    assert {r.server for r in resources} == {"ev", "docs"}
    assert [r.server for r in resources] == sorted((r.server for r in resources), key=["ev", "docs"].index)
    pixel = next(r for r in resources if r.uri == "test://image/pixel.png")
    assert (pixel.name, pixel.mime_type, pixel.description) == ("pixel", "image/png", "A 1x1 PNG.")

    templates = {(t.server, t.uri_template) for t in sup.client.list_resource_templates()}
    assert {
        ("ev", "demo://resource/dynamic/text/{resourceId}"),
        ("docs", "test://slow/{seconds}"),
    } <= templates

    prompts = {p.name: p for p in sup.client.list_prompts()}
    assert {
        "mcp_ev_simple-prompt",
        "mcp_ev_args-prompt",
        "mcp_docs_greet",
        "mcp_docs_plain_prompt_v1",
    } <= set(prompts)
    args_prompt = prompts["mcp_ev_args-prompt"]
    assert (args_prompt.server, args_prompt.original_name) == ("ev", "args-prompt")
    assert [(a["name"], a["required"]) for a in args_prompt.arguments] == [("city", True), ("state", False)]
    assert prompts["mcp_docs_plain_prompt_v1"].original_name == "plain prompt/v1"


def test_listing_one_server_lists_only_its_entries(sup: SupervisorProcess) -> None:
    assert {r.uri for r in sup.client.list_resources("docs")} == {
        "test://doc/1",
        "test://doc/2",
        "test://image/pixel.png",
    }
    assert {p.server for p in sup.client.list_prompts("ev")} == {"ev"}
    with pytest.raises(UnknownToolError, match="no server named 'nope'"):
        sup.client.list_resources("nope")


def test_reading_a_text_and_a_blob_resource(sup: SupervisorProcess) -> None:
    text = sup.client.read_resource("ev", EV_DOC)
    assert text.contents[0]["uri"] == EV_DOC and text.contents[0]["mimeType"] == "text/markdown"
    assert text.text == text.contents[0]["text"] and text.text

    pixel = sup.client.read_resource("docs", "test://image/pixel.png")
    assert pixel.contents == [{"uri": "test://image/pixel.png", "mimeType": "image/png", "blob": PNG_1X1}]
    assert base64.b64decode(pixel.contents[0]["blob"]).startswith(b"\x89PNG")
    assert pixel.text == f"[blob test://image/pixel.png image/png, {len(base64.b64decode(PNG_1X1))} bytes]"


def test_reading_through_a_resource_template(sup: SupervisorProcess) -> None:
    assert sup.client.read_resource("docs", "test://doc/42").text == "document 42"
    dynamic = sup.client.read_resource("ev", "demo://resource/dynamic/text/3")
    assert dynamic.text.startswith("Resource 3: This is a plaintext resource")
    blob = sup.client.read_resource("ev", "demo://resource/dynamic/blob/4").contents[0]
    assert base64.b64decode(blob["blob"]).decode().startswith("Resource 4: This is a base64 blob")


def test_an_unknown_resource_is_the_servers_error(sup: SupervisorProcess) -> None:
    with pytest.raises(ServerError, match="Resource not found: test://nothing"):
        sup.client.read_resource("docs", "test://nothing")
    with pytest.raises(UnknownToolError, match="no server named 'nope'"):
        sup.client.read_resource("nope", "test://doc/1")


def test_getting_a_prompt_with_arguments(sup: SupervisorProcess) -> None:
    weather = sup.client.get_prompt("mcp_ev_args-prompt", {"city": "Lima", "state": "Lima"})
    assert weather.messages == [
        {"role": "user", "content": {"type": "text", "text": "What's weather in Lima, Lima?"}}
    ]
    assert weather.text == "user: What's weather in Lima, Lima?"

    greeting = sup.client.get_prompt("mcp_docs_greet", {"name": "Ada", "punctuation": "."})
    assert (greeting.description, greeting.text) == ("prompt greet", "user: Hello, Ada.")
    # by the server's own name, the server named explicitly
    assert sup.client.get_prompt("plain prompt/v1", server="docs").text == "user: plain"
    assert sup.client.get_prompt("mcp_docs_plain_prompt_v1").text == "user: plain"


def test_prompt_errors_name_what_is_wrong(sup: SupervisorProcess) -> None:
    with pytest.raises(UnknownToolError, match="no prompt named 'mcp_ev_nope'"):
        sup.client.get_prompt("mcp_ev_nope")
    with pytest.raises(UnknownToolError, match="no prompt named 'nope'"):
        sup.client.get_prompt("nope", server="docs")
    with pytest.raises(UnknownToolError, match="no prompt named 'mcp_elsewhere_greet'"):
        sup.client.get_prompt("mcp_elsewhere_greet")
    with pytest.raises(InvalidArgumentsError, match="greet needs the argument 'name'"):
        sup.client.get_prompt("mcp_docs_greet")
    with pytest.raises(InvalidArgumentsError, match="prompt arguments must be strings: 'name' is int"):
        sup.client.get_prompt("mcp_docs_greet", {"name": 3})  # type: ignore[dict-item]


def test_a_slow_read_times_out_at_its_deadline_and_the_server_carries_on(sup: SupervisorProcess) -> None:
    with pytest.raises(ToolTimeoutError, match="resources/read test://slow/60 ran past its 1 s budget"):
        sup.client.read_resource("docs", "test://slow/60", timeout=1)
    assert sup.client.read_resource("docs", "test://slow/0.1").text == "slept 0.1"
    assert sup.status()["docs"].restarts == 0


def test_a_server_past_its_budget_is_left_out_of_an_aggregated_listing_with_a_warning(
    sup: SupervisorProcess, caplog: pytest.LogCaptureFixture
) -> None:
    resources = sup.client.list_resources(timeout=2)
    assert {r.server for r in resources} == {"ev", "docs"}
    assert [record.getMessage() for record in caplog.records] == [
        "left out of the listing: TIMEOUT: server 'slowlist': resources/list ran past its 2 s budget; "
        "the server was sent a cancel"
    ]
    with pytest.raises(ToolTimeoutError, match="server 'slowlist': resources/list ran past its 1 s budget"):
        sup.client.list_resources("slowlist")
    # its other listings are not slow
    assert {p.server for p in sup.client.list_prompts("slowlist")} == {"slowlist"}


def test_a_server_without_resources_or_prompts_lists_none_and_refuses_clearly(sup: SupervisorProcess) -> None:
    assert sup.client.list_resources("plain") == []
    assert sup.client.list_resource_templates("plain") == []
    assert sup.client.list_prompts("plain") == []
    with pytest.raises(BadRequestError, match="server 'plain': the server offers no resources"):
        sup.client.read_resource("plain", "test://doc/1")
    with pytest.raises(UnknownToolError, match="the server offers no prompts"):
        sup.client.get_prompt("mcp_plain_greet")


async def test_the_async_client_lists_reads_and_gets_concurrently(sup: SupervisorProcess) -> None:
    texts: dict[str, str] = {}
    names: list[str] = []

    async def read(client: AsyncSupervisorClient) -> None:
        texts["read"] = (await client.read_resource("docs", "test://doc/7")).text

    async def get(client: AsyncSupervisorClient) -> None:
        texts["get"] = (await client.get_prompt("mcp_docs_greet", {"name": "Bob"})).text

    async def list_prompts(client: AsyncSupervisorClient) -> None:
        names.extend(prompt.name for prompt in await client.list_prompts())

    with trio.fail_after(60):
        async with AsyncSupervisorClient(sup.endpoint) as client, trio.open_nursery() as nursery:
            for fn in (read, get, list_prompts):
                nursery.start_soon(fn, client)
    assert texts == {"read": "document 7", "get": "user: Hello, Bob!"}
    assert {"mcp_docs_greet", "mcp_ev_simple-prompt"} <= set(names)


def test_cli_lists_reads_and_gets(sup: SupervisorProcess) -> None:
    table = cli(sup, "resources", "docs")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == ["SERVER", "URI", "NAME", "MIME", "DESCRIPTION"]
    assert "test://image/pixel.png" in table.stdout

    listed = cli(sup, "resource-templates", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {
        "server": "docs",
        "uri_template": "test://doc/{n}",
        "name": "doc",
        "mime_type": "text/plain",
    } in json.loads(listed.stdout)

    read = cli(sup, "read", "docs", "test://doc/5")
    assert (read.returncode, read.stdout) == (0, "document 5\n")

    prompts = cli(sup, "prompts")
    assert prompts.returncode == 0, prompts.stderr
    assert any(
        line.split()[:3] == ["mcp_docs_greet", "docs", "name,"] for line in prompts.stdout.splitlines()
    )

    got = cli(sup, "prompt", "mcp_docs_greet", '{"name": "Eve"}', "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["messages"][0]["content"]["text"] == "Hello, Eve!"


def test_cli_errors_are_one_line_with_the_code(sup: SupervisorProcess) -> None:
    unknown = cli(sup, "prompt", "mcp_docs_nope")
    assert unknown.returncode == 5
    assert unknown.stderr == "mcp-supervisor: UNKNOWN_TOOL: server 'docs': no prompt named 'mcp_docs_nope'\n"
    bad = cli(sup, "prompt", "mcp_docs_greet", '{"name": 1}')
    assert bad.returncode == 2 and "ARGS_JSON must be a JSON object of strings" in bad.stderr
    missing = cli(sup, "read", "docs", "test://missing")
    assert missing.returncode == 1 and missing.stderr.startswith("mcp-supervisor: SERVER_ERROR: ")
    assert "Traceback" not in unknown.stderr + bad.stderr + missing.stderr


def test_a_stopped_server_is_unavailable_and_left_out(sup: SupervisorProcess) -> None:
    sup.client.stop("docs")
    try:
        sup.wait_states(docs="stopped")
        with pytest.raises(ServerUnavailableError, match="server 'docs' is stopped"):
            sup.client.read_resource("docs", "test://doc/1")
        with pytest.raises(ServerUnavailableError, match="server 'docs' is stopped"):
            sup.client.get_prompt("mcp_docs_greet", {"name": "x"})
        assert {r.server for r in sup.client.list_resources()} == {"ev"}
    finally:
        sup.client.start("docs")
        sup.wait_states(docs="ready")
    poll("docs listing again", lambda: sup.client.list_resources("docs"), 10)
