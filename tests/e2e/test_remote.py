"""Remote servers over streamable HTTP and SSE: the repository's test server served by the SDK's HTTP apps."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from supervisor.client.errors import (
    ServerError,
    ServerUnavailableError,
    SupervisorError,
    ToolTimeoutError,
    WorkerCrashedError,
)
from tests.e2e.harness import TEST_SERVER, SupervisorProcess, accepting, free_port, poll

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
TOKEN = "s3cret-http-token"


# (server flag, URL path, the transport the config loader infers from that URL)
TRANSPORTS = {"streamable-http": ("--http", "/mcp"), "sse": ("--sse", "/sse")}


def _serve(transport: str, port: int, **env: str) -> subprocess.Popen[bytes]:
    """The test server over ``transport`` on 127.0.0.1:``port``, once it accepts connections."""
    server = subprocess.Popen(
        [sys.executable, str(TEST_SERVER), TRANSPORTS[transport][0], str(port)],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    poll(f"the {transport} test server to listen", lambda: server.poll() is not None or accepting(port), 30)
    assert server.poll() is None, f"the {transport} test server exited with {server.returncode}"
    return server


def _url(transport: str, port: int) -> str:
    return f"http://127.0.0.1:{port}{TRANSPORTS[transport][1]}"


def _stop(server: subprocess.Popen[bytes]) -> None:
    server.kill()
    server.wait(10)


@pytest.fixture(params=list(TRANSPORTS))
def http_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The test server over HTTP (bearer token needed, tools in pages of 3); yields its URL and state dir."""
    port, state = free_port(), tmp_path / "http-state"
    state.mkdir()
    env = {"TEST_SERVER_REQUIRE_TOKEN": TOKEN, "TEST_SERVER_PAGE_SIZE": "3", "TEST_SERVER_EXTRA_TOOLS": "7"}
    server = _serve(request.param, port, TEST_SERVER_STATE_DIR=str(state), **env)
    try:
        yield _url(request.param, port), state
    finally:
        _stop(server)


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
            "nobody": {"url": f"http://127.0.0.1:{free_port()}/mcp", **policy},
        },
        wait=False,
    )
    rows = sup.wait_states(timeout=60, no_token="failed", nobody="failed")
    assert "401" in (rows["no_token"].last_error or "")
    assert "Connect" in (rows["nobody"].last_error or "")
    with pytest.raises(ServerUnavailableError, match=r"'no_token' is failed.*HTTP 401"):
        sup.client.call_tool("mcp_no_token_echo", {"text": "x"})


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_http_errors_are_named_in_the_failure(start_supervisor: Start, transport: str) -> None:
    refusing, listening = free_port(), free_port()
    servers = [_serve(transport, refusing, TEST_SERVER_HTTP_STATUS="500"), _serve(transport, listening)]
    try:
        policy = {"maxRestarts": 1, "backoffInitial": 0.1}
        wrong_path = _url(transport, listening).replace(TRANSPORTS[transport][1], "/nowhere")
        sup = start_supervisor(
            {"five": {"url": _url(transport, refusing), **policy}, "four": {"url": wrong_path, **policy}},
            wait=False,
        )
        rows = sup.wait_states(timeout=60, five="failed", four="failed")
        assert "HTTP 500 Internal Server Error from 127.0.0.1" in (rows["five"].last_error or "")
        assert "HTTP 404 Not Found from 127.0.0.1" in (rows["four"].last_error or "")
        with pytest.raises(ServerUnavailableError, match=r"'four' is failed.*HTTP 404"):
            sup.client.call_tool("mcp_four_echo", {"text": "x"})
    finally:
        for server in servers:
            _stop(server)


@pytest.mark.parametrize("transport", list(TRANSPORTS))
def test_a_connection_dropped_mid_call_fails_the_call_and_the_worker_reconnects(
    start_supervisor: Start, tmp_path: Path, transport: str
) -> None:
    port = free_port()
    server = _serve(transport, port, TEST_SERVER_STATE_DIR=str(tmp_path))
    try:
        policy = {"backoffInitial": 0.2, "backoffMax": 0.5, "maxRestarts": 1000}
        sup = start_supervisor({"remote": {"url": _url(transport, port), **policy}})
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(sup.client.call_tool, "mcp_remote_slow", {"seconds": 120, "tag": "drop"}, 60)
            poll("the slow call to reach the server", (tmp_path / "drop.started").exists, 10)
            _stop(server)  # SIGKILL: every connection drops at once
            with pytest.raises(SupervisorError) as failure:
                call.result(timeout=30)
        assert isinstance(failure.value, (WorkerCrashedError, ServerError, ServerUnavailableError)), (
            failure.value
        )
        assert "'remote'" in str(failure.value)
        assert "the connection to the server closed during a call to 'slow' (" in str(failure.value)
        assert "Traceback" not in str(failure.value)

        server = _serve(transport, port, TEST_SERVER_STATE_DIR=str(tmp_path))
        rows = sup.wait_states(timeout=30, remote="ready")
        assert rows["remote"].restarts >= 1
        assert sup.client.call_tool("mcp_remote_echo", {"text": "reconnected"}).text == "reconnected"
    finally:
        _stop(server)
