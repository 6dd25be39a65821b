"""The supervisor's own ROUTER (``supervisor.shared.zmtp_router``) against real peers: libzmq's DEALER
(pyzmq, as the client stubs and the CLI connect), the workers' ZMTP DEALER, and raw sockets that
send garbage, stall their handshake, flood or never read. Each runs in this process over ipc."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
import trio
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.shared import zmtp_router
from supervisor.shared.sockets import Poller, TrioSocket, bind_router, new_dealer
from supervisor.shared.zmtp import SIGNATURE, encode_message, ready
from supervisor.shared.zmtp_dealer import ZmtpDealer
from supervisor.shared.zmtp_router import QueueFull, Unroutable, ZmtpRouter

WAIT = 5.0  # seconds any expected message may take, on a loaded machine
GREETING = SIGNATURE + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\x00" + bytes(31)


def hello(kind: bytes = b"DEALER", identity: bytes | None = None) -> bytes:
    """A peer's greeting and READY, as a raw socket sends them."""
    properties = {b"Socket-Type": kind}
    if identity is not None:
        properties[b"Identity"] = identity
    return GREETING + ready(properties)


DEALER_HELLO = hello()


def dealer(ctx: zmq.Context[zmq.Socket[bytes]], path: str, routing_id: bytes | None = None) -> TrioSocket:
    sock = new_dealer(ctx, routing_id=routing_id)
    sock.connect(f"ipc://{path}")
    return TrioSocket(sock)


async def receive(sock: TrioSocket | ZmtpDealer | Poller, count: int) -> list[list[bytes]]:
    got: list[list[bytes]] = []
    with trio.fail_after(WAIT):
        while len(got) < count:
            if isinstance(sock, Poller):
                (batch,) = await sock.receive()
                got += batch
            else:
                got += await sock.receive_batch()
    return got


async def until_connected(router: ZmtpRouter, poller: Poller, peers: int) -> None:
    """Drive the router until ``peers`` handshakes are done (a peer says nothing until it sends)."""
    with trio.fail_after(WAIT):
        while router.peers < peers:
            router.drain()
            await trio.sleep(0.005)  # a poll interval, bounded by WAIT: a handshake sends no message


