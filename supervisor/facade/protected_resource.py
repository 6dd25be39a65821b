"""The HTTP facade as an OAuth 2.1 protected resource (RFC 9728, RFC 6750, the MCP authorization spec).

Above: ``supervisor.facade.run.Front``, which answers the metadata paths with ``send_metadata`` (no
credentials needed), asks ``verify`` about a bearer token that is none of the static ones, puts the
principal it proves in the request's scope, and answers a ``Refusal`` with ``refuse``. Below: the
token checks (``supervisor.facade.access_tokens``), the settings (``supervisor.config.oauth_resource``)
and the SDK's model of the metadata (``mcp.shared.auth.ProtectedResourceMetadata``).

The metadata is served at ``/.well-known/oauth-protected-resource`` with the resource's path inserted
(``.../oauth-protected-resource/mcp``), and at the bare well-known path. A refusal says where it is:
``WWW-Authenticate: Bearer resource_metadata="..."``, with ``error="invalid_token"`` and a description
of what was wrong when a token was given, or ``error="insufficient_scope", scope="..."`` (403) when it
lacks a required scope; the JSON body says the same. When the authorization server cannot be asked
(its keys cannot be fetched, its introspection fails), the answer is 503 with the reason.

The SDK's ``RequireAuthMiddleware`` and ``BearerAuthBackend`` are not used: a ``TokenVerifier`` can only
say "no", where a refusal here says why, and static bearer tokens are accepted beside access tokens.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final
from urllib.parse import urlsplit

import httpx2
import msgspec
from mcp.shared.auth import ProtectedResourceMetadata

from supervisor.config.oauth_resource import OAuthResource
from supervisor.facade.access_tokens import NO_TOKEN, AccessTokens, Refusal, TokenRefused
from supervisor.facade.principal import Principal

__all__ = ["WELL_KNOWN", "ProtectedResource", "Refusal", "metadata_url"]

log = logging.getLogger("mcp_supervisor.facade.oauth")

WELL_KNOWN: Final = "/.well-known/oauth-protected-resource"
RETRY_AFTER: Final = b"30"  # seconds a client is told to wait after a 503 (the JWKS refetch interval)
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def metadata_url(resource: str) -> str:
    """RFC 9728 §3.1: the metadata URL of ``resource``, the well-known path inserted before its path."""
    parts = urlsplit(resource)
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{WELL_KNOWN}{path}"


def _quoted(text: str) -> str:
    """``text`` fit for a quoted-string of ``WWW-Authenticate`` (RFC 6750 §3: no ``"`` nor ``\\``)."""
    return "".join(c if 0x20 <= ord(c) < 0x7F and c not in '"\\' else "?" for c in text)


class ProtectedResource:
    """The protected resource of ``settings`` (whose ``resource`` is filled in: ``for_listener``)."""

    def __init__(
        self, settings: OAuthResource, mcp_path: str = "/mcp", http: httpx2.AsyncClient | None = None
    ) -> None:
        """``http``: the client to ask the authorization server with (default: one of its own, made at
        the first need, on the running event loop)."""
        if settings.resource is None:
            raise ValueError("the protected resource needs its resource URL (OAuthResource.for_listener)")
        self.settings = settings
        self.metadata_url = metadata_url(settings.resource)
        own = WELL_KNOWN + urlsplit(settings.resource).path.rstrip("/")
        self.metadata_paths = frozenset({own, WELL_KNOWN + mcp_path, WELL_KNOWN})
        document = ProtectedResourceMetadata.model_validate(
            {
                "resource": settings.resource,
                "authorization_servers": [settings.issuer],
                "scopes_supported": list(settings.advertised_scopes or ()) or None,
                "bearer_methods_supported": ["header"],
                "resource_name": "mcp-supervisor",
            }
        )
        self.document = document.model_dump_json(exclude_none=True).encode()
        self._client = http
        self.tokens = AccessTokens(settings, self._http)

    def _http(self) -> httpx2.AsyncClient:
        if self._client is None:
            self._client = httpx2.AsyncClient(follow_redirects=False)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def verify(self, header: bytes | None) -> Principal | Refusal:
        """The principal the ``Authorization`` header's access token proves, or why it does not."""
        if header is None:
            return NO_TOKEN
        scheme, _, token = header.strip().partition(b" ")
        token = token.strip()
        if scheme.lower() != b"bearer" or not token:
            return NO_TOKEN
        try:
            return await self.tokens.principal(token)
        except TokenRefused as refused:
            log.debug("access token refused (%d): %s", refused.refusal.status, refused.refusal.description)
            return refused.refusal
        except Exception as exc:  # the boundary: no token, however made, answers 500
            log.warning("an access token could not be checked (%s); refused", type(exc).__name__)
            return Refusal(401, "invalid_token", "the token could not be checked")

    async def send_metadata(self, method: str, send: Send) -> None:
        """The metadata document (GET, HEAD), or 405."""
        if method not in ("GET", "HEAD"):
            body = b'{"error": "the protected resource metadata is read with GET"}'
            await _send(send, 405, body, [(b"allow", b"GET, HEAD")])
            return
        headers = [(b"cache-control", b"public, max-age=3600")]
        await _send(send, 200, self.document, headers, head=method == "HEAD")

    async def refuse(self, send: Send, refusal: Refusal) -> None:
        """``refusal`` as RFC 6750 and RFC 9728 say: 401 or 403 with ``WWW-Authenticate``, or 503."""
        body: dict[str, str] = {
            "error": refusal.error or "unauthorized",
            "error_description": refusal.description,
        }
        headers: list[tuple[bytes, bytes]] = []
        if refusal.status == 503:
            headers.append((b"retry-after", RETRY_AFTER))
        else:
            parts = [f'resource_metadata="{self.metadata_url}"']
            if refusal.error is not None:
                parts[:0] = [
                    f'error="{refusal.error}"',
                    f'error_description="{_quoted(refusal.description)}"',
                ]
            scope = refusal.scope
            if scope is None and refusal.error is None and self.settings.required_scopes:
                scope = " ".join(self.settings.required_scopes)
            if scope is not None:
                parts.append(f'scope="{_quoted(scope)}"')
                body["scope"] = scope
            headers.append((b"www-authenticate", ("Bearer " + ", ".join(parts)).encode()))
            body["resource_metadata"] = self.metadata_url
        await _send(send, refusal.status, msgspec.json.encode(body), headers)


async def _send(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]], head: bool = False
) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})
