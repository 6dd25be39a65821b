"""The HTTP facade's connections, guarded: how many there may be, and how long a request may take to
arrive.

Above: ``supervisor.facade.run.serve_http``, which gives uvicorn ``guarded_protocol(...)`` as its HTTP
protocol. Below: uvicorn's h11 protocol, whose connections these are.

- At most ``max_connections`` at once (below the process's descriptor limit, so a flood of
  connections can never leave the facade without descriptors). At the cap, a new connection evicts
  the oldest one still waiting for its request's head (the slowloris kind), or, when there is none,
  is closed at once: hosts that send their requests get in while trickling ones are dropped.
- A request's head (request line and headers) must arrive whole within ``HEAD_TIMEOUT`` of the
  connection's start (or of the previous response's end), its body within ``BODY_TIMEOUT`` of the
  head: else 408 and the connection is closed.
- What is refused is counted, and said in one log line a second at most; so is an accept that fails
  for want of descriptors all the same (asyncio would log a traceback for each).
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import TYPE_CHECKING, Final

from supervisor.shared.repeats import Repeats

if TYPE_CHECKING:
    from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["ACCEPT_BACKLOG", "BODY_TIMEOUT", "HEAD_TIMEOUT", "connection_cap", "guarded_protocol"]
__all__ += ["quiet_accept_failures"]

log = logging.getLogger("mcp_supervisor.facade")

HEAD_TIMEOUT: Final = 10.0  # seconds for a request's line and headers to arrive whole
BODY_TIMEOUT: Final = 30.0  # seconds for its body, from its head
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


def guarded_protocol(max_connections: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the cap and the timeouts above (one class per listener: the
    connections waiting for their head are shared by the listener's connections). uvicorn is
    imported here, when an HTTP facade starts: the stdio facade never loads it."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    waiting: dict[Guarded, None] = {}  # connections whose request head has not come, oldest first
    repeats = Repeats(log)

    class Guarded(H11Protocol):
        _timer: asyncio.TimerHandle | None = None

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
            super().data_received(data)
            if self.transport.is_closing():
                return
            state = self.conn.their_state
            if state is h11.SEND_BODY and self in waiting:  # the head came: now its body
                del waiting[self]
                self._arm(BODY_TIMEOUT)
            elif state is h11.DONE and self._timer is not None:  # the whole request came
                waiting.pop(self, None)
                self._timer.cancel()
                self._timer = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._await_head()  # the next request, on a kept-alive connection

        def connection_lost(self, exc: Exception | None) -> None:
            waiting.pop(self, None)
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            super().connection_lost(exc)

        def _await_head(self) -> None:
            waiting[self] = None
            self._arm(HEAD_TIMEOUT)

        def _arm(self, seconds: float) -> None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self.loop.call_later(seconds, self._too_slow)

        def _too_slow(self) -> None:
            self._timer = None
            if self.conn.their_state is not h11.DONE:
                repeats.log(
                    "requests too slow",
                    logging.WARNING,
                    "a request did not arrive in time: connection closed",
                )
                self._refuse()

        def _refuse(self) -> None:
            """408 when no response has begun, and the connection closed."""
            waiting.pop(self, None)
            if self.transport.is_closing():
                return
            if self.cycle is None or not self.cycle.response_started:
                body = b'{"error": "the request did not arrive in time"}'
                head = (
                    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                    b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(body)
                )
                self.transport.write(head + body)
            self.transport.close()

    return Guarded
