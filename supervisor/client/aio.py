"""``AsyncSupervisorClient``: the client stub for asyncio and trio (through anyio).

Above: agents' async code, as ``async with AsyncSupervisorClient() as sup``. Beside it: the blocking
``SupervisorClient`` (``supervisor.client.blocking``), with the same methods; both are one line per method
over the shared core (``supervisor.client.exchanges``). Below: one DEALER (``supervisor.client.dial``) and one
reader task that hands each reply to the request waiting for its id, so any number of tasks may call
at once on one client; a failed CURVE handshake ends every waiting request with its reason.

A request whose waiting task is cancelled (its cancel scope, task group or asyncio task) while the
request is in flight is cancelled at the supervisor too: the client sends ``Cancel`` for it before
the cancellation goes on, and the supervisor tells the MCP server (``notifications/cancelled``).
So does a request the client stops waiting for for any other reason (its wait over, its progress
callback raising).
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Mapping
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

import anyio
import anyio.abc
import msgspec
import zmq
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from supervisor.adapters.formats import anthropic_tool, openai_tool
from supervisor.client.dial import dial, no_answer, unreachable
from supervisor.client.errors import SupervisorError
from supervisor.client.exchanges import (
    LIVENESS_TICK,
    LIVENESS_WAIT,
    REQUEST_TIMEOUT,
    Exchange,
    Handler,
    Liveness,
    Requests,
    answer_failed,
    answer_with,
    handlers,
    request_params,
)
from supervisor.client.tool_cache import AsyncToolCache
from supervisor.client.watch import AsyncEventWatch
from supervisor.protocol import (
    Answer,
    CallProgress,
    Completion,
    FrontReply,
    FrontRequest,
    FrontStats,
    ProgressCallback,
    PromptInfo,
    PromptResult,
    ReloadSummary,
    ResourceInfo,
    ResourceResult,
    ResourceTemplateInfo,
    ServerLog,
    ServerRequest,
    ServerStatus,
    ToolInfo,
    ToolList,
    ToolResult,
    decode_front_reply,
    encode,
)
from supervisor.security.curve import HandshakeWatch
from supervisor.security.keys import ClientKeys, Keys, client_keys
from supervisor.shared.paths import resolve_endpoint
from supervisor.shared.sockets import fd_of, new_dealer, readable

__all__ = ["AsyncSupervisorClient"]

_T = TypeVar("_T")


class AsyncSupervisorClient:
    """Async client for asyncio and trio; use it as ``async with``. ``keys``: see
    ``supervisor.client.blocking``."""

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        request_timeout: float = REQUEST_TIMEOUT,
        keys: Keys = None,
        identity: str | None = None,
        on_sampling: Handler | None = None,
        on_elicitation: Handler | None = None,
    ) -> None:
        """``identity``: who this client is to ``scope: client`` servers (its own session on each); two
        clients that name the same identity share those sessions. Default: unique to this client.
        ``on_sampling(params)``, ``on_elicitation(params)``: answer a server's sampling and elicitation
        requests that arise in this client's own calls (see ``supervisor.client.exchanges.Handler``)."""
        self._handlers = handlers(on_sampling, on_elicitation)
        # first: a bad identity raises before anything is opened
        self._requests = Requests(identity, self._handlers)
        self.endpoint = resolve_endpoint(endpoint)
        self.keys = client_keys(keys, self.endpoint)
        self.request_timeout = request_timeout
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._sock: zmq.Socket[bytes] | None = None
        self._watch: HandshakeWatch | None = None
        self._waiters: dict[int, MemoryObjectSendStream[FrontReply]] = {}
        self._open: AsyncExitStack | None = None  # what __aexit__ undoes
        self._reading: anyio.CancelScope | None = None
        self._origin: AsyncSupervisorClient | None = None  # for ``as_client``: the client that reads

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            stack.callback(self._ctx.destroy, linger=0)
            self._sock, self._watch = dial(
                lambda: new_dealer(self._ctx), self.endpoint, self.keys, unreachable(self.endpoint)
            )
            stack.callback(self._sock.close, linger=0)
            if self._watch is not None:
                stack.callback(self._watch.close)
            tasks = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tasks.cancel_scope.cancel)  # undone first: the tasks end, then the sockets close
            tasks.start_soon(self._read_replies)
            if self._watch is not None:
                tasks.start_soon(self._watch_handshakes, self._watch)
            self._open = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._open is not None, "the client was not entered"
        await self._open.aclose()

    @property
    def identity(self) -> str:
        """This client's identity: its session on each ``scope: client`` server."""
        return self._requests.identity

    # ------------------------------------------------------------ the registry

    async def list_tools(self, wait: float = 0.0) -> list[ToolInfo]:
        """The registry's tools; with ``wait``, once every server's first start is over (a supervisor
        just started answers with every ready server's tools), or after ``wait`` seconds at most."""
        return await self._do(self._requests.list_tools(wait))

    async def tool_list(self, wait: float = 0.0) -> ToolList:
        """The tools with the registry's ``version`` (it grows by one with each change) and the servers
        still ``starting`` for the first time; ``wait`` as for ``list_tools``."""
        return await self._do(self._requests.tool_list(wait))

    async def openai_tools(self) -> list[dict[str, Any]]:
        return [openai_tool(tool) for tool in await self.list_tools()]

    async def anthropic_tools(self) -> list[dict[str, Any]]:
        """As ``SupervisorClient.anthropic_tools``."""
        return [anthropic_tool(tool) for tool in await self.list_tools()]

    async def events_endpoint(self) -> str:
        """Where the supervisor publishes its events."""
        return await self._do(self._requests.events_endpoint())

    async def watch(self, *, messages: bool = False) -> AsyncEventWatch:
        """A subscription to registry and state events: ``async with await sup.watch() as events``;
        with ``messages``, the servers' log messages and resource updates too."""
        watch = AsyncEventWatch(await self.events_endpoint(), keys=self._event_keys(), messages=messages)
        await watch.join()
        return watch

    async def tool_cache(self) -> AsyncToolCache:
        """As ``SupervisorClient.tool_cache``: ``async with await sup.tool_cache() as cache``, then
        ``await cache.tools()`` never asks the supervisor."""

        async def listing() -> tuple[list[ToolInfo], int]:
            reply = await self.tool_list()
            return reply.tools, reply.version

        return await AsyncToolCache.open(await self.events_endpoint(), listing, keys=self._event_keys())

    def _event_keys(self) -> ClientKeys | Literal[False]:
        return False if self.keys is None else self.keys

    # ---------------------------------------------------------------- calls

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        *,
        raise_on_error: bool = True,
        progress: ProgressCallback | None = None,
    ) -> ToolResult:
        """As ``SupervisorClient.call_tool``; ``progress`` may be a coroutine function (it is awaited)."""
        return await self._do(self._requests.call_tool(name, arguments, timeout, raise_on_error, progress))

    async def list_resources(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> list[ResourceInfo]:
        """As ``SupervisorClient.list_resources``."""
        return await self._do(self._requests.list_resources(server, timeout))

    async def list_resource_templates(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> list[ResourceTemplateInfo]:
        return await self._do(self._requests.list_resource_templates(server, timeout))

    async def read_resource(self, server: str, uri: str, *, timeout: float | None = None) -> ResourceResult:
        return await self._do(self._requests.read_resource(server, uri, timeout))

    async def list_prompts(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> list[PromptInfo]:
        return await self._do(self._requests.list_prompts(server, timeout))

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        server: str | None = None,
        timeout: float | None = None,
    ) -> PromptResult:
        return await self._do(self._requests.get_prompt(name, arguments, server, timeout))

    async def complete(
        self,
        ref: Mapping[str, str],
        argument: tuple[str, str],
        context: Mapping[str, str] | None = None,
        *,
        server: str | None = None,
        timeout: float | None = None,
    ) -> Completion:
        """Completions for ``argument`` (its name and the value typed so far) of a prompt
        (``{"type": "ref/prompt", "name": N}``, its prefixed name, or the server's own with ``server``)
        or a resource template (``{"type": "ref/resource", "uri": TEMPLATE}``, with ``server``);
        ``context``: the other arguments' values."""
        return await self._do(self._requests.complete(ref, argument, context, server, timeout))

    async def set_log_level(self, level: str, server: str | None = None) -> None:
        """Ask ``server`` (every server by default) for log messages from ``level`` up (one of
        ``LOG_LEVELS``; ``""`` withdraws this connection's wish). A server is set to the most verbose
        level its connections ask for; its messages come as ``ServerMessage`` on ``watch(messages=True)``."""
        await self._do(self._requests.set_log_level(level, server))

    async def subscribe(self, server: str, uri: str) -> None:
        """Hear when ``server``'s resource ``uri`` changes: a ``ResourceUpdated`` on
        ``watch(messages=True)`` (kept across the server's restarts, until ``unsubscribe``)."""
        await self._do(self._requests.subscribe(server, uri))

    async def unsubscribe(self, server: str, uri: str) -> None:
        await self._do(self._requests.unsubscribe(server, uri))

    # ------------------------------------------------------------ operations

    async def status(self) -> list[ServerStatus]:
        return await self._do(self._requests.status())

    async def front_stats(self) -> FrontStats:
        """As ``SupervisorClient.front_stats``."""
        return await self._do(self._requests.front_stats())

    async def restart(self, server: str) -> None:
        await self._do(self._requests.restart(server))

    async def stop(self, server: str) -> None:
        await self._do(self._requests.stop(server))

    async def start(self, server: str) -> None:
        await self._do(self._requests.start(server))

    async def ping(self) -> None:
        await self._do(self._requests.ping())

    async def reload(self) -> ReloadSummary:
        return await self._do(self._requests.reload(self.request_timeout))

    async def logs(self, server: str, *, after: int = 0, limit: int = 100) -> ServerLog:
        """As ``SupervisorClient.logs``."""
        return await self._do(self._requests.logs(server, after, limit))

    async def shutdown(self, *, grace: float | None = None) -> None:
        """As ``SupervisorClient.shutdown``."""
        await self._do(self._requests.shutdown(grace))

    # ------------------------------------------------------------- transport

    async def _do(self, exchange: Exchange[_T]) -> _T:
        with exchange.traced():
            return exchange.parse(await self._request(exchange.request, exchange.wait, exchange.progress))

    async def _request(
        self, request: FrontRequest, wait: float | None = None, progress: ProgressCallback | None = None
    ) -> FrontReply:
        sock = self._sock
        if sock is None:
            raise SupervisorError("use the client as 'async with AsyncSupervisorClient() as sup'")
        wait = self.request_timeout if wait is None else wait
        # Unbounded, but the supervisor sends one terminal reply and a few progress notifications a second.
        send, receive = anyio.create_memory_object_stream[FrontReply](math.inf)
        with send, receive:
            self._waiters[request.id] = send
            in_flight = False  # sent, and not yet answered
            try:
                if self._watch is not None:
                    self._watch.redial(sock)
                sock.send(encode(request), zmq.NOBLOCK)
                in_flight = True
                self._wake_reader_if_readable()
                probe = Liveness(wait, self.endpoint)
                with anyio.move_on_after(wait):
                    while True:
                        try:
                            reply = await self._next_reply(sock, receive, probe)
                        except anyio.EndOfStream:
                            break
                        if isinstance(reply, ServerRequest):
                            sock.send(encode(await self._answer(reply)), zmq.NOBLOCK)
                            self._wake_reader_if_readable()
                            continue
                        if not isinstance(reply, CallProgress):
                            in_flight = False
                            return reply
                        if progress is not None and inspect.isawaitable(
                            notified := progress(reply.progress, reply.total, reply.message)
                        ):
                            await notified
                while True:  # the wait is over: its answer may have come while a handler ran late
                    try:
                        reply = receive.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                        break
                    if not isinstance(reply, CallProgress | ServerRequest):
                        in_flight = False
                        return reply
            finally:
                del self._waiters[request.id]
                if in_flight:  # cancelled, or given up on: the supervisor need not carry on with it
                    self._cancel(sock, request.id)
        raise no_answer(self.endpoint, wait, self._watch)  # or a failed handshake closed `receive`

    async def _next_reply(
        self, sock: zmq.Socket[bytes], receive: MemoryObjectReceiveStream[FrontReply], probe: Liveness
    ) -> FrontReply:
        """The next reply to one request; in a long wait, the supervisor pinged when it falls silent
        (``Liveness``: ``SupervisorUnreachableError`` when it does not answer). ``EndOfStream`` when a
        failed handshake ended the wait."""
        if not probe.on:
            return await receive.receive()
        while True:
            with anyio.move_on_after(LIVENESS_TICK):
                reply = await receive.receive()
                probe.heard(reply, anyio.current_time())
                return reply
            ping = probe.due(anyio.current_time(), self._requests)
            if ping is not None:
                pings, answered = anyio.create_memory_object_stream[FrontReply](1)
                self._waiters[ping.id] = pings
                try:
                    sock.send(encode(ping), zmq.NOBLOCK)
                    self._wake_reader_if_readable()
                    with anyio.move_on_after(LIVENESS_WAIT), pings, answered:
                        probe.heard(await answered.receive(), anyio.current_time())
                except anyio.EndOfStream:
                    pass  # a failed handshake: the request's own stream ends too
                finally:
                    self._waiters.pop(ping.id, None)
                if receive.statistics().current_buffer_used:
                    probe.alive(anyio.current_time())  # the request's own reply came meanwhile
                probe.due(anyio.current_time(), self._requests)  # unanswered: UNREACHABLE

    async def _answer(self, request: ServerRequest) -> Answer:
        """Run the handler for a server's request of the call this task waits for (awaited if async)."""
        handler = self._handlers.get(request.method)
        if handler is None:
            return answer_failed(request, f"this client has no handler for {request.method}")
        try:
            outcome = handler(request_params(request))
            if inspect.isawaitable(outcome):
                outcome = await outcome
            return answer_with(request, outcome)
        except Exception as exc:  # the handler's failure is the server's answer, not ours
            return answer_failed(request, f"{type(exc).__name__}: {exc}")

    def as_client(
        self,
        identity: str,
        *,
        on_sampling: Handler | None = None,
        on_elicitation: Handler | None = None,
    ) -> AsyncSupervisorClient:
        """This client's connection used as another client: its own identity (its own sessions on
        ``scope: client`` servers) and its own server-request handlers. For a process that serves many
        agents over one connection (the MCP facade: one per host session). Use it while this client is
        open; it is not entered or closed itself."""
        twin = copy.copy(self)  # the same socket, waiters and reader
        twin._origin, twin._open = self._origin or self, None
        twin._handlers = handlers(on_sampling, on_elicitation)
        twin._requests = self._requests.twin(identity, twin._handlers)
        return twin

    def _cancel(self, sock: zmq.Socket[bytes], id: int) -> None:
        """Send ``Cancel`` for a request nobody waits for any more; best effort, and never blocks (it
        runs while a cancellation unwinds): a full queue or a closed socket drop it."""
        try:
            sock.send(encode(Requests.cancel(id)), zmq.NOBLOCK)
            self._wake_reader_if_readable()
        except zmq.ZMQError:  # zmq.Again: the queue to the supervisor is full; or the client is closed
            pass

    async def _watch_handshakes(self, watch: HandshakeWatch) -> None:
        """A failed handshake ends every waiting request with its reason."""
        while True:
            if watch.update() is not None:
                for waiter in self._waiters.values():
                    waiter.close()
            if not readable(watch.monitor):
                await anyio.wait_readable(watch.fd)

    def _wake_reader_if_readable(self) -> None:
        # A send can consume the FD's edge while the reader waits on it.
        assert self._sock is not None
        reader = self._origin or self  # the client whose task reads
        if reader._reading is not None and readable(self._sock):
            reader._reading.cancel()

    async def _read_replies(self) -> None:
        sock = self._sock
        assert sock is not None
        fd = fd_of(sock)
        while True:
            try:
                while True:
                    try:
                        reply = decode_front_reply(sock.recv(zmq.NOBLOCK))
                    except msgspec.DecodeError:
                        continue  # not from a supervisor we understand; nobody is waiting for it
                    waiter = self._waiters.get(reply.id)
                    if waiter is not None:
                        waiter.send_nowait(reply)
            except zmq.Again:
                pass
            with anyio.CancelScope() as scope:
                self._reading = scope
                try:
                    if not readable(sock):
                        await anyio.wait_readable(fd)
                finally:
                    self._reading = None
