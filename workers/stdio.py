"""The stdio transport: one MCP server child process, and the lines it reads and writes.

Below: the server process, in its own session and process group, speaking
newline-delimited JSON-RPC on stdin/stdout. Above: the worker's JSON-RPC client
(``workers.lean``), which hands ``connect`` the callback that takes each line the
server writes (``receive``), and sends its requests through ``own``
(``workers.own_requests``).

It does what the SDK's ``stdio_client`` does, plus what a supervisor needs:
the server's pid, each stderr line handed to a callback (for the log and for
crash reports), an event set when the process exits, and bounded line sizes
so a server printing garbage cannot grow the worker's memory without bound.
The server gets the environment the SDK gives one (``DEFAULT_INHERITED_ENV_VARS``)
plus its config's ``env``.

Each line the server writes on stdout is offered to the worker's own requests
first: their answers and progress are recognised by id before anything parses them
(the hot path of a tool call). Everything else goes to ``receive``, which says
whether the line was JSON-RPC. A line that is not (not JSON, invalid UTF-8, nesting
deeper than a decoder recurses, no JSON-RPC message) is dropped with a rate-limited
warning: nothing on stdout can end the worker. Outgoing lines share one writer task,
which writes whatever has queued up in one go (one system call for a batch of calls
under load), except that a request sent while no other is waiting goes straight to
the pipe (a lone call's latency).

Shutdown follows the MCP spec and the SDK: close stdin, wait, SIGTERM the
process group, wait, SIGKILL; shielded and every wait bounded.
"""

from __future__ import annotations

import array
import fcntl
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import termios
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, Final

import trio

from supervisor.shared.processes import kill_adopted, kill_group
from workers.own_requests import OwnRequests
from workers.ratelimit import RateLimit

if TYPE_CHECKING:
    from workers.sandbox import Sandbox

__all__ = ["CommandNotFound", "StdioServer"]

log = logging.getLogger("mcp_supervisor.worker.stdio")

STDIN_CLOSE_GRACE: Final = 2.0  # seconds for the server to exit on its own after stdin closes
TERM_GRACE: Final = 2.0  # seconds after SIGTERM to the process group before SIGKILL
KILL_REAP: Final = 2.0  # seconds for the kernel to report a SIGKILLed process gone
EXIT_NOTICE: Final = 1.0  # seconds between a broken connection and the server's exit being noticed
MAX_LINE: Final = 16 * 1024 * 1024  # bytes; a longer stdout line is dropped, not buffered forever
MAX_STDERR_LINE: Final = 4096  # characters kept of one stderr line
READ_CHUNK: Final = 256 * 1024
# What a server inherits of the worker's environment (the SDK's ``stdio_client`` passes the same).
DEFAULT_INHERITED_ENV_VARS: Final = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")

Receive = Callable[[bytes], bool]  # a line from the server's stdout; False when it is not JSON-RPC


def get_default_environment() -> dict[str, str]:
    """The variables of ``DEFAULT_INHERITED_ENV_VARS`` this process has (shell functions left out)."""
    return {
        key: value
        for key in DEFAULT_INHERITED_ENV_VARS
        if (value := os.environ.get(key)) is not None and not value.startswith("()")
    }


class CommandNotFound(Exception):
    """The server's command is not on PATH (nor beside the running interpreter)."""


def resolve_command(command: str) -> str:
    """Find ``command`` on PATH, then beside ``sys.executable`` (an unactivated venv's bin)."""
    if os.sep in command:
        if os.access(command, os.X_OK) and not os.path.isdir(command):
            return command
        raise CommandNotFound(f"command {command!r} does not exist or is not executable")
    search = os.pathsep.join(filter(None, [os.environ.get("PATH", ""), os.path.dirname(sys.executable)]))
    found = shutil.which(command, path=search)
    if found is None:
        raise CommandNotFound(f"command {command!r} not found on PATH")
    return found


