"""A DEALER that speaks ZMTP itself over a Unix stream socket under trio: no libzmq, no I/O thread.

Above: the worker's end of the worker link (``workers.uplink``), which uses it as it would a
``supervisor.shared.sockets.TrioSocket``: ``send_nowait``, ``receive_batch``, ``close``. Below: one
non-blocking ``AF_UNIX`` socket to the supervisor's worker ROUTER (libzmq, ``ipc://``) and the wire
codec, ``supervisor.shared.zmtp``.

Why: a ZeroMQ context costs each worker a thread and about 1.2 MB of private memory, and every
message passes through libzmq's I/O thread on its way in and out. Here a send is one ``send(2)``
from the calling task and a read one ``recv(2)`` in the reading task.

The handshake is done in ``connect``, blocking, before the worker's trio loop starts (the ROUTER's
I/O thread answers at once): libzmq takes any frame that comes before it has sent its own READY
for a handshake command, and drops the connection, so no message may go before it. Sends never
block: a message is written at once, and what the socket does not take is kept, in order, and
written by a system task as the socket drains (libzmq's DEALER with no high-water mark queues
without bound too). Heartbeats of ZMTP 3.1 (``PING``) are answered as they are read.

When the connection ends (the supervisor closed it, or died, or broke the protocol, logged with its
reason), sends are dropped and ``receive_batch`` waits for ever, as libzmq's DEALER, which would
try to reconnect, leaves its reader waiting: a worker learns that its supervisor is gone from its
lifeline (stdin), not from this link (see ``workers.worker``).
"""

from __future__ import annotations

import logging
import socket
from collections import deque
from collections.abc import Sequence
from contextlib import suppress
from itertools import islice
from typing import Final

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

__all__ = ["ZmtpDealer"]

log = logging.getLogger("mcp_supervisor.zmtp")

READS_PER_CHECKPOINT: Final = 64  # reads of one long message before yielding to other tasks
HANDSHAKE_TIMEOUT: Final = 5.0  # seconds for the ROUTER's greeting and READY (its I/O thread answers)


