"""The HTTP facade on the wire, as a host's bytes reach it: uvicorn's httptools protocol under the
connection guard. Requests pipelined on one connection are answered in order, a head past the bound is
431 and its connection closed while the facade serves on, and a host that goes away during a call on
the fast path has the call cancelled at the server. Real processes: a supervisor running the test
server, ``serve --http``, and raw sockets as the hosts."""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import mcp_types as types
import pytest
import trio

from supervisor.facade.guard import MAX_HEAD
from tests.e2e.facade import HOST_TIMEOUT, HttpFacade
from tests.e2e.harness import SupervisorProcess, poll, stdio_test_server

pytestmark = pytest.mark.e2e

MODERN: Final = "2026-07-28"
TOKEN: Final = f"wire-{secrets.token_hex(8)}"
ENVELOPE: Final = {
    types.PROTOCOL_VERSION_META_KEY: MODERN,
    types.CLIENT_INFO_META_KEY: {"name": "raw", "version": "0"},
    types.CLIENT_CAPABILITIES_META_KEY: {},
}


@pytest.fixture(scope="module")
def sup(start_module_supervisor: Callable[..., SupervisorProcess]) -> SupervisorProcess:
    return start_module_supervisor({"t": stdio_test_server(TEST_SERVER_STATE_DIR="{state}")})


@pytest.fixture
def facade(sup: SupervisorProcess, tmp_path: Path) -> Iterator[HttpFacade]:
    facade = HttpFacade(tmp_path, sup.endpoint, TOKEN)
    try:
        yield facade
    finally:
        facade.stop()


def address(facade: HttpFacade) -> tuple[str, int]:
    host, port = facade.url.split("//")[1].split("/")[0].split(":")
    return host, int(port)


def call_request(facade: HttpFacade, id: int, name: str, arguments: dict[str, Any]) -> bytes:
    """A 2026-07-28 tools/call POST, as the SDK's client sends it (the fast path takes it)."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": id,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": ENVELOPE},
        }
    ).encode()
    host, port = address(facade)
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"MCP-Protocol-Version: {MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: {name}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Responses:
    """HTTP/1.1 responses read off one socket, each with a Content-Length (as the fast path sends them)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""

    def _more(self) -> bytes:
        chunk = self._sock.recv(65536)
        self._buffer += chunk
        return chunk

    def next(self) -> tuple[int, dict[str, Any]]:
        while b"\r\n\r\n" not in self._buffer:
            assert self._more(), f"the connection closed with {self._buffer!r} unanswered"
        head, _, self._buffer = self._buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = dict(line.split(": ", 1) for line in lines[1:])
        length = int({k.lower(): v for k, v in fields.items()}["content-length"])
        while len(self._buffer) < length:
            assert self._more(), "the connection closed in the middle of a body"
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        return int(lines[0].split()[1]), json.loads(body)


def text(answer: dict[str, Any]) -> str:
    return str(answer["result"]["content"][0]["text"])


def test_requests_pipelined_on_one_connection_are_answered_in_order(facade: HttpFacade) -> None:
    with socket.create_connection(address(facade), timeout=HOST_TIMEOUT) as sock:
        sock.sendall(call_request(facade, 1, "mcp_t_echo", {"text": "warm"}))
        responses = Responses(sock)
        assert text(responses.next()[1]) == "warm"
        sock.sendall(b"".join(call_request(facade, i, "mcp_t_echo", {"text": f"n{i}"}) for i in range(2, 7)))
        answered = [responses.next() for _ in range(2, 7)]
    assert [(status, answer["id"], text(answer)) for status, answer in answered] == [
        (200, i, f"n{i}") for i in range(2, 7)
    ]


def test_a_head_past_the_bound_is_431_and_closed_and_the_facade_serves_on(facade: HttpFacade) -> None:
    host, port = address(facade)
    with socket.create_connection((host, port), timeout=HOST_TIMEOUT) as sock:
        sock.sendall(f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\n".encode())
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused before it is all sent
            for _ in range(2 * MAX_HEAD // 1000):
                sock.sendall(b"X-Padding: " + b"p" * 1000 + b"\r\n")
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    with socket.create_connection((host, port), timeout=HOST_TIMEOUT) as sock:
        sock.sendall(call_request(facade, 1, "mcp_t_echo", {"text": "after"}))
        assert text(Responses(sock).next()[1]) == "after"
    assert "a request head over" in facade.stderr
    assert facade.process.poll() is None


async def test_a_host_that_goes_away_during_a_fast_call_has_it_cancelled_at_the_server(
    facade: HttpFacade, sup: SupervisorProcess
) -> None:
    tag = f"gone-{secrets.token_hex(4)}"
    with socket.create_connection(address(facade), timeout=HOST_TIMEOUT) as sock:
        sock.sendall(call_request(facade, 1, "mcp_t_slow", {"seconds": 60, "tag": tag}))
        with trio.fail_after(HOST_TIMEOUT):
            await trio.to_thread.run_sync(
                poll, "the slow call to start", (sup.state_dir / f"{tag}.started").exists, HOST_TIMEOUT
            )
    with trio.fail_after(HOST_TIMEOUT):
        await trio.to_thread.run_sync(
            poll,
            "the server to hear of the cancel",
            (sup.state_dir / f"{tag}.cancelled").exists,
            HOST_TIMEOUT,
        )
    with socket.create_connection(address(facade), timeout=HOST_TIMEOUT) as sock:
        sock.sendall(call_request(facade, 2, "mcp_t_echo", {"text": "still"}))
        assert text(Responses(sock).next()[1]) == "still"
    assert "Traceback" not in facade.stderr
