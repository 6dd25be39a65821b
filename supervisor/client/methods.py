"""The client stubs' methods, each written once: its parameters, its doc, the request it makes and how
its reply is read; and the state both stubs start from.

Above: ``SupervisorClient`` (``supervisor.client.blocking``) and ``AsyncSupervisorClient``
(``supervisor.client.aio``). Each takes every method of ``Methods`` as ``list_tools =
blocking(Methods.list_tools)`` or ``awaiting(Methods.list_tools)``: a method of the same name,
parameters and doc that carries the ``Exchange`` over the stub's socket and returns what its reply
means (the async one as a coroutine). Below: the requests of ``supervisor.client.exchanges``.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Concatenate, Literal, ParamSpec, Protocol, Self, TypeVar

import zmq

from supervisor.adapters.formats import anthropic_tool, openai_tool
from supervisor.client.answers import Handler, handlers
from supervisor.client.exchanges import REQUEST_TIMEOUT, Exchange, Requests
from supervisor.protocol import (
    AuditRecords,
    Completion,
    FrontStats,
    ProgressCallback,
    PromptInfo,
    PromptResult,
    ReloadSummary,
    ResourceInfo,
    ResourceResult,
    ResourceTemplateInfo,
    ServerLog,
    ServerStatus,
    ToolInfo,
    ToolList,
    ToolResult,
)
from supervisor.security.keys import ClientKeys, Keys, client_keys
from supervisor.shared.paths import resolve_endpoint

__all__ = ["Methods", "Stub", "StubBase", "awaiting", "blocking"]

_T = TypeVar("_T")
_P = ParamSpec("_P")


class Stub(Protocol):
    """What ``Methods`` read of a client stub."""

    _requests: Requests
    request_timeout: float


class _Carries(Stub, Protocol):
    def _do(self, exchange: Exchange[_T]) -> _T: ...


class _Awaits(Stub, Protocol):
    async def _do(self, exchange: Exchange[_T]) -> _T: ...


def blocking(
    method: Callable[Concatenate[Stub, _P], Exchange[_T]],
) -> Callable[Concatenate[_Carries, _P], _T]:
    """``method`` as a blocking stub's method: it waits for the reply and returns what it means."""

    @functools.wraps(method)
    def call(self: _Carries, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return self._do(method(self, *args, **kwargs))

    return _as_method(call, method)


def awaiting(
    method: Callable[Concatenate[Stub, _P], Exchange[_T]],
) -> Callable[Concatenate[_Awaits, _P], Coroutine[Any, Any, _T]]:
    """``method`` as an async stub's method: a coroutine function awaiting the reply."""

    @functools.wraps(method)
    async def call(self: _Awaits, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return await self._do(method(self, *args, **kwargs))

    return _as_method(call, method)


_F = TypeVar("_F", bound=Callable[..., Any])


def _as_method(call: _F, method: Callable[..., Any]) -> _F:
    """``call`` introspected as ``method`` returning what its exchange's reply means (``T`` for
    ``Exchange[T]``); ``StubBase.__init_subclass__`` names it after its class."""
    annotations = {name: kind for name, kind in method.__annotations__.items() if name != "self"}
    returns = annotations["return"]
    assert returns.startswith("Exchange[") and returns.endswith("]"), returns
    annotations["return"] = returns[len("Exchange[") : -1]
    signature = inspect.signature(method)
    self, *parameters = signature.parameters.values()
    call.__annotations__ = annotations
    call.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[self.replace(annotation=inspect.Parameter.empty), *parameters],
        return_annotation=annotations["return"],
    )
    call._of_methods = True  # type: ignore[attr-defined]
    return call


class StubBase:
    """What both stubs hold: how to reach the supervisor, and who this client is."""

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
        requests that arise in this client's own calls (see ``supervisor.client.answers.Handler``)."""
        self._handlers = handlers(on_sampling, on_elicitation)
        # first: a bad identity raises before anything is opened
        self._requests = Requests(identity, self._handlers)
        self.endpoint = resolve_endpoint(endpoint)
        self.keys = client_keys(keys, self.endpoint)
        self.request_timeout = request_timeout
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._init_transport()

    def _init_transport(self) -> None:
        """The stub's own state, past what both hold."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, member in vars(cls).items():
            if getattr(member, "_of_methods", False):
                member.__module__, member.__qualname__ = cls.__module__, f"{cls.__qualname__}.{name}"

    @property
    def identity(self) -> str:
        """This client's identity: its session on each ``scope: client`` server."""
        return self._requests.identity

    def _twin(
        self,
        identity: str,
        on_sampling: Handler | None,
        on_elicitation: Handler | None,
        principal: str = "",
        session: str = "",
    ) -> Self:
        """This client's connections, as another identity with its own handlers (``as_client``)."""
        twin = copy.copy(self)  # the same sockets and ids
        twin._handlers = handlers(on_sampling, on_elicitation)
        twin._requests = self._requests.twin(identity, twin._handlers, principal, session)
        return twin

    def _event_keys(self) -> ClientKeys | Literal[False]:
        return False if self.keys is None else self.keys


def _tools_as(exchange: Exchange[list[ToolInfo]], form: Callable[[ToolInfo], _T]) -> Exchange[list[_T]]:
    parse = exchange.parse
    return Exchange(exchange.request, lambda reply: [form(tool) for tool in parse(reply)], exchange.wait)


class Methods:
    """The stubs' methods that are one request each (``SupervisorClient``'s and
    ``AsyncSupervisorClient``'s alike; on the async one, each is a coroutine function)."""

    # ------------------------------------------------------------ the registry

    def list_tools(self: Stub, wait: float = 0.0) -> Exchange[list[ToolInfo]]:
        """The registry's tools; with ``wait``, once every server's first start is over (a supervisor
        just started answers with every ready server's tools), or after ``wait`` seconds at most."""
        return self._requests.list_tools(wait)

    def tool_list(self: Stub, wait: float = 0.0) -> Exchange[ToolList]:
        """The tools with the registry's ``version`` (it grows by one with each change) and the servers
        still ``starting`` for the first time; ``wait`` as for ``list_tools``."""
        return self._requests.tool_list(wait)

    def openai_tools(self: Stub) -> Exchange[list[dict[str, Any]]]:
        """The tools in OpenAI's format (``supervisor.adapters.formats.openai_tool``)."""
        return _tools_as(self._requests.list_tools(0.0), openai_tool)

    def anthropic_tools(self: Stub) -> Exchange[list[dict[str, Any]]]:
        """The tools in Anthropic's format (``supervisor.adapters.formats.anthropic_tool``)."""
        return _tools_as(self._requests.list_tools(0.0), anthropic_tool)

    def events_endpoint(self: Stub) -> Exchange[str]:
        """Where the supervisor publishes its events."""
        return self._requests.events_endpoint()

    # ---------------------------------------------------------------- calls

    def call_tool(
        self: Stub,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        *,
        raise_on_error: bool = True,
        progress: ProgressCallback | None = None,
    ) -> Exchange[ToolResult]:
        """Call a prefixed tool; ``timeout`` (seconds) defaults to the server's ``toolTimeout``.

        Raises ``ToolExecutionError`` when the tool reports ``isError`` (unless
        ``raise_on_error=False``), and another ``SupervisorError`` when there is no result.
        ``progress(progress, total, message)`` is called in the calling thread (or task) for each
        progress notification that arrives while the call waits (an exception it raises ends the
        wait); on ``AsyncSupervisorClient`` it may be a coroutine function (it is awaited).
        """
        return self._requests.call_tool(name, arguments, timeout, raise_on_error, progress)

    def list_resources(
        self: Stub, server: str | None = None, *, timeout: float | None = None
    ) -> Exchange[list[ResourceInfo]]:
        """Resources of ``server``, or of every ready server (one that fails is logged and left out)."""
        return self._requests.list_resources(server, timeout)

    def list_resource_templates(
        self: Stub, server: str | None = None, *, timeout: float | None = None
    ) -> Exchange[list[ResourceTemplateInfo]]:
        """Resource templates of ``server``, or of every ready server."""
        return self._requests.list_resource_templates(server, timeout)

    def read_resource(
        self: Stub, server: str, uri: str, *, timeout: float | None = None
    ) -> Exchange[ResourceResult]:
        """Read ``uri`` from ``server``; ``timeout`` (seconds) defaults to the server's ``toolTimeout``."""
        return self._requests.read_resource(server, uri, timeout)

    def list_prompts(
        self: Stub, server: str | None = None, *, timeout: float | None = None
    ) -> Exchange[list[PromptInfo]]:
        """Prompts of ``server``, or of every ready server, under their prefixed names."""
        return self._requests.list_prompts(server, timeout)

    def get_prompt(
        self: Stub,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        server: str | None = None,
        timeout: float | None = None,
    ) -> Exchange[PromptResult]:
        """Get a prompt by its prefixed name, or by the server's own name with ``server``."""
        return self._requests.get_prompt(name, arguments, server, timeout)

    def complete(
        self: Stub,
        ref: Mapping[str, str],
        argument: tuple[str, str],
        context: Mapping[str, str] | None = None,
        *,
        server: str | None = None,
        timeout: float | None = None,
    ) -> Exchange[Completion]:
        """Completions for ``argument`` (its name and the value typed so far) of a prompt
        (``{"type": "ref/prompt", "name": N}``, its prefixed name, or the server's own with ``server``)
        or a resource template (``{"type": "ref/resource", "uri": TEMPLATE}``, with ``server``);
        ``context``: the other arguments' values."""
        return self._requests.complete(ref, argument, context, server, timeout)

    def set_log_level(self: Stub, level: str, server: str | None = None) -> Exchange[None]:
        """Ask ``server`` (every server by default) for log messages from ``level`` up (one of
        ``LOG_LEVELS``; ``""`` withdraws this connection's wish). A server is set to the most verbose
        level its connections ask for; its messages come as ``ServerMessage`` on ``watch(messages=True)``."""
        return self._requests.set_log_level(level, server)

    def subscribe(self: Stub, server: str, uri: str) -> Exchange[None]:
        """Hear when ``server``'s resource ``uri`` changes: a ``ResourceUpdated`` on
        ``watch(messages=True)`` (kept across the server's restarts, until ``unsubscribe``)."""
        return self._requests.subscribe(server, uri)

    def unsubscribe(self: Stub, server: str, uri: str) -> Exchange[None]:
        """Stop hearing of changes to ``server``'s resource ``uri``."""
        return self._requests.unsubscribe(server, uri)

    # ------------------------------------------------------------ operations

    def status(self: Stub) -> Exchange[list[ServerStatus]]:
        """Every server's state, workers and counters."""
        return self._requests.status()

    def front_stats(self: Stub) -> Exchange[FrontStats]:
        """Requests in flight now, and what the supervisor refused or dropped since it started."""
        return self._requests.front_stats()

    def restart(self: Stub, server: str) -> Exchange[None]:
        """Restart a server's worker (coalesced with a restart already under way); counters reset."""
        return self._requests.restart(server)

    def stop(self: Stub, server: str) -> Exchange[None]:
        """Stop a server's worker; it stays stopped until ``start`` or ``restart``."""
        return self._requests.stop(server)

    def start(self: Stub, server: str) -> Exchange[None]:
        """Start a stopped or failed server (a running one is left alone)."""
        return self._requests.start(server)

    def ping(self: Stub) -> Exchange[None]:
        """Returns when the supervisor answers."""
        return self._requests.ping()

    def reload(self: Stub) -> Exchange[ReloadSummary]:
        """Re-read the supervisor's config file and apply what changed; returns once removed servers
        have stopped. A file that cannot be used raises ``BadRequestError`` and changes nothing."""
        return self._requests.reload(self.request_timeout)

    def logs(self: Stub, server: str, *, after: int = 0, limit: int = 100) -> Exchange[ServerLog]:
        """The newest ``limit`` lines of ``server``'s log (its stderr, its workers' warnings and errors)
        whose ``seq`` is above ``after``, oldest first; ``last`` is where to follow on from
        (``after=last``). An unknown server raises ``UnknownToolError``."""
        return self._requests.logs(server, after, limit)

    def audit(
        self: Stub,
        *,
        since: float | None = None,
        identity: str | None = None,
        tool: str | None = None,
        server: str | None = None,
        limit: int = 100,
    ) -> Exchange[AuditRecords]:
        """The newest ``limit`` records of the supervisor's audit trail matching every filter given
        (``since``: seconds since the epoch; ``tool``: a glob), newest first, and the trail's figures."""
        filters = {"since": since, "identity": identity, "tool": tool, "server": server}
        return self._requests.audit(filters, limit)

    def shutdown(self: Stub, *, grace: float | None = None) -> Exchange[None]:
        """Ask the supervisor to stop as SIGTERM does: calls in flight get up to ``grace`` seconds
        (default: its ``shutdownGrace``), then every worker and server stops. Returns once it has
        agreed, before it is gone: it stops answering when it is."""
        return self._requests.shutdown(grace)
