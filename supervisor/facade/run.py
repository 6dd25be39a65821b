"""Running the facade: over stdio (``mcp-supervisor mcp``) or streamable HTTP (``serve --http``).

Above: the CLI (``supervisor.cli.main``). Below: the facade (``supervisor.facade.server``) and its link
to the supervisor (``supervisor.facade.upstream``), and the SDK's transports: ``stdio_server`` for a
host that starts the facade as its MCP server, and the SDK's streamable HTTP app on uvicorn.

Over stdio, stdout is the protocol: logs go to stderr, and the facade ends when the host closes its
stdin; a line the SDK's transport cannot read is answered all the same (``supervisor.facade.pipes``).
Over HTTP,
every request needs ``Authorization: Bearer <token>`` with one of the tokens (compared in constant
time), or, with a gateway file's ``oauth`` block, an OAuth access token its authorization server
issued for this server (``supervisor.facade.protected_resource``), unless told to run without; the port is
bound to 127.0.0.1 unless another host is named.
"""

from __future__ import annotations

import logging
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import msgspec
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import SessionMessage

from supervisor.config.gateway import Gateway
from supervisor.facade.access import GRANT, Access
from supervisor.facade.admission import admit
from supervisor.facade.cors import Cors
from supervisor.facade.credentials import BearerAuth
from supervisor.facade.guard import ACCEPT_BACKLOG, ANSWER
from supervisor.facade.handshake import Opening
from supervisor.facade.host_sessions import session_app
from supervisor.facade.http_lane import FastLane
from supervisor.facade.launch import Launcher
from supervisor.facade.pipes import Answers, Unanswered, claimed_stdio, sift
from supervisor.facade.principal import PRINCIPAL, Principal
from supervisor.facade.server import Facade, FacadeOptions
from supervisor.facade.stdio_lane import StdioLane
from supervisor.facade.upstreams import Upstreams
from supervisor.security.keys import Keys
from supervisor.shared.address import HostCheck, ListenAddress
from supervisor.shared.federation import Member

if TYPE_CHECKING:
    from supervisor.facade.protected_resource import ProtectedResource

__all__ = ["MCP_PATH", "BearerAuth", "Front", "SameOrigin", "bind", "http_app", "serve_http", "serve_stdio"]

log = logging.getLogger("mcp_supervisor.facade")

MCP_PATH: Final = "/mcp"
MAX_VERDICTS: Final = 256  # (Host, Origin) pairs whose verdict is kept
DRAIN_GRACE: Final = 10  # seconds the requests in flight get after SIGTERM (then they are cut)
# Seconds without a request before a draining facade exits: a host's next request often follows its last
# answer at once (the SDK's client lists the tools after a call to a tool it has not listed, to check
# the result against the tool's output schema).
DRAIN_QUIET: Final = 1.0

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _facade(
    options: FacadeOptions, members: Sequence[Member], keys: Keys, launcher: Launcher | None
) -> tuple[Facade, Upstreams]:
    facade = Facade(options)
    upstream = Upstreams(
        members,
        keys=keys,
        changed=facade.changed,
        launcher=launcher,
        list_wait=options.list_wait,
        heard=facade.relay.heard,
    )
    facade.upstream = upstream
    return facade, upstream


async def serve_stdio(
    options: FacadeOptions,
    members: Sequence[Member],
    keys: Keys = None,
    launcher: Launcher | None = None,
    opening: Opening | None = None,
) -> None:
    """Serve one host on stdin and stdout, from the supervisors ``members``, until it closes stdin;
    ``opening``: what was read of stdin before, and answered (``supervisor.facade.handshake``)."""
    opening = opening or Opening()
    facade, upstream = _facade(options, members, keys, launcher)
    async with anyio.create_task_group() as tasks:
        await tasks.start(facade.tell_hosts)
        await tasks.start(upstream.run)
        with claimed_stdio(opening.read) as (stdin, stdout):  # trio's own pipes: no thread per line (pipes)
            unanswered = Unanswered()
            lane = StdioLane(facade.express if options.fast else None, stdout, unanswered)
            facade.heard = lane.heard
            from_host, lines_in = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            to_server, messages = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            to_host, answered = anyio.create_memory_object_stream[SessionMessage](0)
            async with anyio.create_task_group() as writing:
                writing.start_soon(lane.write, answered)  # until the server closes its stream
                async with anyio.create_task_group() as lines:
                    lines.start_soon(lane.read, stdin, from_host)
                    lines.start_soon(sift, lines_in, to_server, to_host, unanswered)
                    answers = Answers(to_host, unanswered, opening.answered)
                    await facade.server.run(messages, answers, facade.initialization_options())
                    lines.cancel_scope.cancel()
        log.info("the host closed the connection")
        tasks.cancel_scope.cancel()


