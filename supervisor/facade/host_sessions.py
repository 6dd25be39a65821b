"""The HTTP facade's host sessions: the SDK's session manager, but no client can lock the others out.

Above: ``supervisor.facade.run.http_app``, which serves ``MCP_PATH`` with ``session_app``. Below: the
SDK's ``StreamableHTTPSessionManager`` (one transport and server task per ``Mcp-Session-Id``).

The SDK refuses a new session (503) while ``max_sessions`` are open, and forgets an idle one only
after its idle timeout (30 minutes): a client that opens sessions and never deletes them would lock
every new host out for that long. Here, when the house is full, the session used longest ago that
has no request in flight (an open event stream counts as one) is ended to make room: its client, if
it comes back, gets 404 and starts a new session, as the transport says it must. Only when every
session is busy is a new one refused. At most ``MAX_SESSIONS`` are open, which bounds the memory a
flood of sessions can take.

Each session keeps what it sent on its event streams (``supervisor.facade.replay``, every session's
within one bound), so a host whose stream broke resumes it with ``Last-Event-ID`` and misses nothing;
sessions of 2025-11-25 and later get a priming event with ``retry`` (``RETRY_MS``) on each stream,
whatever version a request's header claims (the SDK goes by the header alone).

The fast path (``supervisor.facade.http_lane``) answers the calls and listings of a session whose
host offers neither sampling nor elicitation (``initialized``, ``for_fast_path``) without the SDK's
transport; ``SessionStream`` does for such a request what the transport does for its own: keeps the
session busy, mints the priming event, keeps the answer's event for a host that resumes.
"""

from __future__ import annotations

import logging
import math
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Final

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, EventMessage, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import jsonrpc_message_adapter
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from supervisor.facade.replay import Ledger, Replay

if TYPE_CHECKING:
    from supervisor.facade.express import Taken
from supervisor.shared.repeats import Repeats

__all__ = ["MAX_SESSIONS", "RETRY_MS", "SessionStream", "Sessions", "session_app"]

log = logging.getLogger("mcp_supervisor.facade")

MAX_SESSIONS: Final = 1000  # host sessions open at once (each a transport and a server task)
RETRY_MS: Final = 1000  # milliseconds a host waits before it resumes a broken event stream


class Sessions(StreamableHTTPSessionManager):
    """The SDK's session manager; a full house ends the least recently used idle session."""

    def __init__(self, app: Any, **options: Any) -> None:
        super().__init__(app, **options)
        self._used: dict[str, None] = {}  # open sessions' ids, least recently used first
        self._repeats = Repeats(log)
        self.ledger = Ledger()  # every session's events kept for resumption
        self._versions: dict[str, str] = {}  # open sessions' newest protocol version seen in a header
        self._plain: dict[str, str] = {}  # open sessions of hosts that may not be asked: their version

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        session_id = headers.get(MCP_SESSION_ID_HEADER)
        if session_id is not None and session_id in self._used:
            del self._used[session_id]
            self._used[session_id] = None  # the most recently used now
            version = headers.get(MCP_PROTOCOL_VERSION_HEADER, "")
            if len(version) == 10 and version > self._versions.get(session_id, ""):  # YYYY-MM-DD
                self._versions[session_id] = version
        await super()._handle_stateful_request(scope, receive, send)

    def initialized(self, session_id: str, version: str, plain: bool) -> None:
        """A session's host finished its handshake on ``version``; ``plain``: it declared neither
        sampling nor elicitation, so its calls may take the fast path (``for_fast_path``)."""
        if plain and session_id in self._server_instances:
            self._plain[session_id] = version

    def for_fast_path(self, session_id: str, version: str) -> StreamableHTTPServerTransport | None:
        """The transport of the open session ``session_id``, when a request of it that names
        ``version`` may be answered on the fast path (the session's host is plain and handshook on
        that version); marked as just used, as a request the SDK serves is. Else None."""
        transport = self._server_instances.get(session_id)
        if transport is None or transport.is_terminated or self._plain.get(session_id) != version:
            return None
        if session_id in self._used:
            del self._used[session_id]
            self._used[session_id] = None
        return transport

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            self._end_least_recently_used()
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            self._used[transport.mcp_session_id] = None
            transport._event_store = Replay(self.ledger)  # its own: no session replays another's events
            transport._mint_priming_event = self._priming(transport)  # type: ignore[method-assign]
        return transport

    def _priming(self, transport: StreamableHTTPServerTransport) -> Any:
        """The transport's priming, by the session's protocol version rather than the request's header."""
        mint, session_id = transport._mint_priming_event, transport.mcp_session_id or ""

        async def priming(stream_id: str, protocol_version: str) -> Any:
            return await mint(stream_id, max(protocol_version, self._versions.get(session_id, "")))

        return priming

    def _end_least_recently_used(self) -> None:
        for session_id in self._used:
            transport = self._server_instances.get(session_id)
            if transport is None or transport._requests_in_flight:
                continue
            del self._used[session_id]
            self._server_instances.pop(session_id, None)  # its id answers 404 from now on
            self._session_owners.pop(session_id, None)
            assert self._task_group is not None
            self._task_group.start_soon(self._discard_session, session_id, transport)
            self._repeats.log(
                "sessions ended for room",
                logging.WARNING,
                "%d host sessions open: the one used longest ago was ended for a new one",
                len(self._server_instances) + 1,
            )
            return

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        self._used.pop(session_id, None)
        self._versions.pop(session_id, None)
        self._plain.pop(session_id, None)
        await super()._discard_session(session_id, transport)


