"""What the HTTP facade's fast path reads of a request before it takes it: the headers that route
it, its body (kept, so the SDK can be handed the request untouched), and a host's cancel.

Above: ``supervisor.facade.http_lane`` (``FastLane``). Below: the ASGI messages uvicorn hands it, and
the SDK's names for the routing headers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import msgspec
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PARAM_HEADER_PREFIX,
    MCP_PROTOCOL_VERSION_HEADER,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

__all__ = [
    "MAX_BODY",
    "Headers",
    "Message",
    "Receive",
    "Routing",
    "cancelled_request",
    "read_body",
    "replaying",
]

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]

MAX_BODY: Final = DEFAULT_MAX_REQUEST_BODY_SIZE  # bytes of a body the lane reads; a longer one is the SDK's
MAX_KEPT: Final = 64  # distinct Accept and Content-Type values whose verdict is kept
_PARAM_PREFIX: Final = MCP_PARAM_HEADER_PREFIX.lower().encode()
_JSON_TYPES: Final = frozenset({"*/*", "application/*", "application/json"})
_SSE_TYPES: Final = frozenset({"*/*", "text/*", "text/event-stream"})
_VERSION: Final = MCP_PROTOCOL_VERSION_HEADER.encode()
_METHOD: Final = MCP_METHOD_HEADER.encode()
_NAME: Final = MCP_NAME_HEADER.encode()
_ROUTING: Final = frozenset({_VERSION, _METHOD, _NAME})  # the SDK refuses any of them twice
_READ: Final = frozenset({b"content-type", b"accept", b"content-length", b"mcp-session-id"})
_MODERN: Final = {version.encode(): version for version in MODERN_PROTOCOL_VERSIONS}
_HANDSHAKE: Final = {version.encode(): version for version in HANDSHAKE_PROTOCOL_VERSIONS}
_CANCELLED: Final = b'"notifications/cancelled"'


class _Cancel(msgspec.Struct):
    """What is read of a ``notifications/cancelled``: the request it cancels."""

    class Params(msgspec.Struct):
        requestId: int | str

    method: str
    params: Params


_decode_cancel = msgspec.json.Decoder(_Cancel).decode


def cancelled_request(body: bytes) -> str | None:
    """The id (as the SDK keys its streams: ``str(id)``) of the request a ``notifications/cancelled``
    in ``body`` cancels; None for any other body."""
    if _CANCELLED not in body:
        return None
    try:
        cancel = _decode_cancel(body)
    except (msgspec.DecodeError, ValueError):
        return None
    return str(cancel.params.requestId) if cancel.method == "notifications/cancelled" else None


class Routing(msgspec.Struct, frozen=True):
    """What the lane reads of a request's headers: its protocol version and routing headers, and its
    host session (the handshake era's ``Mcp-Session-Id``)."""

    version: str
    method: str | None
    name: bytes | None  # as sent
    session: str | None = None


class Headers:
    """The lane's reading of a request's headers, with the verdicts on ``Accept`` and ``Content-Type``
    values kept (a host sends the same ones each time)."""

    def __init__(self) -> None:
        self._accepts: dict[bytes, bool] = {}
        self._types: dict[bytes, bool] = {}

    def of(self, raw: list[tuple[bytes, bytes]]) -> Routing | None:
        """The request's ``Routing``, when it is one the lane may take by its headers alone; else None.
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
        session = read.get(b"mcp-session-id")
        if session is None:
            version = _MODERN.get(routing.get(_VERSION, b""))
        elif _METHOD in routing or _NAME in routing:
            return None  # no handshake-era host sends them: the SDK's
        else:
            version = _HANDSHAKE.get(routing.get(_VERSION, b""))
        if version is None:
            return None
        if not self._json(read.get(b"content-type", b"")) or not self._accepted(read.get(b"accept", b"")):
            return None
        length = read.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            return None
        method = routing.get(_METHOD)
        return Routing(
            version,
            None if method is None else method.decode("latin-1"),
            routing.get(_NAME),
            None if session is None else session.decode("latin-1"),
        )

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


async def read_body(receive: Receive, read: list[Message]) -> bytes | None:
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


def replaying(read: list[Message], receive: Receive) -> Receive:
    """``receive``, with the messages ``read`` of it first."""
    pending = list(read)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
