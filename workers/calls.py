"""Calls and fetches: each ``Invoke`` and ``Fetch`` answered on its own, under its own budget.

Above: the link (``workers.uplink``), which hands each call here as it arrives (``invoke``,
``fetch``), and the session (``workers.session``), which says when it is ready and which tools the
server has (``ready``, ``know``), and is told when a call finds it gone. Below: the server: on stdio
the worker's own ``tools/call`` (the hot path, ``workers.own_requests``, which also hands it the
call's progress), the SDK's ``call_tool`` on a remote one, ``workers.catalog`` for the rest.

A call's arguments are decoded totally (``workers.values``) and checked against the tool's
``inputSchema``; its result is checked (``workers.results``) and against the tool's
``outputSchema``, on every transport (``supervisor.shared.schemas`` builds the validators). On expiry of
its budget the caller gets ``TIMEOUT`` and the server is sent ``notifications/cancelled``. A call
that asks for progress gets the server's notifications as ``InvokeProgress`` (coalesced by
``workers.progress``) before its answer. A result that asks for input first (2026-07-28) is
finished by the worker's callbacks, in rounds as the SDK runs them (``workers.lean_sdk.provide_input``).

While tracing (``supervisor.shared.tracing.on``), a sampled ``Invoke`` is served in a span
``tools/call TOOL`` (child of the supervisor's, with the outcome) whose context goes to the server in
the request's ``_meta``; one not sampled makes no span, and passes on the context it came with.

Each call runs under its own ``trio.CancelScope`` (its budget's deadline), kept by call id while it
runs: an ``Abort`` (its caller cancelled it, and the supervisor has answered) cancels that scope,
which sends the server ``notifications/cancelled`` for the request as expiry does (the hot path's
``OwnRequests.request``, the SDK's requests), and the call then sends nothing at all. A call the
worker's end cancels, whose request its exited server never read, is answered ``NotRun``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import trio

from supervisor.protocol import (
    Abort,
    Answered,
    ErrorCode,
    Fetch,
    Interest,
    Invoke,
    InvokeProgress,
    InvokeResult,
    NotRun,
    ProgressCallback,
    ToolResult,
    WorkerTool,
    encode,
)
from supervisor.shared import tracing
from supervisor.shared.schemas import Validators
from workers.asking import CURRENT_CALL, Asking, Running
from workers.catalog import Catalog, CatalogError
from workers.interest import Interests
from workers.progress import ProgressRelay
from workers.results import InvalidResult, decode_tool_result, to_tool_result
from workers.server_errors import (
    CONNECTION_CLOSED,
    INVALID_PARAMS,
    ConnectionClosed,
    MCPError,
    http_error,
    invalid_result,
    rpc_error,
)
from workers.stdio import StdioServer
from workers.uplink import Link
from workers.values import InvalidArguments, decode_arguments

if TYPE_CHECKING:
    import jsonschema.exceptions

__all__ = ["Calls"]

log = logging.getLogger("mcp_supervisor.worker")

Client = Any  # ``workers.lean.LeanClient``, or the SDK's ``mcp.Client`` (``workers.session``)
_C = TypeVar("_C", Invoke, Fetch)


class Calls:
    """Serves ``Invoke`` and ``Fetch`` once the session is ready (``UNAVAILABLE`` until then), each in
    ``tasks`` (the worker's nursery) as is the pacing of its progress. A call that finds the session
    gone awaits ``lost`` (which ends the worker); one that comes once the server has ended is answered
    ``NotRun`` (the supervisor may send it to the next server). An ``Abort`` silences a running call."""

    def __init__(
        self,
        link: Link,
        tasks: trio.Nursery,
        server: StdioServer | None,
        catalog: Catalog,
        lost: Callable[[str], Awaitable[None]],
        interests: Interests | None = None,
    ) -> None:
        """``interests``: where each ``Interest`` goes (the server's log level and subscriptions)."""
        self._link = link
        self._interests = interests
        self._tasks = tasks
        self._server = server  # for stdio servers: the hot path
        self._catalog = catalog
        self._lost = lost
        self._client: Client | None = None  # once the session is ready
        self._validators = Validators({})  # of arguments
        self._output_validators = Validators({})  # of results
        self._running: dict[int, Running] = {}  # calls and fetches being served, by call id
        self.asking = Asking(link.send, self._running)  # server requests its callers answer

    @property
    def running(self) -> int:
        """Calls and fetches being served now."""
        return len(self._running)

    def ready(self, client: Client, tools: list[WorkerTool]) -> None:
        """The session is ready, with these tools: calls are served from now on."""
        self.know(tools)
        self._client = client

    def know(self, tools: list[WorkerTool]) -> None:
        """The server's tools (at start-up, and whenever they changed)."""
        self._validators = Validators({tool.name: tool.input_schema for tool in tools})
        self._output_validators = Validators({tool.name: tool.output_schema for tool in tools})

    def invoke(self, command: Invoke) -> None:
        self._start(self._serve_call, command)

    def fetch(self, command: Fetch) -> None:
        self._start(self._serve_fetch, command)

    def interest(self, command: Interest) -> None:
        if self._interests is not None:
            self._interests.want(command)

    def _start(self, serve: Callable[[Client, _C, Running], Awaitable[None]], command: _C) -> None:
        """Serve ``command`` in a task of its own, tracked by its call id while it runs."""
        client = self._client
        if client is None:
            self._link.fail(command.call, "UNAVAILABLE", "the server is still starting")
            return
        if self._server is not None and self._server.hung_up:  # it ended: this call never reaches it
            self._link.send(NotRun(call=command.call))
            return
        running = self._track(command)

        async def run() -> None:
            CURRENT_CALL.set(running)  # this task's: a server request made in it is this call's
            try:
                if not running.aborted:  # an Abort that came before this task started: nothing to do
                    await serve(client, command, running)
            except trio.Cancelled:  # the worker ends: a request its dead server never read, the next may run
                at, server = running.sent_at, self._server
                if server is not None and at is not None and server.never_read(at) and not running.aborted:
                    self._link.send(NotRun(call=command.call))
                raise
            finally:
                self._untrack(running)

        self._tasks.start_soon(run)

    def abort(self, command: Abort) -> None:
        """The caller cancelled a call (the supervisor has answered it): cancel its scope, which tells
        the server; the call sends nothing more. A call no longer running is left alone."""
        running = self._running.pop(command.call, None)
        if running is None:
            log.debug("abort of call %d, which is not running: ignored", command.call)
            return
        log.debug("call %d aborted: its caller cancelled it", command.call)
        running.aborted = True
        running.end()
        running.scope.cancel()

    def _track(self, command: Invoke | Fetch) -> Running:
        """A call about to run: its scope, with its budget's deadline, kept by call id until it ends
        (registered now, before its task starts, so an Abort that follows at once finds it)."""
        running = Running(command.call, trio.CancelScope(deadline=trio.current_time() + command.budget))
        running.client = command.client
        if isinstance(command, Invoke):
            running.answers = frozenset(command.answers)
        self._running[command.call] = running
        return running

    def _untrack(self, running: Running) -> None:
        running.end()
        if self._running.get(running.call) is running:
            del self._running[running.call]

    def answered(self, command: Answered) -> None:
        """The caller's answer to a server request of one of its calls."""
        self.asking.answered(command)

    def _fail(self, running: Running, code: ErrorCode, message: str) -> None:
        """Answer a call with an error, unless its caller cancelled it (then nothing is sent)."""
        if not running.aborted:
            if running.span is not None:
                tracing.outcome(running.span, code, message)
            self._link.fail(running.call, code, message)

    async def _serve_call(self, client: Client, invoke: Invoke, running: Running) -> None:
        if tracing.on:  # the call's span, if its trace is sampled, and the context the server gets
            running.span, running.trace = tracing.serve(invoke.tool, invoke.traceparent, invoke.tracestate)
        if running.span is None:
            return await self._call(client, invoke, running)
        try:
            await self._call(client, invoke, running)
            if running.aborted:
                tracing.outcome(running.span, "CANCELLED", "cancelled by the caller")
        finally:
            tracing.end(running.span)

    async def _call(self, client: Client, invoke: Invoke, running: Running) -> None:
        try:
            arguments = decode_arguments(invoke.arguments)
        except InvalidArguments as exc:
            return self._fail(running, "INVALID_ARGUMENTS", str(exc))
        if invoke.tool not in self._validators:
            return self._fail(running, "UNKNOWN_TOOL", f"server has no tool {invoke.tool!r}")
        if error := self._schema_error(self._validators, invoke.tool, "inputSchema", arguments):
            where = "/".join(str(part) for part in error.absolute_path) or "arguments"
            return self._fail(running, "INVALID_ARGUMENTS", f"tool {invoke.tool!r}: {where}: {error.message}")
        if log.isEnabledFor(logging.DEBUG):
            log.debug("call %s %.200s", invoke.tool, msgspec.json.encode(arguments).decode())

        async def call_tool() -> bytes:
            relay = self._progress_relay(running) if invoke.progress else None
            try:
                if self._server is not None:
                    server = self._server
                    result = await self._call_stdio(client, server, invoke.tool, arguments, relay, running)
                else:
                    with tracing.joined(running.trace):
                        sdk_result = await client.call_tool(invoke.tool, arguments, progress_callback=relay)
                    result = to_tool_result(sdk_result)
            finally:
                if relay is not None:
                    relay.close()  # what it holds goes before the answer, nothing after
            self._check_output(invoke.tool, result)
            return encode(result)

        what = f"tool {invoke.tool!r}"
        await self._answer(running, what, f"a call to {invoke.tool!r}", invoke.budget, call_tool)

    async def _call_stdio(
        self,
        client: Client,
        server: StdioServer,
        tool: str,
        arguments: dict[str, Any],
        relay: ProgressRelay | None,
        running: Running,
    ) -> ToolResult:
        """The hot path: the worker's own ``tools/call`` for ``running`` (it learns where the line
        begins; its trace context goes in ``_meta`` while tracing), its JSON result checked."""
        hold: ProgressCallback | None = None
        if relay is not None:
            tasks = self._tasks

            def hold(progress: float, total: float | None, message: str | None) -> None:
                if relay.hold(progress, total, message):
                    tasks.start_soon(relay.pace)  # it sends nothing once the relay is closed

        def queued(at: int) -> None:
            running.sent_at = at

        trace = running.trace
        params = {"name": tool, "arguments": arguments}
        raw = await server.own.request("tools/call", params, hold, trace, queued=queued)
        result = decode_tool_result(raw)
        if result is None:  # the server asks for input first: the worker's callbacks answer
            from workers import lean_sdk

            return to_tool_result(await lean_sdk.provide_input(client, tool, arguments, raw, hold, trace))
        return result

    def _check_output(self, tool: str, result: ToolResult) -> None:
        """Raise ``InvalidResult`` when a result breaks the tool's ``outputSchema``. The worker checks
        results itself, on every transport: the session is given no output schemas (``workers.sdk``)."""
        if self._output_validators.schema(tool) is None or result.is_error:
            return
        if result.structured_content is None:
            raise InvalidResult("no structuredContent, though the tool has an outputSchema")
        structured = result.structured_content
        if error := self._schema_error(self._output_validators, tool, "outputSchema", structured):
            where = "/".join(str(part) for part in error.absolute_path) or "structuredContent"
            raise InvalidResult(
                f"structuredContent does not match the outputSchema: {where}: {error.message}"
            )

    def _schema_error(
        self, validators: Validators, tool: str, which: str, instance: Any
    ) -> jsonschema.exceptions.ValidationError | None:
        """The most relevant way ``instance`` breaks the tool's schema, or None. A schema whose ``$ref``
        does not resolve cannot check anything: it is dropped, with a warning, and the server decides.
        ``jsonschema`` is asked only about what ``Validators`` does not prove valid without it."""
        if validators.proves(tool, instance):
            return None
        check = validators.get(tool)
        if check is None:
            return None
        import jsonschema.exceptions
        import referencing.exceptions

        try:
            if check.is_valid(instance):
                return None
            error: jsonschema.exceptions.ValidationError | None = jsonschema.exceptions.best_match(
                check.iter_errors(instance)
            )
        except referencing.exceptions.Unresolvable as exc:
            log.warning(
                "tool %r: its %s has a $ref that does not resolve (%s); not checked", tool, which, exc
            )
            validators.drop(tool)
            return None
        return error

    async def _serve_fetch(self, client: Client, fetch: Fetch, running: Running) -> None:
        """A resources or prompts request, under its budget and with the error codes of a tool call."""
        what = f"{fetch.method} {fetch.target}".rstrip()
        log.debug("fetch %s", what)

        async def fetched() -> bytes:
            return encode(await self._catalog.fetch(client, fetch))

        # A prompt's (a completion's) arguments are the caller's; other requests name nothing it can fix.
        invalid: ErrorCode = (
            "INVALID_ARGUMENTS" if fetch.method in ("prompts/get", "completion/complete") else "SERVER_ERROR"
        )
        await self._answer(running, what, what, fetch.budget, fetched, invalid)

    async def _answer(
        self,
        running: Running,
        what: str,
        during: str,
        budget: float,
        work: Callable[[], Awaitable[bytes]],
        invalid_params: ErrorCode = "INVALID_ARGUMENTS",
    ) -> None:
        """Run ``work`` (a request to the server) in the call's scope (``budget`` seconds, or until
        aborted) and send its result, or the failure with its error code; a closed session ends the
        worker instead. An aborted call sends nothing: its caller has been answered."""

        def fail(code: ErrorCode, message: str) -> None:
            self._fail(running, code, message)

        try:
            with running.scope as scope:
                result = await work()
            if scope.cancelled_caught:
                return fail(
                    "TIMEOUT", f"{what} ran past its {budget:g} s budget; the server was sent a cancel"
                )
        except CatalogError as exc:
            return fail(exc.code, exc.message)
        except InvalidResult as exc:
            return fail("SERVER_ERROR", f"{what} returned an invalid result: {exc}")
        except OverflowError:  # msgspec, encoding what the server sent for the supervisor
            why = "an integer that does not fit in 64 bits (the wire carries no larger)"
            return fail("SERVER_ERROR", f"{what} returned an invalid result: {why}")
        except Exception as exc:  # boundary: one request's failure must not end the worker
            if (error := rpc_error(exc)) is not None:
                if error.code == CONNECTION_CLOSED:
                    if await self._never_read(error):  # the next server may run it
                        if not running.aborted:
                            self._link.send(NotRun(call=running.call))
                        return None
                    # The session is gone: end the worker; the supervisor fails this call
                    # (WORKER_CRASHED with the server's last stderr lines, or SERVER_ERROR for a remote one).
                    return await self._lost(during)
                code = invalid_params if error.code == INVALID_PARAMS else "SERVER_ERROR"
                return fail(code, f"{what}: {error} (JSON-RPC error {error.code})")
            if invalid_result(exc):  # a result that does not fit the SDK's model
                return fail("SERVER_ERROR", f"{what} returned an invalid result: {exc}")
            if http_error(exc):
                return fail("SERVER_ERROR", f"{what}: HTTP: {type(exc).__name__}: {exc}")
            log.exception("%s failed", what)
            return fail("INTERNAL", f"{what}: {type(exc).__name__}: {exc}")
        if not running.aborted:
            if running.span is not None:
                tracing.outcome(running.span, None)
            self._link.send(InvokeResult(call=running.call, result=msgspec.Raw(result)))

    async def _never_read(self, error: MCPError) -> bool:
        """Whether a request the closed connection left unanswered never reached the stdio server: it
        was still in the pipe when the server exited, or was never written."""
        if (server := self._server) is None or not isinstance(error, ConnectionClosed):
            return False
        return await server.exits() and server.never_read(error.sent_at)

    def _progress_relay(self, running: Running) -> ProgressRelay:
        """The server's progress for a call, as ``InvokeProgress`` (coalesced), before its answer."""
        link, call = self._link, running.call

        def send(progress: float, total: float | None, message: str | None) -> None:
            if not running.aborted:
                link.send(InvokeProgress(call=call, progress=progress, total=total, message=message))

        return ProgressRelay(send)
