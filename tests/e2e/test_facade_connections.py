"""The HTTP facade against connections that take and never give: hundreds that trickle their headers
(slowloris) past its descriptor limit, and one request that never finishes arriving. Real processes:
a supervisor running the test server, ``serve --http`` with a low descriptor limit, and the official
SDK's client as the host that must still be served."""

from __future__ import annotations

import contextlib
import re
import resource
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import pytest
import trio

from supervisor.facade.guard import DESCRIPTORS_KEPT, HEAD_TIMEOUT
from supervisor.facade.host_sessions import MAX_SESSIONS
from tests.e2e.facade import HOST_TIMEOUT, HOST_WARNINGS, REPO, HttpFacade, facade_argv, http_host, text_of
from tests.e2e.harness import START_TIMEOUT, SupervisorProcess, poll, rss_kb, stdio_test_server

pytestmark = [pytest.mark.e2e, *HOST_WARNINGS]

DESCRIPTORS = 256  # the facade's soft limit: its cap is this less DESCRIPTORS_KEPT
SLOW = 400  # trickling connections: more than the facade could hold


@pytest.fixture(scope="module")
def sup(start_module_supervisor: Callable[..., SupervisorProcess]) -> SupervisorProcess:
    return start_module_supervisor({"t": stdio_test_server()})


def _low_limit() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, hard))


@pytest.fixture
def facade(sup: SupervisorProcess, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    stderr_path = tmp_path / "facade.stderr"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            facade_argv(sup.endpoint, "serve", "--http", "127.0.0.1:0", "--no-auth"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=REPO,
            preexec_fn=_low_limit,
        )
    try:
        said = poll(
            "the LISTENING line",
            lambda: re.search(r"^LISTENING http://127.0.0.1:(\d+)/", stderr_path.read_text(), re.M),
            START_TIMEOUT,
        )
        yield process, int(said.group(1)), stderr_path
    finally:
        process.terminate()
        try:
            process.wait(HOST_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def test_hosts_are_served_while_hundreds_of_connections_trickle_their_headers(
    facade: tuple[subprocess.Popen[bytes], int, Path],
) -> None:
    process, port, stderr_path = facade
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))  # this process opens them all
    slow: list[socket.socket] = []
    try:
        for _ in range(SLOW):
            sock = socket.create_connection(("127.0.0.1", port), timeout=HOST_TIMEOUT)
            sock.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode())  # never done
            slow.append(sock)
        async with http_host(f"http://127.0.0.1:{port}/mcp", None) as host:  # a host that sends at once
            assert "mcp_t_echo" in {tool.name for tool in (await host.list_tools()).tools}
            assert text_of(await host.call_tool("mcp_t_echo", {"text": "served"})) == "served"
        assert process.poll() is None
        said = stderr_path.read_text(errors="replace")
        assert "Traceback" not in said, said[-3000:]  # no traceback per failed accept, if any fails
        assert said.count("\n") < 50, said[-3000:]  # counted, a line a second at most
        assert f"{DESCRIPTORS - DESCRIPTORS_KEPT} connections" in said
    finally:
        for sock in slow:
            sock.close()


async def test_a_request_that_never_finishes_arriving_is_408_and_closed(
    facade: tuple[subprocess.Popen[bytes], int, Path],
) -> None:
    _, port, _ = facade
    with socket.create_connection(("127.0.0.1", port), timeout=HEAD_TIMEOUT * 3) as sock:
        sock.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())  # the head, unfinished
        started = time.monotonic()
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := await trio.to_thread.run_sync(sock.recv, 4096):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert time.monotonic() - started < HEAD_TIMEOUT * 3


async def test_a_host_with_many_slow_calls_makes_no_other_host_overloaded(
    start_supervisor: Callable[..., SupervisorProcess], tmp_path: Path
) -> None:
    """Admission counts per host session (maxCallsPerClient), though every host of a facade reaches
    the supervisor over the facade's one connection."""
    sup = start_supervisor(
        {"t": stdio_test_server(TEST_SERVER_STATE_DIR="{state}")},
        wait=False,
        settings={"maxCallsPerClient": 3},
    )
    facade = HttpFacade(tmp_path, sup.endpoint, None)
    try:
        sup.wait_states()
        started = [sup.state_dir / f"busy-{i}.started" for i in range(3)]
        async with (
            http_host(facade.url, None) as busy,
            http_host(facade.url, None) as other,
            trio.open_nursery() as nursery,
        ):
            for i in range(3):  # the busy host's bound, all taken by slow calls
                nursery.start_soon(busy.call_tool, "mcp_t_slow", {"seconds": 60, "tag": f"busy-{i}"})
            with trio.fail_after(HOST_TIMEOUT):
                await poll_async(lambda: all(path.exists() for path in started))
            refused = await busy.call_tool("mcp_t_echo", {"text": "one more"})
            assert refused.is_error and "OVERLOADED" in text_of(refused)
            served = await other.call_tool("mcp_t_echo", {"text": "mine"})
            assert not served.is_error and text_of(served) == "mine"
            nursery.cancel_scope.cancel()
    finally:
        facade.stop()


async def poll_async(check: Callable[[], bool]) -> None:
    while not check():  # noqa: ASYNC110 (files another process writes, polled; the caller bounds it)
        await trio.sleep(0.05)


async def test_a_client_that_opens_sessions_and_never_ends_them_locks_no_host_out(
    facade: tuple[subprocess.Popen[bytes], int, Path],
) -> None:
    """Past MAX_SESSIONS, a new session ends the one used longest ago (idle), instead of 503 for every
    new host until the idle timeout; the ended one's client gets 404 and may start over."""
    process, port, stderr_path = facade
    url = f"http://127.0.0.1:{port}/mcp"
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "flood", "version": "0"},
        },
    }
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    opened: list[str] = []
    async with httpx2.AsyncClient(timeout=HOST_TIMEOUT) as http:
        with trio.fail_after(300):
            for _ in range(MAX_SESSIONS + 50):
                response = await http.post(url, headers=headers, json=init)
                assert response.status_code == 200, response.text
                opened.append(response.headers["mcp-session-id"])
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            first = await http.post(url, headers={**headers, "Mcp-Session-Id": opened[0]}, json=ping)
            assert first.status_code == 404  # ended for room
    async with http_host(url, None) as host:  # a new host gets in
        assert "mcp_t_echo" in {tool.name for tool in (await host.list_tools()).tools}
    assert process.poll() is None
    assert rss_kb(process.pid) < 400 * 1024
    said = stderr_path.read_text(errors="replace")
    assert "ended for a new one" in said and said.count("\n") < 80, said[-3000:]
