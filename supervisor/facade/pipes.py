"""The stdio facade's own stdin and stdout: non-blocking pipes under trio, no thread per line.

Above: ``supervisor.facade.run.serve_stdio``, which hands these to the SDK's ``stdio_server`` in place
of its own. Below: ``trio.lowlevel.FdStream`` on private duplicates of fds 0 and 1.

The SDK's own stdio streams read and write through a worker thread: three thread hand-offs or more
for every request and its answer, which is most of what the facade would add to a call. These
wait on the pipes in trio's own loop instead. As the SDK does, the facade then points fd 0 at
``/dev/null`` and fd 1 at stderr while it serves, so a stray ``print`` (ours, or a library's) can
never land in the middle of the protocol; both are put back when it is done.

A line longer than ``MAX_LINE`` is dropped with a warning (the host gets no answer to it; it could
never be one message the facade serves), and the reading goes on at the next line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final, Self

import trio
import trio.lowlevel

__all__ = ["MAX_LINE", "LineReader", "LineWriter", "claimed_stdio"]

log = logging.getLogger("mcp_supervisor.facade")

MAX_LINE: Final = 64 * 1024 * 1024  # bytes in one line from the host; a longer one is dropped
READ_SIZE: Final = 256 * 1024  # bytes asked of the pipe at a time


class LineReader:
    """Lines (decoded as UTF-8, bad bytes replaced) from a pipe, as ``async for line in reader``."""

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no newline
        self._dropping = False  # inside a line past MAX_LINE: skip to its end

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> str:
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                self._scanned = 0
                if self._dropping:
                    self._dropping = False
                    continue
                return line.decode("utf-8", errors="replace")
            self._scanned = len(self._buffer)
            if self._scanned > MAX_LINE:
                if not self._dropping:
                    log.warning("a line from the host is longer than %d bytes: dropped", MAX_LINE)
                self._dropping = True
                self._buffer.clear()
                self._scanned = 0
            chunk = await self._stream.receive_some(READ_SIZE)
            if not chunk:
                if self._buffer and not self._dropping:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line.decode("utf-8", errors="replace")
                raise StopAsyncIteration
            self._buffer += chunk


class LineWriter:
    """What the SDK's stdio writer needs of stdout: ``write`` (all of it, at once) and ``flush``."""

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self._stream = stream

    async def write(self, text: str) -> None:
        await self._stream.send_all(text.encode("utf-8"))

    async def flush(self) -> None:
        """Nothing is buffered here."""


@contextmanager
def claimed_stdio() -> Iterator[tuple[LineReader, LineWriter]]:
    """The protocol's stdin and stdout, on private fds; fd 0 reads ``/dev/null`` and fd 1 writes to
    stderr meanwhile."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
    finally:
        os.close(null)
    stdin, stdout = trio.lowlevel.FdStream(wire_in), trio.lowlevel.FdStream(wire_out)
    try:
        yield LineReader(stdin), LineWriter(stdout)
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        for stream in (stdin, stdout):
            stream.close()  # synchronous close of a FdStream: closes the private fd only
