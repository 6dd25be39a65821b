"""The async stub's own DEALER on asyncio (``supervisor.client.zmtp_link``) against a real libzmq ROUTER
(pyzmq) and raw sockets: messages both ways, a ROUTER that is not there yet or restarts, heartbeats,
large messages, garbage. Each test runs its own asyncio loop in this process, over ipc."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import zmq

from supervisor.client.zmtp_link import ZmtpLink

WAIT = 5.0  # seconds any expected message may take, on a loaded machine
POLL = 0.005  # seconds between looks at a libzmq socket, each wait bounded by WAIT


def router(ctx: zmq.Context[zmq.Socket[bytes]], path: str, **options: int) -> zmq.Socket[bytes]:
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    for name, value in options.items():
        sock.setsockopt(getattr(zmq, name), value)
    sock.bind(f"ipc://{path}")
    return sock


async def from_router(sock: zmq.Socket[bytes], count: int) -> list[list[bytes]]:
    got: list[list[bytes]] = []
    async with asyncio.timeout(WAIT):
        while len(got) < count:
            try:
                got.append(sock.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                await asyncio.sleep(POLL)
    return got


async def until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT):
        while not check():  # noqa: ASYNC110 - state of a socket, polled; asyncio.timeout bounds it
            await asyncio.sleep(POLL)


def test_messages_wait_for_a_router_that_is_not_there_yet_then_go_both_ways(
    context: zmq.Context[zmq.Socket[bytes]], path: str
) -> None:
    async def main() -> None:
        got: list[bytes] = []
        link = ZmtpLink(asyncio.get_running_loop(), path, got.append)
        link.send(b"sent before anyone listened")
        await asyncio.sleep(0.25)  # let it fail to connect a few times: the path does not exist
        sock = router(context, path)
        try:
            [(peer, first)] = await from_router(sock, 1)
            assert first == b"sent before anyone listened"
            link.send(b"second")
            assert await from_router(sock, 1) == [[peer, b"second"]]
            sock.send_multipart([peer, b"reply"])
            sock.send_multipart([peer, b"x" * 300])
            await until(lambda: len(got) == 2)
            assert got == [b"reply", b"x" * 300] and link.connections == 1
        finally:
            link.close()
            sock.close(linger=0)
        with pytest.raises(ConnectionError):
            link.send(b"after close")

    asyncio.run(main())


def test_a_router_that_restarts_is_reconnected_and_later_messages_reach_it(
    context: zmq.Context[zmq.Socket[bytes]], path: str
) -> None:
    async def main() -> None:
        link = ZmtpLink(asyncio.get_running_loop(), path, lambda frame: None)
        first = router(context, path)
        try:
            link.send(b"one")
            [(old_peer, _)] = await from_router(first, 1)
            first.close(linger=0)
            Path(path).unlink(missing_ok=True)  # noqa: ASYNC240 - a socket file, at once
            await until(lambda: link._sock is None)  # it saw the end of its connection
            link.send(b"meanwhile")  # waits for the next connection
            second = router(context, path)
            [(new_peer, said)] = await from_router(second, 1)
            second.close(linger=0)
            assert said == b"meanwhile" and new_peer != old_peer and link.connections == 2
        finally:
            link.close()
            first.close(linger=0)

    asyncio.run(main())


def test_heartbeats_are_answered_and_the_connection_is_kept(
    context: zmq.Context[zmq.Socket[bytes]], path: str
) -> None:
    async def main() -> None:
        sock = router(context, path, HEARTBEAT_IVL=20, HEARTBEAT_TIMEOUT=100)  # ms
        link = ZmtpLink(asyncio.get_running_loop(), path, lambda frame: None)
        try:
            link.send(b"first")
            [(peer, _)] = await from_router(sock, 1)
            await asyncio.sleep(0.6)  # thirty PINGs; libzmq drops a peer that leaves them unanswered
            link.send(b"second")
            assert await from_router(sock, 1) == [[peer, b"second"]] and link.connections == 1
        finally:
            link.close()
            sock.close(linger=0)

    asyncio.run(main())


def test_messages_larger_than_the_socket_buffer_arrive_whole_both_ways(
    context: zmq.Context[zmq.Socket[bytes]], path: str
) -> None:
    big = bytes(range(256)) * (32 * 1024)  # 8 MB

    async def main() -> None:
        sock = router(context, path)
        got: list[bytes] = []
        link = ZmtpLink(asyncio.get_running_loop(), path, got.append)
        try:
            link.send(b"hello")
            [(peer, _)] = await from_router(sock, 1)
            link.send(big)
            link.send(b"after")
            assert await from_router(sock, 2) == [[peer, big], [peer, b"after"]]
            sock.send_multipart([peer, big])
            await until(lambda: len(got) == 1)
            assert got == [big]
        finally:
            link.close()
            sock.close(linger=0)

    asyncio.run(main())


def test_a_peer_that_answers_garbage_is_left_and_tried_again(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    listener.setblocking(False)

    async def main() -> None:
        link = ZmtpLink(asyncio.get_running_loop(), path, lambda frame: None)
        accepted: list[socket.socket] = []
        try:
            start = time.monotonic()
            async with asyncio.timeout(WAIT):
                while len(accepted) < 3:  # every connection it makes is answered with garbage
                    try:
                        conn, _ = listener.accept()
                    except BlockingIOError:
                        await asyncio.sleep(POLL)
                        continue
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                    accepted.append(conn)
            assert time.monotonic() - start >= 0.2  # two intervals between three connections: no spin
            assert link.connections == 0
        finally:
            link.close()
            for conn in accepted:
                conn.close()

    try:
        asyncio.run(main())
    finally:
        listener.close()
