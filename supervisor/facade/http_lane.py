"""The HTTP facade's fast path: a ``tools/call`` or ``tools/list`` POST, 2026-07-28's or a plain host
session's, answered before the SDK's HTTP stack, everything else handed to it untouched.

Above: ``supervisor.facade.run.http_app``, which puts ``FastLane`` behind its ``Origin``, ``Host`` and
bearer-token checks. Below: the fast path (``supervisor.facade.express``), and the SDK's streamable HTTP
app (Starlette, the session manager), which gets every request the lane does not take, with the body
the lane read of it.

A 2026-07-28 request is one self-contained POST (no session): the lane takes it when the SDK's
single-exchange entry would serve it and its answer is certain to be the SDK's. The request is a
POST to the path, its ``MCP-Protocol-Version`` header names a 2026-07-28 revision, it carries no
``Mcp-Session-Id``, its ``Content-Type`` is JSON and its ``Accept`` takes JSON and event streams, no
routing header is repeated, the ``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name`` headers
agree with the body, it has no ``Mcp-Param-*`` headers and no argument the tool's schema mirrors in
one, it asks for no progress (whose notifications make the SDK answer with an event stream), and the
fast path takes its body. Its answer is then what the SDK sends: JSON with the status the SDK gives
the JSON-RPC error's code (200 for a result); a host that disconnects cancels the call; a call still
running after ``SSE_PING_INTERVAL`` turns the answer into an event stream with keep-alive pings, as
the SDK's does, so no proxy idle timeout cuts it.

A handshake-era request (2025-11-25 and before) belongs to a host session: the lane takes it when
the session is open, its host finished the handshake declaring neither sampling nor elicitation
(``Sessions.for_fast_path``), its ``MCP-Protocol-Version`` is the session's, it sends no routing
headers, asks for no progress, and the fast path takes its body. The call is made as the session's
own client (``Hosts``). Answered within ``PRIME_AFTER``, the answer is JSON with the session's id
(as the SDK's session transport answers in its JSON mode, status 200): a host reads it in one go,
without an event stream's framing. A call that takes longer opens an event stream as the SDK's
does, with the priming event of 2025-11-25 sessions, and the answer is an event whose id is kept
in the session's ``Replay``, so a host whose connection breaks resumes with ``Last-Event-ID`` and
gets the answer (on the resumed stream, if it came back first); a host that goes away does not
cancel the call. Its ``notifications/cancelled`` does, answered with the SDK's ``Request
cancelled`` error.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import msgspec
from mcp.server.streamable_http import REQUEST_CANCELLED
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    X_MCP_HEADER_KEY,
    decode_header_value,
    validate_mcp_param_headers,
)

from supervisor.facade.access import GRANT
from supervisor.facade.express import Express, Taken
from supervisor.facade.guard import ANSWER, GONE
from supervisor.facade.host_sessions import Sessions, SessionStream
from supervisor.facade.lane_requests import (
    MAX_KEPT,
    Headers,
    Message,
    Receive,
    Routing,
    cancelled_request,
    read_body,
    replaying,
)
from supervisor.facade.served_tools import ServedTools

__all__ = ["SSE_PING_INTERVAL", "FastLane"]

Scope = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Answer = Callable[[int, bytes, bytes], bool]  # guard.ANSWER: (status, header lines, body) -> written

SSE_PING_INTERVAL: Final = 15.0  # seconds of a silent call before its answer is a pinged event stream
PRIME_AFTER: Final = 0.05  # seconds before a host session's call sends its stream's head and priming
_JSON_HEADERS: Final = [(b"content-type", b"application/json")]
_JSON_FIELDS: Final = (
    b"content-type: application/json\r\ncontent-length: %d\r\n"  # the same, as ANSWER takes them
)
_SSE_HEADERS: Final = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]
_PING: Final = b": ping\r\n\r\n"
_MIRRORED: Final = msgspec.json.encode(X_MCP_HEADER_KEY)  # in a schema that may mirror arguments in headers


class FastLane:
    """ASGI middleware: the requests ``Express`` answers, answered; the others passed to ``app``."""

    def __init__(
        self, app: ASGIApp, express: Express, tools: ServedTools, path: str, sessions: Sessions | None = None
    ) -> None:
        self._app = app
        self._express = express
        self._tools = tools
        self._path = path
        self._sessions = sessions  # the SDK's host sessions, whose plain hosts' requests it may take
        self._in_flight: dict[tuple[str, str], _Exchange] = {}  # session calls: (session, request id)
        self._headers = Headers()
        self._schemas: dict[str, tuple[dict[str, Any], bool]] = {}  # tool -> (its schema, whether it mirrors)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self._path:
            await self._app(scope, receive, send)
            return
        headers = self._headers.of(scope["headers"])
        stream = None
        if headers is not None and headers.session is not None:
            transport = None
            if self._sessions is not None:
                transport = self._sessions.for_fast_path(headers.session, headers.version)
            stream = None if transport is None else SessionStream(transport, headers.session)
        if headers is None or (headers.session is not None and stream is None):
            await self._app(scope, receive, send)
            return
        read: list[Message] = []
        body = await read_body(receive, read)
        taken = (
            None
            if body is None
            else self._express.take(body, None if stream is None else headers.version, True, scope.get(GRANT))
        )
        if taken is None or not self._agrees(taken, headers):
            if stream is not None and body is not None:
                self._cancel(stream.session, body)  # and the SDK answers it, as any notification
            await self._app(scope, replaying(read, receive), send)
            return
        await self._answer(taken, scope, receive, send, stream)

    def _cancel(self, session: str, body: bytes) -> None:
        """A host's ``notifications/cancelled`` for a call of its session on the fast path, applied."""
        request = cancelled_request(body)
        exchange = None if request is None else self._in_flight.get((session, request))
        if exchange is not None:
            exchange.cancel()

    def _agrees(self, taken: Taken, headers: Routing) -> bool:
        """Whether the SDK would serve ``taken`` as the fast path does: its headers agree with the body,
        and it needs nothing the SDK's entry does otherwise (progress, Mcp-Param headers). A session's
        request (the handshake era) is routed by its body alone."""
        if taken.progress is not None or headers.version != taken.version:
            return False
        if headers.session is not None:
            return True
        if headers.method != taken.method:
            return False
        if taken.method != "tools/call":
            return True
        if headers.name is None or decode_header_value(headers.name.decode("latin-1")) != taken.name:
            return False
        if taken.arguments:
            schema = self._tools.input_schema(taken.name)
            if (
                schema is not None
                and self._mirrors(taken.name, schema)
                and validate_mcp_param_headers(schema, taken.arguments, {}) is not None
            ):
                return False
        return True

    def _mirrors(self, name: str, schema: dict[str, Any]) -> bool:
        """Whether ``schema`` may mirror an argument in an ``Mcp-Param-*`` header (an ``x-mcp-header``
        anywhere in it); kept for each tool's schema as listed, as the SDK's check walks it all."""
        kept = self._schemas.get(name)
        if kept is None or kept[0] is not schema:
            if len(self._schemas) >= MAX_KEPT * 16:
                self._schemas.clear()
            kept = self._schemas[name] = (schema, _MIRRORED in msgspec.json.encode(schema))
        return kept[1]

    async def _answer(
        self, taken: Taken, scope: Scope, receive: Receive, send: Send, stream: SessionStream | None = None
    ) -> None:
        """The answer, as JSON; as an event stream once the call outlasts ``SSE_PING_INTERVAL``, or in a
        host session (``stream``) ``PRIME_AFTER``: there the stream opens with the priming event the
        SDK's opens it with, its events are kept for the host's ``Last-Event-ID``, and a host that goes
        away does not cancel the call, whose answer is kept for it to resume, as on the SDK's path.

        The watches are asyncio's own (uvicorn serves on asyncio): the connection's end, which the
        guarded protocol signals (``guard.GONE``; elsewhere, a task that waits for the host's
        disconnect), and a timer for the stream; anyio's cancel scopes cost more than the rest. An
        answer is written whole by the guarded protocol (``guard.ANSWER``), else sent as ASGI
        messages."""
        head, session, named = _SSE_HEADERS, None, b""
        if stream is not None:
            session = stream.session
            head = [*_SSE_HEADERS, (b"mcp-session-id", session.encode())]
            named = b"mcp-session-id: " + head[-1][1] + b"\r\n"
        opening = None if stream is None else functools.partial(stream.opening, taken)
        exchange = _Exchange(send, asyncio.current_task(), head, opening)
        loop = asyncio.get_running_loop()
        extensions = scope.get("extensions") or {}
        gone: asyncio.Future[None] | None = None if stream is not None else extensions.get(GONE)
        watch = None
        if gone is not None:
            gone.add_done_callback(exchange.went)
        elif stream is None:
            watch = loop.create_task(exchange.watch(receive))
        timer = loop.call_later(SSE_PING_INTERVAL if stream is None else PRIME_AFTER, exchange.start_stream)
        key = None if session is None else (session, str(taken.id))
        try:
            if stream is None:
                body, code = await self._express.answer(taken, grant=scope.get(GRANT))
            else:
                assert key is not None
                self._in_flight[key] = exchange
                with stream:
                    body, code = await self._express.answer(taken, session=session, grant=scope.get(GRANT))
        except asyncio.CancelledError:
            if not exchange.gone and not exchange.cancelled:
                raise
            if exchange.task is not None:
                exchange.task.uncancel()
            if exchange.gone:
                return  # the host went away: nobody to answer
            # cancelled by the host: its answer is the error the SDK's ends such a request with
            error = {"code": REQUEST_CANCELLED, "message": "Request cancelled"}
            body = msgspec.json.encode({"jsonrpc": "2.0", "id": taken.id, "error": error})
            code = REQUEST_CANCELLED
        finally:
            if key is not None and self._in_flight.get(key) is exchange:
                del self._in_flight[key]
            timer.cancel()
            if gone is not None:
                gone.remove_done_callback(exchange.went)
            if watch is not None:
                watch.cancel()
        if exchange.pings is not None:
            exchange.pings.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await exchange.pings  # no ping is being sent now
        if exchange.streaming:  # its head went out: the answer ends the event stream
            event = b"event: message\r\ndata: " + body + b"\r\n\r\n"
            if stream is not None:
                event = b"id: " + stream.kept(taken, body) + b"\r\n" + event
            await send({"type": "http.response.body", "body": event, "more_body": False})
            return
        # Nothing sent yet: the answer is JSON (a session's with status 200, as the SDK's JSON answers)
        status = 200 if code is None or stream is not None else ERROR_CODE_HTTP_STATUS.get(code, 200)
        answer: Answer | None = extensions.get(ANSWER)
        if answer is not None and answer(status, named + _JSON_FIELDS % len(body), body):
            return  # written whole by the connection's protocol (guard.ANSWER)
        headers = [*_JSON_HEADERS, *head[len(_SSE_HEADERS) :], (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _Exchange:
    """One fast-path request's watches: the host's disconnect, and the event stream of a long call."""

    def __init__(
        self,
        send: Send,
        task: asyncio.Task[Any] | None,
        head: list[tuple[bytes, bytes]],
        opening: Callable[[], Awaitable[bytes]] | None,
    ) -> None:
        self._send = send
        self._head = head  # the event stream's headers
        self._opening = opening  # makes its first event (a session's priming event), if it has one
        self.task = task  # the request's own, cancelled when the host goes away or cancels it
        self.gone = False
        self.cancelled = False  # by the host's notifications/cancelled
        self.pings: asyncio.Task[None] | None = None  # once the answer is an event stream
        self.streaming = False  # its head sent

    def cancel(self) -> None:
        """The host cancelled the request: its task is cancelled."""
        self.cancelled = True
        if self.task is not None:
            self.task.cancel()

    def went(self, _: object = None) -> None:
        """The host went away: the request's task is cancelled."""
        self.gone = True
        if self.task is not None:
            self.task.cancel()

    async def watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.went()

    def start_stream(self) -> None:
        self.pings = asyncio.get_running_loop().create_task(self._ping())

    async def _ping(self) -> None:
        opening = b"" if self._opening is None else await self._opening()
        self.streaming = True  # from here the answer ends the stream (the head goes with its first part)
        await self._send({"type": "http.response.start", "status": 200, "headers": self._head})
        if opening:  # a session's stream: primed now, pinged from SSE_PING_INTERVAL on
            await self._send({"type": "http.response.body", "body": opening, "more_body": True})
            await asyncio.sleep(SSE_PING_INTERVAL)
        while True:
            await self._send({"type": "http.response.body", "body": _PING, "more_body": True})
            await asyncio.sleep(SSE_PING_INTERVAL)
