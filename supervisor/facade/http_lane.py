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

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PARAM_HEADER_PREFIX,
    MCP_PROTOCOL_VERSION_HEADER,
    decode_header_value,
    find_duplicated_routing_header,
    validate_mcp_param_headers,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from supervisor.facade.express import Express, Taken
from supervisor.facade.served_tools import ServedTools

__all__ = ["SSE_PING_INTERVAL", "FastLane"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SSE_PING_INTERVAL: Final = 15.0  # seconds of a silent call before its answer is a pinged event stream
MAX_BODY: Final = DEFAULT_MAX_REQUEST_BODY_SIZE  # bytes of a body the lane reads; a longer one is the SDK's
_JSON_HEADERS: Final = [(b"content-type", b"application/json")]
_SSE_HEADERS: Final = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
]
_PING: Final = b": ping\r\n\r\n"
_PARAM_PREFIX: Final = MCP_PARAM_HEADER_PREFIX.lower()
_JSON_TYPES: Final = frozenset({"*/*", "application/*", "application/json"})
_SSE_TYPES: Final = frozenset({"*/*", "text/*", "text/event-stream"})


class FastLane:
    """ASGI middleware: the requests ``Express`` answers, answered; the others passed to ``app``."""

    def __init__(self, app: ASGIApp, express: Express, tools: ServedTools, path: str) -> None:
        self._app = app
        self._express = express
        self._tools = tools
        self._path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self._path:
            await self._app(scope, receive, send)
            return
        headers = _headers(scope)
        if headers is None:
            await self._app(scope, receive, send)
            return
        read: list[Message] = []
        body = await _body(receive, read, headers)
        taken = None if body is None else self._express.take(body, None)
        if taken is None or not self._agrees(taken, headers):
            await self._app(scope, _replaying(read, receive), send)
            return
        await self._answer(taken, receive, send)

    def _agrees(self, taken: Taken, headers: dict[str, str]) -> bool:
        """Whether the SDK would serve ``taken`` as the fast path does: its headers agree with the body,
        and it needs nothing the SDK's entry does otherwise (progress, Mcp-Param headers)."""
        if taken.progress is not None or headers.get(MCP_PROTOCOL_VERSION_HEADER) != taken.version:
            return False
        if headers.get(MCP_METHOD_HEADER) != taken.method:
            return False
        if taken.method != "tools/call":
            return True
        if decode_header_value(headers.get(MCP_NAME_HEADER)) != taken.name:
            return False
        if taken.arguments:
            schema = self._tools.input_schema(taken.name)
            if schema is not None and validate_mcp_param_headers(schema, taken.arguments, {}) is not None:
                return False
        return True

    async def _answer(self, taken: Taken, receive: Receive, send: Send) -> None:
        """The answer, as JSON; as an event stream once the call outlasts ``SSE_PING_INTERVAL``.

        The watches are asyncio's own (uvicorn serves on asyncio): a task that waits for the host's
        disconnect, and a timer for the stream; anyio's cancel scopes cost more than the rest."""
        exchange = _Exchange(send, asyncio.current_task())
        loop = asyncio.get_running_loop()
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
        headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
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

    async def watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self.gone = True
        if self.task is not None:
            self.task.cancel()

    def start_stream(self) -> None:
        self.pings = asyncio.get_running_loop().create_task(self._ping())

    async def _ping(self) -> None:
        await self._send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        self.streaming = True
        while True:
            await self._send({"type": "http.response.body", "body": _PING, "more_body": True})
            await asyncio.sleep(SSE_PING_INTERVAL)


def _headers(scope: Scope) -> dict[str, str] | None:
    """The request's headers, when it is one the lane may take by its headers alone; else None."""
    raw: list[tuple[bytes, bytes]] = scope["headers"]
    pairs = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw]
    headers = dict(pairs)
    if (
        headers.get(MCP_PROTOCOL_VERSION_HEADER) not in MODERN_PROTOCOL_VERSIONS
        or "mcp-session-id" in headers
    ):
        return None
    if not headers.get("content-type", "").lower().startswith("application/json"):
        return None
    accepted = {part.strip().split(";")[0].strip().lower() for part in headers.get("accept", "").split(",")}
    if not accepted & _JSON_TYPES or not accepted & _SSE_TYPES:
        return None
    if find_duplicated_routing_header(pairs) is not None or any(
        name.startswith(_PARAM_PREFIX) for name in headers
    ):
        return None
    length = headers.get("content-length")
    if length is not None and (not length.isdecimal() or int(length) > MAX_BODY):
        return None
    return headers


async def _body(receive: Receive, read: list[Message], headers: dict[str, str]) -> bytes | None:
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
