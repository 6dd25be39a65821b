"""The client stub agents use: ``SupervisorClient`` (blocking) and ``AsyncSupervisorClient``.

Both find the supervisor as the CLI does (an explicit endpoint, else
``$MCP_SUPERVISOR_ENDPOINT``, else the per-user default), speak the front
protocol of ``supervisor.protocol`` over a ZeroMQ DEALER, and raise the
exceptions of ``supervisor.errors``.

On an endpoint other than ``ipc://`` (``tcp://``) they use CurveZMQ with the
``keys`` they are given (``ClientKeys``, or a key directory), else the key
directory ``$MCP_SUPERVISOR_KEYS`` or ``~/.config/mcp-supervisor/keys`` when it
holds ``client.key_secret`` (see ``supervisor.keys``); ``keys=False``: plain
TCP. A supervisor that refuses the handshake (a key it does not allow, CURVE on
one side only) raises ``SupervisorAuthenticationError`` saying which.

- ``SupervisorClient`` is thread-safe: each thread gets its own socket, so
  threads call concurrently; replies are matched by request id.
- ``AsyncSupervisorClient`` runs on asyncio and on trio (through anyio). Use
  it as ``async with``: one reader task demultiplexes replies by id, so any
  number of tasks may call at once on one client.

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

import inspect
import itertools
import logging
import math
import threading
from collections.abc import Callable, Mapping
from time import monotonic
from types import TracebackType
from typing import Any, Final, Literal, Self, TypeVar

import anyio
import anyio.abc
import msgspec
import zmq
from anyio.streams.memory import MemoryObjectSendStream

from supervisor._zmq import MAX_MESSAGE_SIZE, fd_of, readable
from supervisor.curve import HandshakeWatch
from supervisor.errors import (
    SupervisorAuthenticationError,
    SupervisorError,
    SupervisorUnreachableError,
    ToolExecutionError,
    error_for,
)
from supervisor.events import AsyncEventWatch, EventWatch, ToolCache
from supervisor.keys import ClientKeys, Keys, client_keys, needs_curve
from supervisor.paths import ipc_path, resolve_endpoint
from supervisor.protocol import (
    CallProgress,
    CallResult,
    CallTool,
    Done,
    ErrorReply,
    FrontReply,
    FrontRequest,
    FrontStats,
    GetPrompt,
    GetStatus,
    Listing,
    ListPrompts,
    ListResources,
    ListResourceTemplates,
    ListTools,
    Ping,
    ProgressCallback,
    PromptInfo,
    PromptResult,
    ReadResource,
    Reload,
    Reloaded,
    ReloadSummary,
    ResourceInfo,
    ResourceResult,
    ResourceTemplateInfo,
    Restart,
    ServerStatus,
    Start,
    StatusReply,
    Stop,
    ToolInfo,
    ToolList,
    ToolResult,
    decode_front_reply,
    encode,
)

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
    "openai_tool",
]

log = logging.getLogger("mcp_supervisor.client")

REQUEST_TIMEOUT: Final = 10.0  # seconds to wait for an answer to list/status/restart/ping
CALL_WAIT_WITHOUT_TIMEOUT: Final = (
    3600.0  # seconds a call with no timeout waits (the server's toolTimeout rules)
)
RELOAD_WAIT: Final = 30.0  # seconds for a reload: removed servers' workers get up to 10 s each to stop
REPLY_MARGIN: Final = 2.0  # seconds past a call's own timeout before the client stops waiting

_decode_result = msgspec.msgpack.Decoder(ToolResult).decode
_encode_arguments = msgspec.msgpack.Encoder().encode
_decode_resources = msgspec.msgpack.Decoder(list[ResourceInfo]).decode
_decode_templates = msgspec.msgpack.Decoder(list[ResourceTemplateInfo]).decode
_decode_prompts = msgspec.msgpack.Decoder(list[PromptInfo]).decode
_decode_resource = msgspec.msgpack.Decoder(ResourceResult).decode
_decode_prompt = msgspec.msgpack.Decoder(PromptResult).decode


def openai_tool(tool: ToolInfo) -> dict[str, Any]:
    """A tool in OpenAI's function-calling format."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema},
    }


