"""ZeroMQ sockets driven from trio, without a bridge thread or asyncio.

pyzmq has no trio integration, so we wait on the socket's ``FD`` with
``trio.lowlevel.wait_readable``. That FD is edge-triggered and only says "look
at ``zmq.EVENTS``": a reader must drain with ``NOBLOCK`` and re-check
``EVENTS`` before every wait, or it sleeps through messages that are already
queued.

One task owns the receiving side of a socket (``receive_batch``). Sends never
block (the links use unlimited send high-water marks or ``ROUTER_MANDATORY``),
so any task may call ``send_nowait``; since a send can consume the FD's edge
while the reader waits, a send that leaves input pending wakes the reader.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from contextlib import suppress
from typing import Final, cast

import trio
import zmq

__all__ = [
    "BATCH",
    "EVENTS_HWM",
    "MAX_MESSAGE_SIZE",
    "TrioSocket",
    "Unroutable",
    "bind_publisher",
    "bind_router",
    "fd_of",
    "readable",
]

BATCH: Final = 256  # messages taken per wake-up before yielding to other tasks
MAX_MESSAGE_SIZE: Final = 64 * 1024 * 1024  # bytes; a larger frame drops the peer's connection
EVENTS_HWM: Final = 10_000  # events queued per subscriber before it misses some


def fd_of(sock: zmq.Socket[bytes]) -> int:
    return cast(int, sock.getsockopt(zmq.FD))


def readable(sock: zmq.Socket[bytes]) -> bool:
    """Whether a message is queued; also re-arms the FD's edge (see the module docstring)."""
    return bool(cast(int, sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN)


class Unroutable(Exception):
    """A ROUTER reply addressed to a peer that is not connected (any more)."""


class TrioSocket:
    """A zmq socket with one receiving task and non-blocking sends from any task."""

    def __init__(self, sock: zmq.Socket[bytes]) -> None:
        self.sock = sock
        self._fd = fd_of(sock)
        self._waiting: trio.CancelScope | None = None

    def send_nowait(self, frames: Sequence[bytes]) -> None:
        """Queue a multipart message; raises ``Unroutable`` if a ROUTER peer is gone."""
        try:
            self.sock.send_multipart(frames, zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            if exc.errno in (errno.EHOSTUNREACH, zmq.EAGAIN):
                raise Unroutable(str(exc)) from exc
            raise
        finally:
            if self._waiting is not None and readable(self.sock):
                self._waiting.cancel()

    async def receive_batch(self) -> list[list[bytes]]:
        """Wait for at least one message and return every queued one, up to ``BATCH``."""
        sock = self.sock
        while True:
            batch: list[list[bytes]] = []
            try:
                while len(batch) < BATCH:
                    batch.append(sock.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                pass
            if batch:
                await trio.lowlevel.checkpoint()
                return batch
            with trio.CancelScope() as scope:
                self._waiting = scope
                try:
                    if not readable(sock):
                        await trio.lowlevel.wait_readable(self._fd)
                finally:
                    self._waiting = None

    def close(self) -> None:
        if not self.sock.closed:
            with suppress(RuntimeError):  # outside trio: no task can be waiting on the FD
                trio.lowlevel.notify_closing(self._fd)
            self.sock.close(linger=0)


def bind_publisher(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> zmq.Socket[bytes]:
    """A PUB bound to ``endpoint``: events for whoever subscribes; never blocks (drops at its HWM)."""
    sock = ctx.socket(zmq.PUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, EVENTS_HWM)
    try:
        sock.bind(endpoint)
    except zmq.ZMQError:
        sock.close(linger=0)
        raise
    return sock


def bind_router(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> TrioSocket:
    """A ROUTER bound to ``endpoint`` with the options every ROUTER here needs."""
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # unroutable replies raise instead of vanishing
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_SIZE)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    try:
        sock.bind(endpoint)
    except zmq.ZMQError:
        sock.close(linger=0)
        raise
    return TrioSocket(sock)
