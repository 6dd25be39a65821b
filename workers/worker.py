"""One worker process: owns exactly one MCP session and serves the supervisor's calls.

Above: the supervisor, reached through a DEALER on the worker link
(``supervisor.protocol`` ``WorkerCommand`` in, ``WorkerEvent`` out). Below: one
``mcp.Client`` session over the server's transport.

Life of a worker:

1. read one JSON ``WorkerBoot`` line from stdin; stdin then stays open as the
   *lifeline*: ``stop`` then end-of-file is an orderly stop (close the
   session, then the server: stdin, SIGTERM, SIGKILL); end-of-file alone
   means the supervisor died (even by kill -9), and the server is SIGKILLed
   at once;
2. start the server (reporting ``Started`` with its pid), initialize, list
   every tool (following ``nextCursor``; read entry by entry, so one bad tool
   costs only itself: see ``workers.listing``), send ``Ready``; heartbeats are
   answered from the start;
3. serve ``Invoke`` commands concurrently, each under its own budget: on
   expiry the caller gets ``TIMEOUT`` and the server is sent
   ``notifications/cancelled``; a call that asks for progress gets the
   server's notifications as ``InvokeProgress`` (``workers.progress``
   coalesces them) before its answer; serve ``Fetch`` (resources and prompts,
   see ``workers.catalog``) the same way; probe the server every ``pingInterval``.
   On a stdio server every call takes the hot path: the worker writes the
   ``tools/call`` itself (``StdioServer.request``, which also hands it the
   call's progress) and turns the server's JSON result into the wire's
   ``ToolResult`` without the SDK's models; the session still does the
   handshake, the server's own requests and a result that asks for input.
   Listings are the worker's own requests on every transport
   (``workers.listing``), and results are checked against the tool's
   ``outputSchema`` by the worker on every transport;
4. exit with a ``WorkerExit`` status: the server exited on its own
   (``SERVER_DONE`` for status 0, else ``SERVER_DIED``), start-up failed, the
   lifeline closed, or the worker failed (an exception nothing else caught,
   ``CRASHED``). Where the status alone does not say why (start-up failed,
   the worker failed), the last word is one CRITICAL log line with the cause,
   e.g. ``start-up failed: tools/list: ...``: the keeper's ``last_error``.

The worker is a child subreaper: a server's descendant that escapes its
process group is re-parented here and killed with the server.

Log records and the server's stderr go to this process's stderr, one line
each, as ``<levelno> <text>`` or ``S <server stderr line>``; the supervisor's
keeper reads them into its own log (``supervisor.worker_log``).

Nothing the supervisor relays ends the worker: a call's arguments are decoded
totally (``workers.values``), and each call is answered on its own.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Final

import httpx2
import jsonschema.exceptions
import jsonschema.protocols
import msgspec
import referencing.exceptions
import trio
import zmq
from mcp import Client
from mcp.client._transport import TransportStreams
from mcp.client.session import ClientRequestContext
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    INVALID_PARAMS,
    CallToolResult,
    ErrorData,
    Implementation,
    InputRequiredResult,
    InputResponses,
    ToolListChangedNotification,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from supervisor import __version__
from supervisor._process import become_subreaper, reap_on_sigchld
from supervisor._zmq import MAX_MESSAGE_SIZE, TrioSocket
from supervisor.boot import (
    LAST_WORD,
    STOP_LINE,
    WorkerBoot,
    WorkerExit,
    decode_worker_boot,
    log_lines,
    server_line,
)
from supervisor.protocol import (
    HEARTBEAT,
    ErrorCode,
    Fetch,
    Heartbeat,
    Invoke,
    InvokeFailed,
    InvokeProgress,
    InvokeResult,
    ProgressCallback,
    Ready,
    Started,
    ToolResult,
    ToolsChanged,
    WorkerTool,
    decode_worker_command,
    encode,
    salvage_call,
)
from supervisor.schemas import validator
from workers import sdk
from workers.catalog import Catalog, CatalogError
from workers.listing import ListingFailed, Pager, Warnings, list_tools
from workers.progress import ProgressRelay
from workers.ratelimit import RateLimit
from workers.remote import HttpTrouble, connect_remote
from workers.requests import ServerRequests
from workers.results import InvalidResult, decode_tool_result, to_tool_result
from workers.stdio import CommandNotFound, StdioServer
from workers.values import InvalidArguments, decode_arguments

__all__ = ["main"]

log = logging.getLogger("mcp_supervisor.worker")

RELIST_TIMEOUT: Final = 30.0  # seconds for listing the tools again after a change
LISTEN_RETRY_INITIAL: Final = 1.0  # seconds before listening again for tool changes, doubling...
LISTEN_RETRY_MAX: Final = 30.0  # ...up to this
EXIT_NOTICE: Final = 1.0  # seconds between a broken session and the server's exit being noticed
STATE_ONLY_RETRY: Final = 0.05  # seconds before retrying a call the server answered with state only


class _LineHandler(logging.Handler):
    """Writes each record as ``<levelno> <line>`` lines the keeper can parse.

    A record with an exception (the SDK logs transport failures that way) is one line at its
    level, ending in ``Type: message``; the traceback follows as debug lines, when debug is on.
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text, trace = record.getMessage(), ""
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                text = f"{text}: {type(exc).__name__}: {exc}"
                if logging.getLogger().isEnabledFor(logging.DEBUG):
                    trace = logging.Formatter().formatException(record.exc_info)
            lines = log_lines(record.levelno, text)
            if trace:
                lines += log_lines(logging.DEBUG, trace)
            sys.stderr.write(lines)
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


