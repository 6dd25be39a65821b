"""ZMTP spoken by the worker's DEALER: the codec's properties, and the DEALER against libzmq's ROUTER.

The codec (``supervisor.shared.zmtp``) is fed streams split anywhere, cut short, oversized or
random; the DEALER (``supervisor.shared.zmtp_dealer``) talks to a real libzmq ROUTER (pyzmq) in
this process over ipc, as the supervisor's worker link does.
"""

from __future__ import annotations

import logging
import socket

import pytest
import trio
import trio.testing
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.shared.sockets import TrioSocket, bind_zmq_router
from supervisor.shared.zmtp import (
    SIGNATURE,
    Command,
    Decoder,
    FrameTooLarge,
    PeerError,
    ProtocolError,
    encode_command,
    encode_message,
    ready,
)
from supervisor.shared.zmtp_dealer import ZmtpDealer

WAIT = 5.0  # seconds any expected message may take, on a loaded machine

ROUTER_GREETING = SIGNATURE + b"\x03\x01" + b"NULL".ljust(20, b"\0") + b"\x01" + bytes(31)
ROUTER_READY = ready({b"Socket-Type": b"ROUTER"})

frames = st.lists(st.binary(max_size=600), min_size=1, max_size=4)
Item = list[bytes] | Command


def stream(items: list[Item]) -> bytes:
    """What a ROUTER sends: its greeting, READY, then ``items`` (messages, or commands)."""
    body = b"".join(
        encode_command(item.name, item.data) if isinstance(item, Command) else encode_message(item)
        for item in items
    )
    return ROUTER_GREETING + ROUTER_READY + body


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def feed_all(decoder: Decoder, chunks: list[bytes]) -> list[Item]:
    out: list[Item] = []
    for chunk in chunks:
        out += decoder.feed(chunk)
    return out


items = st.lists(
    st.one_of(
        frames, st.builds(Command, st.sampled_from([b"PING", b"PONG", b"HELLO"]), st.binary(max_size=20))
    ),
    max_size=8,
)


@given(items, st.lists(st.integers(min_value=0), max_size=12))
def test_any_split_of_a_valid_stream_decodes_to_the_same_messages_and_commands(
    sent: list[Item], cuts: list[int]
) -> None:
    decoder = Decoder()
    assert feed_all(decoder, split(stream(sent), cuts)) == sent
    assert decoder.ready and decoder.peer == {b"socket-type": b"ROUTER"} and decoder.version == (3, 1)


@given(items, st.integers(min_value=1), st.lists(st.integers(min_value=0), max_size=6))
def test_a_stream_cut_short_gives_the_messages_it_completes_and_no_error(
    sent: list[Item], cut: int, cuts: list[int]
) -> None:
    data = stream(sent)
    head = data[: cut % len(data)]
    got = feed_all(Decoder(), split(head, cuts))
    assert got == sent[: len(got)]


@given(
    st.sampled_from([b"", ROUTER_GREETING, ROUTER_GREETING + ROUTER_READY]),
    st.binary(max_size=400),
    st.lists(st.integers(min_value=0), max_size=6),
)
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_random_bytes_raise_nothing_but_a_protocol_error_and_stop_the_decoder(
    prefix: bytes, noise: bytes, cuts: list[int]
) -> None:
    decoder = Decoder(max_size=1000)
    try:
        feed_all(decoder, split(prefix + noise, cuts))
    except ProtocolError:
        with pytest.raises(ProtocolError):  # a failed stream takes nothing more
            decoder.feed(b"\x00\x00")


@given(st.integers(min_value=1001, max_value=2**63 - 1))
def test_a_frame_past_the_limit_is_refused_from_its_header_alone(size: int) -> None:
    decoder = Decoder(max_size=1000)
    with pytest.raises(FrameTooLarge, match=f"{size} bytes"):
        decoder.feed(ROUTER_GREETING + ROUTER_READY + b"\x02" + size.to_bytes(8, "big"))