def raw_peer(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    return sock


async def read_until_closed(sock: socket.socket, router: ZmtpRouter) -> bytes:
    """What the router sent ``sock`` before it closed the connection (driving the router meanwhile)."""
    sock.setblocking(False)
    got = b""
    with trio.fail_after(WAIT):
        while True:
            router.drain()
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                await trio.sleep(0.005)  # a poll interval, bounded by WAIT
                continue
            except ConnectionResetError:
                return got
            if not data:
                return got
            got += data


async def test_libzmq_dealers_with_and_without_a_routing_id_are_routed_both_ways(
    context: zmq.Context[zmq.Socket[bytes]], path: str
) -> None:
    router = ZmtpRouter(path)
    poller = Poller([router])
    named, anonymous = dealer(context, path, b"client-1"), dealer(context, path)
    try:
        named.send_nowait([b"one"])
        named.send_nowait([b"two", b"", b"x" * 300])
        anonymous.send_nowait([b"three"])
        got = await receive(poller, 3)
        assert [m for m in got if m[0] == b"client-1"] == [
            [b"client-1", b"one"],
            [b"client-1", b"two", b"", b"x" * 300],
        ]
        [(made, three)] = [m for m in got if m[0] != b"client-1"]
        assert three == b"three" and made[:1] == b"\0" and len(made) == 5  # as libzmq makes them
        router.send_nowait([b"client-1", b"back", b"y" * 256])
        router.send_nowait([made, b"yours"])
        assert await receive(named, 1) == [[b"back", b"y" * 256]]
        assert await receive(anonymous, 1) == [[b"yours"]]
    finally:
        named.close()
        anonymous.close()
        router.close()


async def test_the_workers_own_dealer_is_routed_and_large_frames_arrive_whole_both_ways(path: str) -> None:
    router = ZmtpRouter(path)
    poller = Poller([router])
    big = bytes(range(256)) * (32 * 1024)  # 8 MB: many times a socket's buffer
    async with trio.open_nursery() as nursery:
        # connect() blocks for the ROUTER's greeting, which the router sends as it accepts
        nursery.start_soon(until_connected, router, poller, 1)
        worker = await trio.to_thread.run_sync(lambda: ZmtpDealer.connect(path, routing_id=b"w-1"))
    try:
        assert worker.lost is None
        worker.send_nowait([big, b"tail"])
        worker.send_nowait([b"after"])
        assert await receive(poller, 2) == [[b"w-1", big, b"tail"], [b"w-1", b"after"]]
        router.send_nowait([b"w-1", big])
        router.send_nowait([b"w-1", b"small"])
        assert await receive_while_draining(worker, router, 2) == [[big], [b"small"]]
    finally:
        worker.close()
        router.close()


async def receive_while_draining(peer: ZmtpDealer, router: ZmtpRouter, count: int) -> list[list[bytes]]:
    """Receive on ``peer`` while the router flushes what its socket did not take at once."""
    async with trio.open_nursery() as nursery:

        async def drive() -> None:
            while True:
                router.drain()
                await trio.sleep(0.001)  # a poll interval; the caller's receive is bounded by WAIT

        nursery.start_soon(drive)
        got = await receive(peer, count)
        nursery.cancel_scope.cancel()
    return got


async def test_a_second_peer_with_a_routing_id_already_connected_is_refused_and_the_first_kept(
    context: zmq.Context[zmq.Socket[bytes]], path: str
) -> None:
    router = ZmtpRouter(path)
    poller = Poller([router])
    first = dealer(context, path, b"same")
    try:
        first.send_nowait([b"from the first"])
        assert await receive(poller, 1) == [[b"same", b"from the first"]]
        second = raw_peer(path)
        second.sendall(hello(identity=b"same") + encode_message([b"from the second"]))
        await read_until_closed(second, router)
        second.close()
        first.send_nowait([b"first again"])
        assert await receive(poller, 1) == [[b"same", b"first again"]]
        router.send_nowait([b"same", b"to the first"])
        assert await receive(first, 1) == [[b"to the first"]]
    finally:
        first.close()
        router.close()


async def test_a_send_to_no_peer_is_unroutable_and_a_peer_that_never_reads_fills_its_queue(path: str) -> None:
    router = ZmtpRouter(path, send_hwm=3)
    poller = Poller([router])
    with pytest.raises(Unroutable):
        router.send_nowait([b"nobody", b"x"])
    deaf = raw_peer(path)  # handshakes, then never reads another byte
    deaf.sendall(hello(identity=b"deaf") + encode_message([b"hi"]))
    try:
        assert await receive(poller, 1) == [[b"deaf", b"hi"]]
        chunk = b"z" * (1024 * 1024)
        with pytest.raises(QueueFull):
            for _ in range(1000):  # the kernel takes a few MB at most; then three are queued, then full
                router.send_nowait([b"deaf", chunk])
        deaf.close()
        with trio.fail_after(WAIT):
            while router.peers:
                await trio.sleep(0.005)  # a poll interval, bounded by WAIT
                router.drain()
        with pytest.raises(Unroutable):
            router.send_nowait([b"deaf", b"gone"])
    finally:
        router.close()


async def test_messages_sent_before_a_peer_went_away_are_still_delivered(
    context: zmq.Context[zmq.Socket[bytes]], path: str
) -> None:
    router = ZmtpRouter(path)
    poller = Poller([router])
    raw = raw_peer(path)
    raw.sendall(DEALER_HELLO + encode_message([b"last words"]))
    raw.close()
    try:
        [(_, said)] = await receive(poller, 1)
        assert said == b"last words"
    finally:
        router.close()


@pytest.mark.parametrize(
    ("sent", "why"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not ZMTP"),
        (SIGNATURE + b"\x02\x00" + bytes(52), "ZMTP 2"),
        (SIGNATURE + b"\x03\x00" + b"CURVE".ljust(20, b"\0") + bytes(32), "another mechanism"),
        (hello(b"PUB"), "a PUB"),
        (DEALER_HELLO + b"\x02" + (1 << 40).to_bytes(8, "big"), "a frame of a TB"),
        (DEALER_HELLO + b"\x80\x01x", "reserved flag bits"),
    ],
)
async def test_a_peer_that_breaks_the_protocol_is_dropped_and_the_others_are_served(
    context: zmq.Context[zmq.Socket[bytes]], path: str, sent: bytes, why: str
) -> None:
    router = ZmtpRouter(path)
    poller = Poller([router])
    good = dealer(context, path, b"good")
    bad = raw_peer(path)
    try:
        bad.sendall(sent)
        await read_until_closed(bad, router)  # closed: the test fails on WAIT otherwise
        good.send_nowait([b"still served"])
        assert await receive(poller, 1) == [[b"good", b"still served"]], why
        router.send_nowait([b"good", b"yes"])
        assert await receive(good, 1) == [[b"yes"]]
    finally:
        bad.close()
        good.close()
        router.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.binary(min_size=1, max_size=2000))
