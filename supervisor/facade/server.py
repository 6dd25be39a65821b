"""The MCP facade: the supervisor's registry served back as one MCP server, built on the SDK's own
low-level ``Server``.

Above: a transport (``supervisor.facade.run``: stdio for a host that starts it, or streamable HTTP),
which hands each connection to ``Facade.server``. Below: its handlers of tools
(``supervisor.facade.served_tools``), of resources and prompts (``supervisor.facade.resources``) and of
the servers' messages (``supervisor.facade.relay``), the link to the supervisor
(``supervisor.facade.upstream``) and the view of this facade (``supervisor.facade.views``). This module
holds the server itself, and who hears of what: which host connections are told of changes, and
each host's log level and resource subscriptions.

What a host sees: the registry's tools under their prefixed names (or, with ``search``, two tools
that search the registry and call a tool by name), every ready server's resources, resource
templates and prompts, and a list-changed notification whenever those change (handshake-era hosts
get ``notifications/*/list_changed``; 2026-07-28 hosts get them on ``subscriptions/listen``).

A host also gets the servers' log messages (``logging/setLevel``), argument completions
(``completion/complete``, routed to the server of the prompt or resource template) and resource
updates (``resources/subscribe``; ``subscriptions/listen`` with resource URIs on 2026-07-28), through
``supervisor.facade.relay``. With ``single``, the facade serves one server under the server's own
names (tools and prompts unprefixed), so a host config that names them works unchanged.

How calls map (``tools/call``) is said in ``supervisor.facade.served_tools``. Most ``tools/call`` and
``tools/list`` requests never reach this server: the transports offer them to the fast path first
(``supervisor.facade.express``), which answers them as this server would, from the same tools.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.abc
import mcp_types as types
from mcp.server.caching import CacheableMethod, CacheHint
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from supervisor import __version__
from supervisor.client.errors import SupervisorError
from supervisor.facade.access import Access, scope_of
from supervisor.facade.callers import Hosts
from supervisor.facade.express import Express
from supervisor.facade.handshake import INSTRUCTIONS, SERVER_NAME
from supervisor.facade.relay import Relay
from supervisor.facade.resources import Catalog, complete
from supervisor.facade.served_tools import ServedTools
from supervisor.facade.upstream import Change, SupervisorGone
from supervisor.facade.upstreams import Upstreams
from supervisor.facade.views import View

__all__ = ["Facade", "FacadeOptions"]

log = logging.getLogger("mcp_supervisor.facade")

NOTIFY_TIMEOUT: Final = 2.0  # seconds a list-changed notification may take to one host connection
MAX_CONNECTIONS_HEARD: Final = 10_000  # handshake-era connections told of changes (the newest)
_CACHED: Final[tuple[CacheableMethod, ...]] = (
    "tools/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
)


class _FacadeServer(Server[Any]):
    """The SDK's low-level server, saying by default that its lists change (they do, and hosts are told).
    Its capabilities are those the stdio facade's first answer declares (``supervisor.facade.handshake``).

    The streamable HTTP transport asks ``create_initialization_options()`` with no arguments, so the
    default is where a handshake-era host over HTTP learns it."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        if notification_options is None:
            notification_options = NotificationOptions(
                prompts_changed=True, resources_changed=True, tools_changed=True
            )
        return super().create_initialization_options(
            notification_options, experimental_capabilities, extensions
        )


@dataclass(frozen=True, slots=True)
class FacadeOptions:
    view: View = field(default_factory=View)
    search: bool = False  # list two tools (search, call by name) instead of the whole registry
    timeout: float | None = None  # seconds a routed call may take (None: the server's toolTimeout)
    list_wait: float = 30.0  # seconds the first listing waits for a supervisor and its servers' first starts
    search_limit: int = 10  # tools a search returns when the host gives no limit
    single: str | None = None  # serve this one server under its own names (no mcp_{server}_ prefix)
    fast: bool = True  # answer tools/call and tools/list on the fast path when it can (express)