class ZmtpDealer:
    """One connection to a ROUTER: non-blocking sends from any task, one receiving task."""

    def __init__(self, *, max_size: int = MAX_MESSAGE_SIZE) -> None:
        """Not connected: see ``connect``."""
        self._sock: socket.socket | None = None
        self._decoder = Decoder(max_size=max_size)
        self._inbox: deque[list[bytes]] = deque()  # complete messages not yet returned
        self._outbox: deque[memoryview] = deque()  # what the socket has not taken yet, in order
        self._flushing = False  # a system task is writing the outbox
        self._buffer = bytearray(READ_SIZE)
        self._view = memoryview(self._buffer)
        self._drained = True  # the last read took all there was: wait before the next
        self.closed = False  # by ``close``
        self.lost: str | None = None  # why the connection ended under us
        self._closing = trio.Event()  # set by ``close``: wakes a reader parked on a lost link
        self._lost = trio.Event()  # set with ``lost``

    @classmethod
    def connect(
        cls,
        path: str,
        *,
        routing_id: bytes,
        max_size: int = MAX_MESSAGE_SIZE,
        timeout: float = HANDSHAKE_TIMEOUT,
    ) -> ZmtpDealer:
        """Connect to a ROUTER bound at ``path`` (an ``ipc://`` endpoint's path; ``@name``: abstract)
        and complete the handshake, blocking (not in trio: before the worker's loop starts). A
        refused connection or a failed handshake is logged and ends the link at once, as a lost
        connection does."""
        dealer = cls(max_size=max_size)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect("\0" + path[1:] if path.startswith("@") else path)
            sock.sendall(greeting() + ready({b"Socket-Type": b"DEALER", b"Identity": routing_id}))
            items: list[list[bytes] | Command] = []
            while not dealer._decoder.ready:
                data = sock.recv(READ_SIZE)
                if not data:
                    raise ConnectionError("the peer closed the connection")
                items += dealer._decoder.feed(data)
            sock.setblocking(False)
        except (OSError, ProtocolError) as exc:
            sock.close()
            dealer._lose(f"cannot connect to {path}: {exc}", logging.ERROR)
            return dealer
        dealer._sock = sock
        dealer._take(items)
        return dealer

    def send_nowait(self, frames: Sequence[bytes]) -> None:
        """Queue a multipart message: written now, or as soon as the socket takes it; never blocks.
        Dropped once the connection is lost (the peer is gone)."""
        if self.closed:
            raise trio.ClosedResourceError("the DEALER was closed")
        self._write(encode_message(frames))

    async def receive_batch(self) -> list[list[bytes]]:
        """Wait for at least one message and return every queued one, up to ``BATCH``. Always a
        checkpoint, one per call. Waits for ever once the connection is lost."""
        waited = False
        reads = 0
        while True:
            if self._inbox:
                if not waited:
                    await trio.lowlevel.checkpoint()
                inbox = self._inbox
                return [inbox.popleft() for _ in range(min(BATCH, len(inbox)))]
            if self.closed:
                raise trio.ClosedResourceError("the DEALER was closed")
            sock = self._sock
            if sock is None:
                await self._closing.wait()  # lost: the worker's lifeline says when to end
                continue
            if self._drained or reads >= READS_PER_CHECKPOINT:
                await trio.lowlevel.wait_readable(sock)
                waited, reads = True, 0
            reads += 1
            self._read(sock)

    def drain(self) -> list[list[bytes]]:
        """Every message that has arrived, up to ``BATCH``, without waiting (reads what the socket holds)."""
        sock = self._sock
        for _ in range(READS_PER_CHECKPOINT):
            if sock is None or self._sock is not sock or len(self._inbox) >= BATCH:
                break
            self._drained = False
            self._read(sock)
            if self._drained:
                break
        inbox = self._inbox
        return [inbox.popleft() for _ in range(min(BATCH, len(inbox)))]

    @property
    def buffered(self) -> int:
        """Bytes sent and not yet taken by the socket."""
        return sum(len(chunk) for chunk in self._outbox)

    async def wait_lost(self) -> str:
        """Wait until the connection ends under us; why it did."""
        await self._lost.wait()
        assert self.lost is not None
        return self.lost

    def close(self) -> None:
        """Close the socket; whatever was not written is dropped (libzmq's ``LINGER`` 0)."""
        self.closed = True
        self._closing.set()
        self._shut()

    # ------------------------------------------------------------- reading

    def _read(self, sock: socket.socket) -> None:
        try:
            size = sock.recv_into(self._buffer)
        except BlockingIOError:
            self._drained = True
            return
        except OSError as exc:
            self._lose(f"the supervisor's end failed: {exc}", logging.INFO)
            return
        if not size:
            self._lose("the supervisor closed the connection", logging.INFO)
            return
        self._drained = size < READ_SIZE
        try:
            items = self._decoder.feed(self._view[:size])
        except ProtocolError as exc:
            self._lose(f"closed the connection: {exc}", logging.ERROR)
            return
        self._take(items)

    def _take(self, items: list[list[bytes] | Command]) -> None:
        for item in items:
            if isinstance(item, Command):
                self._command(item)
            else:
                self._inbox.append(item)

    def _command(self, command: Command) -> None:
        if command.name == b"PING":
            self._write(pong(command.data))
        elif command.name != b"PONG":  # we send no PINGs; a PONG anyway is harmless
            log.debug("worker link: skipped the %r command", command.name)

    # ------------------------------------------------------------- writing

    def _write(self, data: bytes) -> None:
        sock = self._sock
        if sock is None or not data:
            return
        if self._outbox:
            self._outbox.append(memoryview(data))
            return
        try:
            sent = sock.send(data, socket.MSG_NOSIGNAL)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self._lose(f"the supervisor's end failed: {exc}", logging.INFO)
            return
        if sent < len(data):
            self._outbox.append(memoryview(data)[sent:])
            if not self._flushing:
                self._flushing = True
                trio.lowlevel.spawn_system_task(self._flush, sock, name="zmtp flush")

    async def _flush(self, sock: socket.socket) -> None:
        """Write the outbox as the socket takes it, until it is empty or the connection ends."""
        outbox = self._outbox
        try:
            while outbox and self._sock is sock:
                await trio.lowlevel.wait_writable(sock)
                try:
                    sent = sock.sendmsg(islice(outbox, WRITE_CHUNKS), [], socket.MSG_NOSIGNAL)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    self._lose(f"the supervisor's end failed: {exc}", logging.INFO)
                    return
                written(outbox, sent)
        except trio.ClosedResourceError:  # closed or lost while waiting
            pass
        finally:
            self._flushing = False

    # ------------------------------------------------------------- ending

    def _lose(self, reason: str, level: int) -> None:
        if self.lost is None and not self.closed:
            self.lost = reason
            self._lost.set()
            log.log(level, "worker link: %s", reason)
        self._shut()

    def _shut(self) -> None:
        sock, self._sock = self._sock, None
        self._outbox.clear()
        if sock is None:
            return
        with suppress(RuntimeError):  # outside trio: no task can be waiting on the socket
            trio.lowlevel.notify_closing(sock)
        sock.close()
