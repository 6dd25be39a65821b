"""The HTTP facade's connections, guarded: how many there may be, and how long a request may take to
arrive.

Above: ``supervisor.facade.run.serve_http``, which gives uvicorn ``guarded_protocol(...)`` as its HTTP
protocol. Below: uvicorn's httptools protocol (llhttp, in C: a third of the facade's time went to h11's
parsing in Python), whose connections these are.

- At most ``max_connections`` at once (below the process's descriptor limit, so a flood of
  connections can never leave the facade without descriptors). At the cap, a new connection evicts
  the oldest one still waiting for its request's head (the slowloris kind), or, when there is none,
  is closed at once: hosts that send their requests get in while trickling ones are dropped.
- A request's head (request line and headers) must arrive whole within ``HEAD_TIMEOUT`` of the
  connection's start (or of the previous response's end), its body within ``BODY_TIMEOUT`` of the
  head: else 408 and the connection is closed. A head still incomplete after ``MAX_HEAD`` bytes is
  431, and the connection closed (the parser keeps what it has of a head: this bounds it).
- What is refused is counted, and said in one log line a second at most; so is an accept that fails
  for want of descriptors all the same (asyncio would log a traceback for each).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import resource
from typing import TYPE_CHECKING, Final

from supervisor.shared.repeats import Repeats

if TYPE_CHECKING:
    from uvicorn._types import ASGI3Application
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

__all__ = ["ACCEPT_BACKLOG", "BODY_TIMEOUT", "HEAD_TIMEOUT", "MAX_HEAD", "connection_cap", "guarded_protocol"]
__all__ += ["ANSWER", "GONE", "quiet_accept_failures"]

log = logging.getLogger("mcp_supervisor.facade")

HEAD_TIMEOUT: Final = 10.0  # seconds for a request's line and headers to arrive whole
BODY_TIMEOUT: Final = 30.0  # seconds for its body, from its head
ANSWER: Final = "mcp_supervisor.answer"  # in scope["extensions"]: a whole response written at once
GONE: Final = "mcp_supervisor.gone"  # in a request's scope["extensions"]: a future done when its host is gone
MAX_HEAD: Final = 16 * 1024  # bytes of a request's line and headers (h11's bound); a longer head is 431
MAX_CONNECTIONS: Final = 1000  # at most, and never above the descriptor limit less DESCRIPTORS_KEPT
ACCEPT_BACKLOG: Final = 64  # the listen backlog, and so the most asyncio accepts in one go
# Descriptors left for the rest: two accepting bursts (asyncio closes a refused connection's
# descriptor an iteration later), and the process's own (the supervisor's sockets, logs, pipes).
DESCRIPTORS_KEPT: Final = 2 * ACCEPT_BACKLOG + 64


def connection_cap(limit: int = MAX_CONNECTIONS) -> int:
    """Connections the facade takes at once: ``limit``, less when the descriptor limit is lower."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limit
    return max(1, min(limit, soft - DESCRIPTORS_KEPT))


class _AcceptFailures(logging.Filter):
    """asyncio logs every accept that fails for want of descriptors with a traceback (a flood of
    connections wrote megabytes of them): counted here instead, in a line a second at most."""

    def __init__(self) -> None:
        super().__init__()
        self._repeats = Repeats(log)

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("socket.accept() out of system resource"):
            return True
        said = "out of descriptors: new connections wait (asyncio retries accepting in 1 s)"
        self._repeats.log("accepts failed", logging.WARNING, said)
        return False


def quiet_accept_failures() -> None:
    """Count asyncio's failed accepts (EMFILE) in the facade's log instead of a traceback each."""
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _AcceptFailures) for f in logger.filters):
        logger.addFilter(_AcceptFailures())


def _refusal(status: bytes, why: bytes) -> bytes:
    body = b'{"error": "%s"}' % why
    head = b"HTTP/1.1 %s\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: %d\r\n\r\n"
    return head % (status, len(body)) + body


TOO_SLOW: Final = _refusal(b"408 Request Timeout", b"the request did not arrive in time")
TOO_LONG: Final = _refusal(
    b"431 Request Header Fields Too Large", b"the request head is over %d bytes" % MAX_HEAD
)


