"""The stdio facade's own stdin and stdout: non-blocking pipes under trio, no thread per line.

Above: ``supervisor.facade.run.serve_stdio`` and the stdio transport (``supervisor.facade.stdio_lane``),
which use these in place of the SDK's ``stdio_server``. Below: ``trio.lowlevel.FdStream`` on private
duplicates of fds 0 and 1.

The SDK's own stdio streams read and write through a worker thread: three thread hand-offs or more
for every request and its answer, which is most of what the facade would add to a call. These
wait on the pipes in trio's own loop instead. As the SDK does, the facade then points fd 0 at
``/dev/null`` and fd 1 at stderr while it serves, so a stray ``print`` (ours, or a library's) can
never land in the middle of the protocol; both are put back when it is done.

A host that does not read its answers is held back: past ``MAX_UNANSWERED`` requests in hand the
facade stops reading (``Unanswered``), so its memory is bounded whatever the host sends; a host that
closes its end of stdout is gone, and what is written after is dropped (``LineWriter``).

What the facade read of stdin before (``supervisor.facade.handshake``: the host's first line, which it
may have answered) is read again first; the SDK's answer to a request answered there is dropped
(``Answers``), once compared with the one the host got.

A line longer than ``MAX_LINE`` is dropped with a warning (the host gets no answer to it; it could
never be one message the facade serves), and the reading goes on at the next line.

A line that is not a JSON-RPC message (not JSON, nested deeper than the SDK decodes, a request of the
wrong shape), which the SDK's transport drops unanswered, is answered by ``sift`` with a parse error or
an invalid request naming what is wrong, under the request's id when one can be read (else a host would
wait for ever); a notification or a response is never answered, a blank line is skipped.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Final, Self

import anyio
import anyio.abc
import mcp_types as types
import trio
import trio.lowlevel
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from supervisor.facade.handshake import Answered
from supervisor.shared.repeats import Repeats

__all__ = [
    "MAX_LINE",
    "Answers",
    "LineReader",
    "LineWriter",
    "Unanswered",
    "bad_line_answer",
    "claimed_stdio",
]
__all__ += ["sift"]

log = logging.getLogger("mcp_supervisor.facade")

MAX_LINE: Final = 64 * 1024 * 1024  # bytes in one line from the host; a longer one is dropped
READ_SIZE: Final = 256 * 1024  # bytes asked of the pipe at a time
YIELD_EVERY: Final = 16  # reads in a row that found bytes waiting, before one pass through the scheduler
MAX_UNANSWERED: Final = (
    256  # the host's requests in hand before the facade stops reading (a host not reading)
)
# A JSON token: a string, a punctuation mark, or anything else up to the next one (numbers, literals).
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*+"|[][{}:,]|[^][{}:,\s"]++')


class LineReader:
    """Lines (as bytes, each with its newline) from a pipe, as ``async for line in reader``; the bytes
    ``read`` before come first."""

    def __init__(self, stream: trio.lowlevel.FdStream, read: bytes = b"") -> None:
        self._stream = stream
        self._buffer = bytearray(read)
        self._scanned = 0  # bytes of the buffer known to hold no newline
        self._dropping = False  # inside a line past MAX_LINE: skip to its end
        self._unwaited = 0  # reads in a row that found bytes waiting

    async def _receive(self) -> bytes:
        """The pipe's next bytes (b"" at its end). ``FdStream.receive_some`` passes through trio's
        scheduler before every read; this reads at once and waits only when nothing is there, with one
        scheduling point every ``YIELD_EVERY`` reads that did not wait (a host writing without pause
        cannot hold the loop)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        fd = self._stream.fileno()
        while True:
            try:
                chunk = os.read(fd, READ_SIZE)
            except BlockingIOError:
                self._unwaited = 0
                await trio.lowlevel.wait_readable(fd)
                continue
            except OSError as exc:
                if exc.errno == errno.EBADF:
                    raise trio.ClosedResourceError("file was already closed") from None
                raise trio.BrokenResourceError from exc
            self._unwaited += 1
            if self._unwaited >= YIELD_EVERY:
                self._unwaited = 0
                await trio.lowlevel.cancel_shielded_checkpoint()
            return chunk

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> bytes:
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                self._scanned = 0
                if self._dropping:
                    self._dropping = False
                    continue
                return line
            self._scanned = len(self._buffer)
            if self._scanned > MAX_LINE:
                if not self._dropping:
                    log.warning("a line from the host is longer than %d bytes: dropped", MAX_LINE)
                self._dropping = True
                self._buffer.clear()
                self._scanned = 0
            chunk = await self._receive()
            if not chunk:
                if self._buffer and not self._dropping:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line
                raise StopAsyncIteration
            self._buffer += chunk