class StderrRelay:
    """Relays the server's stderr lines as ``S <line>``, at most ``rate`` lines a second (bursts of 5x).

    A server flooding stderr costs the pipe nothing beyond that: the rest is
    counted, and the count is reported once a second.
    """

    def __init__(self, rate: float) -> None:
        self.limit = RateLimit(rate, 5 * rate)

    def __call__(self, line: str) -> None:
        if self.limit.allow():
            self.report_dropped()
            sys.stderr.write(server_line(line))
            sys.stderr.flush()

    def report_dropped(self) -> None:
        if dropped := self.limit.take_dropped():
            text = f"{dropped} server stderr lines not logged (rate limit)"
            sys.stderr.write(log_lines(logging.WARNING, text))
            sys.stderr.flush()

    async def report_forever(self) -> None:
        """Report a flood's dropped lines once a second, even when the server falls silent after it."""
        while True:
            await trio.sleep(1)
            self.report_dropped()


class Worker:
    def __init__(self, boot: WorkerBoot, link: TrioSocket) -> None:
        self.boot = boot
        self.link = link
        self.exit_code = WorkerExit.LIFELINE
        self.client: Client | None = None
        self.server: StdioServer | None = None  # for stdio servers: the process
        self.http = HttpTrouble()  # for remote servers: the last HTTP error status
        self.requests = ServerRequests(boot.spec)  # what the server asks of us: roots, input, sampling
        self._relist = trio.Event()  # set when the server's tools may have changed
        self.validators: dict[str, jsonschema.protocols.Validator | None] = {}  # of arguments
        self.output_validators: dict[str, jsonschema.protocols.Validator | None] = {}  # of results
        self.tool_warnings = Warnings(boot.server)  # about the tools listed
        self.catalog = Catalog(boot.server, self._pager)  # resources and prompts
        self._scope = trio.CancelScope()
        self._tasks: trio.Nursery | None = None  # the worker's own: calls, and their progress pacing

    async def run(self) -> int:
        spec = self.boot.spec
        relay = StderrRelay(self.boot.stderr_lines_per_second)
        transport: AbstractAsyncContextManager[TransportStreams]
        if spec.transport == "stdio":
            assert spec.command is not None, "stdio servers have a command (checked by the config loader)"
            try:
                self.server = StdioServer(
                    spec.command, list(spec.args), env=dict(spec.env), cwd=spec.cwd, on_stderr=relay
                )
            except CommandNotFound as exc:
                log.log(LAST_WORD, "start-up failed: %s", exc)
                return WorkerExit.START_FAILED
            transport = self.server.connect()
        else:
            transport = connect_remote(spec, self.http)
        async with trio.open_nursery() as nursery:
            self._scope, self._tasks = nursery.cancel_scope, nursery
            nursery.start_soon(self._watch_lifeline)
            if self.server is not None:
                nursery.start_soon(self._watch_server, self.server)
                nursery.start_soon(self._report_spawn, self.server)
            nursery.start_soon(self._serve_link, nursery)
            nursery.start_soon(reap_on_sigchld, self._trio_children)
            nursery.start_soon(relay.report_forever)
            phase = "initialize"  # what the session is doing; "" once it serves
            try:
                async with Client(
                    transport,
                    cache=None,
                    client_info=Implementation(name="mcp-supervisor", version=__version__),
                    message_handler=self._on_message,
                    **self.requests.client_options(),
                ) as client:
                    if self.server is not None:
                        self.server.envelope = sdk.envelope(client.session)
                    phase = "tools/list"
                    tools = await self._list_tools(client)
                    self._know(tools)
                    self.client = client
                    server_pid = self.server.pid if self.server is not None else None
                    self._send(Ready(tools=tools, server_pid=server_pid, server_name=_server_name(client)))
                    phase = ""
                    async with trio.open_nursery() as session_tasks:
                        session_tasks.start_soon(self._follow_tools, client, tools, session_tasks)
                        await self._keep_alive(client)
            except* Exception as group:  # SDK task groups wrap them
                if not await self._session_failed(phase, _first_leaf(group)):
                    raise  # a bug of ours: main() reports it
            self._end(self.exit_code)
        return self.exit_code

    async def _session_failed(self, phase: str, failure: BaseException) -> bool:
        """The session ended with ``failure`` during ``phase``: end the worker, saying why; False when
        the failure is no session's (a bug, for ``main`` to report)."""
        if self._scope.cancel_called:  # already ending, for a reason given before
            log.debug("session ended: %s: %s", type(failure).__name__, failure)
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
        if isinstance(failure, OSError | MCPError | httpx2.HTTPError | ValidationError):
            log.error("the session with the server failed: %s", self.http.explain(failure))
            self._end(WorkerExit.SERVER_DIED)
            return True
        return False

    def _pager(self, client: Client) -> Pager:
        """List requests of the worker's own: on a stdio server through the hot path (raw JSON), on a
        remote one through the session (JSON values); neither checked by the SDK's models."""
        server = self.server
        if server is None:
            return functools.partial(sdk.raw_request, client.session)

        async def request(method: str, params: dict[str, Any]) -> Any:
            return await server.request(method, params)  # raw JSON, decoded entry by entry

        return request

    async def _list_tools(self, client: Client) -> list[WorkerTool]:
        """Every usable tool of the server (``workers.listing``); the session is told them too."""
        modern = client.protocol_version in MODERN_PROTOCOL_VERSIONS
        tools = await list_tools(self._pager(client), self.tool_warnings, modern=modern)
        sdk.absorb_tools(client.session, tools)
        return tools

    async def _on_message(self, message: object) -> None:
        """The session's messages outside requests: a tool list change (handshake-era servers notify
        this way); transport failures, kept to explain what follows."""
        if isinstance(message, ToolListChangedNotification):
            self._relist.set()
        elif isinstance(message, Exception):
            self.http.note(message)
            log.debug("transport: %s: %s", type(message).__name__, message)
        await trio.lowlevel.checkpoint()

    async def _follow_tools(self, client: Client, tools: list[WorkerTool], nursery: trio.Nursery) -> None:
        """List the tools again when the server says they changed, or every ``refreshInterval``;
        tell the supervisor when they did."""
        capability = client.server_capabilities.tools
        if capability is not None and capability.list_changed:
            nursery.start_soon(self._listen_for_tool_changes, client)
        refresh = self.boot.spec.refresh_interval or math.inf
        while True:
            with trio.move_on_after(refresh):
                await self._relist.wait()
            self._relist = trio.Event()  # a change noticed while listing lists again
            try:
                with trio.fail_after(RELIST_TIMEOUT):
                    listed = await self._list_tools(client)
            except ListingFailed as exc:
                log.warning("listing the tools again failed: %s", exc)
                continue
            except (trio.TooSlowError, MCPError, httpx2.HTTPError) as exc:
                log.warning("listing the tools again failed: tools/list: %s", exc or "timed out")
                continue
            if listed != tools:
                tools = listed
                self._know(tools)
                self._send(ToolsChanged(tools=tools))

    def _know(self, tools: list[WorkerTool]) -> None:
        self.validators = {tool.name: validator(tool.input_schema) for tool in tools}
        self.output_validators = {tool.name: validator(tool.output_schema) for tool in tools}

    async def _listen_for_tool_changes(self, client: Client) -> None:
        """2026-07-28 servers send changes only on a ``subscriptions/listen`` stream: keep one open."""
        delay = LISTEN_RETRY_INITIAL
        while True:
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    delay = LISTEN_RETRY_INITIAL
                    async for _ in subscription:
                        self._relist.set()
                return  # the server closed the stream in order: it will send no more
            except ListenNotSupportedError:
                return  # a handshake-era session: changes come as notifications (_on_message)
            except (SubscriptionLost, MCPError, TimeoutError) as exc:
                log.warning("tool change subscription lost (%s); listening again in %g s", exc, delay)
                self._relist.set()  # there is no replay: what changed meanwhile is listed again
            await trio.sleep(delay)
            delay = min(2 * delay, LISTEN_RETRY_MAX)

    async def _report_spawn(self, server: StdioServer) -> None:
        await server.spawned.wait()
        assert server.pid is not None
        self._send(Started(server_pid=server.pid))

    def _trio_children(self) -> set[int] | None:
        """Children that trio reaps itself (the server, sampling programs), or None while one is spawned."""
        hooks = self.requests.children()
        if self.server is None or hooks is None:
            return hooks
        pid = self.server.pid
        return None if pid is None and not self.server.exited.is_set() else hooks | {pid} if pid else hooks

    async def _server_exits(self) -> bool:
        """After the session broke: does the server process exit? (Then its status says why.)"""
        if self.server is None:
            return False
        with trio.move_on_after(EXIT_NOTICE):
            await self.server.exited.wait()
        return self.server.exited.is_set()

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

    def _server_ended(self, code: int | None) -> None:
        if self._scope.cancel_called:
            return
        if code == 0:
            log.warning("server process exited with status 0")
            self._end(WorkerExit.SERVER_DONE)
        else:
            if code is None:
                how = "closed its stdout"  # and had not exited when last looked at
            else:
                how = f"exited with code {code}" if code > 0 else f"was killed by signal {-code}"
            log.error("server process %s", how)
            self._end(WorkerExit.SERVER_DIED)

    def _give_up(self, code: WorkerExit, reason: str) -> None:
        """End the worker for ``reason``, its last word (a CRITICAL line: the keeper's ``last_error``)."""
        if not self._scope.cancel_called:
            log.log(LAST_WORD, "%s", _one_line(reason))
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
            except (trio.TooSlowError, MCPError, ValidationError) as exc:
                log.error("server did not answer a ping within %g s: %s", interval, exc or "timed out")
                if self.server is not None:
                    self.server.kill()  # it is unresponsive: no orderly stop to wait for
                self._end(WorkerExit.SERVER_DIED)
                return

    async def _serve_link(self, nursery: trio.Nursery) -> None:
        """Commands from the supervisor: heartbeats from the start, calls once the session is ready."""
        while True:
            for frames in await self.link.receive_batch():
                try:
                    command = decode_worker_command(frames[-1])
                except msgspec.DecodeError as exc:
                    self._undecodable(frames[-1], exc)
                    continue
                match command:
                    case Invoke():
                        if self.client is None:
                            self._fail(command.call, "UNAVAILABLE", "the server is still starting")
                        else:
                            nursery.start_soon(self._call, self.client, command)
                    case Fetch():
                        if self.client is None:
                            self._fail(command.call, "UNAVAILABLE", "the server is still starting")
                        else:
                            nursery.start_soon(self._fetch, self.client, command)
                    case Heartbeat():
                        self.link.send_nowait([HEARTBEAT])

    def _undecodable(self, frame: bytes, exc: msgspec.DecodeError) -> None:
        """A command that does not decode: a call is still answered, if its id can be found (arguments
        the supervisor relayed untouched may nest deeper than this process's decoder recurses)."""
        salvaged = salvage_call(frame)
        if salvaged is not None and salvaged[0] in ("Invoke", "Fetch"):
            self._fail(salvaged[1], "INVALID_ARGUMENTS", f"arguments do not decode: {exc}")
        else:
            log.error("undecodable command from the supervisor: %s", exc)

    async def _call(self, client: Client, invoke: Invoke) -> None:
        call = invoke.call
        try:
            arguments = decode_arguments(invoke.arguments)
        except InvalidArguments as exc:
            return self._fail(call, "INVALID_ARGUMENTS", str(exc))
        if invoke.tool not in self.validators:
            return self._fail(call, "UNKNOWN_TOOL", f"server has no tool {invoke.tool!r}")
        if error := self._schema_error(self.validators, invoke.tool, "inputSchema", arguments):
            where = "/".join(str(part) for part in error.absolute_path) or "arguments"
            return self._fail(call, "INVALID_ARGUMENTS", f"tool {invoke.tool!r}: {where}: {error.message}")
        if log.isEnabledFor(logging.DEBUG):
            log.debug("call %s %.200s", invoke.tool, msgspec.json.encode(arguments).decode())

        async def call_tool() -> bytes:
            relay = self._progress_relay(call) if invoke.progress else None
            try:
                if self.server is not None:
                    result = await self._call_stdio(client, self.server, invoke.tool, arguments, relay)
                else:
                    sdk_result = await client.call_tool(invoke.tool, arguments, progress_callback=relay)
                    result = to_tool_result(sdk_result)
            finally:
                if relay is not None:
                    relay.close()  # what it holds goes before the answer, nothing after
            self._check_output(invoke.tool, result)
            return encode(result)

        what = f"tool {invoke.tool!r}"
        await self._answer(call, what, f"a call to {invoke.tool!r}", invoke.budget, call_tool)

    async def _call_stdio(
        self,
        client: Client,
        server: StdioServer,
        tool: str,
        arguments: dict[str, Any],
        relay: ProgressRelay | None,
    ) -> ToolResult:
        """The hot path: the worker's own ``tools/call``, its JSON result checked."""
        hold: ProgressCallback | None = None
        if relay is not None:
            tasks = self._tasks
            assert tasks is not None, "calls run in the worker's nursery"

            def hold(progress: float, total: float | None, message: str | None) -> None:
                if relay.hold(progress, total, message):
                    tasks.start_soon(relay.pace)  # it sends nothing once the relay is closed

        raw = await server.request("tools/call", {"name": tool, "arguments": arguments}, hold)
        result = decode_tool_result(raw)
        if result is None:  # the server asks for input first: the session's callbacks answer
            return to_tool_result(await _provide_input(client, tool, arguments, raw, relay))
        return result

    def _check_output(self, tool: str, result: ToolResult) -> None:
        """Raise ``InvalidResult`` when a result breaks the tool's ``outputSchema``. The worker checks
        results itself, on every transport: the session is given no output schemas (``workers.sdk``)."""
        if self.output_validators.get(tool) is None or result.is_error:
            return
        if result.structured_content is None:
            raise InvalidResult("no structuredContent, though the tool has an outputSchema")
        structured = result.structured_content
        if error := self._schema_error(self.output_validators, tool, "outputSchema", structured):
            where = "/".join(str(part) for part in error.absolute_path) or "structuredContent"
            raise InvalidResult(
                f"structuredContent does not match the outputSchema: {where}: {error.message}"
            )

    def _schema_error(
        self,
        validators: dict[str, jsonschema.protocols.Validator | None],
        tool: str,
        which: str,
        instance: Any,
    ) -> jsonschema.exceptions.ValidationError | None:
        """The most relevant way ``instance`` breaks the tool's schema, or None. A schema whose ``$ref``
        does not resolve cannot check anything: it is dropped, with a warning, and the server decides."""
        validator = validators.get(tool)
        if validator is None:
            return None
        try:
            if validator.is_valid(instance):
                return None
            error: jsonschema.exceptions.ValidationError | None = jsonschema.exceptions.best_match(
                validator.iter_errors(instance)
            )
        except referencing.exceptions.Unresolvable as exc:
            log.warning(
                "tool %r: its %s has a $ref that does not resolve (%s); not checked", tool, which, exc
            )
            validators[tool] = None
            return None
        return error

    async def _fetch(self, client: Client, fetch: Fetch) -> None:
        """A resources or prompts request, under its budget and with the error codes of a tool call."""
        what = f"{fetch.method} {fetch.target}".rstrip()
        log.debug("fetch %s", what)

        async def fetched() -> bytes:
            return encode(await self.catalog.fetch(client, fetch))

        # A prompt's arguments are the caller's; other requests name nothing the caller can fix.
        invalid: ErrorCode = "INVALID_ARGUMENTS" if fetch.method == "prompts/get" else "SERVER_ERROR"
        await self._answer(fetch.call, what, what, fetch.budget, fetched, invalid)

    async def _answer(
        self,
        call: int,
        what: str,
        during: str,
        budget: float,
        work: Callable[[], Awaitable[bytes]],
        invalid_params: ErrorCode = "INVALID_ARGUMENTS",
    ) -> None:
        """Run ``work`` (a request to the server) within ``budget`` and send its result, or the failure
        with its error code; a closed session ends the worker instead."""
        try:
            with trio.CancelScope(deadline=trio.current_time() + budget) as scope:
                result = await work()
            if scope.cancelled_caught:
                return self._fail(
                    call, "TIMEOUT", f"{what} ran past its {budget:g} s budget; the server was sent a cancel"
                )
        except CatalogError as exc:
            return self._fail(call, exc.code, exc.message)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                # The session is gone: end the worker; the supervisor fails this call
                # (WORKER_CRASHED with the server's last stderr lines, or SERVER_ERROR for a remote one).
                if not await self._server_exits():
                    log.error(
                        "the connection to the server closed during %s%s",
                        during,
                        self.http.cause(self.boot.spec.url),
                    )
                    self._end(WorkerExit.SERVER_DIED)
                return None
            code = invalid_params if exc.code == INVALID_PARAMS else "SERVER_ERROR"
            return self._fail(call, code, f"{what}: {exc} (JSON-RPC error {exc.code})")
        except (ValidationError, InvalidResult) as exc:
            return self._fail(call, "SERVER_ERROR", f"{what} returned an invalid result: {exc}")
        except OverflowError:  # msgspec, encoding what the server sent for the supervisor
            why = "an integer that does not fit in 64 bits (the wire carries no larger)"
            return self._fail(call, "SERVER_ERROR", f"{what} returned an invalid result: {why}")
        except httpx2.HTTPError as exc:
            return self._fail(call, "SERVER_ERROR", f"{what}: HTTP: {type(exc).__name__}: {exc}")
        except Exception as exc:  # boundary: one request's failure must not end the worker
            log.exception("%s failed", what)
            return self._fail(call, "INTERNAL", f"{what}: {type(exc).__name__}: {exc}")
        self._send(InvokeResult(call=call, result=msgspec.Raw(result)))

    def _progress_relay(self, call: int) -> ProgressRelay:
        """The server's progress for ``call``, relayed as ``InvokeProgress`` (coalesced), all before
        the call's own answer."""

        def send(progress: float, total: float | None, message: str | None) -> None:
            self._send(InvokeProgress(call=call, progress=progress, total=total, message=message))

        return ProgressRelay(send)

    def _fail(self, call: int, code: str, message: str) -> None:
        self._send(InvokeFailed(call=call, code=code, message=message))

    def _send(
        self, event: Started | Ready | InvokeResult | InvokeFailed | ToolsChanged | InvokeProgress
    ) -> None:
        self.link.send_nowait([encode(event)])


