"""The client stub agents use: ``SupervisorClient`` (blocking) and ``AsyncSupervisorClient``.

Both have the same methods, written once (``supervisor.client.methods``: each builds its request with
``supervisor.client.exchanges`` and reads its reply); the blocking one lives here, the async one in
``supervisor.client.aio``. ``openai_tools()`` and ``anthropic_tools()`` give the tools in the formats
of ``supervisor.adapters.formats``, where the tool sets for agent frameworks live too
(``supervisor.adapters``). Both find the supervisor as the CLI does (an explicit
endpoint, else ``$MCP_SUPERVISOR_ENDPOINT``, else the per-user default), speak the front
protocol of ``supervisor.protocol`` over a ZeroMQ DEALER, and raise the
exceptions of ``supervisor.client.errors``.

On an endpoint other than ``ipc://`` (``tcp://``) they use CurveZMQ with the
``keys`` they are given (``ClientKeys``, or a key directory), else the key
directory ``$MCP_SUPERVISOR_KEYS`` or ``~/.config/mcp-supervisor/keys`` when it
holds ``client.key_secret`` (see ``supervisor.security.keys``); ``keys=False``: plain
TCP. A supervisor that refuses the handshake (a key it does not allow, CURVE on
one side only) raises ``SupervisorAuthenticationError`` saying which.

- ``SupervisorClient`` is thread-safe: each thread gets its own socket, so
  threads call concurrently; replies are matched by request id.
- ``AsyncSupervisorClient`` runs on asyncio and on trio (through anyio). Use
  it as ``async with``: one reader task demultiplexes replies by id, so any
  number of tasks may call at once on one client.

A request the client stops waiting for before its reply (its wait is over, its progress callback
raised, Ctrl-C in a blocking call, the task of an async call cancelled) is cancelled at the
supervisor: the client sends ``Cancel`` for it, and its MCP server is sent
``notifications/cancelled``.

``call_tool(..., progress=fn)`` asks for the server's progress notifications:
``fn(progress, total, message)`` is called in the calling thread (or task)
while the call waits, at most about ten times a second, the last one before
the result. Without ``progress`` none are sent.

Example::

    with SupervisorClient() as sup:
        result = sup.call_tool("mcp_time_get_current_time", {"timezone": "UTC"}, timeout=5)
        print(result.text)
"""

from __future__ import annotations

import contextlib
import math
import threading
from time import monotonic
from typing import Final, Self, TypeVar

import msgspec
import zmq

from supervisor.client.answers import Handler, answer_failed, answer_with, request_params
from supervisor.client.dial import dial, no_answer, unreachable
from supervisor.client.errors import SupervisorAuthenticationError, SupervisorError
from supervisor.client.exchanges import Exchange, Requests
from supervisor.client.liveness import Liveness
from supervisor.client.methods import Methods, StubBase, blocking
from supervisor.client.tool_cache import ToolCache
from supervisor.client.watch import EventWatch
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
from supervisor.shared.sockets import new_dealer

__all__ = ["SupervisorClient"]

POLL_SLICE_MS: Final = 100  # a waiting call notices a close() from another thread this soon

_T = TypeVar("_T")


