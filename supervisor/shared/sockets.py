"""ZeroMQ sockets driven from trio, without a bridge thread or asyncio.

pyzmq has no trio integration, so we wait on the sockets' ``FD``s. Such an FD
only says "look at ``zmq.EVENTS``": a reader must check ``EVENTS`` before each
receive and before every wait, or it sleeps through messages already queued.

One task owns the receiving side of a set of sockets: a ``Poller`` puts their
FDs, and an eventfd for wake-ups, in one epoll set, and that task waits on the
epoll set's own FD with ``trio.lowlevel.wait_readable``. One wake-up drains
every socket in batches (``BATCH`` messages each), checking ``EVENTS`` rather
than catching ``zmq.Again``: a raised ``Again`` costs more than the message.

Sends never block (the links use unlimited send high-water marks or
``ROUTER_MANDATORY``), so any task may call ``send_nowait``. A send processes
the socket's pending commands and so can consume the FD's signal while the
reader waits: a send that leaves input pending writes the eventfd, which wakes
the reader.
"""

from __future__ import annotations

import errno
import os
import select
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Final, Protocol, cast

import trio
import zmq
import zmq.backend

from supervisor.shared.zmtp import BATCH, MAX_MESSAGE_SIZE, native_path  # with the codec: no libzmq
from supervisor.shared.zmtp_router import QueueFull, Unroutable, ZmtpRouter

if TYPE_CHECKING:
    from supervisor.security.keys import ServerKeys

__all__ = [
    "BATCH",
    "EVENTS_HWM",
    "MAX_MESSAGE_SIZE",
    "Poller",
    "QueueFull",
    "Receivable",
    "RouterSocket",
    "TrioSocket",
    "Unroutable",
    "ZmtpRouter",
    "bind_publisher",
    "bind_router",
    "bind_zmq_router",
    "fd_of",
    "readable",
]

EVENTS_HWM: Final = 10_000  # events queued per subscriber before it misses some
MAX_USER_IDS: Final = 4096  # CURVE peers whose key a ROUTER remembers (``TrioSocket.user_ids``)


_backend_get = cast(Callable[[zmq.Socket[bytes], int], int], zmq.backend.Socket.get)
_backend_recv = cast(Callable[[zmq.Socket[bytes], int], bytes], zmq.backend.Socket.recv)
_EVENTS: Final = int(zmq.EVENTS)
_RCVMORE: Final = int(zmq.RCVMORE)
_POLLIN: Final = int(zmq.POLLIN)
_NOBLOCK: Final = int(zmq.NOBLOCK)


def fd_of(sock: zmq.Socket[bytes]) -> int:
    return cast(int, sock.getsockopt(zmq.FD))