def _new_socket(
    ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, keys: ClientKeys | None
) -> tuple[zmq.Socket[bytes], HandshakeWatch | None]:
    """A DEALER connected to ``endpoint`` (CURVE with ``keys``), and a watch on its handshakes for
    endpoints where they can fail (all but ipc)."""
    path = ipc_path(endpoint)
    if path is not None and not path.exists():
        raise SupervisorUnreachableError(
            f"no supervisor at {endpoint}: {path} does not exist (is 'mcp-supervisor run' running?)"
        )
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.setsockopt(zmq.RCVHWM, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_SIZE)
    if keys is not None:
        keys.connect(sock)
    watch = HandshakeWatch(sock, endpoint, keys) if needs_curve(endpoint) else None
    try:
        sock.connect(endpoint)
    except zmq.ZMQError as exc:
        if watch is not None:
            watch.close()
        sock.close(linger=0)
        raise SupervisorUnreachableError(f"cannot connect to {endpoint!r}: {exc}") from exc
    return sock, watch


def _no_answer(endpoint: str, wait: float, watch: HandshakeWatch | None) -> SupervisorUnreachableError:
    if watch is not None and watch.failure is not None:
        return SupervisorAuthenticationError(watch.failure)
    return SupervisorUnreachableError(f"no answer from the supervisor at {endpoint} within {wait:g} s")


def _call_request(
    id: int, name: str, arguments: Mapping[str, Any] | None, timeout: float | None, progress: bool = False
) -> CallTool:
    if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return CallTool(
        id=id,
        name=name,
        arguments=msgspec.Raw(_encode_arguments(arguments or {})),
        timeout=timeout,
        progress=progress,
    )


def _check_timeout(timeout: float | None) -> float | None:
    if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return timeout


def _prompt_request(
    id: int, name: str, arguments: Mapping[str, str] | None, server: str | None, timeout: float | None
) -> GetPrompt:
    raw = msgspec.Raw(_encode_arguments(arguments or {}))
    return GetPrompt(id=id, name=name, arguments=raw, server=server, timeout=_check_timeout(timeout))


def _entries(reply: FrontReply, decode: Callable[[bytes], list[_E]]) -> list[_E]:
    """Every server's entries of a ``Listing``; a server that did not answer is logged and left out."""
    listing = _expect(reply, Listing)
    for failure in listing.failures:
        log.warning("left out of the listing: %s: %s", failure.code, failure.message)
    return [entry for part in listing.parts for entry in decode(part)]


def _fetched(reply: FrontReply, decode: Callable[[bytes], _R]) -> _R:
    return decode(_expect(reply, CallResult).result)


def _call_wait(timeout: float | None) -> float:
    return (CALL_WAIT_WITHOUT_TIMEOUT if timeout is None else timeout) + REPLY_MARGIN


def _result(reply: FrontReply, name: str, raise_on_error: bool) -> ToolResult:
    match _checked(reply):
        case CallResult(result=raw):
            result = _decode_result(raw)
            if result.is_error and raise_on_error:
                raise ToolExecutionError(f"tool {name!r} reported an error: {result.text}", result)
            return result
    raise SupervisorError(f"unexpected reply {type(reply).__name__} to a tool call")


def _checked(reply: FrontReply) -> FrontReply:
    if isinstance(reply, ErrorReply):
        raise error_for(reply.code, reply.message)
    return reply


_T = TypeVar("_T")
_E = TypeVar("_E", ResourceInfo, ResourceTemplateInfo, PromptInfo)
_R = TypeVar("_R", ResourceResult, PromptResult)


def _expect(reply: FrontReply, kind: type[_T]) -> _T:
    reply = _checked(reply)
    if not isinstance(reply, kind):
        raise SupervisorError(f"unexpected reply {type(reply).__name__}, wanted {kind.__name__}")
    return reply


