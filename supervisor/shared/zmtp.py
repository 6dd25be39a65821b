"""ZMTP 3.x, the wire protocol under ZeroMQ's sockets, as bytes in and out: no sockets, no I/O.

Above: ``supervisor.shared.zmtp_dealer``, the worker's DEALER on its ipc link, which feeds what it
reads to a ``Decoder`` and writes what ``greeting``, ``ready`` and ``encode_message`` return. Below:
the specifications, ZMTP 3.0 (https://rfc.zeromq.org/spec/23/) and 3.1's heartbeats
(https://rfc.zeromq.org/spec/37/); the peer is libzmq's ROUTER (``supervisor.shared.sockets``).

Only what a DEALER with the NULL mechanism needs: the greeting (version 3.0, NULL, not as-server),
the READY command with its properties, and frames (short or long, MORE, COMMAND). The peer's
greeting must name ZMTP 3 or later and NULL, and its first frame must be READY from an expected
socket type; ``PING`` and every other command after READY come out as ``Command``s for the
connection to answer or skip. Anything else, a frame past ``max_size`` (checked from its header,
before its body arrives) or an ``ERROR`` from the peer, raises a ``ProtocolError``, after which the
decoder takes nothing more: the connection is to be closed.

The limits live here, with no ZeroMQ import, so a process that speaks ZMTP itself needs no libzmq.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Final, NamedTuple

__all__ = [
    "BATCH",
    "MAX_MESSAGE_SIZE",
    "READ_SIZE",
    "WRITE_CHUNKS",
    "Command",
    "Decoder",
    "FrameTooLarge",
    "PeerError",
    "ProtocolError",
    "encode_command",
    "encode_message",
    "greeting",
    "native_path",
    "pong",
    "ready",
    "written",
]

BATCH: Final = 256  # messages taken per wake-up before yielding to other tasks
MAX_MESSAGE_SIZE: Final = 64 * 1024 * 1024  # bytes; a larger frame drops the peer's connection
READ_SIZE: Final = 64 * 1024  # bytes a connection reads with one recv(2)
WRITE_CHUNKS: Final = 64  # pieces of a connection's outbox handed to one sendmsg(2)

SIGNATURE: Final = b"\xff" + bytes(8) + b"\x7f"
GREETING_SIZE: Final = 64  # signature 10, version 2, mechanism 20, as-server 1, filler 31
MORE: Final = 0x01
LONG: Final = 0x02
COMMAND: Final = 0x04
_NULL: Final = b"NULL".ljust(20, b"\0")
_ROUTER: Final = frozenset({b"ROUTER"})


class ProtocolError(Exception):
    """The peer broke ZMTP, or refused us: the connection is over."""


class FrameTooLarge(ProtocolError):
    """A frame whose header announces more than the decoder's ``max_size``."""


class PeerError(ProtocolError):
    """The peer sent ``ERROR`` (its reason is the message): it closes the connection."""


class Command(NamedTuple):
    """A command after the handshake (``PING``, ``PONG`` or one this side does not know)."""

    name: bytes
    data: bytes


def greeting() -> bytes:
    """Our greeting: ZMTP 3.0, the NULL mechanism, as-server 0."""
    return SIGNATURE + b"\x03\x00" + _NULL + b"\x00" + bytes(31)


def native_path(endpoint: str) -> str | None:
    """The socket path (``@name``: abstract) of an ``ipc://`` endpoint on which ZMTP is spoken here
    (``zmtp_router``, the async stub's ``zmtp_link``); None for any other endpoint (tcp, or libzmq's
    ``ipc://*``), which stays with libzmq."""
    if not endpoint.startswith("ipc://"):
        return None
    path = endpoint[len("ipc://") :]
    return None if path in ("", "*") else path


def _frame_head(flags: int, size: int) -> bytes:
    if size > 255:
        return bytes((flags | LONG,)) + size.to_bytes(8, "big")
    return bytes((flags, size))


def encode_command(name: bytes, data: bytes = b"") -> bytes:
    body = bytes((len(name),)) + name + data
    return _frame_head(COMMAND, len(body)) + body


def ready(properties: Mapping[bytes, bytes]) -> bytes:
    """The READY command, e.g. ``{b"Socket-Type": b"DEALER", b"Identity": routing_id}``."""
    data = b"".join(
        bytes((len(name),)) + name + len(value).to_bytes(4, "big") + value
        for name, value in properties.items()
    )
    return encode_command(b"READY", data)


def pong(ping: bytes) -> bytes:
    """The answer to a ``PING``'s data (its 2-byte TTL, then a context of up to 16 bytes echoed)."""
    return encode_command(b"PONG", ping[2:18])


def encode_message(frames: Sequence[bytes]) -> bytes:
    """A message of one frame or more, ready for the wire."""
    last = len(frames) - 1
    if last == 0:  # the usual case: one frame, one join
        frame = frames[0]
        return _frame_head(0, len(frame)) + frame
    if last < 0:
        raise ValueError("a message has one frame at least")
    parts: list[bytes] = []
    for i, frame in enumerate(frames):
        parts.append(_frame_head(MORE if i < last else 0, len(frame)))
        parts.append(frame)
    return b"".join(parts)


def written(outbox: deque[memoryview], sent: int) -> None:
    """Drop from the front of ``outbox`` (what a connection has still to write, in order) the ``sent``
    bytes that one ``sendmsg(2)`` of it took."""
    while sent:
        head = outbox[0]
        if sent < len(head):
            outbox[0] = head[sent:]
            return
        sent -= len(head)
        outbox.popleft()


