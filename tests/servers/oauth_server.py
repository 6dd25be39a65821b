"""A real OAuth 2.1 authorization server and a protected MCP server in one process, for end-to-end tests.

It exists to test MCP clients that must keep their tokens fresh unattended: tokens can be made to
expire quickly (``--token-lifetime``), and the test-control endpoints expire or revoke them on demand
and count what the clients did. Everything is kept in memory and built from the MCP SDK's own
server-side auth pieces (``mcp.server.auth``: metadata, registration, authorize and token handlers,
bearer middleware), so the OAuth behaviour is the SDK's; only the store of clients, codes and tokens
is written here.

Run it as ``python -m tests.servers.oauth_server [--port 0] [--token-lifetime 3600] [--scopes "mcp:basic"]
[--sse] [--jwt] [--any-resource] [--subject SUB] [--groups A,B] [--introspection-client ID:SECRET]``:
    --sse           the legacy SSE transport at ``/sse`` and ``/messages/`` instead of ``/mcp``
    --jwt           access tokens are RS256 JWTs (``iss``, ``sub``, ``aud``, ``exp``, ``iat``, ``scope``,
                    ``client_id``, ``jti``, ``groups``; header ``kid``), else opaque random strings
    --any-resource  issue tokens for any RFC 8707 ``resource`` a client asks for (their ``aud``), not
                    only for this server's own ``/mcp`` (as the authorization server of another resource)
    --subject SUB   every token's ``sub``; by default the client's registered ``client_name``, else its
                    ``client_id``
    --groups A,B    a ``groups`` claim (a list) in every token
    --introspection-client ID:SECRET
                    the HTTP Basic credentials of ``/introspect`` (default introspector:introspector-secret)
It binds 127.0.0.1 (port 0: a free port) and, once listening, prints ``LISTENING http://127.0.0.1:PORT``
on stdout. SIGTERM or SIGINT stops it (exit status 0).

Endpoints (``BASE`` is ``http://127.0.0.1:PORT``, both the issuer and the resource server's origin):
    /mcp                 MCP streamable HTTP; needs ``Authorization: Bearer <token>``, else 401 with
                         ``WWW-Authenticate: Bearer error="invalid_token", error_description="...",
                         resource_metadata="BASE/.well-known/oauth-protected-resource/mcp"``
    /.well-known/oauth-protected-resource/mcp
                         RFC 9728 metadata: resource BASE/mcp, authorization_servers [BASE]
    /.well-known/oauth-authorization-server
                         RFC 8414 metadata (the SDK's, with ``jwks_uri`` and ``introspection_endpoint``)
    /jwks                the public key that signs the JWTs (RFC 7517), ``kid`` "test-key-1"
    /introspect          RFC 7662 introspection of the tokens issued or minted (HTTP Basic, see above):
                         ``active``, ``iss``, ``sub``, ``aud``, ``exp``, ``iat``, ``scope``, ``client_id``
    /register            RFC 7591 dynamic client registration
    /authorize           auto-approves: 302 to the redirect_uri with ``code`` and ``state``
                         (after checking client_id, redirect_uri and the S256 code_challenge)
    /token               ``authorization_code`` (PKCE checked) and ``refresh_token`` (refresh tokens
                         rotate); client auth as registered: client_secret_post, client_secret_basic or none
    /revoke              RFC 7009 revocation
    POST /test/revoke    revoke every access and refresh token issued so far
    POST /test/expire    expire every current access token now (their refresh tokens still work)
    POST /test/mint      a token made to order, for refusal tests: JSON ``{"aud", "sub", "scope",
                         "expires_in" (negative: expired), "not_before_in", "iss", "alg" ("none": unsigned),
                         "key" ("other": signed by a key not in /jwks, under the same kid), "kid",
                         "omit" (claims left out), "groups", "opaque" (true: an opaque token for
                         /introspect)}``, each optional; answers ``{"access_token": ...}``
    GET  /test/stats     {"authorizations", "token_requests", "refreshes", "refresh_failures",
                         "unauthorized", "calls"}: codes issued, /token requests, refresh_token grants
                         answered 200 / with an error, 401s from /mcp, tools/call requests

Tools: ``echo {text}`` returns ``text``; ``whoami {}`` returns ``{"client_id": ..., "scopes": [...]}`` of the
token the call was made with.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import re
import secrets
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

KID = "test-key-1"  # the kid of the key that signs the JWTs
INTROSPECTOR = "introspector:introspector-secret"  # /introspect's HTTP Basic credentials, by default
CODE_LIFETIME = 300  # seconds an authorization code stays usable
S256_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")  # BASE64URL(SHA256(verifier)) without padding
STAT_NAMES = ("authorizations", "token_requests", "refreshes", "refresh_failures", "unauthorized", "calls")


class TimedAccessToken(AccessToken):
    """An access token that knows its expiry to the sub-second (``expires_at`` has whole seconds only)."""

    deadline: float


class Issuing:
    """How tokens are made: JWTs or opaque, for which resources, with which ``sub`` and ``groups``."""

    def __init__(
        self,
        issuer: str,
        jwt_tokens: bool = False,
        any_resource: bool = False,
        subject: str | None = None,
        groups: list[str] | None = None,
    ) -> None:
        self.issuer = issuer
        self.jwt = jwt_tokens
        self.any_resource = any_resource
        self.subject = subject
        self.groups = groups
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)  # in no JWKS

    def jwks(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [public | {"kid": KID, "alg": "RS256", "use": "sig"}]}

    def claims(
        self, client_id: str, subject: str, scopes: list[str], resource: str, exp: float
    ) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": subject,
            "aud": resource,
            "exp": math.ceil(exp),
            "iat": now,
            "scope": " ".join(scopes),
            "client_id": client_id,
            "jti": secrets.token_hex(8),
        }
        if self.groups is not None:
            claims["groups"] = self.groups
        return claims

    def sign(
        self, claims: dict[str, Any], alg: str = "RS256", other_key: bool = False, kid: str = KID
    ) -> str:
        if alg == "none":
            return _unsigned(claims)
        key = self.other_key if other_key else self.key
        return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})


def _unsigned(claims: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


class InMemoryProvider(OAuthAuthorizationServerProvider[AuthorizationCode, RefreshToken, TimedAccessToken]):
    """Clients, codes and tokens in dicts; approves every authorization request it is given."""

    def __init__(
        self, resource: str, token_lifetime: int, stats: dict[str, int], issuing: Issuing | None = None
    ) -> None:
        self.resource = resource
        self.token_lifetime = token_lifetime
        self.stats = stats
        self.issuing = issuing or Issuing(resource.rsplit("/", 1)[0])
        self.scopes: list[str] = []  # what a minted token has when its order names none
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access_tokens: dict[str, TimedAccessToken] = {}
        self.refresh_tokens: dict[str, RefreshToken] = {}
        self.introspected: dict[str, dict[str, Any]] = {}  # token -> what /introspect says of it

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None  # the SDK's registration handler always assigns one
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        # The SDK has checked client_id, redirect_uri, scope and code_challenge_method=S256 already.
        if not S256_CHALLENGE.fullmatch(params.code_challenge):
            raise AuthorizeError("invalid_request", "code_challenge is not an S256 challenge")
        if params.resource not in (None, self.resource) and not self.issuing.any_resource:
            raise AuthorizeError("invalid_target", f"unknown resource {params.resource}")
        assert client.client_id is not None
        subject = self.issuing.subject or client.client_name or client.client_id
        code = AuthorizationCode(
            code=secrets.token_urlsafe(32),
            # No scope asked for: the scopes the client registered with (RFC 6749 §3.3 lets a server default).
            scopes=params.scopes if params.scopes is not None else (client.scope or "").split(),
            expires_at=time.time() + CODE_LIFETIME,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource or self.resource,
            subject=subject,
        )
        self.codes[code.code] = code
        self.stats["authorizations"] += 1
        return construct_redirect_uri(str(params.redirect_uri), code=code.code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        if self.codes.pop(authorization_code.code, None) is None:  # single use
            raise TokenError("invalid_grant", "authorization code was already used")
        code = authorization_code
        return self._issue(code.client_id, code.scopes, code.resource, code.subject)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        return self.refresh_tokens.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        if self.refresh_tokens.pop(refresh_token.token, None) is None:  # rotation: each is used once
            raise TokenError("invalid_grant", "refresh token was already used")
        return self._issue(refresh_token.client_id, scopes, refresh_token.resource, refresh_token.subject)

    async def load_access_token(self, token: str) -> TimedAccessToken | None:
        access = self.access_tokens.get(token)
        return access if access is not None and time.time() < access.deadline else None

    async def revoke_token(self, token: TimedAccessToken | RefreshToken) -> None:
        self.access_tokens.pop(token.token, None)
        self.refresh_tokens.pop(token.token, None)

    def _issue(
        self, client_id: str, scopes: list[str], resource: str | None = None, subject: str | None = None
    ) -> OAuthToken:
        deadline = time.time() + self.token_lifetime
        resource = resource or self.resource
        claims = self.issuing.claims(client_id, subject or client_id, scopes, resource, deadline)
        access = TimedAccessToken(
            token=self.issuing.sign(claims) if self.issuing.jwt else secrets.token_urlsafe(32),
            client_id=client_id,
            scopes=scopes,
            expires_at=math.ceil(deadline),
            resource=resource,
            subject=claims["sub"],
            deadline=deadline,
        )
        refresh = RefreshToken(
            token=secrets.token_urlsafe(32),
            client_id=client_id,
            scopes=scopes,
            resource=resource,
            subject=claims["sub"],
        )
        self.access_tokens[access.token] = access
        self.introspected[access.token] = claims
        self.refresh_tokens[refresh.token] = refresh
        return OAuthToken(
            access_token=access.token,
            expires_in=self.token_lifetime,
            refresh_token=refresh.token,
            scope=" ".join(scopes),
        )

    def revoke_all(self) -> None:
        self.access_tokens.clear()
        self.refresh_tokens.clear()
        self.introspected.clear()

    def introspect(self, token: str) -> dict[str, Any]:
        """RFC 7662's answer about ``token``: its claims while it is live, else ``{"active": false}``."""
        claims = self.introspected.get(token)
        access = self.access_tokens.get(token)
        live = claims is not None and time.time() < claims.get("exp", math.inf)
        if access is not None:  # an issued token: expired or revoked as the provider says
            live = live and time.time() < access.deadline
        if claims is None or not live:
            return {"active": False}
        return {"active": True, "token_type": "Bearer", **claims}

    def mint(self, order: dict[str, Any]) -> str:
        """A token made to ``order`` (see /test/mint)."""
        lifetime = float(order.get("expires_in", self.token_lifetime))
        claims = self.issuing.claims(
            str(order.get("client_id", "minted-client")),
            str(order.get("sub", "minted")),
            str(order.get("scope", " ".join(self.scopes))).split(),
            order.get("aud", self.resource),
            time.time() + lifetime,
        )
        if "iss" in order:
            claims["iss"] = order["iss"]
        if "not_before_in" in order:
            claims["nbf"] = int(time.time() + float(order["not_before_in"]))
        if "groups" in order:
            claims["groups"] = order["groups"]
        for name in order.get("omit", ()):
            claims.pop(name, None)
        if order.get("opaque"):
            token = secrets.token_urlsafe(32)
            self.introspected[token] = claims
            return token
        alg, other = str(order.get("alg", "RS256")), order.get("key") == "other"
        return self.issuing.sign(claims, alg, other, str(order.get("kid", KID)))

    def expire_all(self) -> None:
        now = time.time()
        for token, access in self.access_tokens.items():
            self.access_tokens[token] = access.model_copy(
                update={"expires_at": int(now) - 1, "deadline": now}
            )