def readable(sock: zmq.Socket[bytes]) -> bool:
    """Whether a message is queued; also re-arms the FD's edge (see the module docstring)."""
    return bool(cast(int, sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN)


class Receivable(Protocol):
    """What a ``Poller`` waits on: an FD that is readable while ``drain`` may have something, and
    ``drain``, which never waits (``TrioSocket``, ``ZmtpRouter``)."""

    fd: int
    poller: Poller | None

    def drain(self) -> list[list[bytes]]: ...


class TrioSocket:
    """A zmq socket with one receiving task (through a ``Poller``) and non-blocking sends from any task."""

    def __init__(self, sock: zmq.Socket[bytes]) -> None:
        self.sock = sock
        self.fd = fd_of(sock)
        self.poller: Poller | None = None  # the poller its reader waits in, once it has one
        # A CURVE ROUTER's: each peer's ZAP User-Id (its public key, z85), by routing id, as its
        # latest message said (the ``MAX_USER_IDS`` peers heard from last).
        self.user_ids: dict[bytes, str] | None = None

    def send_nowait(self, frames: Sequence[bytes]) -> None:
        """Queue a multipart message; raises ``Unroutable`` if a ROUTER peer is gone."""
        try:
            self.sock.send_multipart(frames, zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EAGAIN:
                raise QueueFull(str(exc)) from exc
            if exc.errno == errno.EHOSTUNREACH:
                raise Unroutable(str(exc)) from exc
            raise
        finally:
            poller = self.poller
            if poller is not None and poller.waiting and readable(self.sock):
                poller.wake()

    def drain(self) -> list[list[bytes]]:
        """Every queued message, up to ``BATCH``, without waiting."""
        if self.user_ids is not None:
            return self._drain_noting_users(self.user_ids)
        # The backend's own get/recv: pyzmq's sugar wraps each in Python-level option and enum handling.
        sock, get, recv, batch = self.sock, _backend_get, _backend_recv, list[list[bytes]]()
        while len(batch) < BATCH and get(sock, _EVENTS) & _POLLIN:
            frames = [recv(sock, _NOBLOCK)]
            while get(sock, _RCVMORE):
                frames.append(recv(sock, _NOBLOCK))
            batch.append(frames)
        return batch

    def _drain_noting_users(self, user_ids: dict[bytes, str]) -> list[list[bytes]]:
        """As ``drain``, noting each sender's User-Id, read from its message's last frame."""
        sock, batch = self.sock, list[list[bytes]]()
        while len(batch) < BATCH and _backend_get(sock, _EVENTS) & _POLLIN:
            frames: list[bytes] = []
            more = True
            while more:
                frame = sock.recv(_NOBLOCK, copy=False)
                frames.append(frame.bytes)
                more = bool(_backend_get(sock, _RCVMORE))
            user = frame.get("User-Id") if len(frames) > 1 else None
            if isinstance(user, str) and user:
                user_ids.pop(frames[0], None)  # the newest last: the oldest are forgotten first
                user_ids[frames[0]] = user
                if len(user_ids) > MAX_USER_IDS:
                    del user_ids[next(iter(user_ids))]
            batch.append(frames)
        return batch

    async def receive_batch(self) -> list[list[bytes]]:
        """Wait for at least one message and return every queued one, up to ``BATCH``."""
        if self.poller is None:
            self.poller = Poller([self])
        (batch,) = await self.poller.receive()
        return batch

    def close(self) -> None:
        if self.poller is not None:
            self.poller.close()
        if not self.sock.closed:
            self.sock.close(linger=0)


class Poller:
    """Waits until any of its sockets has input; used by one task at a time."""

    def __init__(self, sockets: Sequence[Receivable]) -> None:
        self.sockets = list(sockets)
        self.waiting = False  # the reader is parked: a send that leaves input pending must wake it
        self._epoll = select.epoll()
        self._wakeup = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._woken = False  # the eventfd was written and not read yet
        self._poked = False  # a wake-up was read: receive() returns even with nothing to return
        self._epoll.register(self._wakeup, select.EPOLLIN)
        for sock in self.sockets:
            self._epoll.register(sock.fd, select.EPOLLIN)
            sock.poller = self

    def wake(self) -> None:
        """Make the reader's ``receive()`` return (with whatever is queued, maybe nothing) soon."""
        if not self._woken:
            self._woken = True
            os.eventfd_write(self._wakeup, 1)

    async def receive(self) -> list[list[list[bytes]]]:
        """Wait for input on any socket, or a ``wake()``; then each socket's batch (maybe empty), in order.

        Always a checkpoint: the wait is one; input already queued gets an explicit one, so a
        flood of messages never starves the other tasks."""
        waited = False
        while True:
            batches = [sock.drain() for sock in self.sockets]
            if any(batches) or (waited and self._poked):
                self._poked = False
                if not waited:
                    await trio.lowlevel.checkpoint()
                return batches
            waited = True
            self.waiting = True
            try:
                await trio.lowlevel.wait_readable(self._epoll.fileno())
            finally:
                self.waiting = False
            if self._woken:
                self._woken = False
                self._poked = True
                with suppress(BlockingIOError):
                    os.eventfd_read(self._wakeup)

    def close(self) -> None:
        if self._epoll.closed:
            return
        with suppress(RuntimeError):  # outside trio: no task can be waiting on the FD
            trio.lowlevel.notify_closing(self._epoll.fileno())
        self._epoll.close()
        os.close(self._wakeup)


RouterSocket = TrioSocket | ZmtpRouter  # what ``bind_router`` gives


def new_dealer(ctx: zmq.Context[zmq.Socket[bytes]], *, routing_id: bytes | None = None) -> zmq.Socket[bytes]:
    """A DEALER with the options every DEALER here needs, not yet connected: no HWM (a request or event
    is never dropped or blocked on by the sender), ``LINGER`` 0 and ``MAXMSGSIZE``; ``routing_id`` for
    a worker incarnation."""
    sock = ctx.socket(zmq.DEALER)
    if routing_id is not None:
        sock.setsockopt(zmq.ROUTING_ID, routing_id)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_SIZE)
    return sock


def new_subscriber(
    ctx: zmq.Context[zmq.Socket[bytes]], topics: Iterable[bytes] = (b"",)
) -> zmq.Socket[bytes]:
    """A SUB to ``topics`` (every topic by default), not yet connected: no HWM (a slow reader is the
    publisher's to drop), ``LINGER`` 0."""
    sock = ctx.socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    for topic in topics:
        sock.setsockopt(zmq.SUBSCRIBE, topic)
    return sock


def bind_publisher(
    ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, *, curve: ServerKeys | None = None
) -> zmq.Socket[bytes]:
    """A PUB bound to ``endpoint``: events for whoever subscribes; never blocks (drops at its HWM).
    With ``curve``, only clients with an allowed key subscribe (a ``curve.Gate`` must run in ``ctx``)."""
    sock = ctx.socket(zmq.PUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, EVENTS_HWM)
    _bind(sock, endpoint, curve)
    return sock


def bind_router(
    ctx: zmq.Context[zmq.Socket[bytes]],
    endpoint: str,
    *,
    send_hwm: int = 0,
    recv_hwm: int = 0,
    curve: ServerKeys | None = None,
) -> TrioSocket | ZmtpRouter:
    """A ROUTER bound to ``endpoint``: on an ``ipc://`` path without CURVE the one that speaks ZMTP
    itself (``ZmtpRouter``: no I/O thread between a message and its reader), else libzmq's
    (``bind_zmq_router``). Raises ``zmq.ZMQError`` or ``OSError`` naming the problem."""
    path = native_path(endpoint) if curve is None else None
    if path is not None:
        return ZmtpRouter(path, send_hwm=send_hwm)  # recv_hwm: it reads a peer only as it is read
    return bind_zmq_router(ctx, endpoint, send_hwm=send_hwm, recv_hwm=recv_hwm, curve=curve)


def bind_zmq_router(
    ctx: zmq.Context[zmq.Socket[bytes]],
    endpoint: str,
    *,
    send_hwm: int = 0,
    recv_hwm: int = 0,
    curve: ServerKeys | None = None,
) -> TrioSocket:
    """libzmq's ROUTER bound to ``endpoint`` with the options every ROUTER here needs. ``send_hwm``
    bounds the messages queued for each peer (0: no bound), past which a send raises ``QueueFull``;
    ``recv_hwm`` the messages taken from each peer and not yet read, past which that peer's sends
    wait; ``curve`` as for ``bind_publisher``."""
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)  # unroutable replies raise instead of vanishing
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_SIZE)
    sock.setsockopt(zmq.SNDHWM, send_hwm)
    sock.setsockopt(zmq.RCVHWM, recv_hwm)
    _bind(sock, endpoint, curve)
    router = TrioSocket(sock)
    if curve is not None:
        router.user_ids = {}
    return router


def _bind(sock: zmq.Socket[bytes], endpoint: str, curve: ServerKeys | None) -> None:
    """Bind (closing ``sock`` if that fails); an ipc socket file is made owner-only (0600)."""
    try:
        if curve is not None:
            curve.serve(sock)
        sock.bind(endpoint)
        bound = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        if bound.startswith("ipc://") and not bound.startswith("ipc://@"):  # "@": abstract, no file
            os.chmod(bound[len("ipc://") :], 0o600)
    except (zmq.ZMQError, OSError):
        sock.close(linger=0)
        raise
