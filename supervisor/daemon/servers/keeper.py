"""A keeper owns one worker process: spawn, watch, stop, and restart it by policy.

Above: its server (``supervisor.daemon.servers.pool``), which relays operator commands and hears of
the keeper's state, tools and worker's end (``KeeperServer``); the router, which sends calls to the
live worker incarnation; and the ``Supervisor``, which the keeper asks directly for what only it has
(``ServerOwner``: a worker process, the link, the registry's count; both protocols are in
``supervisor.daemon.servers.owner``). Below: one worker process (``python -m workers NAME``), whose
stdin is its lifeline (a boot line, then held open until we want it gone) and whose stderr carries
its log lines and its server's stderr into our log and the server's ring buffer (``WorkerLog``).

States: ``starting -> ready``; when the worker ends, ``restarting -> starting`` after the policy's
delay, or ``failed`` when the policy gives up (or the restart type is ``temporary``), or ``stopped``
(an operator's stop, ``disabled`` in the config, or a ``transient`` server that exited normally), or
``needs-login`` (an OAuth server whose authorization only a person can give: no restarts until
``start``, which ``mcp-supervisor login`` sends).

A live worker is watched two ways: it must be ready within ``startTimeout``, and once it has spoken
it must answer heartbeats; either failure kills it (SIGKILL, which also ends a SIGSTOPped one) and
counts as a failure.

Operator commands never count as failures and are never undone by the policy: ``stop`` holds the
server stopped; ``start`` and ``restart`` reset the counters; concurrent restarts coalesce into one
until the new worker is ready. A config reload hands a keeper its new spec (``reconfigure``): a
restart with it, or a stop if it is now disabled; a stopped server stays stopped. A keeper is one
worker of its server: the only one, a replica, or a client's session, which runs ``once`` (it is
not restarted: the client's next request starts another). Shutdown is cancellation: the shielded,
bounded clean-up of the live incarnation closes its lifeline and reaps the worker and its server.
"""

from __future__ import annotations

import logging
import secrets
from contextlib import suppress
from functools import partial
from typing import Final

import msgspec
import trio

from supervisor.config.load import ServerSpec, SupervisorSettings
from supervisor.daemon.servers.endings import ending_of
from supervisor.daemon.servers.heartbeats import Heartbeats
from supervisor.daemon.servers.owner import KeeperServer
from supervisor.daemon.servers.reaping import close_lifeline, reap
from supervisor.daemon.servers.restarts import RestartTracker
from supervisor.daemon.servers.rows import server_row
from supervisor.daemon.servers.spawn import SpawnMode, WorkerProcess
from supervisor.daemon.servers.worker_log import WorkerLog
from supervisor.protocol import Ready, ServerStatus, ToolsChanged, WorkerState
from supervisor.shared import tracing
from supervisor.shared.boot import Ended, Outcome, WorkerBoot
from supervisor.shared.processes import run_state
from supervisor.shared.terminal import printable

__all__ = ["Keeper"]

log = logging.getLogger("mcp_supervisor.keeper")

LOG_DRAIN_TIMEOUT: Final = 1.0  # seconds to read an exited worker's last log lines (its last word)