class LineWriter:
    """Lines to stdout, each written whole (``write_line``: one message, from any task). A host that
    closed its end is gone: what is written after is dropped (its calls end with its stdin)."""

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self._stream = stream
        self._lock = trio.Lock()  # one line at a time: the SDK's answers and the fast path's
        self.gone = False

    async def write_line(self, data: bytes) -> None:
        """One line, whole. Written at once when the pipe has room and no other line is being written
        (``trio.Lock.acquire`` and ``FdStream.send_all`` would each pass through trio's scheduler
        first); else the rest as ``send_all`` writes it, waiting for room."""
        if self.gone:
            return
        try:
            self._lock.acquire_nowait()
        except trio.WouldBlock:
            await self._lock.acquire()
        line = data + b"\n"
        try:
            try:
                sent = os.write(self._stream.fileno(), line)
            except BlockingIOError:
                sent = 0
            if sent < len(line):
                await self._stream.send_all(line[sent:])
        except (BrokenPipeError, trio.BrokenResourceError, trio.ClosedResourceError):
            self._gone()
        except OSError as exc:  # as send_all has it: a closed descriptor, or a broken pipe otherwise named
            if exc.errno not in (errno.EBADF, errno.EPIPE):
                raise
            self._gone()
        finally:
            self._lock.release()

    def _gone(self) -> None:
        self.gone = True
        log.info("the host closed its end of the pipe; what it was sent since is dropped")


@contextmanager
def claimed_stdio(read: bytes = b"") -> Iterator[tuple[LineReader, LineWriter]]:
    """The protocol's stdin (after the bytes ``read`` of it before) and stdout, on private fds; fd 0
    reads ``/dev/null`` and fd 1 writes to stderr meanwhile."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
    finally:
        os.close(null)
    stdin, stdout = trio.lowlevel.FdStream(wire_in), trio.lowlevel.FdStream(wire_out)
    try:
        yield LineReader(stdin, read), LineWriter(stdout)
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        for stream in (stdin, stdout):
            stream.close()  # synchronous close of a FdStream: closes the private fd only


# ------------------------------------------------------------ a host that does not read


class Unanswered:
    """The host's requests not answered yet; reading from the host waits while there are ``limit``.

    A host that never reads its answers would otherwise have the facade read on, and keep every
    answer it cannot write: the host's writes wait instead, as on any full pipe. A request counts
    until its answer has gone to the writer (``Answers``), or until the host cancels it."""

    def __init__(self, limit: int = MAX_UNANSWERED) -> None:
        self.limit = limit
        self._ids: dict[types.RequestId, int] = {}  # id -> requests in hand with it (a host may reuse one)
        self._count = 0
        self._room: anyio.Event | None = None

    def __len__(self) -> int:
        return self._count

    async def add(self, id: types.RequestId) -> None:
        while self._count >= self.limit:
            if self._room is None:
                self._room = anyio.Event()
            await self._room.wait()
        self._ids[id] = self._ids.get(id, 0) + 1
        self._count += 1

    def done(self, id: types.RequestId) -> None:
        left = self._ids.get(id)
        if left is None:
            return
        if left > 1:
            self._ids[id] = left - 1
        else:
            del self._ids[id]
        self._count -= 1
        if self._room is not None and self._count < self.limit:
            self._room.set()
            self._room = None


class Answers:
    """The server's side of the stdout stream: each answer counted off ``Unanswered`` once written; the
    SDK's answer to a request ``answered`` before it was loaded is dropped (the host has one)."""

    def __init__(
        self,
        inner: anyio.abc.ObjectSendStream[SessionMessage],
        unanswered: Unanswered,
        answered: Answered | None = None,
    ) -> None:
        self._inner = inner
        self._unanswered = unanswered
        self._answered = answered

    async def send(self, item: SessionMessage) -> None:
        message = item.message
        if not isinstance(message, types.JSONRPCResponse | types.JSONRPCError) or message.id is None:
            await self._inner.send(item)
            return
        answered = self._answered
        if answered is not None and answered.id == message.id:
            self._answered = None
            _compare(answered, message)  # the host has its answer already
        else:
            await self._inner.send(item)
        self._unanswered.done(message.id)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _compare(answered: Answered, message: types.JSONRPCResponse | types.JSONRPCError) -> None:
    """Warn if the SDK answers a request otherwise than the facade did before it was loaded."""
    sdk = json.loads(message.model_dump_json(by_alias=True, exclude_unset=True))
    if sdk == answered.response:
        log.debug("the SDK answers %s as the facade did", answered.method)
    else:
        log.warning(
            "the facade answered %s before loading the SDK otherwise than the SDK does: %.500s "
            "(the SDK: %.500s)",
            answered.method,
            json.dumps(answered.response),
            json.dumps(sdk),
        )


