"""Access tokens checked as the HTTP facade's protected resource does: a JWT against the issuer's keys,
any other token (or every token, if so set) through the authorization server's introspection.

Above: ``supervisor.facade.protected_resource.ProtectedResource``, which asks ``AccessTokens.principal`` for
a request's bearer token and answers a ``TokenRefused`` with its ``Refusal``. Below: the issuer's keys
(``supervisor.facade.token_keys``), PyJWT, httpx2, and the settings
(``supervisor.config.oauth_resource``).

A JWT must be signed with one of the allowed algorithms by a key of the issuer's JWKS, and carry
``iss`` (the issuer), ``aud`` (containing the audience), ``exp`` (not past, give or take the leeway),
``sub``, and, when present, a ``nbf`` and ``iat`` not in the future. An introspection answer must say
``active``, name the audience in ``aud``, and carry a ``sub``; its ``iss``, ``exp`` and ``nbf`` are checked
when present. Either way the token's scopes (``scope``, space-separated, or ``scp``) must hold every
required scope. Tokens are never logged; what is kept is keyed by their SHA-256.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import httpx2
import jwt

from supervisor.config.oauth_resource import OAuthResource
from supervisor.facade.principal import Principal
from supervisor.facade.token_keys import IssuerKeys, KeysUnavailable, SigningKey, fetch_json

__all__ = ["AccessTokens", "Refusal", "TokenRefused"]

log = logging.getLogger("mcp_supervisor.facade.oauth")

MAX_TOKEN: Final = 8192  # bytes of a bearer token
MAX_KEPT: Final = 4096  # tokens whose verdict is kept (the oldest forgotten first)
KEEP_VERIFIED: Final = 300.0  # seconds a JWT's verdict is kept at most (its exp permitting)
KEEP_INTROSPECTED: Final = 60.0  # seconds an introspection's answer is kept at most (its exp permitting)
LOG_INTERVAL: Final = 30.0  # seconds between two log lines about an introspection endpoint that fails
B64TOKEN: Final = re.compile(rb"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750's token syntax
JWT_SHAPE: Final = re.compile(rb"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")  # JWS compact form


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused: ``status`` 401 (no token, ``error`` None; or an invalid one), 403 (the
    token lacks the ``scope`` named) or 503 (the authorization server cannot be asked now);
    ``description`` says why in plain words (and holds no token)."""

    status: int
    error: str | None
    description: str
    scope: str | None = None


NOT_ACTIVE: Final = (
    "the token is not active (the authorization server says it expired, was revoked or is unknown)"
)
NO_TOKEN: Final = Refusal(401, None, "this server needs an OAuth access token: Authorization: Bearer <token>")


class TokenRefused(Exception):
    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.description)
        self.refusal = refusal


def _invalid(description: str) -> TokenRefused:
    return TokenRefused(Refusal(401, "invalid_token", description))


def _unavailable(description: str) -> TokenRefused:
    return TokenRefused(Refusal(503, "temporarily_unavailable", description))


def _shown(value: object, limit: int = 64) -> str:
    """A value from a token, fit to quote in a message: printable ASCII, no quotes, ``limit`` long."""
    text = "".join(c if 0x20 <= ord(c) < 0x7F and c not in '"\\' else "?" for c in str(value))
    return text if len(text) <= limit else text[:limit] + "..."