class SessionStream:
    """A host session's request on the fast path: its transport held busy while it is answered (as the
    SDK's entry holds it: no idle timeout meanwhile), its priming event, its answer kept."""

    def __init__(self, transport: StreamableHTTPServerTransport, session: str) -> None:
        self.transport = transport
        self.session = session

    async def opening(self, taken: Taken) -> bytes:
        """The priming event the SDK opens this request's stream with (kept first), or nothing."""
        event = await self.transport._mint_priming_event(str(taken.id), taken.version)
        if event is None:
            return b""
        retry = event.get("retry")
        return b"id: %s\r\ndata: \r\n%s\r\n" % (
            str(event["id"]).encode(),
            b"" if retry is None else b"retry: %d\r\n" % retry,
        )

    def kept(self, taken: Taken, body: bytes) -> bytes:
        """Keep the answer's event for a host that resumes the stream, and send it on the stream the
        host resumed already, if it did; its event id."""
        store, stream = self.transport._event_store, str(taken.id)
        assert isinstance(store, Replay)  # every session's own (``Sessions._admit_session``)
        event = store.store_json(stream, body)
        resumed = self.transport._request_streams.get(stream)
        if resumed is not None:  # the host came back before the answer: the SDK's replay waits on it
            message = jsonrpc_message_adapter.validate_json(body, by_name=False)
            with suppress(anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                resumed[0].send_nowait(EventMessage(message, event))
        return event.encode()

    def __enter__(self) -> None:
        transport = self.transport
        if transport.idle_scope is not None and transport._idle_timeout is not None:
            transport._requests_in_flight += 1
            transport.idle_scope.deadline = math.inf

    def __exit__(self, *exc: object) -> None:
        transport = self.transport
        if transport.idle_scope is not None and transport._idle_timeout is not None:
            transport._requests_in_flight -= 1
            if not transport._requests_in_flight:
                transport.idle_scope.deadline = anyio.current_time() + transport._idle_timeout


def session_app(server: Any, path: str, security: TransportSecuritySettings) -> tuple[Starlette, Sessions]:
    """``server`` (the SDK's low-level server) on streamable HTTP at ``path``, with ``Sessions``; the
    app and its session manager."""
    manager = Sessions(server, security_settings=security, max_sessions=MAX_SESSIONS, retry_interval=RETRY_MS)
    app = Starlette(
        routes=[Route(path, endpoint=StreamableHTTPASGIApp(manager))],
        lifespan=lambda app: manager.run(),
    )
    return app, manager