def guarded_protocol(max_connections: int) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with the cap, the timeouts and the head's bound above (one class per
    listener: the connections waiting for their head are shared by the listener's connections).
    uvicorn is imported here, when an HTTP facade starts: the stdio facade never loads it.

    The request's progress is the parser's, told by its callbacks: a request begins (its first byte),
    its head is whole, the request is whole. A connection waits for a head from its start and from
    each response's end (when no next request has begun meanwhile, pipelined)."""
    from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
    from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

    waiting: dict[Guarded, None] = {}  # connections whose request head has not come, oldest first
    repeats = Repeats(log)

    class Guarded(HttpToolsProtocol):
        _timer: asyncio.TimerHandle | None = None  # fires at or before _deadline (then looks again)
        _deadline: float | None = None  # the head or body due by then (loop time); None: nothing due
        _arrived = False  # the last request begun on this connection has arrived whole
        _head = 0  # bytes received of a head still incomplete
        _gone: asyncio.Future[None] | None = None  # done when the connection is lost (GONE)
        _heading = False  # in on_headers_complete
        _deferred: tuple[RequestResponseCycle, ASGI3Application] | None = None  # started at its body's end

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                oldest = next(iter(waiting), None)
                if oldest is None:
                    repeats.log(
                        "connections refused",
                        logging.WARNING,
                        "%d connections already: one more refused",
                        max_connections,
                    )
                    transport.close()
                    return
                repeats.log(
                    "slow connections dropped",
                    logging.WARNING,
                    "%d connections: the oldest still sending its request was dropped for a new one",
                    max_connections,
                )
                oldest._refuse()
            self._await_head()

        def data_received(self, data: bytes) -> None:
            heading = self in waiting
            super().data_received(data)
            if heading and self in waiting and not self.transport.is_closing():  # still no whole head
                self._head += len(data)
                if self._head > MAX_HEAD:
                    repeats.log("heads too long", logging.WARNING, "a request head over %d bytes", MAX_HEAD)
                    self._refuse(TOO_LONG)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._gone is None:
                self._gone = self.loop.create_future()
            self.scope["extensions"] = {GONE: self._gone}  # type: ignore[dict-item]  # ours, beside ASGI's
            self._arrived = False
            if self._deadline is None:  # begun while the previous one is answered (pipelined)
                self._await_head()

        def on_headers_complete(self) -> None:
            before = self.cycle
            self._heading = True
            try:
                super().on_headers_complete()
            finally:
                self._heading = False
            if self.cycle is not before:  # the request's response, written through a holding transport
                held = _HeldHead(self.transport, self.loop)
                self.cycle.transport = held  # type: ignore[assignment]
                self.scope["extensions"][ANSWER] = functools.partial(answer, self.cycle, held)  # type: ignore[assignment]
            waiting.pop(self, None)
            self._head = 0
            self._arm(BODY_TIMEOUT)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._arrived = True
            waiting.pop(self, None)
            self._deadline = None
            if self._deferred is not None:
                cycle, app = self._deferred
                self._deferred = None
                if not self.transport.is_closing():
                    super()._start_asgi_task(cycle, app)

        def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
            """A request whose small body is still to come is answered once it has come: its task then
            runs through at once, rather than running to its wait for the body and waking again (a
            host's HTTP client writes a request's head and body apart). Not with ``Expect:
            100-continue`` (the host waits to be asked for the body), nor for a body past uvicorn's
            reading bound (reading would stop until the application reads)."""
            if self._heading and not self.expect_100_continue and _small(self.headers, HIGH_WATER_LIMIT):
                self._deferred = cycle, app
                return
            super()._start_asgi_task(cycle, app)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.is_closing() or not self._arrived or not self.cycle.response_complete:
                return  # closed, or the next request (pipelined) is arriving or being answered
            self._arrived = False
            self._await_head()  # the next request, on a kept-alive connection

        def connection_lost(self, exc: Exception | None) -> None:
            waiting.pop(self, None)
            self._deferred = None
            if self._gone is not None and not self._gone.done():
                self._gone.set_result(None)
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            super().connection_lost(exc)

        def _await_head(self) -> None:
            waiting[self] = None
            self._head = 0
            self._arm(HEAD_TIMEOUT)

        def _arm(self, seconds: float) -> None:
            """Due within ``seconds``. The timer is one per connection, made anew only when it would
            fire too late: each request moves the deadline (head, body, next head), not the timer."""
            deadline = self._deadline = self.loop.time() + seconds
            if self._timer is not None:
                if self._timer.when() <= deadline:
                    return  # it fires first, and looks again
                self._timer.cancel()
            self._timer = self.loop.call_at(deadline, self._look)

        def _look(self) -> None:
            self._timer = None
            if self._deadline is None:
                return  # what was due arrived
            if self._deadline > self.loop.time():
                self._timer = self.loop.call_at(self._deadline, self._look)  # moved later meanwhile
                return
            self._deadline = None
            if not self._arrived:
                repeats.log(
                    "requests too slow",
                    logging.WARNING,
                    "a request did not arrive in time: connection closed",
                )
                self._refuse()

        def _refuse(self, answer: bytes = TOO_SLOW) -> None:
            """``answer`` (408 unless said) when no response has begun, and the connection closed."""
            waiting.pop(self, None)
            if self.transport.is_closing():
                return
            if self.cycle is None or not self.cycle.response_started:
                self.transport.write(answer)
            self.transport.close()

    def answer(cycle: RequestResponseCycle, held: _HeldHead, status: int, fields: bytes, body: bytes) -> bool:
        """``ANSWER``: a whole response written at once, as uvicorn's response cycle writes one from its
        two ASGI messages (the status line, the server's default headers, ``fields``, each line ending
        in CRLF, and ``body``; the same bookkeeping), in one write and without the messages. False,
        with nothing written, when the cycle cannot take it so: a response begun, a host gone, writing
        paused (the caller then sends the messages)."""
        if cycle.response_started or cycle.disconnected or cycle.flow.write_paused:
            return False
        cycle.response_started = True
        cycle.waiting_for_100_continue = False
        scope = cycle.scope
        if cycle.access_log:
            where = get_path_with_query_string(scope)
            said = '%s - "%s %s HTTP/%s" %d'
            cycle.access_logger.info(
                said, get_client_addr(scope), scope["method"], where, scope["http_version"], status
            )
        parts = [STATUS_LINE[status]]
        for name, value in cycle.default_headers:
            parts += (name, b": ", value, b"\r\n")
        parts.append(fields)
        if not cycle.keep_alive:
            parts.append(b"connection: close\r\n")
        parts += (b"\r\n", body)
        held.write_now(b"".join(parts))
        cycle.response_complete = True
        cycle.message_event.set()
        if not cycle.keep_alive:
            held.close()
        cycle.on_response()
        return True

    return Guarded


