"""A small HTTP/1.1 server on h11, run as a task of the supervisor's own trio loop (no threads).

Above: the listener's paths (``supervisor.ops.web.app``): a synchronous ``handle(Request)`` that
returns a ``Response``, or a ``Streaming`` one whose chunks come as they come (Server-Sent Events).
Below: a bound ``trio.SocketListener`` (the daemon binds the socket before the supervisor starts, so
a port in use is a start error) and h11, which parses and frames.

What a client cannot do, whatever it sends (each bound a named constant):

- send more than ``MAX_HEAD`` bytes of request line and headers (431) or a body past ``MAX_BODY``
  (413); anything h11 cannot parse, such as random bytes or a path that is not ASCII, is 400;
- take more than ``REQUEST_TIMEOUT`` to send a whole request (408, or a silent close between
  requests): a slowloris holds one connection that long, no more;
- hold a response up for more than ``WRITE_TIMEOUT`` per write by not reading it;
- hold more than ``MAX_CONNECTIONS`` connections at once: past it a new one is answered 503 and
  closed.

Every error answer closes the connection. So that the close does not reset it before the client has
read the answer, whatever the client still sends is read and dropped for up to ``LINGER_TIMEOUT``
(``LINGER_BYTES`` at most). A handler that raises is a 500, logged with its traceback.
"""

from __future__ import annotations

import contextlib
import errno
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final, Protocol

import h11
import trio

__all__ = ["MAX_BODY", "MAX_CONNECTIONS", "MAX_HEAD", "REQUEST_TIMEOUT", "WRITE_TIMEOUT"]
__all__ += ["Chunks", "Deferred", "Handler", "HttpServer", "Request", "Response", "Streaming"]

log = logging.getLogger("mcp_supervisor.web")

MAX_HEAD: Final = 16 * 1024  # bytes of request line and headers
MAX_BODY: Final = 16 * 1024  # bytes of a request body (the controls send none)
REQUEST_TIMEOUT: Final = 5.0  # seconds to receive one whole request, from its first byte or the last answer
WRITE_TIMEOUT: Final = 10.0  # seconds a client may take to take one write of a response
MAX_CONNECTIONS: Final = 64  # connections at once (Server-Sent Events clients among them)
RECEIVE_CHUNK: Final = 16 * 1024  # bytes read at a time
LINGER_TIMEOUT: Final = 1.0  # seconds spent reading what a client still sends after an error answer
LINGER_BYTES: Final = 256 * 1024  # bytes read and dropped then, at most
REFUSE_TIMEOUT: Final = 0.2  # seconds to write the 503 to a connection past MAX_CONNECTIONS
DEFER_TIMEOUT: Final = 10.0  # seconds a response that is awaited (an audit query) may take; then 503
_ACCEPT_CAPACITY: Final = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
_ACCEPT_PAUSE: Final = 0.1  # seconds to wait when out of file descriptors or memory


@dataclass(frozen=True, slots=True)
class Request:
    method: str  # "GET", "HEAD", "POST", ...
    path: str  # the target before any "?", as sent (percent-encoded, ASCII)
    headers: dict[str, str]  # lower-case names; repeated ones joined with ", "
    body: bytes
    query: str = ""  # the target after its first "?", as sent (percent-encoded); "" for none


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()


class Chunks(Protocol):
    """A streamed body: ``next()`` the next chunk, None at its end; ``close()`` when done with it."""

    async def next(self) -> bytes | None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Streaming:
    """A 200 whose body is sent chunk by chunk (each within ``WRITE_TIMEOUT``); the connection closes
    at its end."""

    chunks: Chunks
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Deferred:
    """A response made by awaiting ``make`` (one that reads files, say), within ``DEFER_TIMEOUT``."""

    make: Callable[[], Awaitable[Response]]


Handler = Callable[[Request], Response | Streaming | Deferred]


class _Gone(Exception):
    """The client went away, or stopped reading for longer than ``WRITE_TIMEOUT``."""