@pytest.mark.parametrize(
    ("greeting", "why"),
    [
        (b"GET / HTTP/1.1\r\n", "does not speak ZMTP"),
        (b"\xff" + bytes(8) + b"\x7e", "does not speak ZMTP"),
        (SIGNATURE + b"\x02\x00", "ZMTP 2.x"),
        (SIGNATURE + b"\x03\x00" + b"CURVE".ljust(20, b"\0"), "'CURVE' mechanism"),
    ],
)
def test_a_peer_that_does_not_greet_as_zmtp_3_with_null_is_refused(greeting: bytes, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        Decoder().feed(greeting)


@pytest.mark.parametrize(
    ("after_greeting", "error", "why"),
    [
        (ready({b"Socket-Type": b"DEALER"}), ProtocolError, "DEALER socket, not ROUTER"),
        (encode_command(b"ERROR", b"\x06denied"), PeerError, "refused: denied"),
        (encode_command(b"PING", b"\x00\x00"), ProtocolError, "before READY"),
        (encode_message([b"early"]), ProtocolError, "message before the peer's READY"),
        (b"\x0c\x00", ProtocolError, "reserved bits"),
        (b"\x05\x01x", ProtocolError, "MORE set"),
        (encode_command(b"READY", b"\x0bSocket-Type\x00\x00\x00\x09ROU"), ProtocolError, "cut short"),
    ],
)
def test_a_peer_that_is_not_a_router_or_breaks_the_handshake_is_refused(
    after_greeting: bytes, error: type[ProtocolError], why: str
) -> None:
    with pytest.raises(error, match=why):
        Decoder().feed(ROUTER_GREETING + after_greeting)


def test_property_names_are_matched_whatever_their_case() -> None:
    decoder = Decoder()
    decoder.feed(ROUTER_GREETING + ready({b"socket-type": b"ROUTER", b"X-Other": b"1"}))
    assert decoder.ready and decoder.peer[b"x-other"] == b"1"


# ---------------------------------------------------------------- against libzmq's ROUTER


async def receive(sock: TrioSocket | ZmtpDealer, count: int) -> list[list[bytes]]:
    got: list[list[bytes]] = []
    with trio.fail_after(WAIT):
        while len(got) < count:
            got += await sock.receive_batch()
    return got


async def test_messages_go_both_ways_and_the_router_sees_the_routing_id(
    context: zmq.Context[zmq.Socket[bytes]], path: str
) -> None:
    router = bind_zmq_router(context, f"ipc://{path}")
    dealer = ZmtpDealer.connect(path, routing_id=b"worker-7")
    try:
        dealer.send_nowait([b"one"])
        dealer.send_nowait([b"two", b"", b"x" * 300])
        assert await receive(router, 2) == [[b"worker-7", b"one"], [b"worker-7", b"two", b"", b"x" * 300]]
        router.send_nowait([b"worker-7", b"back", b"y" * 256])
        router.send_nowait([b"worker-7", b"again"])
        assert await receive(dealer, 2) == [[b"back", b"y" * 256], [b"again"]]
    finally:
        dealer.close()
        router.close()


async def test_frames_larger_than_the_socket_buffer_arrive_whole_and_in_order(
    context: zmq.Context[zmq.Socket[bytes]], path: str
) -> None:
    router = bind_zmq_router(context, f"ipc://{path}")
    dealer = ZmtpDealer.connect(path, routing_id=b"w")
    big = bytes(range(256)) * (32 * 1024)  # 8 MB: many times the socket's buffer
    try:
        dealer.send_nowait([big, b"tail"])
        assert dealer.buffered > 0  # the socket took part of it: the rest waits for the flush task
        dealer.send_nowait([b"after"])
        got = await receive(router, 2)
        assert got == [[b"w", big, b"tail"], [b"w", b"after"]]
        assert dealer.buffered == 0
        router.send_nowait([b"w", big])
        router.send_nowait([b"w", b"small"])
        assert await receive(dealer, 2) == [[big], [b"small"]]
    finally:
        dealer.close()
        router.close()


async def test_the_routers_close_ends_the_link_and_the_reader_waits_until_closed(
    context: zmq.Context[zmq.Socket[bytes]], path: str, caplog: pytest.LogCaptureFixture
) -> None:
    router = bind_zmq_router(context, f"ipc://{path}")
    dealer = ZmtpDealer.connect(path, routing_id=b"w")
    dealer.send_nowait([b"hello"])
    await receive(router, 1)
    returned: list[list[list[bytes]]] = []
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:

            async def read() -> None:
                with pytest.raises(trio.ClosedResourceError):
                    returned.append(await dealer.receive_batch())

            nursery.start_soon(read)
            with caplog.at_level(logging.INFO, "mcp_supervisor.zmtp"):
                router.close()
                assert "closed the connection" in await dealer.wait_lost()
            assert "worker link: the supervisor closed the connection" in caplog.text
            dealer.send_nowait([b"dropped"])  # no error: the peer is gone
            await trio.testing.wait_all_tasks_blocked()
            assert not returned  # the worker's lifeline, not this link, says when to end
            dealer.close()
    assert not returned


class CountingDealer(ZmtpDealer):
    """Says when it has answered ``ENOUGH`` PINGs."""

    ENOUGH = 12

    def __init__(self, *, max_size: int = 1000) -> None:
        super().__init__(max_size=max_size)
        self.pings = 0
        self.answered = trio.Event()

    def _command(self, command: Command) -> None:
        super()._command(command)
        if command.name == b"PING":
            self.pings += 1
            if self.pings >= self.ENOUGH:
                self.answered.set()


async def test_heartbeats_are_answered_and_the_connection_stays_up(
    context: zmq.Context[zmq.Socket[bytes]], path: str
) -> None:
    raw = context.socket(zmq.ROUTER)
    raw.setsockopt(zmq.HEARTBEAT_IVL, 50)  # ms
    raw.setsockopt(zmq.HEARTBEAT_TIMEOUT, 300)  # ms without traffic after a PING: libzmq drops us
    raw.bind(f"ipc://{path}")
    router = TrioSocket(raw)
    dealer = CountingDealer.connect(path, routing_id=b"w")
    assert isinstance(dealer, CountingDealer) and dealer.lost is None
    send, received = trio.open_memory_channel[list[bytes]](10)
    try:
        with trio.fail_after(WAIT):
            async with trio.open_nursery() as nursery:

                async def read() -> None:
                    while True:
                        for message in await dealer.receive_batch():
                            send.send_nowait(message)

                nursery.start_soon(read)
                await dealer.answered.wait()  # twelve PINGs: twice libzmq's timeout
                dealer.send_nowait([b"still here"])
                assert await receive(router, 1) == [[b"w", b"still here"]]
                router.send_nowait([b"w", b"so am I"])
                assert await received.receive() == [b"so am I"]
                nursery.cancel_scope.cancel()
        assert dealer.lost is None
    finally:
        dealer.close()
        router.close()


async def test_a_frame_past_the_limit_closes_the_link_with_its_reason_logged(
    context: zmq.Context[zmq.Socket[bytes]], path: str, caplog: pytest.LogCaptureFixture
) -> None:
    router = bind_zmq_router(context, f"ipc://{path}")
    dealer = ZmtpDealer.connect(path, routing_id=b"w", max_size=1000)
    try:
        router.send_nowait([b"w", b"z" * 1001])
        with trio.fail_after(WAIT), caplog.at_level(logging.ERROR, "mcp_supervisor.zmtp"):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(dealer.receive_batch)
                assert "a frame of 1001 bytes, past the limit of 1000" in await dealer.wait_lost()
                nursery.cancel_scope.cancel()
        assert "worker link: closed the connection: a frame of 1001 bytes" in caplog.text
    finally:
        dealer.close()
        router.close()


def test_a_peer_that_is_not_a_router_ends_the_link_at_connect(
    context: zmq.Context[zmq.Socket[bytes]], path: str, caplog: pytest.LogCaptureFixture
) -> None:
    peer = context.socket(zmq.DEALER)
    peer.bind(f"ipc://{path}")
    with caplog.at_level(logging.ERROR, "mcp_supervisor.zmtp"):
        dealer = ZmtpDealer.connect(path, routing_id=b"w")
    assert dealer.lost is not None and "the peer is a DEALER socket, not ROUTER" in dealer.lost
    assert "worker link: cannot connect to" in caplog.text
    dealer.send_nowait([b"dropped"])
    dealer.close()
    peer.close(linger=0)


def test_a_missing_endpoint_ends_the_link_at_connect(path: str) -> None:
    dealer = ZmtpDealer.connect(path, routing_id=b"w")
    assert dealer.lost is not None and "cannot connect" in dealer.lost
    dealer.close()


def test_a_silent_peer_ends_the_link_after_the_handshake_timeout(path: str) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    try:
        dealer = ZmtpDealer.connect(path, routing_id=b"w", timeout=0.05)
        assert dealer.lost is not None and "timed out" in dealer.lost
        dealer.close()
    finally:
        listener.close()


async def test_an_abstract_endpoint_is_reached(context: zmq.Context[zmq.Socket[bytes]], path: str) -> None:
    name = "@" + path.replace("/", "-")
    router = bind_zmq_router(context, f"ipc://{name}")
    dealer = ZmtpDealer.connect(name, routing_id=b"w")
    try:
        dealer.send_nowait([b"hi"])
        assert await receive(router, 1) == [[b"w", b"hi"]]
    finally:
        dealer.close()
        router.close()
