"""The trio side of ZeroMQ: one receiving task per Poller, batched drains, wake-ups after sends."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest
import trio
import trio.testing
import zmq

from supervisor.shared.sockets import BATCH, Poller, TrioSocket

WAIT = 5.0  # seconds any expected message may take, on a loaded machine


Pair = Callable[[], tuple[TrioSocket, zmq.Socket[bytes]]]


@pytest.fixture
def pair() -> Iterator[Pair]:
    """Makes a ROUTER driven from trio and a blocking DEALER connected to it (routing id b"peer")."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    made: list[tuple[TrioSocket, zmq.Socket[bytes]]] = []
    yield lambda: _pair(ctx, made)
    for sock, peer in made:
        sock.close()
        peer.close(linger=0)
    ctx.term()


_endpoints = itertools.count()


def _pair(
    ctx: zmq.Context[zmq.Socket[bytes]], made: list[tuple[TrioSocket, zmq.Socket[bytes]]]
) -> tuple[TrioSocket, zmq.Socket[bytes]]:
    endpoint = f"inproc://pair-{next(_endpoints)}"
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    router.bind(endpoint)
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.ROUTING_ID, b"peer")
    dealer.connect(endpoint)
    made.append((TrioSocket(router), dealer))
    return made[-1]


async def test_one_poller_receives_from_each_of_its_sockets_in_order(pair: Pair) -> None:
    (a, peer_a), (b, peer_b) = pair(), pair()
    poller = Poller([a, b])
    peer_b.send(b"to b")
    with trio.fail_after(WAIT):
        batches = await poller.receive()
    assert batches == [[], [[b"peer", b"to b"]]]
    peer_a.send_multipart([b"one", b"two"])
    peer_a.send(b"three")
    peer_b.send(b"again")
    got: list[list[list[bytes]]] = [[], []]
    with trio.fail_after(WAIT):
        while sum(map(len, got)) < 3:
            for mine, batch in zip(got, await poller.receive(), strict=True):
                mine += batch
    assert got == [[[b"peer", b"one", b"two"], [b"peer", b"three"]], [[b"peer", b"again"]]]


async def test_a_flood_comes_in_batches_and_other_tasks_still_run(pair: Pair) -> None:
    sock, peer = pair()
    for i in range(BATCH * 3 + 5):
        peer.send(b"%d" % i)
    ran = 0

    async def other() -> None:
        nonlocal ran
        while True:
            ran += 1
            await trio.lowlevel.checkpoint()

    sizes = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        with trio.fail_after(WAIT):
            while sum(sizes) < BATCH * 3 + 5:
                sizes.append(len(await sock.receive_batch()))
        nursery.cancel_scope.cancel()
    assert max(sizes) <= BATCH
    assert ran >= len(sizes) - 1  # every receive is a checkpoint, even with input already queued


async def test_a_send_that_finds_input_pending_wakes_the_waiting_reader(pair: Pair) -> None:
    """A send processes the socket's pending commands, which can consume the FD's signal while the reader
    waits on it; the reader must still wake for the message that is queued."""
    sock, peer = pair()
    received = trio.Event()
    rounds = 300

    async def reader() -> None:
        for _ in range(rounds):
            await sock.receive_batch()
            received.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        for i in range(rounds):
            received = trio.Event()
            await trio.testing.wait_all_tasks_blocked()  # the reader is parked on the poller
            peer.send(b"%d" % i)  # arrives while nobody looks
            sock.send_nowait([b"peer", b"ping"])  # processes the mailbox: the signal may be used up here
            with trio.fail_after(WAIT):
                await received.wait()
            assert peer.recv() == b"ping"


async def test_closing_the_socket_ends_a_waiting_reader(pair: Pair) -> None:
    sock, _peer = pair()
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:

            async def reader() -> None:
                with pytest.raises(trio.ClosedResourceError):
                    await sock.receive_batch()

            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            sock.close()


async def test_wake_makes_a_waiting_receive_return_even_with_nothing_queued(pair: Pair) -> None:
    sock, _peer = pair()
    poller = Poller([sock])
    returned: list[list[list[list[bytes]]]] = []

    async def reader() -> None:
        returned.append(await poller.receive())

    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            assert returned == []
            poller.wake()
    assert returned == [[[]]]
