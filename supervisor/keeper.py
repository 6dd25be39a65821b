"""A keeper owns one worker process: spawn, watch, stop, and restart it by policy.

Above: the ``Supervisor``, which routes calls to a keeper's current worker
incarnation and asks keepers to restart or stop. Below: one worker process
(``python -m workers NAME``), whose stdin is its lifeline (a boot line, then
held open until we want it gone) and whose stderr carries its log lines and
its server's stderr into our log.

States: ``starting -> ready``; on any exit ``restarting -> starting`` after
the policy's delay, or ``failed`` when the policy gives up; ``stopped`` while
disabled in the config. An operator's restart starts it again at once from
any state, with the policy's counters reset, and is never counted as a
failure. Shutdown is cancellation: the shielded, bounded clean-up of the live
incarnation closes its lifeline and reaps the worker and its server.
"""

from __future__ import annotations

import logging
import secrets
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Final

import msgspec
import trio

from supervisor._process import kill_group
from supervisor.config import ServerSpec
from supervisor.policy import RestartPolicy, RestartTracker
from supervisor.protocol import Ready, ServerStatus, WorkerBoot, WorkerState

if TYPE_CHECKING:
    from supervisor.core import Supervisor

__all__ = ["Keeper"]

log = logging.getLogger("mcp_supervisor.keeper")
server_log = logging.getLogger("mcp_supervisor.server")

WORKER_STOP_TIMEOUT: Final = 8.0  # seconds a worker gets to close its session after its lifeline closes
KILL_REAP_TIMEOUT: Final = 2.0  # seconds for a SIGKILLed worker to be reaped
STDERR_TAIL: Final = 20  # server stderr lines kept for crash reports
CRASH_REPORT_LINES: Final = 5  # of which this many go into a WORKER_CRASHED message


