"""The HTTP server's bounds, against real TCP connections on loopback (in-process: the server is a
trio task, as it is in the supervisor): what hostile clients get, and that the next one is served."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import pytest
import trio

from supervisor.ops.web.http import MAX_BODY, MAX_HEAD, HttpServer, Request, Response, Streaming

WAIT = 10.0  # seconds any one step may take before the test fails


def _handler(request: Request) -> Response | Streaming:
    if request.path == "/boom":
        raise RuntimeError("a handler bug")
    if request.path == "/stream":
        return Streaming(_Endless(), "application/octet-stream")
    return Response(200, f"{request.method} {request.path} {len(request.body)}".encode())


class _Endless:
    """A streamed body that never ends (1 MB chunks): a client that does not read must not hold it."""

    closed = False

    async def next(self) -> bytes | None:
        await trio.lowlevel.checkpoint()
        return b"x" * 1_000_000

    def close(self) -> None:
        _Endless.closed = True


@asynccontextmanager
async def serving(**limits: float) -> AsyncIterator[tuple[int, HttpServer]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.setblocking(False)
    port = sock.getsockname()[1]
    server = HttpServer(_handler, **limits)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
        yield port, server
        nursery.cancel_scope.cancel()


async def read_all(stream: trio.SocketStream) -> bytes:
    """Everything the server sends until it closes (a reset ends it too)."""
    data = b""
    with trio.fail_after(WAIT):
        while True:
            try:
                chunk = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return data
            if not chunk:
                return data
            data += chunk


async def exchange(port: int, raw: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(raw)
        return await read_all(stream)


async def get_ok(port: int) -> None:
    """A plain request is served."""
    answer = await exchange(port, b"GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"GET /ok 0"), answer


async def wait_connections(server: HttpServer, count: int) -> None:
    """Poll (bounded) until the server holds ``count`` connections: it has no event to wait on."""
    with trio.fail_after(WAIT):
        while True:
            if server.connections == count:
                return
            await trio.sleep(0.01)


async def test_keep_alive_serves_several_requests_on_one_connection_and_head_has_no_body() -> None:
    async with serving() as (port, _):
        raw = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nHEAD /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        answer = await exchange(port, raw)
    first, second = answer.split(b"HTTP/1.1 200 OK")[1:]
    assert first.endswith(b"GET /a 0")
    assert b"content-length: 9\r\n" in second and second.endswith(b"\r\n\r\n")


@pytest.mark.parametrize(
    "raw",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)),  # a TLS hello, and more
        b"GET / HTTP/1.1\r\n\r\n",  # no Host
        b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n",  # a path that is not ASCII (nor UTF-8)
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: x\r\n\r\n",
    ],
)
async def test_garbage_is_400_and_closes(raw: bytes) -> None:
    async with serving() as (port, server):
        answer = await exchange(port, raw)
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
        await wait_connections(server, 0)
        await get_ok(port)


async def test_bytes_that_cannot_start_a_request_are_400_at_once_not_at_the_timeout() -> None:
    async with serving(request_timeout=30) as (port, _):
        with trio.fail_after(5):
            assert (await exchange(port, b"\x00\xffnot http" * 100)).startswith(b"HTTP/1.1 400 ")


async def test_a_head_past_the_bound_is_431() -> None:
    async with serving() as (port, _):
        raw = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (MAX_HEAD + 100) + b"\r\n\r\n"
        assert (await exchange(port, raw)).startswith(b"HTTP/1.1 431 ")
        await get_ok(port)


async def test_a_megabyte_header_harms_nothing() -> None:
    async with serving() as (port, server):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream, trio.open_nursery() as nursery:

            async def flood() -> None:
                with suppress(trio.BrokenResourceError):
                    await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 1_000_000)

            nursery.start_soon(flood)
            answer = await read_all(stream)
            nursery.cancel_scope.cancel()
        assert answer == b"" or answer.startswith(b"HTTP/1.1 431 "), answer[:100]  # or reset while sending
        await wait_connections(server, 0)
        await get_ok(port)


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n",
        b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n" % (MAX_BODY + 1)
        + b"y" * (MAX_BODY + 1)
        + b"\r\n0\r\n\r\n",
    ],
)
async def test_a_body_past_the_bound_is_413(raw: bytes) -> None:
    async with serving() as (port, _):
        assert (await exchange(port, raw)).startswith(b"HTTP/1.1 413 ")


async def test_a_small_body_is_read() -> None:
    async with serving() as (port, _):
        answer = await exchange(
            port, b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"
        )
        assert answer.endswith(b"POST /x 3")


async def test_a_slowloris_is_answered_408_and_closed_while_others_are_served() -> None:
    async with serving(request_timeout=0.5) as (port, server):
        slow = await trio.open_tcp_stream("127.0.0.1", port)
        async with slow:
            await slow.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and never the end of it
            await get_ok(port)  # meanwhile
            assert (await read_all(slow)).startswith(b"HTTP/1.1 408 ")
        idle = await trio.open_tcp_stream("127.0.0.1", port)
        async with idle:
            assert await read_all(idle) == b""  # nothing sent at all: closed without a word
        await wait_connections(server, 0)


async def test_connections_past_the_cap_get_503_until_some_close() -> None:
    async with serving(max_connections=2) as (port, server):
        held = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(2)]
        await wait_connections(server, 2)
        refused = await exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert refused.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        for stream in held:
            await stream.aclose()
        await wait_connections(server, 0)
        await get_ok(port)


async def test_a_handler_that_raises_is_500_and_the_server_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    async with serving() as (port, _):
        answer = await exchange(port, b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 500 ")
        await get_ok(port)
    assert "a handler bug" in caplog.text


async def test_a_client_that_does_not_read_a_stream_is_dropped() -> None:
    _Endless.closed = False
    async with serving(write_timeout=0.3) as (port, server):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            await wait_connections(server, 1)
            await wait_connections(server, 0)  # it read nothing: dropped after the write timeout
        assert _Endless.closed
        await get_ok(port)