class HttpServer:
    """Serves ``handle`` on a listener, one task per connection, at most ``max_connections``."""

    def __init__(
        self,
        handle: Handler,
        *,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT,
        write_timeout: float = WRITE_TIMEOUT,
    ) -> None:
        self._handle = handle
        self._max_connections = max_connections
        self._request_timeout = request_timeout
        self._write_timeout = write_timeout
        self.connections = 0  # open now

    async def serve(
        self, listener: trio.SocketListener, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Accept and serve connections until cancelled (the listener is closed then)."""
        async with listener, trio.open_nursery() as nursery:
            task_status.started()
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in _ACCEPT_CAPACITY:
                        raise
                    log.warning("metrics listener: cannot accept a connection: %s", exc)
                    await trio.sleep(_ACCEPT_PAUSE)
                    continue
                if self.connections >= self._max_connections:
                    await self._refuse(stream)
                    continue
                self.connections += 1
                nursery.start_soon(self._connection, stream)

    async def _refuse(self, stream: trio.SocketStream) -> None:
        with trio.move_on_after(REFUSE_TIMEOUT):
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.send_all(_REFUSAL)
        await _close(stream)

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            while True:
                received = await self._receive(stream, conn)
                if received is None:
                    break
                if isinstance(received, int):
                    await self._error(stream, conn, received)
                    break
                await self._answer(stream, conn, received)
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    break  # the answer closes the connection (an error, a stream, or asked to)
                conn.start_next_cycle()
        except (_Gone, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:  # boundary: one connection's failure must not end the listener
            log.exception("metrics listener: a connection failed")
        finally:
            self.connections -= 1
            await _close(stream)

    # ------------------------------------------------------------ reading

    async def _receive(self, stream: trio.SocketStream, conn: h11.Connection) -> Request | int | None:
        """The next whole request; an error status to answer; or None to close without a word (the
        client closed, or sent nothing at all within the timeout)."""
        with trio.move_on_after(self._request_timeout):
            try:
                return await self._read_request(stream, conn)
            except h11.RemoteProtocolError as exc:
                log.debug("metrics listener: bad request: %s", exc)
                return exc.error_status_hint
        started = conn.their_state is not h11.IDLE or bool(conn.trailing_data[0])
        return HTTPStatus.REQUEST_TIMEOUT if started else None

    async def _read_request(self, stream: trio.SocketStream, conn: h11.Connection) -> Request | int | None:
        event = await _next_event(stream, conn)
        if not isinstance(event, h11.Request):
            return None  # ConnectionClosed
        size = len(event.target) + sum(len(name) + len(value) + 4 for name, value in event.headers)
        if size > MAX_HEAD:  # h11 bounds a head still incomplete; this, one that came whole
            return HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
        headers: dict[str, str] = {}
        for name, value in event.headers:
            key = name.decode("ascii")
            text = value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        length = headers.get("content-length")
        if length is not None and int(length) > MAX_BODY:  # h11 checked it is a number
            return HTTPStatus.REQUEST_ENTITY_TOO_LARGE
        body = bytearray()
        while True:
            part = await _next_event(stream, conn)
            if isinstance(part, h11.Data):
                body += part.data
                if len(body) > MAX_BODY:
                    return HTTPStatus.REQUEST_ENTITY_TOO_LARGE
            elif isinstance(part, h11.EndOfMessage):
                break
            else:
                return None
        target = event.target.decode("ascii")  # h11 lets only visible ASCII through
        path, _, query = target.partition("?")
        return Request(event.method.decode("ascii"), path, headers, bytes(body), query)

    # ------------------------------------------------------------ writing

    async def _answer(self, stream: trio.SocketStream, conn: h11.Connection, request: Request) -> None:
        try:
            reply = self._handle(request)
            if isinstance(reply, Deferred):
                made = None
                with trio.move_on_after(DEFER_TIMEOUT):
                    made = await reply.make()
                reply = made or Response(HTTPStatus.SERVICE_UNAVAILABLE, b"no answer in time\n")
        except Exception:  # boundary: one request's failure must not end the listener
            log.exception("metrics listener: %s %s failed", request.method, request.path[:200])
            reply = Response(HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error (logged)\n")
        if isinstance(reply, Streaming):
            await self._stream(stream, conn, reply)
            return
        headers = [
            ("content-type", reply.content_type),
            ("content-length", str(len(reply.body))),
            *_COMMON,
            *reply.headers,
        ]
        if reply.status >= 400:
            headers.append(("connection", "close"))
        head = h11.Response(status_code=reply.status, headers=headers, reason=_reason(reply.status))
        data = conn.send(head)
        if request.method != "HEAD":
            data += conn.send(h11.Data(data=reply.body))
        data += conn.send(h11.EndOfMessage())
        await self._write(stream, data)
        if reply.status >= 400:
            await self._linger(stream)

    async def _stream(self, stream: trio.SocketStream, conn: h11.Connection, reply: Streaming) -> None:
        try:
            headers = [("content-type", reply.content_type), *_COMMON, *reply.headers]
            headers.append(("connection", "close"))
            await self._write(stream, conn.send(h11.Response(status_code=200, headers=headers)))
            while (chunk := await reply.chunks.next()) is not None:
                await self._write(stream, conn.send(h11.Data(data=chunk)))
            await self._write(stream, conn.send(h11.EndOfMessage()))
        finally:
            reply.chunks.close()

    async def _error(self, stream: trio.SocketStream, conn: h11.Connection, status: int) -> None:
        """Answer ``status`` and close, if no answer was begun (written by hand: h11 may be in no
        state to frame it, for bytes that never were a request)."""
        if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        reason = _reason(status)
        body = b"%d %s\n" % (status, reason)
        head = [b"HTTP/1.1 %d %s" % (status, reason), b"content-type: text/plain; charset=utf-8"]
        head += [b"content-length: %d" % len(body), *_COMMON_BYTES, b"connection: close"]
        await self._write(stream, b"\r\n".join(head) + b"\r\n\r\n" + body)
        await self._linger(stream)

    async def _write(self, stream: trio.SocketStream, data: bytes) -> None:
        with trio.move_on_after(self._write_timeout):
            await stream.send_all(data)
            return
        raise _Gone

    async def _linger(self, stream: trio.SocketStream) -> None:
        """Read and drop what the client still sends (bounded), so that closing does not reset the
        connection before it has read our answer."""
        with trio.move_on_after(LINGER_TIMEOUT):
            await stream.send_eof()
            dropped = 0
            while dropped < LINGER_BYTES:
                data = await stream.receive_some(RECEIVE_CHUNK)
                if not data:
                    break
                dropped += len(data)


async def _next_event(stream: trio.SocketStream, conn: h11.Connection) -> object:
    """The next h11 event (a ``Request``, ``Data``, ``EndOfMessage``, ``ConnectionClosed``...).
    Raises ``h11.RemoteProtocolError`` for bytes that cannot be the start of a request line, at once
    (h11 would wait for the line's end first)."""
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        if conn.their_state is h11.IDLE:
            line = conn.trailing_data[0].split(b"\n", 1)[0].rstrip(b"\r")
            if line.translate(None, _VISIBLE):
                raise h11.RemoteProtocolError("not an HTTP request line", 400)
        try:
            data = await stream.receive_some(RECEIVE_CHUNK)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        conn.receive_data(data)  # b"": the client closed


async def _close(stream: trio.SocketStream) -> None:
    with trio.CancelScope(shield=True):
        await stream.aclose()  # closes the socket at once, whatever happens


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


_COMMON: Final = (("cache-control", "no-store"), ("x-content-type-options", "nosniff"))
_COMMON_BYTES: Final = tuple(f"{name}: {value}".encode() for name, value in _COMMON)
_VISIBLE: Final = bytes(range(0x20, 0x7F))  # what a request line is made of (and spaces)
_TOO_MANY: Final = b"too many connections; try again later\n"
_REFUSAL: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(_TOO_MANY), _TOO_MANY)
)