class AccessTokens:
    """Checks access tokens for the protected resource of ``settings`` (its ``resource`` filled in);
    ``http`` gives the HTTP client; ``clock``: seconds since the epoch."""

    def __init__(
        self,
        settings: OAuthResource,
        http: Callable[[], httpx2.AsyncClient],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._audience = settings.expected_audience
        self._http = http
        self._clock = clock
        self.keys = IssuerKeys(settings.issuer, settings.jwks_uri, http)
        self._kept: dict[bytes, tuple[Principal | Refusal, float]] = {}  # SHA-256 -> verdict, until
        self._logged_at = -LOG_INTERVAL

    async def principal(self, token: bytes) -> Principal:
        """Who ``token`` (a bearer token's bytes) speaks for; ``TokenRefused`` saying why not."""
        if len(token) > MAX_TOKEN:
            raise _invalid(f"the token is over {MAX_TOKEN} bytes")
        if not B64TOKEN.fullmatch(token):
            raise _invalid("the token has characters a bearer token cannot have")
        digest = hashlib.sha256(token).digest()
        now = self._clock()
        kept = self._kept.get(digest)
        if kept is not None and now < kept[1]:
            verdict = kept[0]
            if isinstance(verdict, Refusal):
                raise TokenRefused(verdict)
            if verdict.expires_at is None or now <= verdict.expires_at + self._settings.leeway:
                return self._scoped(verdict)
        self._kept.pop(digest, None)
        introspection = self._settings.introspection
        jwt_shaped = JWT_SHAPE.fullmatch(token) is not None
        if introspection is not None and (introspection.introspect_all or not jwt_shaped):
            found, keep = await self._introspect(token.decode("ascii"))
        elif jwt_shaped:
            found, keep = await self._verify(token.decode("ascii")), KEEP_VERIFIED
        else:
            raise _invalid("the token is not a JWT, and this server has no introspection endpoint to ask")
        until = now + keep
        if isinstance(found, Principal) and found.expires_at is not None:
            until = min(until, found.expires_at + self._settings.leeway)
        self._keep(digest, found, until)
        if isinstance(found, Refusal):
            raise TokenRefused(found)
        log.debug("the access token of %r (%s) is accepted", _shown(found.name), found.via)
        return self._scoped(found)

    def _keep(self, digest: bytes, verdict: Principal | Refusal, until: float) -> None:
        while len(self._kept) >= MAX_KEPT:
            del self._kept[next(iter(self._kept))]
        self._kept[digest] = (verdict, until)

    def _scoped(self, principal: Principal) -> Principal:
        missing = [scope for scope in self._settings.required_scopes if scope not in principal.scopes]
        if missing:
            needed = " ".join(self._settings.required_scopes)
            lacks = ", ".join(missing)
            raise TokenRefused(
                Refusal(403, "insufficient_scope", f"the token lacks the scope {lacks}", needed)
            )
        return principal

    # --- JWTs -------------------------------------------------------------------------------------

    async def _verify(self, token: str) -> Principal:
        try:
            header = jwt.get_unverified_header(token)  # a JSON object, whose kid, if any, is a string
        except jwt.PyJWTError as exc:  # PyJWT's messages say what is wrong and quote nothing of the token
            raise _invalid(f"malformed JWT: {_shown(exc, 120)}") from None
        algorithm, kid = header.get("alg"), header.get("kid")
        if not isinstance(algorithm, str) or algorithm.lower() == "none":
            raise _invalid("the token is unsigned (alg none)")
        if algorithm not in self._settings.algorithms:
            allowed = ", ".join(self._settings.algorithms)
            raise _invalid(f"the token's algorithm {_shown(algorithm)} is not accepted (accepted: {allowed})")
        try:
            keys = await self.keys.keys_for(kid, algorithm)
        except KeysUnavailable as exc:
            raise _unavailable(str(exc)) from None
        if not keys:
            named = f"kid {_shown(kid)}" if kid is not None else f"no kid, and no {algorithm} key"
            raise _invalid(f"unknown key: {named} is not in the issuer's JWKS")
        claims = self._decode(token, algorithm, keys)
        return Principal(self._subject(claims), "jwt", claims, _scopes(claims), float(claims["exp"]))

    def _decode(self, token: str, algorithm: str, keys: list[SigningKey]) -> dict[str, Any]:
        options: Any = {"require": ["exp", "iss", "aud"], "verify_sub": False, "verify_jti": False}
        for key in keys:
            try:
                claims: dict[str, Any] = jwt.decode(
                    token,
                    key.key,
                    algorithms=[algorithm],
                    audience=self._audience,
                    issuer=self._settings.issuer,
                    leeway=self._settings.leeway,
                    options=options,
                )
                return claims
            except jwt.InvalidSignatureError:
                continue  # another key of the set may have signed it
            except jwt.PyJWTError as exc:
                raise _invalid(_why(exc, self._settings.issuer, self._audience)) from None
        raise _invalid("bad signature: no key of the issuer's JWKS signed this token")

    @staticmethod
    def _subject(claims: Mapping[str, Any]) -> str:
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise _invalid("the token has no sub (subject)")
        return subject

    # --- introspection (RFC 7662) -----------------------------------------------------------------

    async def _introspect(self, token: str) -> tuple[Principal | Refusal, float]:
        """The authorization server's verdict on ``token``, and how long it may be kept."""
        introspection = self._settings.introspection
        assert introspection is not None
        headers = {"Accept": "application/json"}
        if introspection.client_id is not None and introspection.client_secret is not None:
            pair = f"{quote(introspection.client_id, safe='')}:{quote(introspection.client_secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        form = {"token": token, "token_type_hint": "access_token"}
        try:
            answer = await fetch_json(
                self._http(), "POST", introspection.endpoint, data=form, headers=headers
            )
        except KeysUnavailable as exc:
            why = f"the authorization server's introspection cannot be asked: {exc}"
            now = time.monotonic()
            if now - self._logged_at >= LOG_INTERVAL:
                self._logged_at = now
                log.warning("%s (tokens it must vouch for get 503 meanwhile)", why)
            raise _unavailable(why) from None
        if not isinstance(answer, dict) or not isinstance(answer.get("active"), bool):
            raise _unavailable("the introspection endpoint's answer has no 'active' (true or false)")
        if answer["active"] is not True:
            return Refusal(401, "invalid_token", NOT_ACTIVE), KEEP_INTROSPECTED
        try:
            return self._introspected(answer), KEEP_INTROSPECTED
        except TokenRefused as refused:
            return refused.refusal, KEEP_INTROSPECTED

    def _introspected(self, answer: dict[str, Any]) -> Principal:
        now, leeway = self._clock(), self._settings.leeway
        issuer = answer.get("iss")
        if issuer is not None and issuer != self._settings.issuer:
            raise _invalid(f"wrong issuer: the token is not from {self._settings.issuer}")
        audience = answer.get("aud")
        audiences = (
            [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
        )
        if self._audience not in audiences:
            raise _invalid(f"wrong audience: the token is not for {self._audience}")
        expires = answer.get("exp")
        if expires is not None and not isinstance(expires, (int, float)):
            raise _invalid("the introspection answer's exp is not a number")
        if expires is not None and expires + leeway < now:
            raise _invalid("the token expired")
        not_before = answer.get("nbf")
        if isinstance(not_before, (int, float)) and not_before - leeway > now:
            raise _invalid("the token is not yet valid (its nbf is in the future)")
        expires_at = None if expires is None else float(expires)
        return Principal(self._subject(answer), "introspection", answer, _scopes(answer), expires_at)


def _scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """The scopes a token grants: ``scope`` (space-separated, RFC 8693/9068) or ``scp`` (a list, or a
    space-separated string, as some providers give it)."""
    found: set[str] = set()
    for key in ("scope", "scp"):
        value = claims.get(key)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(item for item in value if isinstance(item, str))
    return frozenset(found)


def _why(exc: jwt.PyJWTError, issuer: str, audience: str) -> str:
    """A JWT's refusal in plain words (PyJWT's messages quote no token, but say less)."""
    match exc:
        case jwt.ExpiredSignatureError():
            return "the token expired"
        case jwt.ImmatureSignatureError():
            return "the token is not yet valid (its nbf or iat is in the future)"
        case jwt.InvalidAudienceError():
            return f"wrong audience: the token is not for {audience}"
        case jwt.InvalidIssuerError():
            return f"wrong issuer: the token is not from {issuer}"
        case jwt.MissingRequiredClaimError():
            return f"the token has no {exc.claim} claim"
        case jwt.InvalidSignatureError():
            return "bad signature"
        case jwt.DecodeError():
            return "malformed JWT"
        case _:
            return f"invalid token ({_shown(exc, 120)})"
