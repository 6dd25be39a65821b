"""OAuth 2.1 for a remote server, through the SDK's client auth (``mcp.client.auth``).

The SDK does the protocol: protected resource metadata discovery (the ``WWW-Authenticate`` hint,
path-based, root), authorization server metadata (OAuth and OpenID), dynamic client registration,
Client ID Metadata Documents, PKCE, the token endpoint's client authentication, scope selection and
step-up, the RFC 8707 ``resource`` parameter, and the 2025-03-26 fallbacks. This module adds what a
daemon needs around it:

- ``FileStorage``: the SDK's token storage over the server's token file (``supervisor.security.tokens``), so
  tokens outlive the worker, and ``mcp-supervisor login`` hands them to it;
- ``Unattended``: a token is refreshed ahead of its expiry (``REFRESH_AHEAD``), and on a 401 with a
  refresh token, a refresh is tried before anything else. Where only a person can go on (no token, a
  refresh refused, more scope asked for), the worker is told (``on_login_needed``) and the request
  fails with ``LoginNeeded`` instead of waiting for a browser nobody will open;
- ``make_auth``: the grant's provider for a server's ``oauth`` settings: the authorization code
  (``login``), client credentials (a secret, or ``private_key_jwt``), or an identity assertion.

Above: ``workers.remote`` (the worker's transports) and ``supervisor.cli.login`` (the ``login`` command,
which passes handlers that do reach a person). Nothing here logs a token, a secret or a code.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Final, Literal

import httpx2
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider
from mcp.client.auth.utils import extract_field_from_www_auth, extract_scope_from_www_auth, union_scopes
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl, ValidationError

from supervisor.config.model import OAuthSpec, ServerSpec
from supervisor.security.tokens import TokenFile
from workers.remote import LoginNeeded, login_hint

__all__ = ["FileStorage", "Unattended", "make_auth"]

log = logging.getLogger("mcp_supervisor.worker.oauth")

REFRESH_AHEAD: Final = 60.0  # seconds before expiry a token is refreshed (at most a fifth of its life)


class _QuietLoginNeeded(logging.Filter):
    """The SDK logs every failed flow with its traceback; a ``LoginNeeded`` is the worker's own last
    word instead (``workers.session``), said once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], LoginNeeded))


logging.getLogger("mcp.client.auth.oauth2").addFilter(_QuietLoginNeeded())

RedirectHandler = Callable[[str], Awaitable[None]]
CallbackHandler = Callable[[], Awaitable[AuthorizationCodeResult]]


class FileStorage(TokenStorage):
    """The SDK's token storage, kept in the server's token file. A pre-registered client (``clientId``
    in the config) is the config's, and its secret never goes to the file."""

    def __init__(
        self, file: TokenFile, preregistered: OAuthClientInformationFull | None = None, *, fresh: bool = False
    ) -> None:
        self.file = file
        self.preregistered = preregistered
        self.fresh = fresh  # ``login``: the stored token is not used (it is replaced once a new one comes)
        self._expires_at: float | None = None  # of the token last read or written: no file read per request

    async def get_tokens(self) -> OAuthToken | None:
        if self.fresh:
            return None
        record = self.file.read()
        stored = record.get("tokens")
        expires_at = record.get("expires_at")
        self._expires_at = float(expires_at) if isinstance(expires_at, int | float) else None
        try:
            return None if stored is None else OAuthToken.model_validate(stored)
        except ValidationError:
            log.warning("the stored token of server %r is unreadable; ignored", self.file.server)
            return None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.fresh = False
        self.file.set_tokens(tokens.model_dump(mode="json", exclude_none=True), tokens.expires_in)
        self._expires_at = None if tokens.expires_in is None else time.time() + tokens.expires_in

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        if self.preregistered is not None:
            return self.preregistered
        stored = self.file.read().get("client_info")
        try:
            return None if stored is None else OAuthClientInformationFull.model_validate(stored)
        except ValidationError:
            log.warning("the stored client of server %r is unreadable; ignored", self.file.server)
            return None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        if self.preregistered is None:
            self.file.update(client_info=client_info.model_dump(mode="json", exclude_none=True))

    def expires_at(self) -> float | None:
        """When the token in use expires (seconds since the epoch), if it says."""
        return self._expires_at