class SameOrigin:
    """Against DNS rebinding (the MCP transport's MUST): a request whose ``Host`` does not name this
    listener gets 421, one whose ``Origin`` is another site's gets 403, on every address the facade
    listens on (the SDK checks only on 127.0.0.1, localhost and ::1). ``Front`` asks ``refusal``."""

    def __init__(self, hosts: HostCheck, cors: Cors | None = None) -> None:
        self._hosts = hosts
        self._cors = cors  # origins of other sites whose pages are allowed all the same
        self._verdicts: dict[tuple[bytes, bytes | None], tuple[int, str] | None] = {}  # (Host, Origin) ->

    def refusal(self, headers: Mapping[bytes, bytes]) -> tuple[int, str] | None:
        """The status and reason a request with ``headers`` is refused with, or None; kept for each
        (Host, Origin) pair seen (a host sends the same ones each time)."""
        key = (headers.get(b"host", b""), headers.get(b"origin"))
        if key in self._verdicts:
            return self._verdicts[key]
        host, origin = key[0].decode("latin-1"), None if key[1] is None else key[1].decode("latin-1")
        verdict: tuple[int, str] | None = None
        if not self._hosts.allows(host):
            verdict = 421, f"Host {host!r} does not name this server (--allow-host adds names)"
        elif origin is not None and not self._same_site(origin) and not self._cors_allows(key[1]):
            verdict = 403, f"Origin {origin!r} is another site's"
        if len(self._verdicts) >= MAX_VERDICTS:
            self._verdicts.clear()
        self._verdicts[key] = verdict
        return verdict

    def _cors_allows(self, origin: bytes | None) -> bool:
        return self._cors is not None and self._cors.allows(origin)

    def _same_site(self, origin: str) -> bool:
        scheme, sep, rest = origin.partition("://")
        return (
            bool(sep) and scheme.lower() in ("http", "https") and "/" not in rest and self._hosts.allows(rest)
        )


async def _refuse(send: Send, status: int, why: str) -> None:
    body = msgspec.json.encode({"error": why})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def http_app(
    facade: Facade,
    sock: socket.socket,
    tokens: Sequence[str] | None,
    allow_hosts: Sequence[str] = (),
    gateway: Gateway | None = None,
) -> Front:
    """The SDK's streamable HTTP app for ``facade`` at ``/mcp``, behind ``SameOrigin`` (the hosts this
    listener answers to: its address, loopback names on loopback, ``allow_hosts``) and ``BearerAuth``
    with ``tokens`` (and the tokens of ``gateway``'s clients) and, with ``gateway``'s ``oauth``, the
    protected resource that checks access tokens, in one ``Front`` that counts the requests in flight.
    ``tokens`` None: no authentication at all."""
    host, port = sock.getsockname()[:2]
    ours = TransportSecuritySettings(enable_dns_rebinding_protection=False)  # SameOrigin does it, everywhere
    app: ASGIApp
    app, sessions = session_app(facade.server, MCP_PATH, ours)
    if facade.options.fast:
        facade.session_initialized = sessions.initialized
        app = FastLane(app, facade.express, facade.tools, MCP_PATH, sessions)
    facade.access.use(gateway)
    cors = Cors(() if gateway is None else gateway.cors_origins)
    auth = oauth = None
    if tokens is not None:
        named = {f"token-{n}": token for n, token in enumerate(tokens, 1)}
        for entry in gateway.clients or () if gateway is not None else ():
            if entry.token is not None:
                named[entry.name] = entry.token
        auth = BearerAuth(named) if named else None
    if tokens is not None and gateway is not None and gateway.oauth is not None:
        from supervisor.facade.protected_resource import ProtectedResource  # only with OAuth: PyJWT, crypto

        oauth = ProtectedResource(gateway.oauth.for_listener(host, port), MCP_PATH)
    if tokens is not None and auth is None and oauth is None:
        raise ValueError("bearer authentication needs at least one token, or OAuth")
    origin = SameOrigin(HostCheck(ListenAddress(host, port), port, allow_hosts), cors)
    return Front(app, origin, auth, oauth, facade.access, cors)


