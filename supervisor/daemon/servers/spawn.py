"""Starting worker processes: forked from a zygote (milliseconds), or ``exec`` as a fallback.

``Spawner.spawn(name, mode)`` returns a ``WorkerProcess`` either way: its pid, its
stdin (the lifeline) and stderr (the log) as trio streams, ``wait()`` for its
exit status and ``kill()``.

With ``workerSpawn: "zygote"`` (the default) the first spawn starts the zygote
(``workers.zygote``, its stdin a socket to us), which imports the worker's code once; each worker is
then a fork of it, re-parented to the supervisor (a child subreaper), which
reaps it through a pidfd. There are two zygotes, each started at the first spawn that needs it
(the keeper says which: ``mode``): ``zygote`` for stdio servers, which imports only what a lean stdio
worker runs (no MCP SDK, no HTTP stack: ``workers.lean``), so each fork copies few pages; and
``zygote-remote`` for remote servers, which imports the SDK's client stack as well. A config with no
remote server never starts the second. If a zygote cannot be used (no pidfd or subreaper
on this platform, it failed to start, it died or did not answer), the worker is
started with ``exec`` instead and the reason is logged; a zygote that died is
started again at the next spawn, up to ``MAX_ZYGOTE_FAILURES`` times (each kind counts its own).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
from contextlib import suppress
from typing import Final, Literal, Protocol

import trio

from supervisor.shared.boot import worker_argv, zygote_argv

__all__ = ["ForkedWorker", "Spawner", "WorkerProcess"]

log = logging.getLogger("mcp_supervisor.spawn")

ZYGOTE_START_TIMEOUT: Final = 60.0  # seconds for the zygote's imports (a loaded machine is slow)
FORK_TIMEOUT: Final = 10.0  # seconds for the zygote to answer a spawn request
ZYGOTE_STOP_TIMEOUT: Final = 5.0  # seconds for the zygote to exit once its socket closes
MAX_ZYGOTE_FAILURES: Final = 3  # after this many, every worker is started with exec

SpawnMode = Literal["zygote", "zygote-remote", "exec"]  # which zygote forks the worker, or exec
ZygoteKind = Literal["stdio", "remote"]


class WorkerProcess(Protocol):
    """What a keeper needs of its worker's process; ``trio.Process`` is one."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def stdin(self) -> trio.abc.SendStream | None: ...
    @property
    def stderr(self) -> trio.abc.ReceiveStream | None: ...
    async def wait(self) -> int: ...
    def kill(self) -> None: ...


