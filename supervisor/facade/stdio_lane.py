"""The stdio facade's transport: the host's lines to the fast path or the SDK's server, and every
answer to stdout.

Above: ``supervisor.facade.run.serve_stdio``, which runs ``read`` and ``write`` beside the SDK's server
loop. Below: the pipes (``supervisor.facade.pipes``) and the fast path (``supervisor.facade.express``).

It takes the place of the SDK's ``stdio_server``, and does what it does: each line the fast path does
not take is decoded as that transport decodes it (UTF-8 with replacement, the SDK's message models)
and goes on to the SDK; the SDK's messages are written as it writes them. Each line is offered to the
fast path first, with what is known of the connection: its era, decided as the SDK decides it (by the
host's first request: the 2026-07-28 envelope, or else the handshake), and on a handshake-era
connection the protocol version and capabilities the SDK recorded once it accepted the host's
``initialize`` (read from the SDK's own connection, which the facade's middleware hands over). Until
then everything goes the SDK's way.

The fast path's requests are the SDK's in every other respect: each counts as unanswered until its
answer is written (``Unanswered``: a host that does not read is held back), the host's
``notifications/cancelled`` cancels it (the routed call is cancelled, and no answer is sent), and when
the host closes stdin the calls in flight end with "Connection closed".
"""

from __future__ import annotations

import logging
from typing import Any, Final, Literal

import anyio
import anyio.abc
import mcp_types as types
import trio
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.message import SessionMessage
from msgspec.json import encode

from supervisor.facade.express import Express, Taken
from supervisor.facade.pipes import LineReader, LineWriter, Unanswered

__all__ = ["StdioLane"]

log = logging.getLogger("mcp_supervisor.facade")

CLOSE_WRITE_TIMEOUT: Final = 1.0  # seconds for a call's "Connection closed" answer when the host leaves


class StdioLane:
    """One host's stdio connection: ``read`` its lines, ``write`` the SDK's messages."""

    def __init__(self, express: Express | None, writer: LineWriter, unanswered: Unanswered) -> None:
        """``express``: the fast path (None: every request goes the SDK's way)."""
        self._express = express
        self._writer = writer
        self._unanswered = unanswered
        self._era: Literal["", "handshake", "modern"] = ""  # decided by the host's first request
        self._connection: Connection | None = None  # the SDK's (handshake era), once heard
        self._in_flight: dict[types.RequestId, trio.CancelScope] = {}  # fast-path requests, by id

    def heard(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """A message the SDK's server serves (the facade's middleware): its connection is this one's."""
        if self._connection is None:
            self._connection = getattr(ctx.session, "_connection", None)

    async def read(
        self, stdin: LineReader, to_server: anyio.abc.ObjectSendStream[SessionMessage | Exception]
    ) -> None:
        """Every line from the host, to the fast path or on to the SDK, until the host closes stdin."""
        async with trio.open_nursery() as calls:  # trio's own: the stdio facade runs on trio, and cheaper
            async with to_server:
                async for line in stdin:
                    taken = self._take(line)
                    if taken is not None:
                        await self._unanswered.add(taken.id)
                        calls.start_soon(self._answer, taken)
                        continue
                    item = _decoded(line)
                    if isinstance(item, SessionMessage):
                        self._note(item.message)
                    try:
                        await to_server.send(item)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        break  # the server is done
            calls.cancel_scope.cancel()  # the host is gone: as the SDK does, its calls end

    async def write(self, from_server: anyio.abc.ObjectReceiveStream[SessionMessage]) -> None:
        """The SDK's messages, written as its stdio transport writes them, until it closes the stream."""
        async with from_server:
            async for item in from_server:
                await self._writer.write_line(
                    item.message.model_dump_json(by_alias=True, exclude_unset=True).encode()
                )

    # ------------------------------------------------------------ the fast path

    def _take(self, line: bytes) -> Taken | None:
        express = self._express
        if express is None or not self._era:
            return None
        if self._era == "modern":
            return express.take(line, None)
        connection = self._connection
        params = connection.client_params if connection is not None else None
        if params is None:  # not initialized (yet): the SDK says what that means
            return None
        capabilities = params.capabilities
        plain = capabilities.sampling is None and capabilities.elicitation is None
        assert connection is not None
        return express.take(line, connection.protocol_version, plain)

    async def _answer(self, taken: Taken) -> None:
        assert self._express is not None
        key = coerce_request_id(taken.id)
        scope = self._in_flight[key] = trio.CancelScope()
        answer: bytes | None = None
        try:
            with scope:
                answer = (await self._express.answer(taken, self._writer.write_line))[0]
        except trio.Cancelled:
            with trio.move_on_after(CLOSE_WRITE_TIMEOUT) as closing:
                closing.shield = True
                closed = {"code": types.CONNECTION_CLOSED, "message": "Connection closed"}
                await self._writer.write_line(encode({"jsonrpc": "2.0", "id": taken.id, "error": closed}))
            raise
        finally:
            if self._in_flight.get(key) is scope:
                del self._in_flight[key]
        if answer is None:  # cancelled by the host: never answered (its cancel counted it off)
            return
        await self._writer.write_line(answer)
        self._unanswered.done(taken.id)

    def _note(self, message: Any) -> None:
        """The era, from the host's first request; a host's cancel of a fast-path request, applied."""
        if not self._era and isinstance(message, types.JSONRPCRequest):
            meta = (message.params or {}).get("_meta")
            modern = isinstance(meta, dict) and types.PROTOCOL_VERSION_META_KEY in meta
            self._era = "modern" if modern and message.method != "initialize" else "handshake"
        elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
            cancelled = (message.params or {}).get("requestId")
            if isinstance(cancelled, str | int) and not isinstance(cancelled, bool):
                scope = self._in_flight.get(coerce_request_id(cancelled))
                if scope is not None:
                    scope.cancel()


def _decoded(line: bytes) -> SessionMessage | Exception:
    """A line as the SDK's stdio transport reads it: a message, or why it is none."""
    try:
        return SessionMessage(
            types.jsonrpc_message_adapter.validate_json(line.decode("utf-8", "replace"), by_name=False)
        )
    except Exception as exc:  # what the SDK's transport hands on: sift answers it
        return exc