def parse_properties(data: bytes) -> dict[bytes, bytes]:
    """A READY command's metadata: names as sent (matched case-insensitively by ``Decoder``)."""
    properties: dict[bytes, bytes] = {}
    pos, end = 0, len(data)
    while pos < end:
        name_end = pos + 1 + data[pos]
        if name_end + 4 > end:
            raise ProtocolError("READY: a property is cut short")
        size = int.from_bytes(data[name_end : name_end + 4], "big")
        if name_end + 4 + size > end:
            raise ProtocolError("READY: a property value is cut short")
        properties[data[pos + 1 : name_end]] = data[name_end + 4 : name_end + 4 + size]
        pos = name_end + 4 + size
    return properties


_GREETING, _HANDSHAKE, _TRAFFIC, _FAILED = range(4)


class Decoder:
    """Bytes from the peer in (``feed``, any split), messages and commands out, in order."""

    def __init__(self, *, max_size: int = MAX_MESSAGE_SIZE, peer_types: frozenset[bytes] = _ROUTER) -> None:
        self.max_size = max_size
        self.peer_types = peer_types  # the socket types we may talk to
        self.peer: dict[bytes, bytes] = {}  # the peer's READY properties, names lower-cased
        self.version = (0, 0)  # the peer's ZMTP version, once its greeting is in
        self._buf = bytearray()
        self._state = _GREETING
        self._frames: list[bytes] = []  # a message's frames so far

    @property
    def ready(self) -> bool:
        """Whether the handshake is done (the peer's READY is in)."""
        return self._state == _TRAFFIC

    def feed(self, data: bytes | bytearray | memoryview) -> list[list[bytes] | Command]:
        """Take ``data``; return every message (a list of frames) and command it completes."""
        if self._state == _FAILED:
            raise ProtocolError("the stream failed before: nothing more is read")
        buf = self._buf
        buf += data
        out: list[list[bytes] | Command] = []
        pos = 0
        try:
            while True:
                avail = len(buf) - pos
                if self._state == _GREETING:
                    if not self._greeting(buf[pos : pos + GREETING_SIZE]):
                        break
                    pos += GREETING_SIZE
                    continue
                if avail < 2:
                    break
                flags = buf[pos]
                if flags & ~(MORE | LONG | COMMAND):
                    raise ProtocolError(f"frame flags {flags:#04x} set reserved bits")
                if flags & LONG:
                    if avail < 9:
                        break
                    size, head = int.from_bytes(buf[pos + 1 : pos + 9], "big"), 9
                else:
                    size, head = buf[pos + 1], 2
                if size > self.max_size:
                    raise FrameTooLarge(f"a frame of {size} bytes, past the limit of {self.max_size}")
                if avail < head + size:
                    break
                body = bytes(buf[pos + head : pos + head + size])
                pos += head + size
                if flags & COMMAND:
                    if flags & MORE:
                        raise ProtocolError("a command frame with MORE set")
                    command = self._command(body)
                    if command is not None:
                        out.append(command)
                elif self._state != _TRAFFIC:
                    raise ProtocolError("a message before the peer's READY")
                else:
                    self._frames.append(body)
                    if not flags & MORE:
                        out.append(self._frames)
                        self._frames = []
        except ProtocolError:
            self._state = _FAILED
            buf.clear()
            raise
        del buf[:pos]
        return out

    def _greeting(self, head: bytearray) -> bool:
        """Check as much of the peer's greeting as is in; true once all of it is, and it is good."""
        if (head and head[0] != 0xFF) or (len(head) >= 10 and not head[9] & 1):
            raise ProtocolError("the peer does not speak ZMTP (bad greeting signature)")
        if len(head) >= 11 and head[10] < 3:
            raise ProtocolError(f"the peer speaks ZMTP {head[10]}.x; 3.0 or later is needed")
        if len(head) >= 32 and head[12:32] != _NULL:
            mechanism = bytes(head[12:32]).rstrip(b"\0").decode("ascii", "replace")
            raise ProtocolError(f"the peer asks for the {mechanism!r} mechanism; only NULL is spoken")
        if len(head) < GREETING_SIZE:
            return False
        self.version = (head[10], head[11])
        self._state = _HANDSHAKE
        return True

    def _command(self, body: bytes) -> Command | None:
        if not body or 1 + body[0] > len(body):
            raise ProtocolError("a command whose name is cut short")
        name, data = body[1 : 1 + body[0]], body[1 + body[0] :]
        if name == b"ERROR":
            reason = data[1 : 1 + data[0]] if data else b""
            raise PeerError(f"the peer refused: {reason.decode('utf-8', 'replace') or 'no reason given'}")
        if self._state == _TRAFFIC:
            return Command(name, data)
        if name != b"READY":
            raise ProtocolError(f"the peer sent {name!r} before READY")
        self.peer = {key.lower(): value for key, value in parse_properties(data).items()}
        kind = self.peer.get(b"socket-type", b"")
        if kind not in self.peer_types:
            expected = " or ".join(sorted(t.decode() for t in self.peer_types))
            kind_name = kind.decode("ascii", "replace") or "?"
            raise ProtocolError(f"the peer is a {kind_name} socket, not {expected}")
        self._state = _TRAFFIC
        return None
