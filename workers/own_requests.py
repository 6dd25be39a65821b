"""The worker's own requests to a stdio server, beside the session's: the hot path of a tool call.

Above: ``workers.calls`` (``tools/call``) and the session's pager (listings: ``workers.session``),
which ``request`` and get the result as raw JSON. Below: the server's pipes, through
``workers.stdio``: each request goes out as one line by its writer, and each line the server
writes on stdout is offered here first (``take``), before anything parses it.

A request is written as JSON by msgspec, with an id above ``OWN_IDS`` (far from the session's,
which count up from 0) and the ``_meta`` the session stamps on its own (``envelope``); with a
progress callback, that id is its progress token too; while tracing, ``_meta`` carries the trace
context as well. Its answer is recognised by its id and handed back as raw JSON; its
``notifications/progress`` go to the request's callback as they are read. An answer nested too
deeply to decode still ends its request at once (``_answer_id`` finds its id without recursing).
Cancelled, a request sends the server ``notifications/cancelled``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

import msgspec
import trio

from supervisor.protocol import ProgressCallback, total_decoder
from workers.server_errors import INTERNAL_ERROR, ConnectionClosed, MCPError

__all__ = ["OWN_IDS", "OwnRequests"]

log = logging.getLogger("mcp_supervisor.worker.stdio")

OWN_IDS: Final = 1 << 40  # the worker's own requests have ids above this (exact in JavaScript too)
_ABSENT: Final = msgspec.Raw(b"")


class _Head(msgspec.Struct):
    """What a line from the server is routed on; the result or error stays raw JSON."""

    id: int | str | None = None
    method: str | None = None
    params: msgspec.Raw = _ABSENT
    result: msgspec.Raw = _ABSENT
    error: msgspec.Raw = _ABSENT


class _Progress(msgspec.Struct, rename="camel"):
    progress_token: int | str
    progress: float
    total: float | None = None
    message: str | None = None


class _Error(msgspec.Struct):
    code: int
    message: str
    data: Any = None


# Total: a line with invalid UTF-8 or nesting deeper than msgspec recurses is a DecodeError like any other.
_decode_head = total_decoder(msgspec.json.Decoder(_Head).decode)
_decode_error = total_decoder(msgspec.json.Decoder(_Error).decode)
_decode_progress = total_decoder(msgspec.json.Decoder(_Progress).decode)
_encode = msgspec.json.Encoder().encode


class Write(Protocol):
    """Queue a line for the server's stdin; ``at_once``: write it now if the pipe is idle and has room.
    Returns where the line begins in the bytes queued for stdin so far."""

    def __call__(self, line: bytes, *, at_once: bool = False) -> int: ...


class _Pending:
    """One of the worker's own requests, waiting for its answer."""

    __slots__ = ("answered", "error", "progress", "result", "sent_at")

    def __init__(self, progress: ProgressCallback | None) -> None:
        self.progress = progress  # its progress callback; its id is the progress token
        self.sent_at = 0  # where its line begins in the bytes queued for the server's stdin
        self.answered = trio.Event()
        self.result = _ABSENT
        self.error: MCPError | None = None