class Keeper:
    """Keeps one server's worker running, one incarnation at a time."""

    def __init__(
        self,
        spec: ServerSpec,
        server: KeeperServer,
        settings: SupervisorSettings,
        *,
        label: str | None = None,
        once: bool = False,
    ) -> None:
        """``label``: how logs, the worker's process title and its calls' errors name this worker (a
        replica ``files#2``, a session ``files@agent-7``; the server's name by default). ``once``: run
        one incarnation and return (a per-client session), instead of restarting by policy."""
        self.spec = spec
        self.name = spec.name
        self.label = label or spec.name
        self.once = once
        self.outcome: Outcome | None = None  # how the last incarnation ended
        self.policy = spec.policy
        self.settings = settings
        self.server = server
        self.owner = server.owner
        self.tracker = RestartTracker(spec.policy)
        self._state: WorkerState = "stopped" if spec.disabled else "starting"
        self.identity: bytes | None = None  # routing id of the live incarnation (set before it starts)
        self._incarnation = 0
        self.upcoming = self._new_identity()  # the next incarnation's routing id
        self.worker_pid: int | None = None
        self.server_pid: int | None = None
        self.last_error: str | None = "disabled in config" if spec.disabled else None
        self.restart_at: float | None = None
        self.last_heard: float | None = None  # when the live worker last said anything
        self._heartbeats: Heartbeats | None = None  # the live incarnation's
        self.spawning = False  # a worker process is being forked (its pid is not known yet)
        self.worker_log = WorkerLog(self.label, self.owner.log_ring(spec.name))
        self._want_running = not spec.disabled  # False after an operator's stop
        self._restarting = False  # an operator's restart is under way: more of them coalesce
        self._why = "stopped by an operator"  # what the calls of an incarnation we end are told
        self._wake = trio.Event()  # an operator asked for something
        self._ready = trio.Event()  # the live incarnation said Ready
        self._process: WorkerProcess | None = None
        self._ending: Outcome | None = None  # why we are ending the live worker, if we are
        self._kill_reason: str | None = None
        self._started_at = 0.0
        self._exited = False  # the live incarnation's process has exited (it is not reaped yet)
        self.draining = False  # no new calls for the live incarnation: it is about to be restarted

    @property
    def state(self) -> WorkerState:
        return self._state

    @state.setter
    def state(self, state: WorkerState) -> None:
        """Every state change goes through here, and is published."""
        previous, self._state = self._state, state
        if state != previous:
            self.server.state_changed(self, previous)

    @property
    def ending(self) -> bool:
        """The live worker has exited, or is being stopped or killed."""
        return self._exited or self._ending is not None or self._kill_reason is not None

    @property
    def serving(self) -> bool:
        """Ready, not ending and not draining: calls may be sent to ``identity``."""
        return self._state == "ready" and not self.ending and not self.draining

    @property
    def target(self) -> bytes:
        """Where a call for this worker goes: the live incarnation, or the one about to start."""
        return self.identity if self.identity is not None else self.upcoming

    def _new_identity(self) -> bytes:
        self._incarnation += 1
        return f"{self.label}/{self._incarnation}/{secrets.token_hex(4)}".encode()

    # ------------------------------------------------------------- operator

    def request_restart(self, why: str = "restarted by an operator") -> bool:
        """Restart now with the counters reset; False when a restart is already under way."""
        if self._restarting:
            return False
        self._why = why
        self._restarting = True
        self._want_running = True
        self.tracker.reset()
        self._end_worker()
        self.state = "restarting" if self._process is not None else "starting"
        self._wake.set()
        return True

    def request_stop(self, why: str = "stopped by an operator") -> None:
        """Stop the worker and keep the server stopped until ``start`` or ``restart``."""
        self._why = why
        self._want_running = False
        self._restarting = False
        self._end_worker()
        self.state = "stopped"
        self._wake.set()

    def request_start(self) -> bool:
        """Start a stopped or failed server; False when it is already running or starting."""
        if self._want_running and self.state not in ("failed", "stopped", "needs-login"):
            return False
        self._want_running = True
        self.tracker.reset()
        self.state = "starting"
        self._wake.set()
        return True

    def reconfigure(self, spec: ServerSpec) -> None:
        """Take a reloaded spec: restart with it, or stop if it is now disabled. A server that is
        stopped (an operator's stop, a finished transient one) stays stopped and starts with it later;
        one that was disabled starts."""
        was_disabled = self.spec.disabled
        self.adopt(spec)
        if spec.disabled:
            self.request_stop("disabled in the config (reload)")
            self.last_error = "disabled in config"
        elif self._want_running or was_disabled:
            self._restarting = False  # a restart under way may already run the old spec
            self.request_restart("restarted with its new config (reload)")
            if was_disabled:
                self.last_error = None

    def status(self) -> ServerStatus:
        """The server's row, when this is its only worker."""
        return server_row(self, self.owner.tool_count(self.name))

    def adopt(self, spec: ServerSpec) -> None:
        """Take a reloaded spec without restarting (its server restarts its workers one by one)."""
        self.spec, self.policy, self.tracker.policy = spec, spec.policy, spec.policy

    def _end_worker(self) -> None:
        """Close the live worker's lifeline (an orderly stop), if there is one."""
        process = self._process
        if process is not None and self._ending is None:
            self._ending = "operator"
            assert process.stdin is not None
            trio.lowlevel.spawn_system_task(close_lifeline, process.stdin)

    def _kill(self, reason: str) -> None:
        """Kill the live worker now (it hangs or is stopped); counted as a failure."""
        if self._process is not None and self._kill_reason is None:
            self._kill_reason = reason
            log.error("server %r: %s; killing its worker", self.label, reason)
            self._process.kill()

    # ------------------------------------------------------------- life cycle

    async def run(self) -> None:
        while True:
            if not self._want_running:
                if self.once:
                    self.state = "stopped"
                    return
                await self._park("stopped")
                continue
            self._wake = trio.Event()
            try:
                outcome = await self._run_once()
            except Exception as exc:  # boundary: one worker's failure must not end the supervisor
                log.exception("server %r: starting or watching its worker failed", self.label)
                self.last_error = f"{type(exc).__name__}: {exc}"
                outcome = "abnormal"
            self.outcome = outcome
            if self.once:
                self.state = "failed" if outcome == "abnormal" else "stopped"
                return
            if outcome == "operator":
                continue
            self._restarting = False
            if outcome == "needs-login":  # restarting cannot help; login starts it again
                await self._park("needs-login")
                continue
            restart = self.policy.restart
            if restart == "temporary" or (restart == "transient" and outcome == "normal"):
                self._want_running = outcome != "normal"  # a failed temporary server waits for start
                await self._park("failed" if outcome == "abnormal" else "stopped")
                continue
            delay = self.tracker.failed(trio.current_time())
            if delay is None:
                log.error(
                    "server %r failed: more than %d restarts in %g s; last error: %s "
                    "(run 'mcp-supervisor restart %s' to try again)",
                    *(self.label, self.policy.max_restarts, self.policy.window, self.last_error, self.name),
                )
                await self._park("failed")
                continue
            self.state = "restarting"
            if delay > 0:
                log.warning("server %r: restarting in %.2f s", self.label, delay)
                self.restart_at = trio.current_time() + delay
                with trio.move_on_after(delay):
                    await self._wake.wait()
                self.restart_at = None

    async def _park(self, state: WorkerState) -> None:
        """Stay in ``state`` until an operator asks for something."""
        self.state = state
        self._wake = trio.Event()
        await self._wake.wait()

    async def _run_once(self) -> Outcome:
        """Run one worker incarnation to its end and say how it ended."""
        identity, self.upcoming = self.upcoming, self._new_identity()
        boot = WorkerBoot(
            server=self.name,
            endpoint=self.owner.worker_endpoint,
            identity=identity.decode(),
            spec=self.spec,
            log_level=logging.getLogger("mcp_supervisor").getEffectiveLevel(),
            tracing=tracing.on,
            memory_merge=self.settings.memory_merge,
        )
        self.state = "starting"
        self._started_at = trio.current_time()
        self._ready = trio.Event()
        self._ending = self._kill_reason = None
        self._exited = self.draining = False
        self.last_heard = None
        self._heartbeats = Heartbeats(identity, self.owner.send_to_worker)
        self.worker_log.reset()
        self.server_pid = None
        self.identity = identity  # calls held for it (a session starting) fail with it if it fails
        self.spawning = True
        try:
            mode: SpawnMode = self.settings.worker_spawn
            if mode == "zygote" and self.spec.transport != "stdio":
                mode = "zygote-remote"  # the zygote that has the SDK's client stack (``spawn``)
            process = await self.owner.spawn(self.label, mode)
        except BaseException:
            self.server.detach(self, f"server {self.label!r}: its worker could not be started", "UNAVAILABLE")
            self.identity = None
            raise
        finally:
            self.spawning = False
        self._process = process
        self.worker_pid = process.pid
        self.owner.attach(identity, self)
        if not self._want_running:  # an operator's stop arrived while we were spawning
            self._end_worker()
        assert process.stdin is not None and process.stderr is not None
        try:
            async with trio.open_nursery() as nursery:
                log_read = trio.Event()
                nursery.start_soon(self._read_log, process.stderr, log_read)
                with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    # a worker that dies at once closes this pipe; its exit code says why
                    await process.stdin.send_all(msgspec.json.encode(boot) + b"\n")
                heartbeats, ready, kill = self._heartbeats, self._ready, self._kill
                start_timeout = self.policy.start_timeout
                nursery.start_soon(heartbeats.watch_start, ready, start_timeout, self.settings, kill)
                watch = partial(heartbeats.watch, ready, lambda: self.last_heard, lambda: self.settings)
                nursery.start_soon(watch, self.owner.caught_up, kill, partial(run_state, process.pid))
                await process.wait()
                self._exited = True  # no call goes to it from now on, while its last words are read
                with trio.move_on_after(LOG_DRAIN_TIMEOUT):  # its last lines say why it ended
                    await log_read.wait()
                    await self.owner.caught_up()  # and its last messages are heard before its calls fail
                nursery.cancel_scope.cancel()
        finally:
            ended_on_its_own = process.returncode is not None and self._ending is None
            self._ending = self._ending or "shutdown"
            self._exited = True
            with trio.CancelScope(shield=True):
                await self._reap(process)
            remote = self.spec.transport != "stdio"
            ended = Ended(process.returncode, self._kill_reason, self.worker_log.last_word, remote)
            end = ending_of(ended, ended_on_its_own, self._ending, self.worker_log.report(), self._why)
            if end.own:
                self.last_error = end.reason
                (log.error if end.outcome == "abnormal" else log.warning)(
                    "server %r: %s", self.label, printable(end.reason)
                )
            self.server.detach(self, f"server {self.label!r}: {end.reason}", end.code)
            self.identity = None
        return end.outcome

    async def _read_log(self, stream: trio.abc.ReceiveStream, done: trio.Event) -> None:
        await self.worker_log.pump(stream)
        done.set()

    def heartbeat_answered(self) -> None:
        if self._heartbeats is not None:
            self._heartbeats.answered()

    async def _reap(self, process: WorkerProcess) -> None:
        """Make sure the worker and its server are gone (bounded), and forget them."""
        await reap(process, self.label, self.server_pid, self.owner.own_children)
        self._process = None
        self.worker_pid = None
        self.server_pid = None
        self.last_heard = None

    # ---------------------------------------------------------- from the link

    def heard(self, now: float) -> None:
        """The live worker said something (any message counts as a sign of life)."""
        self.last_heard = now

    def use_settings(self, settings: SupervisorSettings) -> None:
        """Reloaded settings: heartbeats follow them at once; nothing restarts for them."""
        self.settings = settings

    def started(self, server_pid: int) -> None:
        self.server_pid = server_pid

    def ready(self, event: Ready) -> None:
        if self._kill_reason is not None or self._ending is not None:
            log.debug("server %r: Ready from a worker that is being stopped; ignored", self.label)
            return  # its tools would only be routed to a worker about to exit
        now = trio.current_time()
        self.server_pid = event.server_pid
        self.tracker.ready(now)
        self._restarting = False
        self._ready.set()
        count = self.server.tools_changed(self, event.tools)  # tools first: "ready" means they are there
        self.state = "ready"
        log.info(
            "server %r ready: %d tools in %.2f s (%s)",
            *(self.label, count, now - self._started_at, event.server_name or "unnamed server"),
        )

    def tools_changed(self, event: ToolsChanged) -> None:
        if self.state == "ready":
            count = self.server.tools_changed(self, event.tools)
            log.info("server %r tools changed: %d tools", self.label, count)