POLL_SLICE_MS: Final = 100  # a waiting call notices a close() from another thread this soon


class SupervisorClient:
    """Blocking client; safe to share between threads. ``keys``: see the module docstring."""

    def __init__(
        self, endpoint: str | None = None, *, request_timeout: float = REQUEST_TIMEOUT, keys: Keys = None
    ) -> None:
        self.endpoint = resolve_endpoint(endpoint)
        self.keys = client_keys(keys, self.endpoint)
        self.request_timeout = request_timeout
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._local = threading.local()
        self._sockets: list[zmq.Socket[bytes]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
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

    def list_tools(self) -> list[ToolInfo]:
        return self.tool_list().tools

    def tool_list(self) -> ToolList:
        """The tools with the registry's ``version`` (it grows by one with each change)."""
        return _expect(self._request(ListTools(id=next(self._ids))), ToolList)

    def events_endpoint(self) -> str:
        """Where the supervisor publishes its events."""
        return _expect(self._request(GetStatus(id=next(self._ids))), StatusReply).events

    def watch(self) -> EventWatch:
        """A subscription to registry and state events: ``with sup.watch() as events: for e in events``.

        It returns once the subscription is live: every change after that is seen.
        """
        watch = EventWatch(self.events_endpoint(), keys=self._event_keys())
        watch.join()
        return watch

    def tool_cache(self) -> ToolCache:
        """The tool list, kept current by the supervisor's events: ``cache.tools()`` never asks it."""

        def listing() -> tuple[list[ToolInfo], int]:
            reply = self.tool_list()
            return reply.tools, reply.version

        return ToolCache(self.events_endpoint(), listing, keys=self._event_keys())

    def openai_tools(self) -> list[dict[str, Any]]:
        return [openai_tool(tool) for tool in self.list_tools()]

    def _event_keys(self) -> ClientKeys | Literal[False]:
        return False if self.keys is None else self.keys

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
        request = _call_request(next(self._ids), name, arguments, timeout, progress is not None)
        return _result(self._request(request, _call_wait(timeout), progress), name, raise_on_error)

    def list_resources(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> list[ResourceInfo]:
        """Resources of ``server``, or of every ready server (one that fails is logged and left out)."""
        request = ListResources(id=next(self._ids), server=server, timeout=_check_timeout(timeout))
        return _entries(self._request(request, _call_wait(timeout)), _decode_resources)

    def list_resource_templates(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> list[ResourceTemplateInfo]:
        """Resource templates of ``server``, or of every ready server."""
        request = ListResourceTemplates(id=next(self._ids), server=server, timeout=_check_timeout(timeout))
        return _entries(self._request(request, _call_wait(timeout)), _decode_templates)

    def read_resource(self, server: str, uri: str, *, timeout: float | None = None) -> ResourceResult:
        """Read ``uri`` from ``server``; ``timeout`` (seconds) defaults to the server's ``toolTimeout``."""
        request = ReadResource(id=next(self._ids), server=server, uri=uri, timeout=_check_timeout(timeout))
        return _fetched(self._request(request, _call_wait(timeout)), _decode_resource)

    def list_prompts(self, server: str | None = None, *, timeout: float | None = None) -> list[PromptInfo]:
        """Prompts of ``server``, or of every ready server, under their prefixed names."""
        request = ListPrompts(id=next(self._ids), server=server, timeout=_check_timeout(timeout))
        return _entries(self._request(request, _call_wait(timeout)), _decode_prompts)

    def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        server: str | None = None,
        timeout: float | None = None,
    ) -> PromptResult:
        """Get a prompt by its prefixed name, or by the server's own name with ``server``."""
        request = _prompt_request(next(self._ids), name, arguments, server, timeout)
        return _fetched(self._request(request, _call_wait(timeout)), _decode_prompt)

    def status(self) -> list[ServerStatus]:
        return _expect(self._request(GetStatus(id=next(self._ids))), StatusReply).servers

    def front_stats(self) -> FrontStats:
        """Requests in flight now, and what the supervisor refused or dropped since it started."""
        return _expect(self._request(GetStatus(id=next(self._ids))), StatusReply).front or FrontStats()

    def restart(self, server: str) -> None:
        """Restart a server's worker (coalesced with a restart already under way); counters reset."""
        _expect(self._request(Restart(id=next(self._ids), server=server)), Done)

    def stop(self, server: str) -> None:
        """Stop a server's worker; it stays stopped until ``start`` or ``restart``."""
        _expect(self._request(Stop(id=next(self._ids), server=server)), Done)

    def start(self, server: str) -> None:
        """Start a stopped or failed server (a running one is left alone)."""
        _expect(self._request(Start(id=next(self._ids), server=server)), Done)

    def ping(self) -> None:
        _expect(self._request(Ping(id=next(self._ids))), Done)

    def reload(self) -> ReloadSummary:
        """Re-read the supervisor's config file and apply what changed; returns once removed servers
        have stopped. A file that cannot be used raises ``BadRequestError`` and changes nothing."""
        wait = max(self.request_timeout, RELOAD_WAIT)
        return _expect(self._request(Reload(id=next(self._ids)), wait), Reloaded).summary

    def _socket(self) -> tuple[zmq.Socket[bytes], HandshakeWatch | None]:
        sock: zmq.Socket[bytes] | None = getattr(self._local, "sock", None)
        if sock is None:
            with self._lock:
                if self._closed:
                    raise SupervisorError("client is closed")
                sock, watch = _new_socket(self._ctx, self.endpoint, self.keys)
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
        deadline = monotonic() + wait
        while (remaining := deadline - monotonic()) > 0:
            if self._closed:  # close() from another thread: its socket may be gone under our poll
                raise SupervisorError("client is closed")
            if not sock.poll(max(1, min(POLL_SLICE_MS, math.ceil(remaining * 1000)))):
                if watch is not None and (failure := watch.update()) is not None:
                    raise SupervisorAuthenticationError(failure)
                continue
            try:
                reply: FrontReply = decode_front_reply(sock.recv())
            except msgspec.DecodeError as exc:
                raise SupervisorError(f"undecodable reply from {self.endpoint}: {exc}") from exc
            if isinstance(reply, CallProgress):
                if progress is not None and reply.id == request.id:
                    progress(reply.progress, reply.total, reply.message)
                continue
            if reply.id == request.id:
                return reply
            # a late reply to an earlier request this thread gave up on: drop it
        raise _no_answer(self.endpoint, wait, watch)


class AsyncSupervisorClient:
    """Async client for asyncio and trio; use it as ``async with``. ``keys``: see the module docstring."""

    def __init__(
        self, endpoint: str | None = None, *, request_timeout: float = REQUEST_TIMEOUT, keys: Keys = None
    ) -> None:
        self.endpoint = resolve_endpoint(endpoint)
        self.keys = client_keys(keys, self.endpoint)
        self.request_timeout = request_timeout
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._sock: zmq.Socket[bytes] | None = None
        self._watch: HandshakeWatch | None = None
        self._ids = itertools.count(1)
        self._waiters: dict[int, MemoryObjectSendStream[FrontReply]] = {}
        self._task_group: anyio.abc.TaskGroup | None = None
        self._reading: anyio.CancelScope | None = None

    async def __aenter__(self) -> Self:
        self._sock, self._watch = _new_socket(self._ctx, self.endpoint, self.keys)
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(self._read_replies)
        if self._watch is not None:
            self._task_group.start_soon(self._watch_handshakes, self._watch)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._task_group is not None and self._sock is not None
        self._task_group.cancel_scope.cancel()
        try:
            await self._task_group.__aexit__(exc_type, exc, tb)
        finally:
            if self._watch is not None:
                self._watch.close()
            self._sock.close(linger=0)
            self._ctx.destroy(linger=0)

    async def list_tools(self) -> list[ToolInfo]:
        return (await self.tool_list()).tools

    async def tool_list(self) -> ToolList:
        """The tools with the registry's ``version`` (it grows by one with each change)."""
        return _expect(await self._request(ListTools(id=next(self._ids))), ToolList)

    async def watch(self) -> AsyncEventWatch:
        """A subscription to registry and state events: ``async with await sup.watch() as events``."""
        reply = _expect(await self._request(GetStatus(id=next(self._ids))), StatusReply)
        watch = AsyncEventWatch(reply.events, keys=False if self.keys is None else self.keys)
        await watch.join()
        return watch

    async def openai_tools(self) -> list[dict[str, Any]]:
        return [openai_tool(tool) for tool in await self.list_tools()]

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
        request = _call_request(next(self._ids), name, arguments, timeout, progress is not None)
        return _result(await self._request(request, _call_wait(timeout), progress), name, raise_on_error)

    async def list_resources(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> list[ResourceInfo]:
        """As ``SupervisorClient.list_resources``."""
        request = ListResources(id=next(self._ids), server=server, timeout=_check_timeout(timeout))
        return _entries(await self._request(request, _call_wait(timeout)), _decode_resources)

    async def list_resource_templates(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> list[ResourceTemplateInfo]:
        request = ListResourceTemplates(id=next(self._ids), server=server, timeout=_check_timeout(timeout))
        return _entries(await self._request(request, _call_wait(timeout)), _decode_templates)

    async def read_resource(self, server: str, uri: str, *, timeout: float | None = None) -> ResourceResult:
        request = ReadResource(id=next(self._ids), server=server, uri=uri, timeout=_check_timeout(timeout))
        return _fetched(await self._request(request, _call_wait(timeout)), _decode_resource)

    async def list_prompts(
        self, server: str | None = None, *, timeout: float | None = None
    ) -> list[PromptInfo]:
        request = ListPrompts(id=next(self._ids), server=server, timeout=_check_timeout(timeout))
        return _entries(await self._request(request, _call_wait(timeout)), _decode_prompts)

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        server: str | None = None,
        timeout: float | None = None,
    ) -> PromptResult:
        request = _prompt_request(next(self._ids), name, arguments, server, timeout)
        return _fetched(await self._request(request, _call_wait(timeout)), _decode_prompt)

    async def status(self) -> list[ServerStatus]:
        return _expect(await self._request(GetStatus(id=next(self._ids))), StatusReply).servers

    async def front_stats(self) -> FrontStats:
        """As ``SupervisorClient.front_stats``."""
        return _expect(await self._request(GetStatus(id=next(self._ids))), StatusReply).front or FrontStats()

    async def restart(self, server: str) -> None:
        _expect(await self._request(Restart(id=next(self._ids), server=server)), Done)

    async def stop(self, server: str) -> None:
        _expect(await self._request(Stop(id=next(self._ids), server=server)), Done)

    async def start(self, server: str) -> None:
        _expect(await self._request(Start(id=next(self._ids), server=server)), Done)

    async def ping(self) -> None:
        _expect(await self._request(Ping(id=next(self._ids))), Done)

    async def reload(self) -> ReloadSummary:
        wait = max(self.request_timeout, RELOAD_WAIT)
        return _expect(await self._request(Reload(id=next(self._ids)), wait), Reloaded).summary

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
            try:
                if self._watch is not None:
                    self._watch.redial(sock)
                sock.send(encode(request), zmq.NOBLOCK)
                self._wake_reader_if_readable()
                with anyio.move_on_after(wait):
                    async for reply in receive:
                        if not isinstance(reply, CallProgress):
                            return reply
                        if progress is not None and inspect.isawaitable(
                            notified := progress(reply.progress, reply.total, reply.message)
                        ):
                            await notified
            finally:
                del self._waiters[request.id]
        raise _no_answer(self.endpoint, wait, self._watch)  # or a failed handshake closed `receive`

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
        if self._reading is not None and readable(self._sock):
            self._reading.cancel()

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