class Keeper:
    """Keeps one server's worker running, one incarnation at a time."""

    def __init__(self, spec: ServerSpec, supervisor: Supervisor, policy: RestartPolicy) -> None:
        self.spec = spec
        self.name = spec.name
        self.sup = supervisor
        self.tracker = RestartTracker(policy)
        self.state: WorkerState = "stopped" if spec.disabled else "starting"
        self.identity: bytes | None = None  # routing id of the live incarnation
        self.worker_pid: int | None = None
        self.server_pid: int | None = None
        self.last_error: str | None = "disabled in config" if spec.disabled else None
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self.inflight: set[int] = set()  # supervisor call ids sent to the live incarnation
        self.restart_at: float | None = None
        self._started_at = 0.0
        self._incarnation = 0
        self._wake = trio.Event()  # an operator asked for a (re)start
        self._stop_worker: Callable[[], None] | None = None

    # ------------------------------------------------------------- operator

    def request_restart(self) -> None:
        """Restart now, forgetting past failures; coalesces with a restart already asked for."""
        self.tracker.reset()
        if self._stop_worker is not None:
            self._stop_worker()
        self._wake.set()

    def status(self) -> ServerStatus:
        return ServerStatus(
            server=self.name,
            state=self.state,
            worker_pid=self.worker_pid,
            server_pid=self.server_pid,
            restarts=self.tracker.restarts,
            tools=self.sup.registry.count(self.name),
            last_error=self.last_error,
            transport=self.spec.transport,
            next_restart_in=max(0.0, self.restart_at - trio.current_time()) if self.restart_at else None,
        )

    # ------------------------------------------------------------- life cycle

    async def run(self) -> None:
        waiting = self.spec.disabled
        while True:
            if waiting:
                await self._wake.wait()
            self._wake = trio.Event()
            try:
                operator_stop = await self._run_once()
            except Exception as exc:  # boundary: one worker's failure must not end the supervisor
                log.exception("server %r: starting or watching its worker failed", self.name)
                self.last_error = f"{type(exc).__name__}: {exc}"
                operator_stop = False
            waiting = False
            if operator_stop:
                continue
            delay = self.tracker.failed(trio.current_time())
            if delay is None:
                self.state = "failed"
                log.error(
                    "server %r failed: more than %d restarts in %g s; last error: %s "
                    "(run 'mcp-supervisor restart %s' to try again)",
                    self.name,
                    self.tracker.policy.max_restarts,
                    self.tracker.policy.window,
                    self.last_error,
                    self.name,
                )
                waiting = True
                continue
            self.state = "restarting"
            if delay > 0:
                log.warning("server %r: restarting in %.2f s", self.name, delay)
                self.restart_at = trio.current_time() + delay
                with trio.move_on_after(delay):
                    await self._wake.wait()
                self.restart_at = None

    async def _run_once(self) -> bool:
        """Run one worker incarnation to its end; True when an operator's restart ended it."""
        self._incarnation += 1
        identity = f"{self.name}/{self._incarnation}/{secrets.token_hex(4)}".encode()
        boot = WorkerBoot(
            server=self.name,
            endpoint=self.sup.worker_endpoint,
            identity=identity.decode(),
            spec=self.spec,
            log_level=logging.getLogger("mcp_supervisor").getEffectiveLevel(),
        )
        self.state = "starting"
        self._started_at = trio.current_time()
        self.stderr_tail.clear()
        self.server_pid = None
        operator_stop = False
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "workers", self.name],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.worker_pid = process.pid
        self.identity = identity
        self.sup.attach(identity, self)
        assert process.stdin is not None and process.stderr is not None
        lifeline = process.stdin

        def stop_worker() -> None:
            nonlocal operator_stop
            operator_stop = True
            self._stop_worker = None
            nursery.start_soon(lifeline.aclose)

        ended = False  # the worker exited on its own (not cancelled by shutdown, no error here)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump_stderr, process.stderr)
                self._stop_worker = stop_worker
                with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    # a worker that dies at once closes this pipe; its exit code says why
                    await lifeline.send_all(msgspec.json.encode(boot) + b"\n")
                await process.wait()
                ended = True
                nursery.cancel_scope.cancel()
        finally:
            self._stop_worker = None
            with trio.CancelScope(shield=True):
                await self._reap(process, lifeline)
            reason = self._exit_reason(process.returncode) if ended else "the supervisor is stopping"
            if ended and not operator_stop:
                self.last_error = reason
                log.error("server %r: %s", self.name, reason)
            self.sup.detach(self, f"server {self.name!r}: {reason}")
        return operator_stop

    async def _reap(self, process: trio.Process, lifeline: trio.abc.SendStream) -> None:
        """Make sure the worker and its server are gone; every wait bounded."""
        await lifeline.aclose()
        with trio.move_on_after(WORKER_STOP_TIMEOUT):
            await process.wait()
        if process.returncode is None:
            log.warning("worker of %r did not stop within %g s; killing it", self.name, WORKER_STOP_TIMEOUT)
            process.kill()
            with trio.move_on_after(KILL_REAP_TIMEOUT):
                await process.wait()
        if self.server_pid is not None:  # the worker may have died without stopping its server
            kill_group(self.server_pid, signal.SIGKILL)
        self.worker_pid = None
        self.server_pid = None

    def _exit_reason(self, code: int | None) -> str:
        if code is not None and code < 0:
            what = f"worker was killed by {signal.Signals(-code).name}"
        else:
            what = f"worker exited with code {code}"
        tail = list(self.stderr_tail)[-CRASH_REPORT_LINES:]
        return f"{what}; last stderr: {' | '.join(tail)}" if tail else what

    # ---------------------------------------------------------- from the link

    def started(self, server_pid: int) -> None:
        self.server_pid = server_pid

    def ready(self, event: Ready) -> None:
        now = trio.current_time()
        self.state = "ready"
        self.server_pid = event.server_pid
        self.tracker.ready(now)
        infos = self.sup.registry.replace(self.name, event.tools)
        log.info(
            "server %r ready: %d tools in %.2f s (%s)",
            self.name,
            len(infos),
            now - self._started_at,
            event.server_name or "unnamed server",
        )

    async def _pump_stderr(self, stream: trio.abc.ReceiveStream) -> None:
        pending = b""
        while True:
            try:
                chunk = await stream.receive_some(65536)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                chunk = b""
            if not chunk:
                return
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                self._log_line(line.decode(errors="replace"))

    def _log_line(self, line: str) -> None:
        kind, _, text = line.partition(" ")
        if kind == "S":
            self.stderr_tail.append(text)
            server_log.info("[%s] %s", self.name, text)
        elif kind.isdigit():
            level = int(kind)
            if level >= logging.ERROR:
                self.stderr_tail.append(text)
            log.log(level, "[%s] %s", self.name, text)
        elif line:
            log.info("[%s] %s", self.name, line)