class Front:
    """The ASGI middleware in front of the app: ``SameOrigin``'s checks, a configured origin's preflight
    (``Cors``), then the credentials: a static token of ``BearerAuth`` (when given), else an access
    token of the ``oauth`` protected resource (when given), whose metadata paths it answers without
    credentials; then the principal's grant (``Access``: 403 when no ``clients`` entry admits it; its
    limits, 429). The request's headers are read once, in one await frame (each wait and wake of a
    request's task passes through every frame of its stack); ``count`` is the requests being
    answered, but the long-lived event streams (GET), and ``last``, when the last of them was answered
    (``time.monotonic``). Neither ``auth`` nor ``oauth``: no authentication."""

    def __init__(
        self,
        app: ASGIApp,
        origin: SameOrigin,
        auth: BearerAuth | None,
        oauth: ProtectedResource | None = None,
        access: Access | None = None,
        cors: Cors | None = None,
    ) -> None:
        self._app = app
        self.count = 0
        self.last = 0.0
        self._origin = origin
        self._auth = auth
        self.oauth = oauth
        self._access = access
        self._cors = cors if cors else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        refused = self._origin.refusal(headers)
        if refused is not None:
            await _refuse(send, *refused)
            return
        if self._cors is not None and self._cors.allows(origin := headers.get(b"origin")):
            assert origin is not None
            if scope.get("method") == "OPTIONS":
                await self._cors.preflight(headers, send)
                return
            send = self._cors.sending(origin, send)
            scope["extensions"] = {k: v for k, v in (scope.get("extensions") or {}).items() if k != ANSWER}
        if self.oauth is not None and scope["path"] in self.oauth.metadata_paths:
            await self.oauth.send_metadata(scope.get("method", "GET"), send)
            return
        grant = None
        if self._auth is not None or self.oauth is not None:
            header = headers.get(b"authorization")
            principal = None if self._auth is None else self._auth.principal(header)
            if principal is None and self.oauth is not None:
                verdict = await self.oauth.verify(header)
                if not isinstance(verdict, Principal):
                    await self.oauth.refuse(send, verdict)
                    return
                principal = verdict
            elif principal is None:
                assert self._auth is not None
                await self._auth.refuse(send)
                return
            scope[PRINCIPAL] = principal
            if self._access is not None:
                grant = self._access.grant(principal)
                if grant is None:
                    await _refuse(
                        send, 403, f"{principal.name!r} is admitted by none of the gateway's clients"
                    )
                    return
                scope[GRANT] = grant
        if scope.get("method") == "GET":
            await self._app(scope, receive, send)
            return
        self.count += 1
        try:
            if grant is not None and grant.limiter is not None and scope.get("method") == "POST":
                await admit(grant, self._app, scope, receive, send)
            else:
                await self._app(scope, receive, send)
        finally:
            self.count -= 1
            self.last = time.monotonic()


def bind(host: str, port: int) -> socket.socket:
    """The listening socket: bound and listening before serving, so that port 0 can say which port it
    got, and a host that connects the moment the ``LISTENING`` line appears is queued by the kernel
    until the server accepts (rather than refused)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so, and without it every
    # response waits for the host's delayed ACK (Nagle: some 40 ms a request).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(ACCEPT_BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


async def serve_http(
    options: FacadeOptions,
    members: Sequence[Member],
    sock: socket.socket,
    tokens: Sequence[str] | None,
    keys: Keys = None,
    launcher: Launcher | None = None,
    log_level: str = "warning",
    allow_hosts: Sequence[str] = (),
    gateway: Gateway | None = None,
) -> None:
    """Serve streamable HTTP at ``/mcp`` on ``sock`` from the supervisors ``members``, until cancelled
    (on asyncio, as uvicorn is)."""
    import uvicorn
    from sse_starlette.sse import AppStatus

    from supervisor.facade.guard import connection_cap, guarded_protocol, quiet_accept_failures

    # Event streams end when we say (below), not the moment a signal comes: a call in flight answers
    # on its request's stream.
    AppStatus.disable_automatic_graceful_drain()  # type: ignore[no-untyped-call]

    class Server(uvicorn.Server):
        """uvicorn's, but SIGTERM drains: once no request is in flight and none was answered for
        ``DRAIN_QUIET`` seconds (at most ``DRAIN_GRACE`` seconds in all), every stream ends and ``serve``
        returns (exit 0). Meanwhile requests are still served: a host may need one more (a listing, to
        read the result's schema) to finish its call."""

        drain_until: float | None = None

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if sig != signal.SIGTERM:
                AppStatus.should_exit = True
                super().handle_exit(sig, frame)
            elif self.drain_until is None:
                busy = requests.count
                log.warning("SIGTERM: draining (%d requests in flight, %g s at most)", busy, DRAIN_GRACE)
                self.drain_until = time.monotonic() + DRAIN_GRACE

        async def on_tick(self, counter: int) -> bool:
            if self.drain_until is None:
                return await super().on_tick(counter)
            now = time.monotonic()
            if (requests.count or now - requests.last < DRAIN_QUIET) and now < self.drain_until:
                return False
            AppStatus.should_exit = True
            return True

    facade, upstream = _facade(options, members, keys, launcher)
    app = requests = http_app(facade, sock, tokens, allow_hosts, gateway)
    protocol = guarded_protocol(connection_cap())  # a cap on connections, and on slow requests
    quiet_accept_failures()
    config = uvicorn.Config(
        app,
        http=protocol,
        backlog=ACCEPT_BACKLOG,  # asyncio accepts this many at a time: the cap's margin (guard)
        log_level=log_level,
        lifespan="on",
        # Nothing here reads the client's address or scheme: no X-Forwarded-* rewriting of each request,
        # and no "server: uvicorn" header on each answer for the host to parse.
        proxy_headers=False,
        server_header=False,
        timeout_graceful_shutdown=DRAIN_GRACE,
    )
    server = Server(config)
    async with anyio.create_task_group() as tasks:
        await tasks.start(facade.tell_hosts)
        await tasks.start(upstream.run)
        try:
            await server.serve(sockets=[sock])
        finally:
            if app.oauth is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(DRAIN_GRACE):
                    await app.oauth.aclose()
        tasks.cancel_scope.cancel()