def _small(headers: list[tuple[bytes, bytes]], limit: int) -> bool:
    """Whether the request's ``Content-Length`` says a body of at most ``limit`` bytes."""
    for name, value in headers:
        if name == b"content-length":
            return value.isdigit() and int(value) <= limit
    return False


class _HeldHead:
    """One response's side of a connection's transport, as uvicorn's response cycle writes to it: the
    head (the first write) is held until the next write, which goes with it, or until the event loop's
    next turn. A response whose body follows at once (the fast path's, any JSON answer) then leaves in
    one segment: one system call here, and the host reads it whole, woken once instead of twice."""

    __slots__ = ("_flush", "_gone", "_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._flush: asyncio.Handle | None = None  # the held head's write at the loop's next turn
        self._gone = False  # the head has been written

    def write(self, data: bytes) -> None:
        if self._held is not None:
            data = self._release() + data
        elif not self._gone:
            self._held = data
            self._flush = self._loop.call_soon(self._write_held)
            return
        self._transport.write(data)

    def write_now(self, data: bytes) -> None:
        """``data`` written at once, after the head held if any."""
        if self._held is not None:
            data = self._release() + data
        self._gone = True
        self._transport.write(data)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self._write_held()
        self._transport.close()

    def _write_held(self) -> None:
        if self._held is not None:
            held = self._release()
            if not self._transport.is_closing():
                self._transport.write(held)

    def _release(self) -> bytes:
        held, self._held, self._gone = self._held, None, True
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        assert held is not None
        return held
