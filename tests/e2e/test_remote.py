"""Remote servers over streamable HTTP: the repository's test server served by the SDK's HTTP app."""

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


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The test server on streamable HTTP (bearer token required); yields its URL and state dir."""
    port, state = _free_port(), tmp_path / "http-state"
    state.mkdir()
    env = {**os.environ, "TEST_SERVER_REQUIRE_TOKEN": TOKEN, "TEST_SERVER_STATE_DIR": str(state)}
    server = subprocess.Popen(
        [sys.executable, str(TEST_SERVER), "--http", str(port)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        poll("the HTTP test server to listen", lambda: _accepting(port), 30)
        yield f"http://127.0.0.1:{port}/mcp", state
    finally:
        server.terminate()
        server.wait(10)


def test_streamable_http_server_is_served_with_headers_and_deadlines(
    start_supervisor: Start, http_server: tuple[str, Path]
) -> None:
    url, state = http_server
    remote = {"url": url, "headers": {"Authorization": "Bearer ${HTTP_TOKEN}"}}
    sup = start_supervisor({"remote": remote}, env={"HTTP_TOKEN": TOKEN})
    row = sup.status()["remote"]
    assert (row.transport, row.server_pid) == ("streamable-http", None)
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