def test_random_bytes_from_a_peer_harm_no_other_peer(tmp_path: Path, garbage: bytes) -> None:
    async def main() -> None:
        path = str(tmp_path / f"r{os.getpid()}-{len(garbage)}")
        router = ZmtpRouter(path)
        poller = Poller([router])
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        good = dealer(ctx, path, b"good")
        bad = raw_peer(path)
        try:
            bad.sendall(garbage)
            good.send_nowait([b"ping"])
            got = await receive(poller, 1)
            assert [b"good", b"ping"] in got
            router.send_nowait([b"good", b"pong"])
            assert await receive(good, 1) == [[b"pong"]]
        finally:
            bad.close()
            good.close()
            router.close()
            ctx.destroy(linger=0)
            os.unlink(path)

    trio.run(main)


async def test_a_peer_that_never_finishes_its_handshake_is_dropped_in_time(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(zmtp_router, "HANDSHAKE_TIMEOUT", 0.2)
    router = ZmtpRouter(path)
    silent = raw_peer(path)
    silent.sendall(SIGNATURE[:5])  # a trickle that stops
    try:
        with trio.fail_after(WAIT):
            sent = await read_until_closed(silent, router)
        assert sent.startswith(SIGNATURE)  # it was greeted, then let go
    finally:
        silent.close()
        router.close()


async def test_libzmq_heartbeats_are_answered_and_the_peer_stays(
    context: zmq.Context[zmq.Socket[bytes]], path: str
) -> None:
    router = ZmtpRouter(path)
    poller = Poller([router])
    sock = new_dealer(context, routing_id=b"beating")
    sock.setsockopt(zmq.HEARTBEAT_IVL, 20)  # ms
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 100)  # ms without an answer: libzmq drops the connection
    sock.connect(f"ipc://{path}")
    beating = TrioSocket(sock)
    try:
        beating.send_nowait([b"first"])
        assert await receive(poller, 1) == [[b"beating", b"first"]]
        with trio.move_on_after(0.6):  # thirty heartbeats, each answered as the router drains
            while True:
                router.drain()
                await trio.sleep(0.005)
        assert router.peers == 1  # libzmq would have dropped a peer whose PINGs went unanswered
        beating.send_nowait([b"second"])
        assert await receive(poller, 1) == [[b"beating", b"second"]]
    finally:
        beating.close()
        router.close()


async def test_peers_are_taken_in_turn(path: str) -> None:
    router = ZmtpRouter(path)
    poller = Poller([router])
    a, b = raw_peer(path), raw_peer(path)
    try:
        # Both floods are in the kernel's buffers before the router reads anything.
        for who, sock in ((b"a", a), (b"b", b)):
            sock.sendall(hello(identity=who) + b"".join(encode_message([b"%d" % i]) for i in range(600)))
        first: list[list[bytes]] = []
        with trio.fail_after(WAIT):
            while not first:  # the first wake-up accepts them; the next one reads
                (first,) = await poller.receive()
        assert len(first) == 256 and {m[0] for m in first} == {b"a", b"b"}  # neither waits for the other
        rest = await receive(poller, 1200 - len(first))
        for who in (b"a", b"b"):
            assert [m[1] for m in first + rest if m[0] == who] == [b"%d" % i for i in range(600)]
    finally:
        a.close()
        b.close()
        router.close()


def test_a_stale_socket_file_is_replaced_the_new_one_is_owner_only_and_other_files_are_kept(
    tmp_path: Path,
) -> None:
    stale = tmp_path / "stale"
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(str(stale))
    left.close()  # a socket file nobody listens on, as a killed supervisor leaves it
    router = ZmtpRouter(str(stale))
    assert stat.S_IMODE(stale.stat().st_mode) == 0o600
    router.close()
    regular = tmp_path / "regular"
    regular.write_text("not a socket")
    with pytest.raises(OSError):
        ZmtpRouter(str(regular))
    assert regular.read_text() == "not a socket"


async def test_an_abstract_endpoint_and_the_choice_of_router(
    context: zmq.Context[zmq.Socket[bytes]], path: str
) -> None:
    name = "@" + path.replace("/", "-")
    router = bind_router(context, f"ipc://{name}")
    assert isinstance(router, ZmtpRouter)
    poller = Poller([router])
    peer = dealer(context, name, b"p")
    try:
        peer.send_nowait([b"hi"])
        assert await receive(poller, 1) == [[b"p", b"hi"]]
    finally:
        peer.close()
        router.close()
    tcp = bind_router(context, "tcp://127.0.0.1:*")
    assert isinstance(tcp, TrioSocket)  # tcp stays with libzmq (and CURVE with it)
    tcp.close()


async def test_closing_the_router_closes_every_connection(path: str) -> None:
    router = ZmtpRouter(path)
    peer = raw_peer(path)
    peer.sendall(DEALER_HELLO)
    await until_connected(router, Poller([router]), 1)
    router.close()
    peer.settimeout(WAIT)
    data = peer.recv(4096)
    while data:
        data = peer.recv(4096)
    peer.close()