class Unattended(OAuthClientProvider):
    """The SDK's provider, for a process nobody watches: tokens refreshed ahead of time and on a 401,
    and a clear ``LoginNeeded`` where the SDK would wait for a person."""

    on_login_needed: Callable[[str], None] | None = None
    why: str = "the server asks for authorization"

    @property
    def store(self) -> FileStorage:
        storage = self.context.storage
        assert isinstance(storage, FileStorage), "make_auth gives every provider a FileStorage"
        return storage

    def _prime_expiry(self) -> None:
        """The SDK keeps no expiry across processes: take it from the file, less the refresh margin."""
        expires_at = self.store.expires_at()
        tokens = self.context.current_tokens
        if tokens is not None and expires_at is not None:
            life = tokens.expires_in or REFRESH_AHEAD * 5
            self.context.token_expiry_time = expires_at - min(REFRESH_AHEAD, life / 5)

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if not self._initialized:
            await self._initialize()
            if self.context.current_tokens is None:
                self.why = "no token is stored for it"
        self._prime_expiry()
        flow = super()._auth_flow(request)
        refreshed = False
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                if outgoing is request and response.status_code == 401 and not refreshed:
                    refreshed = True
                    if self.context.can_refresh_token():
                        # The server refused a token we hold (revoked early, or clocks disagree): a
                        # refresh is cheaper than a new authorization, and needs nobody.
                        refresh_response = yield await self._refresh_token()
                        if await self._handle_refresh_response(refresh_response):
                            self._add_auth_header(request)
                            response = yield request
                if (
                    outgoing is request
                    and response.status_code == 403
                    and extract_field_from_www_auth(response, "error") == "insufficient_scope"
                ):
                    scope = extract_scope_from_www_auth(response)
                    self.why = f"the server asks for scope {scope or 'more'!r} (insufficient_scope)"
                    if scope:  # for ``login``, which asks for it with the rest
                        self.store.file.update(scope_needed=scope)
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        await response.aread()  # an auth flow's responses are streamed: read it to tell why
        ok = await super()._handle_refresh_response(response)
        if not ok:
            error = _error_code(response)
            self.why = f"refreshing its token failed (HTTP {response.status_code}{error})"
            log.warning("server %r: %s", self.store.file.server, self.why)
        return ok

    async def _perform_authorization(self) -> httpx2.Request:
        """Ask for the scope the server asked for last time (a step-up that ended a worker) as well."""
        needed = self.store.file.read().get("scope_needed")
        if isinstance(needed, str):
            self.context.client_metadata.scope = union_scopes(self.context.client_metadata.scope, needed)
        return await super()._perform_authorization()

    async def no_person(self, authorization_url: str) -> None:
        """The redirect handler of a worker: nobody is there to open the URL."""
        if self.on_login_needed is not None:
            self.on_login_needed(self.why)
        raise LoginNeeded(self.why, login_hint(self.store.file.server))


class _ClientCredentials(Unattended, ClientCredentialsOAuthProvider):
    """Client credentials with a secret: a new token whenever one is needed, nobody involved."""


class _PrivateKeyJWT(Unattended, PrivateKeyJWTOAuthProvider):
    """Client credentials authenticated with a signed JWT (``private_key_jwt``)."""


