"""Remote servers over streamable HTTP and SSE: the repository's test server served by the SDK's HTTP apps."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from supervisor.errors import ServerUnavailableError, ToolTimeoutError
from tests.e2e.harness import TEST_SERVER, SupervisorProcess, poll

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
TOKEN = "s3cret-http-token"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _accepting(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


# (server flag, URL path, the transport the config loader infers from that URL)
TRANSPORTS = {"streamable-http": ("--http", "/mcp"), "sse": ("--sse", "/sse")}


@pytest.fixture(params=list(TRANSPORTS))
def http_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The test server over HTTP (bearer token needed, tools in pages of 3); yields its URL and state dir."""
    flag, path = TRANSPORTS[request.param]
    port, state = _free_port(), tmp_path / "http-state"
    state.mkdir()
    env = {
        **os.environ,
        "TEST_SERVER_REQUIRE_TOKEN": TOKEN,
        "TEST_SERVER_STATE_DIR": str(state),
        "TEST_SERVER_PAGE_SIZE": "3",
        "TEST_SERVER_EXTRA_TOOLS": "7",
    }
    server = subprocess.Popen(
        [sys.executable, str(TEST_SERVER), flag, str(port)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        poll("the HTTP test server to listen", lambda: _accepting(port), 30)
        yield f"http://127.0.0.1:{port}{path}", state
    finally:
        server.terminate()
        server.wait(10)


def test_remote_server_is_served_with_headers_pages_and_deadlines(
    start_supervisor: Start, http_server: tuple[str, Path], request: pytest.FixtureRequest
) -> None:
    url, state = http_server
    remote = {"url": url, "headers": {"Authorization": "Bearer ${HTTP_TOKEN}"}}
    sup = start_supervisor({"remote": remote}, env={"HTTP_TOKEN": TOKEN})
    row = sup.status()["remote"]
    assert (row.transport, row.server_pid) == (request.node.callspec.params["http_server"], None)
    tools = {tool.name for tool in sup.client.list_tools()}
    assert {f"mcp_remote_extra_{i}" for i in range(7)} | {"mcp_remote_echo"} <= tools  # every page
    assert sup.client.call_tool("mcp_remote_echo", {"text": "over http"}).text == "over http"
    added = sup.client.call_tool("mcp_remote_add", {"a": 1, "b": 2})
    assert added.structured_content == {"sum": 3}
    assert [item["type"] for item in sup.client.call_tool("mcp_remote_image").content] == ["image", "text"]
    with pytest.raises(ToolTimeoutError):
        sup.client.call_tool("mcp_remote_slow", {"seconds": 30, "tag": "remote"}, timeout=1)
    poll("the remote server's cancellation marker", (state / "remote.cancelled").exists, 10)
    assert sup.client.call_tool("mcp_remote_echo", {"text": "still"}).text == "still"
    assert TOKEN not in sup.log


def test_remote_server_that_refuses_or_is_unreachable_is_unavailable_with_the_cause(
    start_supervisor: Start, http_server: tuple[str, Path]
) -> None:
    url, _ = http_server
    policy = {"maxRestarts": 1, "backoffInitial": 0.1}
    sup = start_supervisor(
        {
            "no_token": {"url": url, **policy},
            "nobody": {"url": f"http://127.0.0.1:{_free_port()}/mcp", **policy},
        },
        wait=False,
    )
    rows = sup.wait_states(timeout=60, no_token="failed", nobody="failed")
    assert "401" in (rows["no_token"].last_error or "")
    assert "Connect" in (rows["nobody"].last_error or "")
    with pytest.raises(ServerUnavailableError, match=r"'no_token' is failed.*HTTP 401"):
        sup.client.call_tool("mcp_no_token_echo", {"text": "x"})
