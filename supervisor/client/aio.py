"""``AsyncSupervisorClient``: the client stub for asyncio and trio (through anyio).

Above: agents' async code, as ``async with AsyncSupervisorClient() as sup``. Beside it: the blocking
``SupervisorClient`` (``supervisor.client.blocking``), with the same methods, written once for both
(``supervisor.client.methods``). Below: one DEALER and one reader that hands each reply to the
request waiting for its id (``Replies``), so any number of tasks may call at once on one client: on
asyncio with an ``ipc://`` endpoint our own (``supervisor.client.zmtp_link``), read by a callback of
the loop; else libzmq's (``supervisor.client.dial``), read by a callback on asyncio or a task on
trio. A failed CURVE handshake ends every waiting request with its reason.

A request whose waiting task is cancelled (its cancel scope, task group or asyncio task) while the
request is in flight is cancelled at the supervisor too: the client sends ``Cancel`` for it before
the cancellation goes on, and the supervisor tells the MCP server (``notifications/cancelled``).
So does a request the client stops waiting for for any other reason (its wait over, its progress
callback raising).
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, suppress
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import anyio
import anyio.abc
import msgspec
import zmq

from supervisor.client.aio_events import AsyncEventWatch, AsyncToolCache
from supervisor.client.answers import Handler, answer_failed, answer_with, request_params
from supervisor.client.dial import dial, no_answer, unreachable
from supervisor.client.errors import SupervisorError, SupervisorUnreachableError
from supervisor.client.exchanges import LIVENESS_TICK, LIVENESS_WAIT, Exchange, Requests
from supervisor.client.liveness import Liveness
from supervisor.client.methods import Methods, StubBase, awaiting
from supervisor.client.replies import Replies
from supervisor.client.zmtp_link import ZmtpLink
from supervisor.protocol import (
    Answer,
    CallProgress,
    FrontReply,
    FrontRequest,
    ProgressCallback,
    ServerRequest,
    ToolInfo,
    decode_front_reply,
    encode,
)
from supervisor.security.curve import HandshakeWatch
from supervisor.shared.sockets import fd_of, new_dealer, readable
from supervisor.shared.zmtp import native_path

__all__ = ["AsyncSupervisorClient"]

_T = TypeVar("_T")


class AsyncSupervisorClient(StubBase):
    """Async client for asyncio and trio; use it as ``async with``. ``keys``: see
    ``supervisor.client.blocking``."""

    def _init_transport(self) -> None:
        self._sock: zmq.Socket[bytes] | None = None  # libzmq's DEALER, or
        self._link: ZmtpLink | None = None  # on asyncio and ipc, our own
        self._watch: HandshakeWatch | None = None
        self._waiters: dict[int, Replies] = {}
        self._open: AsyncExitStack | None = None  # what __aexit__ undoes
        self._origin: AsyncSupervisorClient | None = None  # for ``as_client``: the client that reads
        self._future: Callable[[], Awaitable[None]] | None = None  # asyncio's loop.create_future
        self._loop: Any = None  # on asyncio, its running loop (its clock and timers are the waits')

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            stack.callback(self._ctx.destroy, linger=0)
            if self._link_in_loop(stack):
                self._open = stack.pop_all()
                return self
            self._sock, self._watch = dial(
                lambda: new_dealer(self._ctx), self.endpoint, self.keys, unreachable(self.endpoint)
            )
            stack.callback(self._sock.close, linger=0)
            if self._watch is not None:
                stack.callback(self._watch.close)
            tasks = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tasks.cancel_scope.cancel)  # undone first: the tasks end, then the sockets close
            if not self._read_in_loop(self._sock, stack):
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

    # ------------------------------------------------------------ the registry

    list_tools = awaiting(Methods.list_tools)
    tool_list = awaiting(Methods.tool_list)
    openai_tools = awaiting(Methods.openai_tools)
    anthropic_tools = awaiting(Methods.anthropic_tools)
    events_endpoint = awaiting(Methods.events_endpoint)

    async def watch(self, *, messages: bool = False) -> AsyncEventWatch:
        """A subscription to registry and state events: ``async with await sup.watch() as events``;
        with ``messages``, the servers' log messages and resource updates too (as
        ``SupervisorClient.watch``)."""
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

    # ---------------------------------------------------------------- calls

    call_tool = awaiting(Methods.call_tool)
    list_resources = awaiting(Methods.list_resources)
    list_resource_templates = awaiting(Methods.list_resource_templates)
    read_resource = awaiting(Methods.read_resource)
    list_prompts = awaiting(Methods.list_prompts)
    get_prompt = awaiting(Methods.get_prompt)
    complete = awaiting(Methods.complete)
    set_log_level = awaiting(Methods.set_log_level)
    subscribe = awaiting(Methods.subscribe)
    unsubscribe = awaiting(Methods.unsubscribe)

    # ------------------------------------------------------------ operations

    status = awaiting(Methods.status)
    front_stats = awaiting(Methods.front_stats)
    restart = awaiting(Methods.restart)
    stop = awaiting(Methods.stop)
    start = awaiting(Methods.start)
    ping = awaiting(Methods.ping)
    reload = awaiting(Methods.reload)
    logs = awaiting(Methods.logs)
    audit = awaiting(Methods.audit)
    shutdown = awaiting(Methods.shutdown)

    # ------------------------------------------------------------- transport

    async def _do(self, exchange: Exchange[_T]) -> _T:
        with exchange.traced():
            return exchange.parse(await self._request(exchange.request, exchange.wait, exchange.progress))

    async def _request(
        self, request: FrontRequest, wait: float | None = None, progress: ProgressCallback | None = None
    ) -> FrontReply:
        if self._sock is None and self._link is None:
            raise SupervisorError("use the client as 'async with AsyncSupervisorClient() as sup'")
        wait = self.request_timeout if wait is None else wait
        receive = self._waiters[request.id] = Replies((self._origin or self)._future)
        in_flight = False  # sent, and not yet answered
        try:
            if self._watch is not None and self._sock is not None:
                self._watch.redial(self._sock)
            self._send(encode(request))
            in_flight = True
            probe = Liveness(wait, self.endpoint)
            loop = (self._origin or self)._loop
            deadline = (anyio.current_time() if loop is None else loop.time()) + wait
            while (reply := await self._next_reply(receive, probe, deadline)) is not None:
                if isinstance(reply, ServerRequest):
                    with anyio.CancelScope(deadline=deadline):
                        self._send(encode(await self._answer(reply)))
                    continue
                if not isinstance(reply, CallProgress):
                    in_flight = False
                    return reply
                if progress is not None and inspect.isawaitable(
                    notified := progress(reply.progress, reply.total, reply.message)
                ):
                    with anyio.CancelScope(deadline=deadline):
                        await notified
            while receive.pending:  # the wait is over: its answer may have come while a handler ran late
                reply = receive.receive_nowait()
                if not isinstance(reply, CallProgress | ServerRequest):
                    in_flight = False
                    return reply
        finally:
            del self._waiters[request.id]
            if in_flight:  # cancelled, or given up on: the supervisor need not carry on with it
                self._cancel(request.id)
        raise no_answer(self.endpoint, wait, self._watch)  # or a failed handshake closed `receive`

    async def _next_reply(self, receive: Replies, probe: Liveness, deadline: float) -> FrontReply | None:
        """The next reply to one request, or None once ``deadline`` has passed or a failed handshake
        ended the wait. In a long wait, the supervisor is pinged when it falls silent (``Liveness``:
        ``SupervisorUnreachableError`` when it does not answer). Each reply is waited for until the
        wait's deadline, or the next look at the silence when that comes first: on asyncio with a
        timer of the loop's (an anyio cancel scope costs several times as much), else in a cancel
        scope."""
        loop = (self._origin or self)._loop
        clock: Callable[[], float] = anyio.current_time if loop is None else loop.time
        while True:
            now = clock()
            if now >= deadline:
                return None
            until = min(deadline, now + LIVENESS_TICK) if probe.on else deadline
            try:
                reply = await receive.receive_before(loop, until)
            except anyio.EndOfStream:
                return None
            if reply is not None:
                if probe.on:
                    probe.heard(reply, clock())
                return reply
            ping = probe.due(clock(), self._requests)
            if ping is not None:
                answered = self._waiters[ping.id] = Replies((self._origin or self)._future)
                try:
                    self._send(encode(ping))
                    with anyio.CancelScope(deadline=min(deadline, clock() + LIVENESS_WAIT)):
                        probe.heard(await answered.receive(), clock())
                except anyio.EndOfStream:
                    pass  # a failed handshake: the request's own stream ends too
                finally:
                    self._waiters.pop(ping.id, None)
                if receive.pending:
                    probe.alive(clock())  # the request's own reply came meanwhile
                elif clock() < deadline:
                    probe.due(clock(), self._requests)  # unanswered: UNREACHABLE

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
        principal: str = "",
        session: str = "",
        on_sampling: Handler | None = None,
        on_elicitation: Handler | None = None,
    ) -> AsyncSupervisorClient:
        """This client's connection used as another client: its own identity (its own sessions on
        ``scope: client`` servers) and its own server-request handlers. For a process that serves many
        agents over one connection (the MCP facade: one per host session). ``principal`` (who the caller
        authenticated as) and ``session`` (the host session) go with its every call, read and prompt,
        for the audit trail (1 to 128 printable characters each, or ""). Use it while this client is
        open; it is not entered or closed itself."""
        # the same socket, waiters and reader
        twin = self._twin(identity, on_sampling, on_elicitation, principal, session)
        twin._origin, twin._open = self._origin or self, None
        return twin

    def _send(self, data: bytes) -> None:
        """Send one request; never blocks."""
        if self._link is not None:
            self._link.send(data)
            return
        assert self._sock is not None
        self._sock.send(data, zmq.NOBLOCK)
        self._wake_reader_if_readable()

    def _cancel(self, id: int) -> None:
        """Send ``Cancel`` for a request nobody waits for any more; best effort, and never blocks (it
        runs while a cancellation unwinds): a full queue or a closed socket drop it."""
        with suppress(zmq.ZMQError, ConnectionError):  # zmq.Again: the queue is full; or the client is closed
            self._send(encode(Requests.cancel(id)))

    async def _watch_handshakes(self, watch: HandshakeWatch) -> None:
        """A failed handshake ends every waiting request with its reason."""
        while True:
            if watch.update() is not None:
                for waiter in self._waiters.values():
                    waiter.close()
            if not readable(watch.monitor):
                await anyio.wait_readable(watch.fd)

    def _wake_reader_if_readable(self) -> None:
        """After a send: the replies it made readable, handed to their waiters now. A send can consume
        the FD's edge while the reader waits on it (the reader would not wake for them), so the sender
        reads them itself, as the reader would; once the queue is read empty, the next reply raises a
        new edge, and the reader wakes for it."""
        assert self._sock is not None
        (self._origin or self)._hand_out(self._sock)

    def _hand_out(self, sock: zmq.Socket[bytes]) -> None:
        """Every reply queued, to the request waiting for its id (none waits: dropped). The queue is
        asked before each read (which also re-arms the FD's edge), so that no read fails."""
        while readable(sock):
            self._take(sock.recv(zmq.NOBLOCK))

    def _take(self, payload: bytes) -> None:
        """A reply, to the request waiting for its id (none waits: dropped)."""
        try:
            reply = decode_front_reply(payload)
        except msgspec.DecodeError:
            return  # not from a supervisor we understand; nobody is waiting for it
        waiter = self._waiters.get(reply.id)
        if waiter is not None:
            waiter.send_nowait(reply)

    def _link_in_loop(self, stack: AsyncExitStack) -> bool:
        """On asyncio and an ``ipc://`` endpoint, our own DEALER (``supervisor.client.zmtp_link``),
        read by a callback of the loop's; False elsewhere (libzmq's)."""
        asyncio = sys.modules.get("asyncio")  # loaded when the application runs on it; never imported here
        path = native_path(self.endpoint)
        if asyncio is None or path is None or self.keys is not None:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no asyncio loop: trio's
            return False
        if not path.startswith("@") and not os.path.exists(path):
            raise SupervisorUnreachableError(unreachable(self.endpoint)(Path(path)))
        self._link = ZmtpLink(loop, path, self._take)
        stack.callback(self._link.close)
        self._future = loop.create_future
        self._loop = loop
        return True

    def _read_in_loop(self, sock: zmq.Socket[bytes], stack: AsyncExitStack) -> bool:
        """On asyncio, the replies are read by a callback the event loop runs whenever the socket's FD is
        readable, registered once: no task woken for each reply, nor an FD registered and dropped for
        each wait, as ``anyio.wait_readable`` does. False elsewhere (trio): a task reads them."""
        asyncio = sys.modules.get("asyncio")  # loaded when the application runs on it; never imported here
        if asyncio is None:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no asyncio loop: trio's
            return False
        fd = fd_of(sock)
        loop.add_reader(fd, self._hand_out, sock)
        stack.callback(loop.remove_reader, fd)
        self._future = loop.create_future
        self._loop = loop
        return True

    async def _read_replies(self) -> None:
        sock = self._sock
        assert sock is not None
        fd = fd_of(sock)
        while True:
            self._hand_out(sock)  # until the queue is empty: the FD's edge re-armed
            await anyio.wait_readable(fd)
