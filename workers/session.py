"""The session's life: start the server and the session, serve until something ends them, say why.

Above: ``workers.worker``, which runs one ``Worker`` in ``trio.run`` and exits with its
``WorkerExit`` status. Below: one MCP session: with a stdio server, the worker's own client over the
server's pipes (``workers.lean`` over ``workers.stdio``), which loads nothing of the MCP SDK; with a
remote server, the SDK's ``mcp.Client`` (``workers.sdk`` over ``workers.remote``), imported only
then. Both offer the same attributes and methods to the rest of the worker. Beside it, the link
(``workers.uplink``), the calls it serves (``workers.calls``) and the server's tools
(``workers.tools``).

A worker starts the server (reporting ``Started`` with its pid), initializes, lists every tool and
sends ``Ready``; then it serves calls, follows the tools and pings the server every
``pingInterval``. It ends, the first reason winning (``_end``), when:

- the lifeline closes: after ``stop``, an orderly stop (the session, then the server: stdin,
  SIGTERM, SIGKILL); without it the supervisor died (even by kill -9), and the server is SIGKILLed
  at once (``LIFELINE``);
- the server exits on its own (``SERVER_DONE`` for status 0, else ``SERVER_DIED``), its
  connection closes, or it does not answer a ping (``SERVER_DIED``);
- start-up fails (``START_FAILED``), with its last word: one ``LAST_WORD`` log line with the
  cause, e.g. ``start-up failed: tools/list: ...``, the keeper's ``last_error``.

The worker is a child subreaper: a server's descendant that escapes its process group is
re-parented here and killed with the server; its zombie is reaped on SIGCHLD.
"""

from __future__ import annotations

import logging
import os
import signal
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Final

import trio

from supervisor import __version__
from supervisor.protocol import Ready, Started, ToolsChanged, WorkerTool
from supervisor.shared.boot import LAST_WORD, STOP_LINE, WorkerBoot, WorkerExit
from supervisor.shared.processes import merge_identical_pages, reap_on_sigchld
from workers.calls import Calls
from workers.catalog import Catalog
from workers.interest import Interests
from workers.lean import Event, open_client
from workers.listing import ListingFailed, Pager
from workers.logs import StderrRelay, one_line
from workers.requests import ServerRequests
from workers.sandbox import Sandbox, SandboxUnavailable
from workers.server_errors import http_error, invalid_result, rpc_error
from workers.stdio import CommandNotFound, StdioServer
from workers.tools import ToolWatch
from workers.trouble import HttpTrouble, LoginNeeded, login_hint
from workers.uplink import Link

if TYPE_CHECKING:
    import httpx2

Client = Any  # ``workers.lean.LeanClient`` on a stdio server, the SDK's ``mcp.Client`` on a remote one

__all__ = ["Worker", "first_leaf"]

log = logging.getLogger("mcp_supervisor.worker")

SANDBOX_WATCH: Final = 0.2  # seconds between looks at what a sandboxed server uses