def _one_line(text: str) -> str:
    """A last word is one log line (a pydantic error, say, has several)."""
    return " ".join(text.split())


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first exception that is not itself a group."""
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


async def _provide_input(
    client: Client, tool: str, arguments: dict[str, Any], raw: msgspec.Raw, relay: ProgressRelay | None
) -> CallToolResult:
    """Finish a call whose first answer asks for input (2026-07-28): answer that round's requests through
    the session's callbacks, then the session retries with the answers (and runs any further rounds)."""
    first = InputRequiredResult.model_validate_json(bytes(raw), by_name=False)
    responses: InputResponses | None = None
    if first.input_requests:
        responses = {}
        for key, request in first.input_requests.items():
            meta = request.params.meta if request.params is not None else None
            context = ClientRequestContext(session=client.session, request_id=key, meta=meta)
            answer = await client.session.dispatch_input_request(context, request)
            if isinstance(answer, ErrorData):
                raise MCPError.from_error_data(answer)
            responses[key] = answer
    else:
        await trio.sleep(STATE_ONLY_RETRY)
    return await client.call_tool(
        tool, arguments, progress_callback=relay, input_responses=responses, request_state=first.request_state
    )


def _server_name(client: Client) -> str:
    info = client.server_info
    return f"{info.name} {info.version}" if info is not None else ""