async def exec_worker(name: str) -> trio.Process:
    return await trio.lowlevel.open_process(
        worker_argv(name), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


class ForkedWorker:
    """A worker forked by the zygote and adopted by us: waited for through its pidfd."""

    def __init__(self, pid: int, stdin: int, stderr: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd: int | None = os.pidfd_open(pid)
        self.stdin: trio.abc.SendStream | None = trio.lowlevel.FdStream(stdin)
        self.stderr: trio.abc.ReceiveStream | None = trio.lowlevel.FdStream(stderr)
        self._lock = trio.Lock()  # one waiter on the pidfd at a time

    def _poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else: should not happen, but never wait forever
                log.error("worker %d was reaped elsewhere; its exit status is lost", self.pid)
                pid, status = self.pid, 255 << 8
            if pid == 0:
                return None
            self.returncode = os.waitstatus_to_exitcode(status)
            if self._pidfd is not None:
                trio.lowlevel.notify_closing(self._pidfd)
                os.close(self._pidfd)
                self._pidfd = None
        return self.returncode

    async def wait(self) -> int:
        async with self._lock:
            while (code := self._poll()) is None:
                assert self._pidfd is not None
                await trio.lowlevel.wait_readable(self._pidfd)
            return code

    def kill(self) -> None:
        if self.returncode is None:  # still our unreaped child: the pid cannot have been reused
            with suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


class Spawner:
    """Starts workers; owns the zygotes, if there are any."""

    def __init__(self) -> None:
        self.can_fork = hasattr(os, "pidfd_open")  # and the supervisor must be a subreaper: see adopt()
        self._zygotes: dict[ZygoteKind, Zygote] = {"stdio": Zygote("stdio"), "remote": Zygote("remote")}

    @property
    def zygote_pid(self) -> int | None:
        """The stdio zygote's pid, while it runs."""
        return self._zygotes["stdio"].pid

    @property
    def zygote_pids(self) -> set[int]:
        """Every running zygote's pid."""
        return {pid for zygote in self._zygotes.values() if (pid := zygote.pid) is not None}

    async def spawn(self, name: str, mode: SpawnMode) -> WorkerProcess:
        if mode != "exec" and self.can_fork:
            forked = await self._zygotes["remote" if mode == "zygote-remote" else "stdio"].fork(name)
            if forked is not None:
                return forked
        return await exec_worker(name)

    async def aclose(self) -> None:
        for zygote in self._zygotes.values():
            await zygote.aclose()


class Zygote:
    """One zygote process (of a kind), started when first needed, and the socket to it."""

    def __init__(self, kind: ZygoteKind) -> None:
        self.kind = kind
        self._zygote: trio.Process | None = None
        self._sock: socket.socket | None = None
        self._lock = trio.Lock()  # one request to the zygote at a time
        self._failures = 0

    @property
    def pid(self) -> int | None:
        return self._zygote.pid if self._zygote is not None and self._zygote.returncode is None else None

    async def fork(self, name: str) -> ForkedWorker | None:
        """A worker forked from this zygote, or None (then it is started with exec)."""
        if self._failures >= MAX_ZYGOTE_FAILURES:
            return None
        async with self._lock:
            return await self._fork(name)

    async def _fork(self, name: str) -> ForkedWorker | None:
        if (self._sock is None or self.pid is None) and not await self._start_zygote():
            return None
        assert self._sock is not None
        stdin_r, stdin_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        theirs, ours = (stdin_r, stderr_w), (stdin_w, stderr_r)
        try:
            socket.send_fds(self._sock, [name.encode()], list(theirs))
            with trio.fail_after(FORK_TIMEOUT):
                reply = await self._receive()
        except (OSError, trio.TooSlowError, EOFError) as exc:
            why = "did not answer in time" if isinstance(exc, trio.TooSlowError) else f"failed ({exc!r})"
            await self._zygote_failed(f"the zygote {why}")
            reply = None
        finally:
            for fd in theirs:
                os.close(fd)
        pid = int(reply) if reply is not None and reply.isdigit() else None
        if pid is None:
            for fd in ours:
                os.close(fd)
            if reply is not None:
                log.error("zygote could not fork a worker for %r: %s", name, reply.decode(errors="replace"))
            return None
        try:
            return ForkedWorker(pid, stdin_w, stderr_r)
        except OSError as exc:  # pidfd_open: the worker already exited and was reaped
            log.error("could not watch forked worker %d of %r: %s", pid, name, exc)
            for fd in ours:
                os.close(fd)
            return None

    async def _receive(self) -> bytes:
        assert self._sock is not None
        while True:
            try:
                data = self._sock.recv(4096)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self._sock)
                continue
            if not data:
                raise EOFError("the zygote closed its socket")
            return data

    async def _start_zygote(self) -> bool:
        await self._stop_zygote()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        try:
            self._zygote = await trio.lowlevel.open_process(
                zygote_argv(self.kind),
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
            )
        except OSError as exc:
            ours.close()
            await self._zygote_failed(f"the zygote could not be started ({exc})")
            return False
        finally:
            theirs.close()
        self._sock = ours
        try:
            with trio.fail_after(ZYGOTE_START_TIMEOUT):
                ready = await self._receive()
        except (OSError, EOFError, trio.TooSlowError) as exc:
            ready = repr(exc).encode()
        if ready != b"ready":
            await self._zygote_failed(f"the zygote did not start: {ready.decode(errors='replace')}")
            return False
        log.debug("%s zygote %d ready", self.kind, self._zygote.pid)
        return True

    async def _zygote_failed(self, why: str) -> None:
        self._failures += 1
        final = self._failures >= MAX_ZYGOTE_FAILURES
        log.warning("%s; starting workers with exec%s", why, " from now on" if final else " meanwhile")
        await self._stop_zygote()

    async def _stop_zygote(self) -> None:
        """Close its socket (end-of-file ends it), then make sure it is gone; bounded."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        zygote, self._zygote = self._zygote, None
        if zygote is not None:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(ZYGOTE_STOP_TIMEOUT):
                    await zygote.wait()
                if zygote.returncode is None:
                    zygote.kill()
                    await zygote.wait()

    async def aclose(self) -> None:
        async with self._lock:
            await self._stop_zygote()
