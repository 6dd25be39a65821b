"""The client stub agents use: ``SupervisorClient`` (blocking) and ``AsyncSupervisorClient``.

Both have the same methods, each one line over the shared core (``supervisor.client.exchanges``, which
builds every request and reads every reply); the blocking one lives here, the async one in
``supervisor.client.aio`` (re-exported here); ``openai_tools()`` and ``anthropic_tools()`` give the tools
in the formats of ``supervisor.adapters.formats``, where the tool sets for agent frameworks live too
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
import copy
import math
import threading
from collections.abc import Mapping
from time import monotonic
from typing import Any, Final, Literal, Self, TypeVar

import msgspec
import zmq

from supervisor.adapters.formats import anthropic_tool, openai_tool
from supervisor.client.aio import AsyncSupervisorClient
from supervisor.client.dial import dial, no_answer, unreachable
from supervisor.client.errors import SupervisorAuthenticationError, SupervisorError
from supervisor.client.exchanges import (
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
from supervisor.client.tool_cache import ToolCache
from supervisor.client.watch import EventWatch
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
from supervisor.shared.sockets import new_dealer

__all__ = [
    "AsyncSupervisorClient",
    "ClientKeys",
    "FrontStats",
    "ProgressCallback",
    "PromptInfo",
    "PromptResult",
    "ReloadSummary",
    "ResourceInfo",
    "ResourceResult",
    "ResourceTemplateInfo",
    "ServerStatus",
    "SupervisorClient",
    "ToolInfo",
    "ToolResult",
    "anthropic_tool",
    "openai_tool",
]

POLL_SLICE_MS: Final = 100  # a waiting call notices a close() from another thread this soon

_T = TypeVar("_T")


class SupervisorClient:
    """Blocking client; safe to share between threads. ``keys``: see the module docstring."""

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

    @property
    def identity(self) -> str:
        """This client's identity: its session on each ``scope: client`` server."""
        return self._requests.identity

    # ------------------------------------------------------------ the registry

    def list_tools(self, wait: float = 0.0) -> list[ToolInfo]:
        """The registry's tools; with ``wait``, once every server's first start is over (a supervisor
        just started answers with every ready server's tools), or after ``wait`` seconds at most."""
        return self._do(self._requests.list_tools(wait))

    def tool_list(self, wait: float = 0.0) -> ToolList:
        """The tools with the registry's ``version`` (it grows by one with each change) and the servers
        still ``starting`` for the first time; ``wait`` as for ``list_tools``."""
        return self._do(self._requests.tool_list(wait))

    def openai_tools(self) -> list[dict[str, Any]]:
        return [openai_tool(tool) for tool in self.list_tools()]

    def anthropic_tools(self) -> list[dict[str, Any]]:
        """The tools in Anthropic's format (``supervisor.adapters.formats.anthropic_tool``)."""
        return [anthropic_tool(tool) for tool in self.list_tools()]

    def events_endpoint(self) -> str:
        """Where the supervisor publishes its events."""
        return self._do(self._requests.events_endpoint())

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

    def _event_keys(self) -> ClientKeys | Literal[False]:
        return False if self.keys is None else self.keys

    # ---------------------------------------------------------------- calls

    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        *,
        raise_on_error: bool = True,
        progress: ProgressCallback | None = None,
    ) -> ToolResult:
        """Call a prefixed tool; ``timeout`` (seconds) defaults to the server's ``toolTimeout``.

        Raises ``ToolExecutionError`` when the tool reports ``isError`` (unless
        ``raise_on_error=False``), and another ``SupervisorError`` when there is no result.
        ``progress(progress, total, message)`` is called in this thread for each progress
        notification that arrives while the call waits (an exception it raises ends the wait).
        """
        return self._do(self._requests.call_tool(name, arguments, timeout, raise_on_error, progress))

    def list_resources(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> list[ResourceInfo]:
        """Resources of ``server``, or of every ready server (one that fails is logged and left out)."""
        return self._do(self._requests.list_resources(server, timeout))

    def list_resource_templates(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> list[ResourceTemplateInfo]:
        """Resource templates of ``server``, or of every ready server."""
        return self._do(self._requests.list_resource_templates(server, timeout))

    def read_resource(self, server: str, uri: str, *, timeout: float | None = None) -> ResourceResult:
        """Read ``uri`` from ``server``; ``timeout`` (seconds) defaults to the server's ``toolTimeout``."""
        return self._do(self._requests.read_resource(server, uri, timeout))

    def list_prompts(self, server: str | None = None, *, timeout: float | None = None) -> list[PromptInfo]:
        """Prompts of ``server``, or of every ready server, under their prefixed names."""
        return self._do(self._requests.list_prompts(server, timeout))

    def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        server: str | None = None,
        timeout: float | None = None,
    ) -> PromptResult:
        """Get a prompt by its prefixed name, or by the server's own name with ``server``."""
        return self._do(self._requests.get_prompt(name, arguments, server, timeout))

    def complete(
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
        return self._do(self._requests.complete(ref, argument, context, server, timeout))

    def set_log_level(self, level: str, server: str | None = None) -> None:
        """Ask ``server`` (every server by default) for log messages from ``level`` up (one of
        ``LOG_LEVELS``; ``""`` withdraws this connection's wish). A server is set to the most verbose
        level its connections ask for; its messages come as ``ServerMessage`` on ``watch(messages=True)``."""
        self._do(self._requests.set_log_level(level, server))

    def subscribe(self, server: str, uri: str) -> None:
        """Hear when ``server``'s resource ``uri`` changes: a ``ResourceUpdated`` on
        ``watch(messages=True)`` (kept across the server's restarts, until ``unsubscribe``)."""
        self._do(self._requests.subscribe(server, uri))

    def unsubscribe(self, server: str, uri: str) -> None:
        self._do(self._requests.unsubscribe(server, uri))

    # ------------------------------------------------------------ operations

    def status(self) -> list[ServerStatus]:
        return self._do(self._requests.status())

    def front_stats(self) -> FrontStats:
        """Requests in flight now, and what the supervisor refused or dropped since it started."""
        return self._do(self._requests.front_stats())

    def restart(self, server: str) -> None:
        """Restart a server's worker (coalesced with a restart already under way); counters reset."""
        self._do(self._requests.restart(server))

    def stop(self, server: str) -> None:
        """Stop a server's worker; it stays stopped until ``start`` or ``restart``."""
        self._do(self._requests.stop(server))

    def start(self, server: str) -> None:
        """Start a stopped or failed server (a running one is left alone)."""
        self._do(self._requests.start(server))

    def ping(self) -> None:
        self._do(self._requests.ping())

    def reload(self) -> ReloadSummary:
        """Re-read the supervisor's config file and apply what changed; returns once removed servers
        have stopped. A file that cannot be used raises ``BadRequestError`` and changes nothing."""
        return self._do(self._requests.reload(self.request_timeout))

    def logs(self, server: str, *, after: int = 0, limit: int = 100) -> ServerLog:
        """The newest ``limit`` lines of ``server``'s log (its stderr, its workers' warnings and errors)
        whose ``seq`` is above ``after``, oldest first; ``last`` is where to follow on from
        (``after=last``). An unknown server raises ``UnknownToolError``."""
        return self._do(self._requests.logs(server, after, limit))

    def shutdown(self, *, grace: float | None = None) -> None:
        """Ask the supervisor to stop as SIGTERM does: calls in flight get up to ``grace`` seconds
        (default: its ``shutdownGrace``), then every worker and server stops. Returns once it has
        agreed, before it is gone: it stops answering when it is."""
        self._do(self._requests.shutdown(grace))

    # ------------------------------------------------------------- transport

    def as_client(
        self,
        identity: str,
        *,
        on_sampling: Handler | None = None,
        on_elicitation: Handler | None = None,
    ) -> SupervisorClient:
        """This client's connections used as another client: its own identity (its own sessions on
        ``scope: client`` servers) and its own server-request handlers, for a process that serves many
        agents. Use it while this client is open; closing either closes both."""
        twin = copy.copy(self)  # the same sockets (one per thread) and ids
        twin._handlers = handlers(on_sampling, on_elicitation)
        twin._requests = self._requests.twin(identity, twin._handlers)
        return twin

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