class Worker:
    """One server's session, from start to the first reason to end it (``exit_code``)."""

    def __init__(self, boot: WorkerBoot, link: Link) -> None:
        self.boot = boot
        self.link = link
        self.exit_code = WorkerExit.LIFELINE
        self.server: StdioServer | None = None  # for stdio servers: the process
        self.http = HttpTrouble()  # for remote servers: the last HTTP error status
        self.requests = ServerRequests(boot.spec)  # what the server asks of us: roots, input, sampling
        self.tools = ToolWatch(boot.server, self._pager, boot.spec.refresh_interval)
        self.catalog = Catalog(boot.server, self._pager)  # resources and prompts
        self.interests = Interests(link.send)  # its log level and resource subscriptions
        self._scope = trio.CancelScope()

    async def run(self) -> int:
        spec = self.boot.spec
        relay = StderrRelay(self.boot.stderr_lines_per_second)
        session: AbstractAsyncContextManager[Client]
        if spec.transport == "stdio":
            assert spec.command is not None, "stdio servers have a command (checked by the config loader)"
            try:
                sandbox = None if spec.sandbox is None else Sandbox(spec.name, spec.sandbox, spec.cwd)
                self.server = StdioServer(
                    spec.command,
                    list(spec.args),
                    env=dict(spec.env),
                    cwd=spec.cwd,
                    on_stderr=relay,
                    sandbox=sandbox,
                )
            except (CommandNotFound, SandboxUnavailable) as exc:
                log.log(LAST_WORD, "start-up failed: %s", exc)
                return WorkerExit.START_FAILED
            client_info = {"name": "mcp-supervisor", "version": __version__}
            session = open_client(self.server, self.requests, client_info, self._on_event)
        else:
            from workers import sdk  # only remote workers load the SDK

            self.tools.absorb = sdk.absorb_tools
            session = sdk.open_remote(spec, self.http, self._oauth(), self.requests, self._on_event)
        async with trio.open_nursery() as nursery:
            self._scope = nursery.cancel_scope
            calls = Calls(
                self.link, nursery, self.server, self.catalog, self._connection_closed, self.interests
            )
            self.requests.ask_caller = calls.asking.ask  # a caller's own handlers answer first
            nursery.start_soon(self._watch_lifeline)
            if self.server is not None:
                nursery.start_soon(self._watch_server, self.server)
                nursery.start_soon(self._report_spawn, self.server)
                if self.server.sandbox is not None and self.server.sandbox.watched:
                    nursery.start_soon(self._watch_sandbox, self.server, self.server.sandbox)
            nursery.start_soon(self.link.serve, calls)
            nursery.start_soon(reap_on_sigchld, self._trio_children)
            nursery.start_soon(relay.report_forever)
            phase = "initialize"  # what the session is doing; "" once it serves
            try:
                async with session as client:
                    phase = "tools/list"
                    tools = await self.tools.list_all(client)
                    calls.ready(client, tools)
                    server_pid = self.server.pid if self.server is not None else None
                    capability = client.server_capabilities.tools
                    changes = capability is not None and bool(capability.list_changed)
                    self.link.send(
                        Ready(
                            tools=tools,
                            server_pid=server_pid,
                            server_name=_server_name(client),
                            tools_change=changes,
                        )
                    )
                    phase = ""
                    if (
                        self.boot.memory_merge
                    ):  # and what starting the session mapped (trio's, ZeroMQ's, the SDK's)
                        merge_identical_pages()

                    def tools_changed(listed: list[WorkerTool]) -> None:
                        calls.know(listed)
                        self.link.send(ToolsChanged(tools=listed))

                    async with trio.open_nursery() as session_tasks:
                        session_tasks.start_soon(
                            self.tools.follow, client, tools, session_tasks, tools_changed
                        )
                        session_tasks.start_soon(self.interests.follow, client)
                        await self._keep_alive(client)
            except* Exception as group:  # SDK task groups wrap them
                if not await self._session_failed(phase, first_leaf(group)):
                    raise  # a bug of ours: main() reports it
            self._end(self.exit_code)
        refused = self.link.refuse_unread()  # calls that came while it ended: the next server's
        if refused:
            log.debug("%d calls that came while the worker ended were not run", refused)
        return self.exit_code

    def _oauth(self) -> httpx2.Auth | None:
        """OAuth for a remote server that has it: the SDK's flow, unattended (``workers.oauth``)."""
        spec = self.boot.spec
        if spec.oauth is None or spec.url is None:
            return None
        from supervisor.security.tokens import TokenFile  # only OAuth servers pay for these imports
        from workers.oauth import make_auth

        return make_auth(spec, TokenFile(spec.name, spec.url), on_login_needed=self._login_needed)

    def _login_needed(self, why: str) -> None:
        """Only a person can authorize the server now: end as ``needs-login``, saying what to run."""
        self._give_up(WorkerExit.NEEDS_LOGIN, f"needs login: {why}; {login_hint(self.boot.server)}")

    async def _session_failed(self, phase: str, failure: BaseException) -> bool:
        """The session ended with ``failure`` during ``phase``: end the worker, saying why; False when
        the failure is no session's (a bug, for ``main`` to report)."""
        if self._scope.cancel_called:  # already ending, for a reason given before
            log.debug("session ended: %s: %s", type(failure).__name__, failure)
            return True
        needs_login = _login_needed_in(failure)
        if needs_login is not None:
            self._login_needed(needs_login)
            return True
        if self.server is not None and self.server.hung_up:  # it went first: its exit status says why
            await self._server_exits()
            self._server_ended(self.server.returncode)
            return True
        if phase:
            cause = (
                str(failure)
                if isinstance(failure, ListingFailed)
                else f"{phase}: {self.http.explain(failure)}"
            )
            self._give_up(WorkerExit.START_FAILED, f"start-up failed: {cause}")
            return True
        if (
            isinstance(failure, OSError)
            or rpc_error(failure)
            or http_error(failure)
            or invalid_result(failure)
        ):
            log.error("the session with the server failed: %s", self.http.explain(failure))
            self._end(WorkerExit.SERVER_DIED)
            return True
        return False

    async def _connection_closed(self, during: str) -> None:
        """A call found the session gone: end the worker (the supervisor fails the call)."""
        if not await self._server_exits():
            log.error(
                "the connection to the server closed during %s%s",
                during,
                self.http.cause(self.boot.spec.url),
            )
            self._end(WorkerExit.SERVER_DIED)

    def _pager(self, client: Client) -> Pager:
        """List requests of the worker's own: on a stdio server through the hot path (raw JSON), on a
        remote one through the session (JSON values); neither checked by the SDK's models."""
        server = self.server
        if server is None:
            from workers import sdk

            session = client.session

            async def remote(method: str, params: dict[str, Any]) -> Any:
                return await sdk.raw_request(session, method, params)

            return remote
        own = server.own

        async def request(method: str, params: dict[str, Any]) -> Any:
            return await own.request(method, params)  # raw JSON, decoded entry by entry

        return request

    def _on_event(self, event: Event, value: Any) -> None:
        """What the server says outside requests: its tools changed (handshake-era servers notify this
        way), a log message (``value``: its params), a resource update (``value``: its URI)."""
        if event == "tools":
            self.tools.changed()
        elif event == "logged":
            self.interests.logged(value)
        else:
            self.interests.updated(value)

    async def _report_spawn(self, server: StdioServer) -> None:
        await server.spawned.wait()
        assert server.pid is not None
        self.link.send(Started(server_pid=server.pid))

    def _trio_children(self) -> set[int] | None:
        """Children that trio reaps itself (the server, sampling programs), or None while one is spawned."""
        hooks = self.requests.children()
        if self.server is None or hooks is None:
            return hooks
        pid = self.server.pid
        return None if pid is None and not self.server.exited.is_set() else hooks | {pid} if pid else hooks

    async def _server_exits(self) -> bool:
        """After the session broke: does the server process exit? (Then its status says why.)"""
        return self.server is not None and await self.server.exits()

    def _end(self, exit_code: int) -> None:
        """Stop everything; the first reason to end wins."""
        if not self._scope.cancel_called:
            self.exit_code = WorkerExit(exit_code)
            self._scope.cancel()

    async def _watch_lifeline(self) -> None:
        """Our stdin: ``stop`` then end-of-file is an orderly stop; end-of-file alone, a dead supervisor."""
        orderly = False
        while True:
            await trio.lowlevel.wait_readable(0)
            data = os.read(0, 4096)
            if not data:
                break
            orderly = orderly or STOP_LINE in data
        if not orderly:
            # The supervisor died (kill -9?): nobody waits for an orderly stop, so leave no
            # server behind even for a moment.
            log.error("supervisor is gone; stopping at once")
            if self.server is not None:
                self.server.kill()
        self._end(WorkerExit.LIFELINE)

    async def _watch_server(self, server: StdioServer) -> None:
        """A server that ends on its own ends the worker; one we stopped, whoever stopped it explains."""
        await server.exited.wait()
        if server.hung_up:
            self._server_ended(server.returncode)

    async def _watch_sandbox(self, server: StdioServer, sandbox: Sandbox) -> None:
        """A server that reaches a limit of its sandbox is stopped, and its status says which (the
        kernel's counters, and what its processes hold, are looked at every ``SANDBOX_WATCH``)."""
        await server.spawned.wait()
        while True:
            why = sandbox.breach(server.pid)
            if why is not None:
                break
            await trio.sleep(SANDBOX_WATCH)
        self._give_up(WorkerExit.SERVER_DIED, f"{why}; the server was stopped")
        server.kill()

    def _server_ended(self, code: int | None) -> None:
        if self._scope.cancel_called:
            return
        if code == 0:
            log.warning("server process exited with status 0")
            self._end(WorkerExit.SERVER_DONE)
        else:
            sandbox = self.server.sandbox if self.server is not None else None
            if sandbox is not None and code is not None and code > 128:
                code = 128 - code  # bwrap passes the server's death by a signal on as 128 + its number
            if code is None:
                how = "closed its stdout"  # and had not exited when last looked at
            else:
                how = f"exited with code {code}" if code > 0 else f"was killed by {_signal_name(-code)}"
            limit = sandbox.ended(code) if sandbox is not None else None
            said = f"{limit}: server process {how}" if limit else f"server process {how}"
            log.log(LAST_WORD, "%s", said)  # the calls it had fail naming this first
            self._end(WorkerExit.SERVER_DIED)

    def _give_up(self, code: WorkerExit, reason: str) -> None:
        """End the worker for ``reason``, its last word (a ``LAST_WORD`` line: ``last_error``)."""
        if not self._scope.cancel_called:
            log.log(LAST_WORD, "%s", one_line(reason))
            self._end(code)

    async def _keep_alive(self, client: Client) -> None:
        """Ping the server every ``pingInterval`` (if set); one that does not answer ends the worker."""
        interval = self.boot.spec.policy.ping_interval
        if interval is None:
            await trio.sleep_forever()
            return
        while True:
            await trio.sleep(interval)
            try:
                with trio.fail_after(interval):
                    await client.send_ping()
            except Exception as exc:
                if not (isinstance(exc, trio.TooSlowError) or rpc_error(exc) or invalid_result(exc)):
                    raise
                log.error("server did not answer a ping within %g s: %s", interval, exc or "timed out")
                if self.server is not None:
                    self.server.kill()  # it is unresponsive: no orderly stop to wait for
                self._end(WorkerExit.SERVER_DIED)
                return


def first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception that is not itself a group."""
    first = group.exceptions[0]
    return first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


def _login_needed_in(failure: BaseException) -> str | None:
    """Why, when ``failure`` is (or was caused by) ``LoginNeeded``."""
    seen: BaseException | None = failure
    for _ in range(10):  # a bounded walk of the cause chain
        if seen is None:
            return None
        if isinstance(seen, LoginNeeded):
            return seen.why
        seen = seen.__cause__ or seen.__context__
    return None


def _server_name(client: Client) -> str:
    info = client.server_info
    return f"{info.name} {info.version}" if info is not None else ""


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} (signal {number})"
    except ValueError:
        return f"signal {number}"
