"""A ROUTER that speaks ZMTP itself on a Unix stream socket: no libzmq, no I/O thread.

Above: the supervisor's front door and worker link (``supervisor.daemon``), which use it as they
use libzmq's ROUTER (``supervisor.shared.sockets.TrioSocket``): one task receives through a
``Poller`` (``fd`` and ``drain``), any task sends with ``send_nowait([routing_id, payload])``.
Below: a listening ``AF_UNIX`` socket, its connections, one epoll set holding them all (whose own
FD the ``Poller`` waits on), and the wire codec (``supervisor.shared.zmtp``). Peers are libzmq's
DEALERs (the client stubs, the Node client, the CLI) or the workers' own
(``supervisor.shared.zmtp_dealer``).

Why: through libzmq every message in or out is handed between the supervisor's thread and
libzmq's I/O thread, a wake-up of each; a routed call is four messages. Here a message in is one
``recv(2)`` by the receiving task, a message out one ``send(2)`` by the sender.

What a libzmq ROUTER with ``ROUTER_MANDATORY`` does, this does: a peer's routing id is the
``Identity`` of its READY, or a generated one (a zero byte and a counter) when it gives none; a
second peer with an id already connected is refused (closed); a send to an id not connected raises
``Unroutable``, and past ``send_hwm`` messages the socket has not taken for one peer, ``QueueFull``;
messages are taken from the peers in turn, at most ``BATCH`` a wake-up; PINGs are answered; a peer
that breaks the protocol, sends a frame past ``MAX_MESSAGE_SIZE`` or does not finish its handshake
within ``HANDSHAKE_TIMEOUT`` is disconnected, and nothing else is touched. A peer whose messages
wait unread is not read from, so its sends wait in the kernel (the ``RCVHWM``'s role).
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import select
import socket
import stat
from collections import deque
from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Final

import trio

from supervisor.shared.zmtp import (
    BATCH,
    MAX_MESSAGE_SIZE,
    READ_SIZE,
    WRITE_CHUNKS,
    Command,
    Decoder,
    ProtocolError,
    encode_message,
    greeting,
    pong,
    ready,
    written,
)

if TYPE_CHECKING:
    from supervisor.shared.sockets import Poller

__all__ = ["ZmtpRouter"]

log = logging.getLogger("mcp_supervisor.zmtp")

HANDSHAKE_TIMEOUT: Final = 10.0  # seconds a peer has to greet and send READY (libzmq's is 30)
ACCEPT_PAUSE: Final = 0.1  # seconds without accepting after the process ran out of descriptors
_PEERS: Final = frozenset({b"DEALER", b"REQ", b"ROUTER"})  # what libzmq's ROUTER talks to
_IN: Final = select.EPOLLIN
_IN_OUT: Final = select.EPOLLIN | select.EPOLLOUT
_HELLO: Final = greeting() + ready({b"Socket-Type": b"ROUTER"})


class Unroutable(Exception):
    """A ROUTER reply addressed to a peer that is not connected (any more), or that cannot take it."""


class QueueFull(Unroutable):
    """A ROUTER reply to a peer whose queue is at the send high-water mark: it does not read."""


class _Peer:
    """One connection: its codec, what it sent and was not yet taken, what it was sent and the
    socket did not take yet."""

    __slots__ = ("deadline", "deaf", "decoder", "fd", "identity", "inbox", "outbox", "sock")

    def __init__(self, sock: socket.socket, max_size: int, deadline: float) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.decoder = Decoder(max_size=max_size, peer_types=_PEERS)
        self.deadline = deadline  # for its handshake
        self.identity: bytes | None = None  # once its READY is in and it was admitted
        self.inbox: deque[list[bytes]] = deque()  # [identity, *frames], not yet taken
        self.outbox: deque[memoryview] = deque()  # one message each (the first maybe part-written)
        self.deaf = False  # a write failed: nothing more is written; what it sent is still read


class ZmtpRouter:
    """A ROUTER bound at a socket path: one receiving task (through a ``Poller``), non-blocking sends
    from any task."""

    def __init__(self, path: str, *, send_hwm: int = 0, max_size: int = MAX_MESSAGE_SIZE) -> None:
        """Bind at ``path`` (``@name``: abstract); an existing socket file there is replaced, as
        libzmq does, and the new one is owner-only (0600). Raises ``OSError`` naming the problem."""
        self.send_hwm = send_hwm  # messages queued for one peer past which a send raises QueueFull
        self.max_size = max_size
        self.poller: Poller | None = None  # the poller its reader waits in, once it has one
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            if path.startswith("@"):
                self._listener.bind("\0" + path[1:])
            else:
                with suppress(FileNotFoundError):
                    if stat.S_ISSOCK(os.lstat(path).st_mode):
                        os.unlink(path)
                self._listener.bind(path)
                os.chmod(path, 0o600)
            self._listener.listen(socket.SOMAXCONN)
            self._listener.setblocking(False)
        except OSError:
            self._listener.close()
            raise
        self._epoll = select.epoll()
        self.fd = self._epoll.fileno()
        self._epoll.register(self._listener.fileno(), _IN)
        self._listening = True
        self._peers: dict[int, _Peer] = {}  # by FD
        self._routes: dict[bytes, _Peer] = {}  # by routing id, once admitted
        self._waiting: deque[_Peer] = deque()  # peers with messages not yet taken, in turn
        self._handshakes: set[_Peer] = set()  # connected, READY not yet in
        self._sweeping = False  # a system task is timing the handshakes out
        self._ids = itertools.count(1)
        self._buffer = bytearray(READ_SIZE)
        self._view = memoryview(self._buffer)
        self.closed = False

    @property
    def peers(self) -> int:
        """Connections whose handshake is done."""
        return len(self._routes)

    # ------------------------------------------------------------- sending

    def send_nowait(self, frames: Sequence[bytes]) -> None:
        """Send ``frames[1:]`` to the peer ``frames[0]``: written now, or as soon as its socket takes
        it; never blocks. Raises ``Unroutable`` (no such peer) or ``QueueFull`` (past ``send_hwm``)."""
        peer = self._routes.get(frames[0])
        if peer is None:
            raise Unroutable(f"no peer with routing id {frames[0]!r}")
        if self.send_hwm and len(peer.outbox) >= self.send_hwm:
            raise QueueFull(f"{len(peer.outbox)} messages queued for the peer")
        self._write(peer, encode_message(frames[1:]))

    def _write(self, peer: _Peer, data: bytes) -> None:
        if peer.outbox:
            peer.outbox.append(memoryview(data))
            return
        if peer.deaf:
            return
        try:
            sent = peer.sock.send(data, socket.MSG_NOSIGNAL)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._deafen(peer)
            return
        if sent < len(data):
            peer.outbox.append(memoryview(data)[sent:])
            self._epoll.modify(peer.fd, _IN_OUT)

    def _flush(self, peer: _Peer) -> None:
        outbox = peer.outbox
        try:
            sent = peer.sock.sendmsg(itertools.islice(outbox, WRITE_CHUNKS), [], socket.MSG_NOSIGNAL)
        except BlockingIOError:
            return
        except OSError:
            self._deafen(peer)
            return
        written(outbox, sent)
        if not outbox:
            self._epoll.modify(peer.fd, _IN)

    # ------------------------------------------------------------- receiving

    def drain(self) -> list[list[bytes]]:
        """Every message waiting (``[routing_id, *frames]``), up to ``BATCH``, taken from the peers
        in turn; accepts, reads and writes whatever the sockets are ready for. Never waits."""
        if self.closed:
            return []
        for fd, events in self._epoll.poll(0):
            peer = self._peers.get(fd)
            if peer is None:
                if self._listening and fd == self._listener.fileno():
                    self._accept()
                continue
            if events & select.EPOLLOUT:
                self._flush(peer)
            if events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR) and len(peer.inbox) < BATCH:
                self._read(peer)
        batch: list[list[bytes]] = []
        waiting = self._waiting
        while waiting and len(batch) < BATCH:
            peer = waiting.popleft()
            batch.append(peer.inbox.popleft())
            if peer.inbox:
                waiting.append(peer)
        return batch

    def _accept(self) -> None:
        for _ in range(BATCH):
            try:
                sock, _address = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._pause_accepting(exc)
                return  # ECONNABORTED and the like: that one peer is gone
            sock.setblocking(False)
            peer = _Peer(sock, self.max_size, trio.current_time() + HANDSHAKE_TIMEOUT)
            self._peers[peer.fd] = peer
            self._handshakes.add(peer)
            self._epoll.register(peer.fd, _IN)
            self._write(peer, _HELLO)
            if not self._sweeping:
                self._sweeping = True
                trio.lowlevel.spawn_system_task(self._sweep, name="zmtp handshakes")

    def _read(self, peer: _Peer) -> None:
        try:
            size = peer.sock.recv_into(self._buffer)
        except BlockingIOError:
            return
        except OSError as exc:
            self._drop(peer, f"its connection failed: {exc}")
            return
        if not size:
            self._drop(peer, None)
            return
        try:
            items = peer.decoder.feed(self._view[:size])
        except ProtocolError as exc:
            self._drop(peer, str(exc))
            return
        identity = peer.identity
        if identity is None:
            if not peer.decoder.ready:
                return
            identity = self._admit(peer)
            if identity is None:
                return
        had = bool(peer.inbox)
        for item in items:
            if isinstance(item, Command):
                self._command(peer, item)
            else:
                item.insert(0, identity)
                peer.inbox.append(item)
        if peer.inbox and not had:
            self._waiting.append(peer)

    def _admit(self, peer: _Peer) -> bytes | None:
        """Route to a peer whose READY is in, by the routing id it gave or one made up."""
        self._handshakes.discard(peer)
        identity = peer.decoder.peer.get(b"identity", b"")
        if not identity:
            while not identity or identity in self._routes:
                identity = b"\0" + (next(self._ids) & 0xFFFFFFFF).to_bytes(4, "big")
        elif identity in self._routes:
            self._drop(peer, f"routing id {identity!r} is already connected")
            return None
        peer.identity = identity
        self._routes[identity] = peer
        return identity

    def _command(self, peer: _Peer, command: Command) -> None:
        if command.name == b"PING":
            self._write(peer, pong(command.data))
        elif command.name != b"PONG":
            log.debug("zmtp router: skipped the %r command", command.name)

    # ------------------------------------------------------------- ending

    def _deafen(self, peer: _Peer) -> None:
        """The peer's end is closed for our writes (it went away): drop what it was sent, write it
        nothing more, and read what it sent before going until its end of file drops it."""
        peer.deaf = True
        if peer.outbox:
            peer.outbox.clear()
            self._epoll.modify(peer.fd, _IN)

    def _drop(self, peer: _Peer, why: str | None) -> None:
        """Close one peer's connection; messages it sent before stay to be taken, as libzmq's do."""
        if self._peers.pop(peer.fd, None) is None:
            return
        if why is not None:
            log.debug("zmtp router: dropped a peer (%r): %s", peer.identity, why)
        self._handshakes.discard(peer)
        if peer.identity is not None and self._routes.get(peer.identity) is peer:
            del self._routes[peer.identity]
        peer.outbox.clear()
        with suppress(OSError):
            self._epoll.unregister(peer.fd)
        peer.sock.close()

    async def _sweep(self) -> None:
        """Disconnect peers that have not finished their handshake in time; ends when none is left."""
        try:
            while self._handshakes and not self.closed:
                await trio.sleep_until(min(peer.deadline for peer in self._handshakes))
                now = trio.current_time()
                for peer in [p for p in self._handshakes if p.deadline <= now]:
                    self._drop(peer, f"no handshake within {HANDSHAKE_TIMEOUT:g} s")
        finally:
            self._sweeping = False

    def _pause_accepting(self, exc: OSError) -> None:
        """Out of descriptors: stop accepting for a moment, rather than spin on the listener."""
        log.warning("zmtp router: cannot accept a connection: %s (retrying in %g s)", exc, ACCEPT_PAUSE)
        self._epoll.unregister(self._listener.fileno())
        self._listening = False

        async def resume() -> None:
            await trio.sleep(ACCEPT_PAUSE)
            if not self.closed:
                self._epoll.register(self._listener.fileno(), _IN)
                self._listening = True
                if self.poller is not None:
                    self.poller.wake()

        trio.lowlevel.spawn_system_task(resume, name="zmtp accept")

    def close(self) -> None:
        """Close every connection and the listener; whatever was not written is dropped (``LINGER`` 0)."""
        if self.closed:
            return
        self.closed = True
        if self.poller is not None:
            self.poller.close()
        for peer in list(self._peers.values()):
            self._drop(peer, None)
        self._listener.close()
        self._epoll.close()