class Facade:
    """One low-level MCP ``Server`` over a supervisor; ``changed`` tells every connected host."""

    def __init__(self, options: FacadeOptions) -> None:
        self.options = options
        self.upstream: Upstreams | None = None  # set by whoever runs the facade, before serving
        self._bus = InMemorySubscriptionBus()
        self._heard: dict[int, ServerSession] = {}  # handshake-era connections, by first request's session
        self._hosts = Hosts()  # each host connection a client of its own, answering its server's requests
        self._tasks: anyio.abc.TaskGroup | None = None  # the facade's own background tasks
        self._untold = Change()  # changes noted and not told to hosts yet
        self._wake = anyio.Event()  # set when there are
        self.access = Access(options.view)  # what each principal may see and call (a gateway's clients)
        self.tools = ServedTools(options, self._client, self._hosts, self.access)
        self._catalog = Catalog(self.access, self._client, self._hosts, single=options.single)
        self.relay = Relay(lambda: self._heard, self._forget, self._bus, single=options.single)
        self._listen_handler = ListenHandler(self._bus)
        self._listens = itertools.count(1)  # keys of 2026-07-28 listen streams (negative: no session)
        # Named and described as the stdio facade's first answer says (before the SDK is loaded).
        self.server: Server[Any] = _FacadeServer(
            SERVER_NAME,
            version=__version__,
            title=SERVER_NAME,
            instructions=INSTRUCTIONS,
            # Never fresh for long: the registry changes when servers restart (hosts are told, too).
            cache_hints={method: CacheHint(ttl_ms=0, scope="private") for method in _CACHED},
            on_call_tool=self.tools.call_tool,
            on_subscriptions_listen=self._listen,
        )
        # Listings and reads relay JSON as the servers sent it (the SDK still checks it on the way out).
        paginated = types.PaginatedRequestParams
        add = self.server.add_request_handler
        add("tools/list", paginated, self.tools.list_tools)
        add("resources/list", paginated, self._catalog.list_resources)
        add("resources/templates/list", paginated, self._catalog.list_resource_templates)
        add("resources/read", types.ReadResourceRequestParams, self._catalog.read_resource)
        add("prompts/list", paginated, self._catalog.list_prompts)
        add("prompts/get", types.GetPromptRequestParams, self._catalog.get_prompt)
        add("completion/complete", types.CompleteRequestParams, self._catalog.completion)
        add("logging/setLevel", types.SetLevelRequestParams, self._set_level)
        add("resources/subscribe", types.SubscribeRequestParams, self._subscribe)
        add("resources/unsubscribe", types.UnsubscribeRequestParams, self._unsubscribe)
        # Only ours: the SDK's default OpenTelemetry middleware costs every message and exports nothing here.
        self.server.middleware = [self._hear_connections]
        # A 2026-07-28 call's Mcp-Param-* headers are checked against the schema listed (not a listing).
        self.server.get_tool_input_schema = self.tools.input_schema
        self.express = Express(self.tools, self._hosts, self.server, self._client)
        self.heard: Callable[[ServerRequestContext[Any, Any]], None] | None = None  # each message served
        # an HTTP host session's handshake done: (its Mcp-Session-Id, its protocol version, plain host)
        self.session_initialized: Callable[[str, str, bool], None] | None = None

    def initialization_options(self) -> InitializationOptions:
        return self.server.create_initialization_options()

    def _client(self) -> Upstreams:
        assert self.upstream is not None, "the facade is served before its upstream is set"
        return self.upstream

    # ------------------------------------------------------------ telling hosts of changes

    async def _hear_connections(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Remember each handshake-era connection (by its ``notifications/initialized``), to tell it
        of changes; a request whose params do not fit its method is told which (the SDK's own error
        names nothing)."""
        if self.heard is not None:
            self.heard(ctx)
        if ctx.method == "notifications/initialized":
            self._heard[host_key(ctx)] = ctx.session
            while len(self._heard) > MAX_CONNECTIONS_HEARD:
                self._forget(next(iter(self._heard)))
            session_id = session_of(ctx)
            if session_id is not None and self.session_initialized is not None:
                caps = ctx.session.client_capabilities
                plain = caps is None or (caps.sampling is None and caps.elicitation is None)
                self.session_initialized(session_id, ctx.session.protocol_version, plain)
        try:
            return await call_next(ctx)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "params"
            raise MCPError(
                types.INVALID_PARAMS, f"Invalid params for {ctx.method}: {where}: {first['msg']}"
            ) from None

    async def changed(self, change: Change) -> None:
        """What the supervisor serves changed: noted at once (the link's event loop never waits for a
        host); ``tell_hosts`` tells them, changes that come meanwhile coalesced into one round."""
        if change.tools:
            self.tools.changed()
        if change.tools or change.catalog:
            self._catalog.forget()
        self._untold = Change(
            tools=self._untold.tools or (change.tools and not self.options.search),
            catalog=self._untold.catalog or change.catalog,
        )
        self._wake.set()

    async def tell_hosts(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Tell every host of the changes noted, the way its protocol version hears them: each round
        sends to every connection at once, each bounded by ``NOTIFY_TIMEOUT`` (a host that does not read
        delays no other, and no round outlasts it). The servers' messages go by ``relay``."""
        async with anyio.create_task_group() as tasks:
            self._hosts.tasks = tasks  # 2026-07-28 hosts' calls that wait for their retry run here
            self._tasks = tasks
            await tasks.start(self.relay.run)
            task_status.started()
            await self._tell_forever()

    async def _tell_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            change, self._untold = self._untold, Change()
            if change.tools:
                await self._bus.publish(ToolsListChanged())
            if change.catalog:
                await self._bus.publish(ResourcesListChanged())
                await self._bus.publish(PromptsListChanged())
            if change.tools or change.catalog:
                async with anyio.create_task_group() as round_:
                    for key, session in list(self._heard.items()):
                        round_.start_soon(self._tell, key, session, change)

    async def _tell(self, key: int, session: ServerSession, change: Change) -> None:
        try:
            with anyio.fail_after(NOTIFY_TIMEOUT):
                if change.tools:
                    await session.send_tool_list_changed()
                if change.catalog:
                    await session.send_resource_list_changed()
                    await session.send_prompt_list_changed()
        except Exception as exc:  # boundary: a host that went away or stalls is forgotten, the others told
            log.debug("a host connection is gone (%s: %s); forgotten", type(exc).__name__, exc)
            self._forget(key)

    def _forget(self, key: int) -> None:
        """A host connection is gone: forgotten, and what it asked for withdrawn (in the background)."""
        self._heard.pop(key, None)
        level, dropped = self.relay.gone(key)
        if (level is not None or dropped) and self._tasks is not None:
            self._tasks.start_soon(self._withdraw, level, dropped)

    async def _withdraw(self, level: str | None, dropped: list[tuple[str, str]]) -> None:
        with anyio.move_on_after(NOTIFY_TIMEOUT):
            try:
                if level is not None:
                    await self._client().want_level(level, self.options.single)
                for server, uri in dropped:
                    await self._client().unsubscribe(server, uri)
            except (SupervisorGone, SupervisorError) as exc:
                log.debug("could not withdraw a gone host's wishes: %s", exc)

    # ------------------------------------------------------------ logging and subscriptions

    async def _set_level(
        self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> dict[str, Any]:
        key = host_key(ctx)
        self._heard.setdefault(key, ctx.session)
        asked = self.relay.set_level(key, params.level)
        if asked is not None:
            try:
                await self._client().want_level(asked, self.options.single)
            except SupervisorGone:
                pass  # asked of the supervisor when one answers
            except SupervisorError as exc:
                raise MCPError(types.INTERNAL_ERROR, f"{exc.code or 'ERROR'}: {exc.message or exc}") from exc
        return complete(ctx, {})

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> dict[str, Any]:
        key = host_key(ctx)
        self._heard.setdefault(key, ctx.session)
        await self._subscribe_to(key, str(params.uri), self.access.of(scope_of(ctx)).view)
        return complete(ctx, {})

    async def _subscribe_to(self, key: int, uri: str, view: View | None = None) -> None:
        server = await self._catalog.server_of_uri(uri, view)
        if server is None:
            raise MCPError(
                types.INVALID_PARAMS, f"Resource not found: no server lists {uri!r} or a template it fits"
            )
        if self.relay.subscribe(key, server, uri):
            try:
                await self._client().subscribe(server, uri)
            except (SupervisorGone, SupervisorError) as exc:
                self.relay.unsubscribe(key, server, uri)
                raise MCPError(types.INTERNAL_ERROR, f"could not subscribe to {uri!r}: {exc}") from exc

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> dict[str, Any]:
        uri = str(params.uri)
        server = await self._catalog.server_of_uri(uri, self.access.of(scope_of(ctx)).view)
        if server is not None and self.relay.unsubscribe(host_key(ctx), server, uri):
            try:
                await self._client().unsubscribe(server, uri)
            except (SupervisorGone, SupervisorError) as exc:
                log.debug("could not unsubscribe from %s: %s", uri, exc)
        return complete(ctx, {})

    async def _listen(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """A 2026-07-28 host's listen stream: its resource URIs subscribed to while it lasts."""
        key = -next(self._listens)  # never a connection's key: updates reach it by the bus only
        view = self.access.of(scope_of(ctx)).view
        try:
            for uri in params.notifications.resource_subscriptions or ():
                await self._subscribe_to(key, uri, view)
            return await self._listen_handler(ctx, params)
        finally:
            with anyio.CancelScope(shield=True):
                _, dropped = self.relay.gone(key)
                await self._withdraw(None, dropped)


# ------------------------------------------------------------------ helpers


def session_of(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The ``Mcp-Session-Id`` a request came with (streamable HTTP's handshake era), else None."""
    headers = getattr(ctx.request, "headers", None)
    session_id = headers.get("mcp-session-id") if headers is not None else None
    return session_id or None


def host_key(ctx: ServerRequestContext[Any, Any]) -> int:
    """The host connection a request came on (each request has a session object of its own)."""
    return id(getattr(ctx.session, "_connection", ctx.session))