def _error_code(response: httpx2.Response) -> str:
    """``: invalid_grant`` from an OAuth error response (only the code: descriptions may quote input)."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return ""
    return f": {error}" if isinstance(error, str) and error.isprintable() and len(error) < 64 else ""


async def _never() -> AuthorizationCodeResult:
    raise LoginNeeded("no authorization code can arrive in a worker")  # no_person raised first


def make_auth(
    spec: ServerSpec,
    file: TokenFile,
    *,
    on_login_needed: Callable[[str], None] | None = None,
    redirect_handler: RedirectHandler | None = None,
    callback_handler: CallbackHandler | None = None,
    fresh: bool = False,
) -> httpx2.Auth:
    """The httpx auth for ``spec``'s grant. Without handlers (a worker), an authorization code that
    only a person could give ends in ``LoginNeeded`` and ``on_login_needed``."""
    oauth = spec.oauth
    assert oauth is not None and spec.url is not None, "only remote servers with oauth settings"
    if oauth.grant == "identity_assertion":
        return _identity_assertion(spec.url, oauth, FileStorage(file))
    provider: Unattended
    if oauth.grant == "client_credentials":
        assert oauth.client_id is not None, "checked by the config loader"
        if oauth.private_key is not None:
            jwt = SignedJWTParameters(
                issuer=oauth.client_id,
                subject=oauth.client_id,
                signing_key=oauth.private_key,
                signing_algorithm=oauth.signing_algorithm,
            )
            provider = _PrivateKeyJWT(
                spec.url,
                FileStorage(file),
                oauth.client_id,
                jwt.create_assertion_provider(),
                scope=oauth.scope,
                issuer=oauth.issuer,
            )
        else:
            assert oauth.client_secret is not None, "checked by the config loader"
            provider = _ClientCredentials(
                spec.url,
                FileStorage(file),
                oauth.client_id,
                oauth.client_secret,
                token_endpoint_auth_method=_secret_method(oauth),
                scope=oauth.scope,
                issuer=oauth.issuer,
            )
    else:
        storage = FileStorage(file, _preregistered(oauth), fresh=fresh)
        provider = Unattended(
            spec.url,
            OAuthClientMetadata(
                client_name=oauth.client_name,
                redirect_uris=[AnyUrl(oauth.redirect_uri)],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                scope=oauth.scope,
                token_endpoint_auth_method=oauth.token_endpoint_auth_method,
            ),
            storage,
            redirect_handler,
            callback_handler,
            client_metadata_url=oauth.client_metadata_url,
        )
        if redirect_handler is None:
            provider.context.redirect_handler = provider.no_person
            provider.context.callback_handler = _never
    provider.on_login_needed = on_login_needed
    return provider


def _preregistered(oauth: OAuthSpec) -> OAuthClientInformationFull | None:
    if oauth.client_id is None:
        return None
    method = oauth.token_endpoint_auth_method or ("client_secret_basic" if oauth.client_secret else "none")
    return OAuthClientInformationFull(
        client_id=oauth.client_id,
        client_secret=oauth.client_secret,
        redirect_uris=[AnyUrl(oauth.redirect_uri)],
        token_endpoint_auth_method=method,
        scope=oauth.scope,
    )


def _identity_assertion(url: str, oauth: OAuthSpec, storage: FileStorage) -> httpx2.Auth:
    """SEP-990: the IdP's ID token exchanged there for an ID-JAG (RFC 8693), which the authorization
    server at ``issuer`` exchanges for an access token (RFC 7523 jwt-bearer)."""
    assert oauth.client_id and oauth.client_secret and oauth.issuer, "checked by the config loader"
    assert oauth.idp_token_endpoint and oauth.idp_client_id and oauth.idp_id_token, "checked too"
    endpoint, idp_client, id_token = oauth.idp_token_endpoint, oauth.idp_client_id, oauth.idp_id_token

    async def fetch_id_jag(audience: str, resource: str) -> str:
        async with httpx2.AsyncClient(timeout=30.0) as http:
            response = await http.post(
                endpoint,
                data={
                    "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                    "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
                    "subject_token": id_token,
                    "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
                    "audience": audience,
                    "resource": resource,
                    "client_id": idp_client,
                },
            )
        if response.status_code != 200:
            raise LoginNeeded(
                f"the identity provider refused the ID token (HTTP {response.status_code}"
                f"{_error_code(response)}); give a fresh one in oauth.idpIdToken"
            )
        token = response.json().get("access_token")
        if not isinstance(token, str):
            raise LoginNeeded("the identity provider's token exchange answered no access_token")
        return token

    return IdentityAssertionOAuthProvider(
        url,
        storage,
        oauth.client_id,
        oauth.client_secret,
        oauth.issuer,
        fetch_id_jag,
        scope=oauth.scope,
        token_endpoint_auth_method=_secret_method(oauth),
    )


def _secret_method(oauth: OAuthSpec) -> Literal["client_secret_basic", "client_secret_post"]:
    """How a confidential client sends its secret: ``client_secret_basic`` unless the config says post."""
    return (
        "client_secret_post"
        if oauth.token_endpoint_auth_method == "client_secret_post"
        else "client_secret_basic"
    )
