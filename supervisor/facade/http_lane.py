"""The HTTP facade's fast path: a 2026-07-28 ``tools/call`` or ``tools/list`` POST answered before the
SDK's HTTP stack, everything else handed to it untouched.

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
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import msgspec
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PARAM_HEADER_PREFIX,
    MCP_PROTOCOL_VERSION_HEADER,
    X_MCP_HEADER_KEY,
    decode_header_value,
    validate_mcp_param_headers,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from supervisor.facade.express import Express, Taken
from supervisor.facade.guard import ANSWER, GONE
from supervisor.facade.served_tools import ServedTools

__all__ = ["SSE_PING_INTERVAL", "FastLane"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Answer = Callable[[int, bytes, bytes], bool]  # guard.ANSWER: (status, header lines, body) -> written

SSE_PING_INTERVAL: Final = 15.0  # seconds of a silent call before its answer is a pinged event stream
MAX_BODY: Final = DEFAULT_MAX_REQUEST_BODY_SIZE  # bytes of a body the lane reads; a longer one is the SDK's
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
_PARAM_PREFIX: Final = MCP_PARAM_HEADER_PREFIX.lower().encode()
_JSON_TYPES: Final = frozenset({"*/*", "application/*", "application/json"})
_SSE_TYPES: Final = frozenset({"*/*", "text/*", "text/event-stream"})
_VERSION: Final = MCP_PROTOCOL_VERSION_HEADER.encode()
_METHOD: Final = MCP_METHOD_HEADER.encode()
_NAME: Final = MCP_NAME_HEADER.encode()
_ROUTING: Final = frozenset({_VERSION, _METHOD, _NAME})  # the SDK refuses any of them twice
_READ: Final = frozenset({b"content-type", b"accept", b"content-length", b"mcp-session-id"})
_MODERN: Final = {version.encode(): version for version in MODERN_PROTOCOL_VERSIONS}
_MIRRORED: Final = msgspec.json.encode(X_MCP_HEADER_KEY)  # in a schema that may mirror arguments in headers
MAX_KEPT: Final = 64  # distinct Accept and Content-Type values whose verdict is kept


class FastLane:
    """ASGI middleware: the requests ``Express`` answers, answered; the others passed to ``app``."""

    def __init__(self, app: ASGIApp, express: Express, tools: ServedTools, path: str) -> None:
        self._app = app
        self._express = express
        self._tools = tools
        self._path = path
        self._headers = _Headers()
        self._schemas: dict[str, tuple[dict[str, Any], bool]] = {}  # tool -> (its schema, whether it mirrors)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self._path:
            await self._app(scope, receive, send)
            return
        headers = self._headers.of(scope["headers"])
        if headers is None:
            await self._app(scope, receive, send)
            return
        read: list[Message] = []
        body = await _body(receive, read)
        taken = None if body is None else self._express.take(body, None)
        if taken is None or not self._agrees(taken, headers):
            await self._app(scope, _replaying(read, receive), send)
            return
        await self._answer(taken, scope, receive, send)

    def _agrees(self, taken: Taken, headers: _Routing) -> bool:
        """Whether the SDK would serve ``taken`` as the fast path does: its headers agree with the body,
        and it needs nothing the SDK's entry does otherwise (progress, Mcp-Param headers)."""
        if taken.progress is not None or headers.version != taken.version or headers.method != taken.method:
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

    async def _answer(self, taken: Taken, scope: Scope, receive: Receive, send: Send) -> None:
        """The answer, as JSON; as an event stream once the call outlasts ``SSE_PING_INTERVAL``.

        The watches are asyncio's own (uvicorn serves on asyncio): the connection's end, which the
        guarded protocol signals (``guard.GONE``; elsewhere, a task that waits for the host's
        disconnect), and a timer for the stream; anyio's cancel scopes cost more than the rest. A JSON
        answer is written whole by the guarded protocol (``guard.ANSWER``), else sent as ASGI
        messages."""
        exchange = _Exchange(send, asyncio.current_task())
        loop = asyncio.get_running_loop()
        extensions = scope.get("extensions") or {}
        gone: asyncio.Future[None] | None = extensions.get(GONE)
        watch = None
        if gone is not None:
            gone.add_done_callback(exchange.went)
        else:
            watch = loop.create_task(exchange.watch(receive))
        timer = loop.call_later(SSE_PING_INTERVAL, exchange.start_stream)
        try:
            body, code = await self._express.answer(taken)
        except asyncio.CancelledError:
            if not exchange.gone:
                raise
            if exchange.task is not None:
                exchange.task.uncancel()
            return  # the host went away: nobody to answer
        finally:
            timer.cancel()
            if gone is not None:
                gone.remove_done_callback(exchange.went)
            if watch is not None:
                watch.cancel()
        if exchange.pings is not None:  # the answer ends the event stream
            exchange.pings.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await exchange.pings  # no ping is being sent now
            if not exchange.streaming:
                await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            event = b"event: message\r\ndata: " + body + b"\r\n\r\n"
            await send({"type": "http.response.body", "body": event, "more_body": False})
            return
        status = 200 if code is None else ERROR_CODE_HTTP_STATUS.get(code, 200)
        answer: Answer | None = extensions.get(ANSWER)
        if answer is not None and answer(status, _JSON_FIELDS % len(body), body):
            return  # written whole by the connection's protocol (guard.ANSWER)
        headers = [*_JSON_HEADERS, (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _Exchange:
    """One fast-path request's watches: the host's disconnect, and the event stream of a long call."""

    def __init__(self, send: Send, task: asyncio.Task[Any] | None) -> None:
        self._send = send
        self.task = task  # the request's own, cancelled when the host goes away
        self.gone = False
        self.pings: asyncio.Task[None] | None = None  # once the answer is an event stream
        self.streaming = False  # its head sent

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
        await self._send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        self.streaming = True
        while True:
            await self._send({"type": "http.response.body", "body": _PING, "more_body": True})
            await asyncio.sleep(SSE_PING_INTERVAL)


class _Routing(msgspec.Struct, frozen=True):
    """What the lane reads of a request's headers: its protocol version and routing headers."""

    version: str
    method: str | None
    name: bytes | None  # as sent


class _Headers:
    """The lane's reading of a request's headers, with the verdicts on ``Accept`` and ``Content-Type``
    values kept (a host sends the same ones each time)."""

    def __init__(self) -> None:
        self._accepts: dict[bytes, bool] = {}
        self._types: dict[bytes, bool] = {}

    def of(self, raw: list[tuple[bytes, bytes]]) -> _Routing | None:
        """The request's ``_Routing``, when it is one the lane may take by its headers alone; else None.
        Header names come lowercased from the server (uvicorn's parsers)."""
        routing: dict[bytes, bytes] = {}
        read: dict[bytes, bytes] = {}
        for name, value in raw:
            if name in _ROUTING:
                if name in routing:  # duplicated: the SDK refuses it
                    return None
                routing[name] = value
            elif name in _READ:
                read[name] = value
            elif name.startswith(_PARAM_PREFIX):
                return None
        version = _MODERN.get(routing.get(_VERSION, b""))
        if version is None or b"mcp-session-id" in read:
            return None
        if not self._json(read.get(b"content-type", b"")) or not self._accepted(read.get(b"accept", b"")):
            return None
        length = read.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            return None
        method = routing.get(_METHOD)
        return _Routing(version, None if method is None else method.decode("latin-1"), routing.get(_NAME))

    def _json(self, value: bytes) -> bool:
        verdict = self._types.get(value)
        if verdict is None:
            verdict = value.decode("latin-1").lower().startswith("application/json")
            self._types = _kept(self._types, value, verdict)
        return verdict

    def _accepted(self, value: bytes) -> bool:
        verdict = self._accepts.get(value)
        if verdict is None:
            accepted = {
                part.strip().split(";")[0].strip().lower() for part in value.decode("latin-1").split(",")
            }
            verdict = bool(accepted & _JSON_TYPES) and bool(accepted & _SSE_TYPES)
            self._accepts = _kept(self._accepts, value, verdict)
        return verdict


def _kept(verdicts: dict[bytes, bool], value: bytes, verdict: bool) -> dict[bytes, bool]:
    if len(verdicts) >= MAX_KEPT:
        verdicts = {}
    verdicts[value] = verdict
    return verdicts


async def _body(receive: Receive, read: list[Message]) -> bytes | None:
    """The request's body, each message kept in ``read``; None when it is not one the lane takes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        read.append(message)
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _replaying(read: list[Message], receive: Receive) -> Receive:
    """``receive``, with the messages ``read`` of it first."""
    pending = list(read)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
