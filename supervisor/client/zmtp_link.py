"""A client's DEALER that speaks ZMTP itself on an ``ipc://`` endpoint, driven by an asyncio loop.

Above: ``AsyncSupervisorClient`` (``supervisor.client.aio``) running on asyncio, as ``serve --http``
does: it ``send``s encoded requests and is handed every reply's bytes (``deliver``) from the loop's
reader callback. Below: one non-blocking ``AF_UNIX`` socket to the supervisor's front ROUTER and the
wire codec (``supervisor.shared.zmtp``). On trio, or on any other endpoint, the client keeps
libzmq's DEALER.

Why: through libzmq each request and each reply is handed between the caller's thread and
libzmq's I/O thread, a wake-up of each; here a request is one ``send(2)`` and a reply one
``recv(2)`` in the loop's callback.

It behaves as libzmq's connecting DEALER does (``RECONNECT_IVL`` 100 ms, no high-water mark): a
message sent while there is no connection, or before the ROUTER's ``READY``, waits for one; when
the connection ends (the supervisor stopped or restarted, or broke the protocol) what was in flight
is lost and a new connection is tried every ``RECONNECT_INTERVAL``, under a new routing id made up
by the ROUTER. ``PING``s are answered.
"""

from __future__ import annotations

import logging
import socket
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from itertools import islice
from typing import TYPE_CHECKING, Final

from supervisor.shared.zmtp import (
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
    import asyncio

__all__ = ["ZmtpLink"]

log = logging.getLogger("mcp_supervisor.client")

RECONNECT_INTERVAL: Final = 0.1  # seconds between tries to connect (libzmq's RECONNECT_IVL)
_HELLO: Final = greeting() + ready({b"Socket-Type": b"DEALER"})


class ZmtpLink:
    """One DEALER to the ROUTER at ``path``, reconnecting; every frame received goes to ``deliver``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, path: str, deliver: Callable[[bytes], None]) -> None:
        """Connects at once (and again whenever the connection ends) until ``close``."""
        self._loop = loop
        self._address = "\0" + path[1:] if path.startswith("@") else path
        self._deliver = deliver
        self._sock: socket.socket | None = None
        self._decoder = Decoder()
        self._waiting: deque[bytes] = deque()  # messages for a connection whose handshake is not done
        self._outbox: deque[memoryview] = deque()  # what the socket has not taken yet, in order
        self._buffer = bytearray(READ_SIZE)
        self._view = memoryview(self._buffer)
        self._retry: asyncio.TimerHandle | None = None
        self.connections = 0  # made so far (each handshake done)
        self.closed = False
        self._connect()

    def send(self, data: bytes) -> None:
        """Send one single-frame message: now, or once there is a connection; never blocks."""
        if self.closed:
            raise ConnectionError("the link to the supervisor is closed")
        if self._sock is None or not self._decoder.ready:
            self._waiting.append(data)
            return
        self._write(encode_message((data,)))

    def close(self) -> None:
        """Close the connection; whatever was not written is dropped (libzmq's ``LINGER`` 0)."""
        self.closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self._waiting.clear()
        self._shut()

    # ------------------------------------------------------------- connecting

    def _connect(self) -> None:
        self._retry = None
        if self.closed:
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
        try:
            sock.connect(self._address)  # a Unix socket connects at once, or not at all
        except OSError as exc:
            sock.close()
            log.debug("cannot connect to %s: %s (trying again)", self._address, exc)
            self._retry = self._loop.call_later(RECONNECT_INTERVAL, self._connect)
            return
        self._sock = sock
        self._decoder = Decoder()
        self._loop.add_reader(sock.fileno(), self._on_readable)
        self._write(_HELLO)

    def _lose(self, why: str) -> None:
        log.debug("the connection to %s ended: %s (reconnecting)", self._address, why)
        self._shut()
        if not self.closed and self._retry is None:
            self._retry = self._loop.call_later(RECONNECT_INTERVAL, self._connect)

    def _shut(self) -> None:
        sock, self._sock = self._sock, None
        self._outbox.clear()
        if sock is None:
            return
        with suppress(ValueError, RuntimeError):  # the loop is closing, or closed
            self._loop.remove_reader(sock.fileno())
            self._loop.remove_writer(sock.fileno())
        sock.close()

    # ------------------------------------------------------------- reading

    def _on_readable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            size = sock.recv_into(self._buffer)
        except BlockingIOError:
            return
        except OSError as exc:
            self._lose(str(exc))
            return
        if not size:
            self._lose("the supervisor closed it")
            return
        was_ready = self._decoder.ready
        try:
            items = self._decoder.feed(self._view[:size])
        except ProtocolError as exc:
            self._lose(str(exc))
            return
        if not was_ready and self._decoder.ready:
            self.connections += 1
            waiting, self._waiting = self._waiting, deque()
            for data in waiting:
                self._write(encode_message((data,)))
        for item in items:
            if isinstance(item, Command):
                if item.name == b"PING":
                    self._write(pong(item.data))
                continue
            for frame in item:  # as libzmq's DEALER is read here: frame by frame
                self._deliver(frame)

    # ------------------------------------------------------------- writing

    def _write(self, data: bytes) -> None:
        sock = self._sock
        if sock is None:
            return
        if self._outbox:
            self._outbox.append(memoryview(data))
            return
        try:
            sent = sock.send(data, socket.MSG_NOSIGNAL)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self._lose(str(exc))
            return
        if sent < len(data):
            self._outbox.append(memoryview(data)[sent:])
            self._loop.add_writer(sock.fileno(), self._flush)

    def _flush(self) -> None:
        sock, outbox = self._sock, self._outbox
        if sock is None:
            return
        try:
            sent = sock.sendmsg(islice(outbox, WRITE_CHUNKS), [], socket.MSG_NOSIGNAL)
        except BlockingIOError:
            return
        except OSError as exc:
            self._lose(str(exc))
            return
        written(outbox, sent)
        if not outbox:
            self._loop.remove_writer(sock.fileno())