class SupervisorClient(StubBase):
    """Blocking client; safe to share between threads. ``keys``: see the module docstring."""

    def _init_transport(self) -> None:
        self._local = threading.local()
        self._sockets: list[zmq.Socket[bytes]] = []
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for sock in self._sockets:
                sock.close(linger=0)
            self._sockets.clear()
        self._ctx.destroy(linger=0)

    # ------------------------------------------------------------ the registry

    list_tools = blocking(Methods.list_tools)
    tool_list = blocking(Methods.tool_list)
    openai_tools = blocking(Methods.openai_tools)
    anthropic_tools = blocking(Methods.anthropic_tools)
    events_endpoint = blocking(Methods.events_endpoint)

    def watch(self, *, messages: bool = False) -> EventWatch:
        """A subscription to registry and state events: ``with sup.watch() as events: for e in events``;
        with ``messages``, the servers' log messages (``ServerMessage``, see ``set_log_level``) and
        updates of the resources subscribed to (``ResourceUpdated``, see ``subscribe``) too.

        It returns once the subscription is live: every change after that is seen.
        """
        watch = EventWatch(self.events_endpoint(), keys=self._event_keys(), messages=messages)
        watch.join()
        return watch

    def tool_cache(self) -> ToolCache:
        """The tool list, kept current by the supervisor's events: ``cache.tools()`` never asks it."""

        def listing() -> tuple[list[ToolInfo], int]:
            reply = self.tool_list()
            return reply.tools, reply.version

        return ToolCache(self.events_endpoint(), listing, keys=self._event_keys())

    # ---------------------------------------------------------------- calls

    call_tool = blocking(Methods.call_tool)
    list_resources = blocking(Methods.list_resources)
    list_resource_templates = blocking(Methods.list_resource_templates)
    read_resource = blocking(Methods.read_resource)
    list_prompts = blocking(Methods.list_prompts)
    get_prompt = blocking(Methods.get_prompt)
    complete = blocking(Methods.complete)
    set_log_level = blocking(Methods.set_log_level)
    subscribe = blocking(Methods.subscribe)
    unsubscribe = blocking(Methods.unsubscribe)

    # ------------------------------------------------------------ operations

    status = blocking(Methods.status)
    front_stats = blocking(Methods.front_stats)
    restart = blocking(Methods.restart)
    stop = blocking(Methods.stop)
    start = blocking(Methods.start)
    ping = blocking(Methods.ping)
    reload = blocking(Methods.reload)
    logs = blocking(Methods.logs)
    audit = blocking(Methods.audit)
    shutdown = blocking(Methods.shutdown)

    # ------------------------------------------------------------- transport

    def as_client(
        self,
        identity: str,
        *,
        principal: str = "",
        session: str = "",
        on_sampling: Handler | None = None,
        on_elicitation: Handler | None = None,
    ) -> SupervisorClient:
        """This client's connections used as another client: its own identity (its own sessions on
        ``scope: client`` servers) and its own server-request handlers, for a process that serves many
        agents. ``principal`` and ``session``: as for ``AsyncSupervisorClient.as_client``. Use it while
        this client is open; closing either closes both."""
        # the same sockets (one per thread)
        return self._twin(identity, on_sampling, on_elicitation, principal, session)

    def _answer(self, request: ServerRequest) -> Answer:
        """Run the handler for a server's request of the call we wait for, in this thread."""
        handler = self._handlers.get(request.method)
        if handler is None:
            return answer_failed(request, f"this client has no handler for {request.method}")
        try:
            return answer_with(request, handler(request_params(request)))
        except Exception as exc:  # the handler's failure is the server's answer, not ours
            return answer_failed(request, f"{type(exc).__name__}: {exc}")

    def _do(self, exchange: Exchange[_T]) -> _T:
        with exchange.traced():
            return exchange.parse(self._request(exchange.request, exchange.wait, exchange.progress))

    def _socket(self) -> tuple[zmq.Socket[bytes], HandshakeWatch | None]:
        sock: zmq.Socket[bytes] | None = getattr(self._local, "sock", None)
        if sock is None:
            with self._lock:
                if self._closed:
                    raise SupervisorError("client is closed")
                sock, watch = dial(
                    lambda: new_dealer(self._ctx), self.endpoint, self.keys, unreachable(self.endpoint)
                )
                self._sockets.append(sock)
                if watch is not None:
                    self._sockets.append(watch.monitor)
            self._local.sock, self._local.watch = sock, watch
        return sock, self._local.watch

    def _request(
        self, request: FrontRequest, wait: float | None = None, progress: ProgressCallback | None = None
    ) -> FrontReply:
        try:
            return self._exchange(request, wait, progress)
        except zmq.ZMQError as exc:  # close() from another thread closed this thread's socket under it
            if self._closed:
                raise SupervisorError("client is closed") from exc
            raise SupervisorError(f"ZeroMQ error talking to {self.endpoint}: {exc}") from exc

    def _exchange(
        self, request: FrontRequest, wait: float | None, progress: ProgressCallback | None
    ) -> FrontReply:
        sock, watch = self._socket()
        wait = self.request_timeout if wait is None else wait
        if watch is not None:
            watch.redial(sock)
        sock.send(encode(request))
        answered = False
        probe = Liveness(
            wait, self.endpoint
        )  # a long wait pings a silent supervisor: one killed leaves its socket
        try:
            deadline = monotonic() + wait
            while True:
                if self._closed:  # close() from another thread: its socket may be gone under our poll
                    raise SupervisorError("client is closed")
                remaining = deadline - monotonic()  # past it, one last look (a handler ran late)
                if not sock.poll(max(0, min(POLL_SLICE_MS, math.ceil(remaining * 1000)))):
                    if watch is not None and (failure := watch.update()) is not None:
                        raise SupervisorAuthenticationError(failure)
                    if remaining <= 0:
                        break
                    if (ping := probe.due(monotonic(), self._requests)) is not None:
                        sock.send(encode(ping), zmq.NOBLOCK)
                    continue
                try:
                    reply: FrontReply = decode_front_reply(sock.recv())
                except msgspec.DecodeError as exc:
                    raise SupervisorError(f"undecodable reply from {self.endpoint}: {exc}") from exc
                if probe.heard(reply, monotonic()):
                    continue
                if isinstance(reply, CallProgress):
                    if progress is not None and reply.id == request.id:
                        progress(reply.progress, reply.total, reply.message)
                    continue
                if isinstance(reply, ServerRequest):
                    if reply.id == request.id:
                        sock.send(encode(self._answer(reply)))
                    continue
                if reply.id == request.id:
                    answered = True
                    return reply
                # a late reply to an earlier request this thread gave up on: drop it
            raise no_answer(self.endpoint, wait, watch)
        finally:
            if not answered and not self._closed:
                # Given up on (its wait over, Ctrl-C, the progress callback raised): cancel it, so that
                # neither the supervisor nor the server carries on with it. Best effort, never blocking.
                with contextlib.suppress(zmq.ZMQError):  # zmq.Again: the queue is full
                    sock.send(encode(Requests.cancel(request.id)), zmq.NOBLOCK)