def _connect(boot: WorkerBoot) -> TrioSocket:
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.ROUTING_ID, boot.identity.encode())
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_SIZE)
    sock.connect(boot.endpoint)
    return TrioSocket(sock)


def main() -> int:
    handler = _LineHandler()
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    try:
        boot = decode_worker_boot(sys.stdin.buffer.readline())
    except msgspec.DecodeError as exc:
        log.log(LAST_WORD, "start-up failed: bad boot message on stdin: %s", exc)
        return WorkerExit.START_FAILED
    logging.getLogger().setLevel(boot.log_level)
    # One line per HTTP request is debug detail: errors are logged with their status anyway.
    logging.getLogger("httpx2").setLevel(max(boot.log_level, logging.WARNING))
    become_subreaper()  # daemons that escape the server's process group are re-parented to us
    link = _connect(boot)
    try:
        return trio.run(Worker(boot, link).run)
    except KeyboardInterrupt:
        return WorkerExit.LIFELINE
    except Exception as exc:  # boundary: whatever ends the worker, its keeper is told why
        leaf = _first_leaf(exc) if isinstance(exc, BaseExceptionGroup) else exc
        log.info("worker failed:\n%s", "".join(traceback.format_exception(exc)).rstrip())
        log.log(LAST_WORD, "worker failed: %s: %s", type(leaf).__name__, _one_line(str(leaf)))
        return WorkerExit.CRASHED
    finally:
        link.close()
        zmq.Context.instance().term()