class StdioServer:
    """One MCP server child process; ``connect(receive)`` runs it and its pipes."""

    def __init__(
        self,
        command: str,
        args: list[str],
        *,
        env: dict[str, str],
        cwd: str | None,
        on_stderr: Callable[[str], None],
        sandbox: Sandbox | None = None,
    ) -> None:
        """``sandbox``: confine the server so (``workers.sandbox``)."""
        self._argv = [resolve_command(command), *args]
        self.sandbox = sandbox
        self._env = get_default_environment() | env
        self._cwd = cwd
        self._on_stderr = on_stderr
        self.process: trio.Process | None = None
        self.spawned = trio.Event()
        self._garbage = RateLimit(rate=1, burst=10)  # warnings about non-JSON-RPC lines on stdout
        self.exited = trio.Event()
        self._outbox: list[bytes] = []  # lines for the server's stdin, written by one task
        self._outbox_filled = trio.Event()
        self._stdin: int | None = None  # the pipe's fd while it is open and no write is under way
        self._queued = 0  # bytes queued for stdin so far: where the next line begins
        self._written = 0  # bytes the pipe took so far
        self.read_upto: int | None = None  # once the server exited: the bytes it can have read
        self.own = OwnRequests(self._write)  # the worker's own requests: the hot path
        self._stopping = False  # we are ending the server (stop or kill)
        self.hung_up = False  # the server closed its stdout or exited before we began to end it

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def returncode(self) -> int | None:
        return self.process.returncode if self.process is not None else None

    def _write(self, line: bytes, *, at_once: bool = False) -> int:
        """Queue ``line`` for the server's stdin; ``at_once``: write it now if the pipe is idle, has room.
        Returns where the line begins in the bytes queued so far."""
        begins = self._queued
        self._queued += len(line) + 1
        if at_once and self._stdin is not None and not self._outbox:
            data = line + b"\n"
            try:
                sent = os.write(self._stdin, data)
            except OSError:  # full (the writer waits), or broken (the writer meets that too)
                sent = 0
            self._written += sent
            if sent < len(data):
                self._outbox.append(data[sent:])
                self._outbox_filled.set()
            return begins
        self._outbox += (line, b"\n")
        self._outbox_filled.set()
        return begins

    async def exits(self) -> bool:
        """After the connection broke: does the process exit (within ``EXIT_NOTICE``)? No checkpoint
        when it has: a worker that is ending still hears the answer."""
        if not self.exited.is_set():
            with trio.move_on_after(EXIT_NOTICE):
                await self.exited.wait()
        return self.exited.is_set()

    def never_read(self, sent_at: int | None) -> bool:
        """Whether the line queued at ``sent_at`` (None: never queued) cannot have been read by the
        server, now that it has exited: nothing of it was written, or all of it is still in the pipe."""
        return sent_at is None or (self.read_upto is not None and sent_at >= self.read_upto)

    def _unread_end(self, process: trio.Process) -> int | None:
        """Once the server has exited: the bytes it can have read of its stdin; None while a process
        (one it left behind) still holds the pipe's other end, or when we closed ours."""
        fd = process.stdin.fileno() if isinstance(process.stdin, trio.lowlevel.FdStream) else -1
        if fd < 0:  # closed by us (``_stop``)
            return None
        try:
            poller = select.poll()
            poller.register(fd, select.POLLOUT)
            if not any(events & select.POLLERR for _, events in poller.poll(0)):
                return None  # a reader is left: it may read on
            unread = array.array("i", [0])
            fcntl.ioctl(fd, termios.FIONREAD, unread)
        except OSError:
            return None
        return self._written - unread[0]

    def kill(self) -> None:
        """SIGKILL the server's process group now (the orderly stop still runs afterwards)."""
        if self.process is not None:
            self._stopping = True
            kill_group(self.process.pid, signal.SIGKILL)

    @asynccontextmanager
    async def connect(self, receive: Receive) -> AsyncIterator[None]:
        argv, cwd, options = self._argv, self._cwd, dict[str, Any]()
        if self.sandbox is not None:  # bwrap runs the server, in the cwd it is given
            argv, cwd = self.sandbox.argv(self._argv, self._env, self._cwd), None
            options["preexec_fn"] = self.sandbox.preexec()
        process = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self._env,
            cwd=cwd,
            start_new_session=True,
            **options,
        )
        self.process = process
        self.spawned.set()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_exit, process)
            nursery.start_soon(self._pump_stdout, process, receive)
            nursery.start_soon(self._pump_stdin, process)
            nursery.start_soon(self._pump_stderr, process)
            try:
                yield
            finally:
                with trio.CancelScope(shield=True):
                    await self._stop(process)
                nursery.cancel_scope.cancel()

    def send(self, line: bytes) -> None:
        """Queue one line (a message of the worker's JSON-RPC client) for the server's stdin."""
        self._write(line)

    async def _watch_exit(self, process: trio.Process) -> None:
        await process.wait()
        self.read_upto = self._unread_end(process)
        self.hung_up = self.hung_up or not self._stopping
        self.exited.set()

    async def _pump_stdout(self, process: trio.Process, receive: Receive) -> None:
        assert process.stdout is not None
        buffer = bytearray()
        dropping = False
        try:
            while chunk := await _receive(process.stdout):
                start = 0
                while (end := chunk.find(b"\n", start)) != -1:
                    if dropping:
                        dropping = False
                    else:
                        buffer += chunk[start:end]
                        self._deliver(bytes(buffer), receive)
                    buffer.clear()
                    start = end + 1
                if not dropping:
                    buffer += chunk[start:]
                    if len(buffer) > MAX_LINE:
                        log.warning("server wrote a stdout line over %d bytes; dropping it", MAX_LINE)
                        buffer.clear()
                        dropping = True
        finally:
            self.hung_up = self.hung_up or not self._stopping
            self.own.close()

    def _deliver(self, line: bytes, receive: Receive) -> None:
        if not line.strip() or self.own.take(line) or receive(line):
            return
        if self._garbage.allow():
            more = self._garbage.take_dropped()
            also = f" (and {more} more such lines)" if more else ""
            log.warning("server wrote a line that is not JSON-RPC on stdout%s: %.200r", also, line)

    async def _pump_stdin(self, process: trio.Process) -> None:
        """Write what has queued up for the server's stdin, all of it at once, counting each byte the
        pipe takes (a write the server's death breaks counts only what went in)."""
        stdin = process.stdin
        assert isinstance(stdin, trio.lowlevel.FdStream)  # on Unix; its fd is non-blocking
        self._stdin = stdin.fileno()
        with suppress(trio.ClosedResourceError, OSError):  # closed by us, or no reader is left
            while True:
                await self._outbox_filled.wait()
                self._outbox_filled = trio.Event()
                data = memoryview(b"".join(self._outbox))
                self._outbox.clear()
                self._stdin = None  # lines queue behind this write
                while data:
                    if (fd := stdin.fileno()) < 0:  # closed by us (``_stop``) while we waited
                        return
                    try:
                        sent = os.write(fd, data)
                    except BlockingIOError:
                        await trio.lowlevel.wait_writable(fd)
                        continue
                    self._written += sent
                    data = data[sent:]
                self._stdin = stdin.fileno() if stdin.fileno() >= 0 else None
        self._stdin = None

    async def _pump_stderr(self, process: trio.Process) -> None:
        assert process.stderr is not None
        pending = b""
        while chunk := await _receive(process.stderr):
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()[-MAX_STDERR_LINE:]
            for line in lines:
                self._on_stderr(line[:MAX_STDERR_LINE].decode(errors="replace").rstrip("\r"))
        if pending:
            self._on_stderr(pending.decode(errors="replace"))

    async def _stop(self, process: trio.Process) -> None:
        """Close stdin, then SIGTERM and SIGKILL the process group; every wait bounded."""
        self._stopping = True
        self._stdin = None  # its fd number may be reused once closed
        if process.stdin is not None:
            with suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await process.stdin.aclose()
        with trio.move_on_after(STDIN_CLOSE_GRACE):
            await process.wait()
        kill_group(process.pid, signal.SIGTERM)
        if process.returncode is None:
            with trio.move_on_after(TERM_GRACE):
                await process.wait()
        kill_group(process.pid, signal.SIGKILL)
        if process.returncode is None:
            with trio.move_on_after(KILL_REAP):
                await process.wait()
            if process.returncode is None:
                log.error("server process %d survived SIGKILL; abandoning it", process.pid)
        # Whatever escaped the group (a double-forked daemon) was re-parented to us: end it too.
        # Its zombie is reaped on SIGCHLD, or by the supervisor once we have exited.
        kill_adopted(keep=lambda pid, _cmdline: False, group=process.pid)
        if self.sandbox is not None:  # its cgroup goes once its last process has (the kernel is quick)
            with trio.move_on_after(KILL_REAP):
                while not self.sandbox.empty():  # noqa: ASYNC110 - a v1 cgroup gives no notice
                    await trio.sleep(0.01)
            self.sandbox.close()


async def _receive(stream: trio.abc.ReceiveStream) -> bytes:
    """The next chunk, or b"" at end of stream or when the pipe was closed under us."""
    try:
        return bytes(await stream.receive_some(READ_CHUNK))
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        return b""