class OwnRequests:
    """The worker's requests in flight to one server, by id; their lines go out through ``write``."""

    def __init__(self, write: Write) -> None:
        self._write = write
        self._pending: dict[int | str, _Pending] = {}  # the worker's own requests by id
        self._last_id = OWN_IDS
        self._closed = False  # the server's stdout has ended: no answer will come
        self.envelope: dict[str, Any] | None = None  # ``_meta`` for our requests (``workers.sdk.envelope``)

    async def request(
        self,
        method: str,
        params: dict[str, Any],
        progress: ProgressCallback | None = None,
        trace: Mapping[str, str] | None = None,
        *,
        request_id: str | None = None,
        cancel_on_abandon: bool = True,
        queued: Callable[[int], None] | None = None,
    ) -> msgspec.Raw:
        """Send a request of the worker's own and return its result as raw JSON.

        The request carries the ``_meta`` the session stamps on its own (the 2026-07-28 envelope:
        protocol version, client info and capabilities; nothing on older protocol versions), and
        with ``progress`` a progress token: the server's progress notifications for it are handed
        to ``progress`` as they are read, so all of them before the answer; ``trace`` adds the
        entries that carry the trace context (``traceparent``, ``tracestate``: see
        ``supervisor.shared.tracing.serve``). A JSON-RPC error, or the server's stdout ending first,
        raises ``MCPError`` (``workers.server_errors``; ``ConnectionClosed``, which says where the request
        began in what was written, for the latter). Cancelled, it sends the server
        ``notifications/cancelled``, unless ``cancel_on_abandon`` is False (the handshake's requests,
        which the spec forbids to cancel). ``request_id``: a string id of the caller's choosing
        (``subscriptions/listen``'s), else the next number above ``OWN_IDS``. Empty params are left out,
        as the SDK leaves them. ``queued`` is told where its line begins once it is queued.
        """
        if self._closed:
            raise ConnectionClosed(None)
        if request_id is None:
            self._last_id += 1
            key: int | str = self._last_id
        elif request_id in self._pending:
            raise ValueError(f"request id {request_id!r} is already in flight")
        else:
            key = request_id
        meta = self.envelope
        if progress is not None:
            meta = {**(meta or {}), "progressToken": key}
        if trace:
            meta = {**(meta or {}), **trace}
        if meta is not None:
            params = {**params, "_meta": meta}
        pending = self._pending[key] = _Pending(progress)
        message = {"jsonrpc": "2.0", "id": key, "method": method, "params": params}
        if not params:
            del message["params"]
        pending.sent_at = self._write(_encode(message), at_once=len(self._pending) == 1)
        if queued is not None:
            queued(pending.sent_at)
        try:
            await pending.answered.wait()
        finally:
            if self._pending.pop(key, None) is not None and cancel_on_abandon:  # abandoned before its answer
                cancel = {"requestId": key, "reason": "caller cancelled"}
                self._write(
                    _encode({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
                )
        if pending.error is not None:
            raise pending.error
        return pending.result

    def take(self, line: bytes) -> bool:
        """Take a line from the server's stdout if it is for one of our requests: its answer, or a
        progress notification for it; False for a line the session's parser is to decide on."""
        try:
            head = _decode_head(line)
        except msgspec.DecodeError as exc:
            # Not JSON-RPC as far as routing goes: the session's parser decides, and warns. But an
            # answer of ours nested too deeply to decode still ends its request, at once.
            pending = self._pending.pop(own, None) if (own := _answer_id(line)) is not None else None
            if pending is None:
                return False
            pending.error = MCPError(INTERNAL_ERROR, f"the server's answer does not decode: {exc}")
            pending.answered.set()
            return True
        if head.method is None and (
            (isinstance(head.id, int) and head.id > OWN_IDS)
            or (isinstance(head.id, str) and head.id in self._pending)
        ):
            self._settle(head)
            return True
        return head.method == "notifications/progress" and bool(self._pending) and self._relay_progress(head)

    def close(self) -> None:
        """The server's stdout has ended: every request waiting fails, and so does every later one."""
        self._closed = True
        for pending in self._pending.values():
            pending.error = ConnectionClosed(pending.sent_at)
            pending.answered.set()
        self._pending.clear()

    def _settle(self, head: _Head) -> None:
        """Hand an answer to the worker's own request that waits for it."""
        assert head.id is not None
        pending = self._pending.pop(head.id, None)
        if pending is None:
            log.debug("answer to abandoned request %r dropped", head.id)
            return
        if head.result:
            pending.result = head.result
        elif not head.error:
            pending.error = MCPError(INTERNAL_ERROR, "server answered with neither a result nor an error")
        else:
            try:
                error = _decode_error(head.error)
            except msgspec.DecodeError as exc:
                shown = bytes(head.error)[:200].decode(errors="replace")
                pending.error = MCPError(INTERNAL_ERROR, f"server sent a malformed error ({exc}): {shown}")
            else:
                pending.error = MCPError(error.code, error.message, error.data)
        pending.answered.set()

    def _relay_progress(self, head: _Head) -> bool:
        """Hand a progress notification to the request of ours it is for; False if it is not."""
        try:
            params = _decode_progress(head.params)
        except msgspec.DecodeError:
            return False  # the session's parser decides
        token = params.progress_token
        pending = self._pending.get(token) if isinstance(token, int) else None
        if pending is None or pending.progress is None:
            return False
        pending.progress(params.progress, params.total, params.message)
        return True


_TOKENS: Final = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}:]')  # strings, and what nests or names
_INTEGER_VALUE: Final = re.compile(rb"\s*(\d+)\s*[,}]")


def _answer_id(line: bytes) -> int | None:
    """The integer ``id`` at the top level of a JSON object, found by a scan that does not recurse
    (for a line nested too deeply to decode), or None."""
    depth, previous = 0, b""
    for match in _TOKENS.finditer(line):
        token = match.group()
        if token in (b"{", b"["):
            depth += 1
        elif token in (b"}", b"]"):
            depth -= 1
        elif token == b":" and depth == 1 and previous == b'"id"':
            value = _INTEGER_VALUE.match(line, match.end())
            return int(value.group(1)) if value else None
        previous = token
    return None
