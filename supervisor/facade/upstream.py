"""The facade's link to the supervisor: one client stub, the tools kept current by events, reconnection.

Above: the MCP facade (``supervisor.facade.server``), which reads ``tools()``, calls through
``calling()`` and is told by ``changed`` when what it serves may have changed. Below: the async
client stub (``supervisor.client.aio``) and an event subscription (``supervisor.client.watch``); with a
``Launcher`` (``mcp-supervisor mcp --config FILE``), the supervisor it starts when none answers.

The supervisor publishes its registry's version every second. No event for ``BEACON_LOSS`` seconds
means it is gone (killed, stopped, restarting): every call in flight through the facade ends at
once with ``SupervisorGone``, the stub is closed, and the link dials again until a supervisor
answers. Then the tools are listed again and ``changed`` is told, so the host lists them again.
Nothing waits without a bound: while no supervisor answers, calls fail at once and saying why.

The servers' log messages and resource updates (``ServerMessage``, ``ResourceUpdated``) go to
``heard`` as they come. What the facade asked of the supervisor for its hosts (a log level, resource
subscriptions: ``want_level``, ``subscribe``) is kept here and asked again of every supervisor the
link reaches, so a supervisor that restarted still knows it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Final

import anyio
import anyio.abc

from supervisor.client.aio import AsyncSupervisorClient
from supervisor.client.aio_events import AsyncEventWatch
from supervisor.client.errors import SupervisorError
from supervisor.client.tool_cache import ToolTable
from supervisor.facade.launch import Launcher
from supervisor.protocol import ResourceUpdated, ServerMessage, StateChanged, ToolInfo
from supervisor.security.keys import Keys
from supervisor.shared.paths import resolve_endpoint

__all__ = ["BEACON_LOSS", "Change", "SupervisorGone", "Upstream"]

log = logging.getLogger("mcp_supervisor.facade")

BEACON_LOSS: Final = 3.5  # seconds without an event (beacons come every second) before the supervisor is gone
REQUEST_TIMEOUT: Final = 5.0  # seconds for a listing, a ping or a status from the supervisor
DIAL_RETRY_MIN: Final = 0.2  # seconds between tries to reach a supervisor, doubling ...
DIAL_RETRY_MAX: Final = 2.0  # ... up to this
LIST_WAIT: Final = 30.0  # seconds the first listing may wait for the supervisor's servers to start


class SupervisorGone(Exception):
    """No supervisor to route through (none answers, or it went away during the call)."""


@dataclass(frozen=True, slots=True)
class Change:
    """What may have changed: the tools, and the resources and prompts (a server became ready or not)."""

    tools: bool = False
    catalog: bool = False


class Calling:
    """``Upstream.calling``: a class rather than a generator, for it wraps every routed call."""

    __slots__ = ("_scope", "_upstream")

    def __init__(self, upstream: Upstream) -> None:
        self._upstream = upstream
        self._scope = anyio.CancelScope()

    async def __aenter__(self) -> AsyncSupervisorClient:
        upstream = self._upstream
        client = upstream._client
        if client is None:
            raise SupervisorGone(upstream.why)
        self._scope.__enter__()
        upstream._calls.add(self._scope)
        return client

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        upstream, scope = self._upstream, self._scope
        upstream._calls.discard(scope)
        exited = scope.__exit__(kind, exc, tb)  # (trio's says True for a clean exit too)
        swallowed = kind is not None and bool(exited)  # only its own cancel, which a lost supervisor makes
        lost = scope in upstream._lost
        upstream._lost.discard(scope)
        if swallowed or (lost and kind is None):
            raise SupervisorGone(f"the supervisor went away during the request ({upstream.why})")


class Upstream:
    """A supervisor, reached through one client stub and one event subscription, dialled again when lost."""

    def __init__(
        self,
        endpoint: str | None,
        *,
        keys: Keys = None,
        changed: Callable[[Change], Awaitable[None]],
        launcher: Launcher | None = None,
        list_wait: float = LIST_WAIT,
        heard: Callable[[ServerMessage | ResourceUpdated], None] = lambda _: None,
        lost: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``list_wait``: seconds a listing may wait for the supervisor's servers to finish starting;
        ``heard``: each server log message and resource update (it must not block); ``lost``: told
        each time the supervisor goes away."""
        self.endpoint = endpoint
        self._on_lost = lost
        self._heard = heard
        self._level: tuple[str, str | None] = ("", None)  # the log level asked for, and of which server
        self._subscriptions: set[tuple[str, str]] = set()  # (server, uri) asked for
        self._list_wait = list_wait
        self._keys = keys
        self._changed = changed
        self._launcher = launcher
        self._client: AsyncSupervisorClient | None = None
        self._table = ToolTable()
        self._first = anyio.Event()  # set once a supervisor was listed (or the first dial gave up waiting)
        self._reached = anyio.Event()  # set once a supervisor answered (or the first dial gave up waiting)
        self._calls: set[anyio.CancelScope] = set()
        self._lost: set[anyio.CancelScope] = set()  # scopes cancelled because the supervisor went away
        self.why = "not connected to a supervisor yet"

    # ------------------------------------------------------------ the facade's side

    @property
    def connected(self) -> bool:
        return self._client is not None

    @property
    def settled(self) -> bool:
        """Connected, and its tools listed: a listing or a call need not wait for anything."""
        return self._client is not None and self._first.is_set()

    @property
    def first_done(self) -> bool:
        """Its first listing was made, or the first dial gave up waiting for one."""
        return self._first.is_set()

    async def wait_first(self, wait: float) -> None:
        """Before the first connection, wait up to ``wait`` seconds for one (a host that starts the
        facade asks at once; a supervisor that answers a moment later should not fail its first call)."""
        if not self._first.is_set():
            with anyio.move_on_after(wait):
                await self._first.wait()

    async def wait_reached(self, wait: float) -> None:
        """Before the first connection, wait up to ``wait`` seconds for one (not for its first listing:
        a call need not wait for every server, only for its own, and the supervisor holds it for that)."""
        if not self._reached.is_set():
            with anyio.move_on_after(wait):
                await self._reached.wait()

    async def tools(self, wait: float) -> list[ToolInfo]:
        """The registry's tools as last heard (the last known ones while the supervisor is away); before
        the first connection, waits up to ``wait`` seconds for one."""
        await self.wait_first(wait)
        return list(self._table.tools.values())

    def find(self, name: str) -> ToolInfo | None:
        return self._table.tools.get(name)

    @property
    def version(self) -> int:
        """The registry's version the tools are at (as last heard)."""
        return self._table.version

    def listed(self) -> list[ToolInfo]:
        """The tools as last heard, without waiting."""
        return list(self._table.tools.values())

    def calling(self) -> Calling:
        """The client to make one request with (``async with upstream.calling() as client``);
        ``SupervisorGone`` when there is none, or when the supervisor goes away before the request is
        answered (the request is then ended at once)."""
        return Calling(self)

    async def want_level(self, level: str, server: str | None) -> None:
        """Ask for ``server``'s (every server's) log messages from ``level`` up (``""``: none asked)."""
        self._level = (level, server)
        async with self.calling() as client:
            await client.set_log_level(level, server)

    async def subscribe(self, server: str, uri: str) -> None:
        """Hear of changes to ``server``'s resource ``uri``; raises ``SupervisorError`` (unknown server)."""
        async with self.calling() as client:
            await client.subscribe(server, uri)
        self._subscriptions.add((server, uri))

    async def unsubscribe(self, server: str, uri: str) -> None:
        self._subscriptions.discard((server, uri))
        async with self.calling() as client:
            await client.unsubscribe(server, uri)

    async def _ask_again(self, client: AsyncSupervisorClient) -> None:
        """A supervisor reached: it hears the log level and subscriptions asked of the last one."""
        try:
            level, server = self._level
            if level:
                await client.set_log_level(level, server)
            for server_name, uri in sorted(self._subscriptions):
                await client.subscribe(server_name, uri)
        except SupervisorError as exc:
            log.warning("could not ask the supervisor again for log messages and subscriptions: %s", exc)

    # ------------------------------------------------------------ the link's life

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Dial, follow, dial again, for ever; started at once (the host need not wait for a supervisor)."""
        task_status.started()
        while True:
            async with AsyncExitStack() as stack:
                client, watch = await self._dial(stack)
                self._client = client  # calls go through at once (they wait for their server if need be)
                self._reached.set()
                self.why = "connected"
                try:
                    # The first listing waits for the servers still starting, so that a host that
                    # lists once, right after initialize, sees every tool there will be.
                    self._table.listed(await self._listing(client, self._list_wait))
                    log.info(
                        "connected to the supervisor at %s (%d tools)",
                        client.endpoint,
                        len(self._table.tools),
                    )
                    heard_before = self._first.is_set()  # hosts may have listed: tell them (a reconnection)
                    self._first.set()
                    await self._ask_again(client)
                    if heard_before:
                        await self._changed(Change(tools=True, catalog=True))
                    # Joined only now, so the host's first listing does not wait for a beacon: a change
                    # made meanwhile shows in the registry's version, which every beacon carries.
                    await watch.join()
                    await self._follow(client, watch)
                except SupervisorError as exc:  # a listing it did not answer: as good as gone
                    self.why = f"the supervisor did not answer ({exc})"
                finally:
                    self._client = None
                    self._end_calls()
            log.warning(
                "lost the supervisor at %s: %s; dialling again", self.endpoint or resolve_endpoint(), self.why
            )
            if self._on_lost is not None:
                await self._on_lost()

    async def _dial(self, stack: AsyncExitStack) -> tuple[AsyncSupervisorClient, AsyncEventWatch]:
        """A client that answered a ping and an event subscription (joined by the caller), trying until
        there is one (and, with a launcher, starting a supervisor when none answers)."""
        delay = DIAL_RETRY_MIN
        while True:
            try:
                async with AsyncExitStack() as attempt:
                    client = AsyncSupervisorClient(
                        self.endpoint, request_timeout=REQUEST_TIMEOUT, keys=self._keys
                    )
                    await attempt.enter_async_context(client)
                    await client.ping()
                    watch = AsyncEventWatch(
                        await client.events_endpoint(),
                        keys=False if client.keys is None else client.keys,
                        messages=True,
                    )
                    attempt.callback(watch.close)
                    stack.push_async_exit(attempt.pop_all())  # joined after the first listing
                    return client, watch
            except SupervisorError as exc:
                self.why = f"no supervisor answers at {self.endpoint or resolve_endpoint()}: {exc}"
            if self._launcher is not None:
                note = self._launcher.ensure_running()
                if note:
                    self.why += f"; {note}"
            if not self._first.is_set() and (self._launcher is None or self._launcher.gave_up):
                self._first.set()  # listings stop waiting: the host sees no tools until one answers
                self._reached.set()
                log.warning(
                    "%s; start one (mcp-supervisor run CONFIG) or give --config: its tools reach the "
                    "host as soon as it answers",
                    self.why,
                )
            log.debug("%s; trying again in %g s", self.why, delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, DIAL_RETRY_MAX)

    async def _listing(self, client: AsyncSupervisorClient, wait: float = 0.0) -> tuple[list[ToolInfo], int]:
        reply = await client.tool_list(wait)
        if reply.starting:
            log.warning(
                "listed the tools while these servers were still starting: %s", ", ".join(reply.starting)
            )
        return reply.tools, reply.version

    async def _follow(self, client: AsyncSupervisorClient, watch: AsyncEventWatch) -> None:
        """Apply events until none comes for ``BEACON_LOSS`` seconds; tell ``changed`` what moved."""
        while True:
            event = await watch.next_any(BEACON_LOSS)
            if event is None:
                self.why = f"no event from the supervisor for {BEACON_LOSS:g} s"
                return
            if isinstance(event, ServerMessage | ResourceUpdated):
                self._heard(event)
                continue
            before = self._table.version
            if self._table.apply(event):
                self._table.listed(await self._listing(client))
            tools = self._table.version != before
            catalog = isinstance(event, StateChanged) and "ready" in (event.state, event.previous)
            if tools or catalog:
                await self._changed(Change(tools=tools, catalog=catalog))

    def _end_calls(self) -> None:
        """The supervisor is gone: every request in flight through it ends now, as ``SupervisorGone``."""
        for scope in self._calls:
            self._lost.add(scope)
            scope.cancel()