class HttpCounters:
    """ASGI middleware counting 401s from the MCP routes and the answers of ``/token``."""

    def __init__(self, app: ASGIApp, stats: dict[str, int]) -> None:
        self.app = app
        self.stats = stats

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path") if scope["type"] == "http" else None
        mcp = path in ("/mcp", "/sse") or str(path).startswith("/messages")  # either transport's routes
        if not mcp and path != "/token":
            await self.app(scope, receive, send)
            return
        grant_type = ""
        if path == "/token":
            self.stats["token_requests"] += 1
            receive, body = await _buffered(receive)
            grant_type = parse_qs(body.decode(errors="replace")).get("grant_type", [""])[0]

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                if mcp and status == 401:
                    self.stats["unauthorized"] += 1
                elif grant_type == "refresh_token":
                    self.stats["refreshes" if status == 200 else "refresh_failures"] += 1
            await send(message)

        await self.app(scope, receive, counting_send)


async def _buffered(receive: Receive) -> tuple[Receive, bytes]:
    """Read the whole request body; return a ``receive`` that replays it, and the body."""
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay, body


class MoreMetadata:
    """ASGI middleware adding ``more`` to the SDK's authorization server metadata (which knows no JWKS
    and no introspection)."""

    def __init__(self, app: ASGIApp, more: dict[str, Any]) -> None:
        self.app = app
        self.more = more

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/.well-known/oauth-authorization-server":
            await self.app(scope, receive, send)
            return
        start: Message = {}
        body = b""

        async def keep(message: Message) -> None:
            nonlocal start, body
            if message["type"] == "http.response.start":
                start = message
            else:
                body += message.get("body", b"")

        await self.app(scope, receive, keep)
        if start.get("status") == 200:
            body = json.dumps(json.loads(body) | self.more).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def build_app(
    base_url: str,
    token_lifetime: int,
    scopes: list[str],
    sse: bool = False,
    issuing: Issuing | None = None,
    introspector: str = INTROSPECTOR,
) -> ASGIApp:
    """The whole server as one ASGI app: authorization server, MCP server and test-control routes;
    with ``sse``, the MCP server is the legacy SSE transport at ``/sse`` instead of ``/mcp``; ``issuing``:
    how tokens are made (default: opaque, for this server's resource only); ``introspector``: the
    ``ID:SECRET`` that ``/introspect`` needs."""
    resource = f"{base_url}/sse" if sse else f"{base_url}/mcp"
    stats = dict.fromkeys(STAT_NAMES, 0)
    provider = InMemoryProvider(resource, token_lifetime, stats, issuing or Issuing(base_url))
    provider.scopes = scopes
    introspector_header = "Basic " + base64.b64encode(introspector.encode()).decode()

    async def count_calls(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call":
            stats["calls"] += 1
        return await call_next(ctx)

    # Validated from strings: AuthSettings keeps "http://127.0.0.1:PORT" as it is, where AnyHttpUrl(...)
    # would add a trailing slash to the issuer (and RFC 8414 issuers are compared as exact strings).
    auth = AuthSettings.model_validate(
        {
            "issuer_url": base_url,
            "resource_server_url": resource,
            "validate_token_resource": True,
            "required_scopes": scopes,
            "client_registration_options": ClientRegistrationOptions(
                enabled=True, valid_scopes=scopes, default_scopes=scopes
            ),
            "revocation_options": RevocationOptions(enabled=True),
        }
    )
    mcp = MCPServer(
        "oauth-test-server",
        auth_server_provider=provider,
        auth=auth,
        log_level="WARNING",
        middleware=[count_calls],
    )

    @mcp.tool()
    def echo(text: str) -> str:
        """Return ``text``."""
        return text

    @mcp.tool()
    def whoami() -> dict[str, Any]:
        """The client_id and scopes of the access token this call was made with."""
        token = get_access_token()
        assert token is not None  # /mcp is behind the bearer middleware
        return {"client_id": token.client_id, "scopes": token.scopes}

    async def test_revoke(request: Request) -> Response:
        provider.revoke_all()
        return JSONResponse({"revoked": True})

    async def test_expire(request: Request) -> Response:
        provider.expire_all()
        return JSONResponse({"expired": True})

    async def test_stats(request: Request) -> Response:
        return JSONResponse(stats)

    async def test_mint(request: Request) -> Response:
        return JSONResponse({"access_token": provider.mint(await request.json())})

    async def jwks(request: Request) -> Response:
        return JSONResponse(provider.issuing.jwks())

    async def introspect(request: Request) -> Response:
        if not secrets.compare_digest(request.headers.get("authorization", ""), introspector_header):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        form = await request.form()
        token = form.get("token")
        if not isinstance(token, str):
            return JSONResponse(
                {"error": "invalid_request", "error_description": "no token"}, status_code=400
            )
        return JSONResponse(provider.introspect(token))

    # Routes without auth. custom_route is an untyped decorator, so it is applied as a plain call.
    mcp.custom_route("/test/revoke", methods=["POST"])(test_revoke)
    mcp.custom_route("/test/expire", methods=["POST"])(test_expire)
    mcp.custom_route("/test/stats", methods=["GET"])(test_stats)
    mcp.custom_route("/test/mint", methods=["POST"])(test_mint)
    mcp.custom_route("/jwks", methods=["GET"])(jwks)
    mcp.custom_route("/introspect", methods=["POST"])(introspect)

    app = mcp.sse_app() if sse else mcp.streamable_http_app(host="127.0.0.1")
    more = {"jwks_uri": f"{base_url}/jwks", "introspection_endpoint": f"{base_url}/introspect"}
    return MoreMetadata(HttpCounters(app, stats), more)


class Server(uvicorn.Server):
    """uvicorn, announcing itself on stdout once it listens, and exiting with 0 on SIGTERM/SIGINT."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and sockets:
            host, port = sockets[0].getsockname()[:2]
            print(f"LISTENING http://{host}:{port}", flush=True)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn's own version re-raises the signal after shutting down, which kills the process.
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--token-lifetime", type=int, default=3600, help="access token lifetime in seconds")
    parser.add_argument("--scopes", default="mcp:basic", help="space-separated scopes clients get and need")
    parser.add_argument("--sse", action="store_true", help="serve MCP over legacy SSE at /sse, not at /mcp")
    parser.add_argument("--jwt", action="store_true", help="access tokens are RS256 JWTs (else opaque)")
    parser.add_argument("--any-resource", action="store_true", help="issue tokens for any RFC 8707 resource")
    parser.add_argument(
        "--subject", help="every token's sub (default: the client's client_name, or client_id)"
    )
    parser.add_argument("--groups", help="a groups claim, comma-separated")
    parser.add_argument("--introspection-client", default=INTROSPECTOR, metavar="ID:SECRET")
    args = parser.parse_args(argv)

    # IPPROTO_TCP, not 0: uvicorn sets TCP_NODELAY only on sockets made so, and without it Nagle's
    # algorithm holds each small response back some 40 ms.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}"
    groups = None if args.groups is None else [group for group in args.groups.split(",") if group]
    issuing = Issuing(base_url, args.jwt, args.any_resource, args.subject, groups)
    app = build_app(
        base_url, args.token_lifetime, args.scopes.split(), args.sse, issuing, args.introspection_client
    )
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