# ------------------------------------------------------------ lines the SDK cannot read


async def sift(
    from_host: anyio.abc.ObjectReceiveStream[SessionMessage | Exception],
    to_server: anyio.abc.ObjectSendStream[SessionMessage | Exception],
    to_host: anyio.abc.ObjectSendStream[SessionMessage],
    unanswered: Unanswered | None = None,
) -> None:
    """The host's messages, on to the server (each request waiting for room in ``unanswered``, and
    a host's cancel making room); each line that was not one answered here, if it needs an answer."""
    repeats = Repeats(log)
    async with to_server:
        async for item in from_host:
            if not isinstance(item, Exception):
                message = item.message
                if unanswered is not None:
                    if isinstance(message, types.JSONRPCRequest):
                        await unanswered.add(message.id)
                    elif isinstance(message, types.JSONRPCNotification) and message.method == (
                        "notifications/cancelled"
                    ):
                        cancelled = (message.params or {}).get("requestId")
                        if isinstance(cancelled, str | int):
                            unanswered.done(cancelled)
                try:
                    await to_server.send(item)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return  # the server is done
                continue
            if _blank(item):
                continue
            answer = bad_line_answer(item)
            why = answer.error.message if answer is not None else str(item).splitlines()[0]
            repeats.log("bad line", logging.WARNING, "the host sent a line that is not JSON-RPC: %.300s", why)
            if answer is not None:
                with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await to_host.send(SessionMessage(answer))


def bad_line_answer(exc: Exception) -> types.JSONRPCError | None:
    """The answer to a line the SDK's stdio transport could not read as a JSON-RPC message (``exc``
    says why): a parse error or an invalid request, under the request's id when one can be read
    (else null); None for a notification or a response (never answered)."""
    if not isinstance(exc, ValidationError) or not exc.error_count():
        return None
    errors = exc.errors()
    first = errors[0]
    if first["type"] == "json_invalid":  # not JSON, or nested deeper than pydantic decodes
        line = first.get("input")
        request_id = _scanned_id(line) if isinstance(line, str) else None
        return _error_answer(request_id, types.PARSE_ERROR, f"Parse error: {first['msg']}")
    # Valid JSON of the wrong shape: the whole message is the input of a field missing at its top
    # level (or of the top level's own type error); the problem told is the one as a request.
    whole = next((e["input"] for e in errors if e["type"] == "missing" and len(e["loc"]) == 2), None)
    if whole is None:
        whole = next((e["input"] for e in errors if len(e["loc"]) <= 1), None)
    if isinstance(whole, dict):
        notification = "method" in whole and "id" not in whole
        response = "method" not in whole and bool(whole.keys() & {"result", "error"})
        if notification or response:
            return None
    problem = next((e for e in errors if e["loc"][:1] == ("JSONRPCRequest",)), first)
    where = ".".join(str(part) for part in problem["loc"][1:]) or "the message"
    request_id = _request_id(whole.get("id")) if isinstance(whole, dict) else None
    return _error_answer(request_id, types.INVALID_REQUEST, f"Invalid request: {where}: {problem['msg']}")


def _blank(exc: Exception) -> bool:
    """A blank line: not JSON, and only blanks (``"params": ""`` is a message with an empty string)."""
    first = exc.errors()[0] if isinstance(exc, ValidationError) and exc.error_count() else None
    line = None if first is None or first["type"] != "json_invalid" else first.get("input")
    return isinstance(line, str) and not line.strip()


def _request_id(value: object) -> int | str | None:
    """``value`` if it can be a JSON-RPC request's id (a string or an integer), else None."""
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    return None


def _scanned_id(line: str) -> int | str | None:
    """The ``id`` at the top level of a JSON object that does not decode, read token by token (no
    recursion: nesting of any depth is only counted)."""
    depth, previous = 0, ""
    tokens = (match.group() for match in _TOKEN.finditer(line))
    for token in tokens:
        if not previous and token != "{":
            return None  # not an object: no id
        if token in ("{", "["):
            depth += 1
        elif token in ("}", "]"):
            depth -= 1
        elif depth == 1 and token == '"id"' and previous in ("{", ",") and next(tokens, "") == ":":
            try:
                return _request_id(json.loads(next(tokens, "")))
            except ValueError:
                return None
        previous = token
    return None


def _error_answer(request_id: int | str | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))
