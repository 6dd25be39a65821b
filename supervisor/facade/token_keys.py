"""The authorization server's signing keys, as the HTTP facade's protected resource needs them: its
JWKS, found through the issuer's metadata when not given, fetched once and kept.

Above: ``supervisor.facade.access_tokens``, which asks ``IssuerKeys.keys_for`` for the keys a JWT may be
signed with. Below: httpx2 (the SDK's HTTP client; the facade runs on asyncio) and PyJWT's JWK parsing.

The JWKS is fetched at the first JWT, then again only when a token names a key it does not hold, at
most once every ``REFETCH_INTERVAL`` seconds (a token with a made-up ``kid`` cannot make the facade
hammer the authorization server). While no keys could ever be fetched, ``keys_for`` raises
``KeysUnavailable`` saying why, and the failure is logged once per attempt, so once per interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import anyio
import httpx2
import jwt
import msgspec

__all__ = ["MAX_DOCUMENT", "REFETCH_INTERVAL", "IssuerKeys", "KeysUnavailable", "SigningKey", "fetch_json"]

log = logging.getLogger("mcp_supervisor.facade.oauth")

REFETCH_INTERVAL: Final = 30.0  # seconds between two fetches of the JWKS (or tries, while it fails)
FETCH_TIMEOUT: Final = 10.0  # seconds one fetch of a metadata document or the JWKS may take
MAX_DOCUMENT: Final = 1 << 20  # bytes of a metadata document, a JWKS or an introspection answer
MAX_KEYS: Final = 100  # keys of a JWKS kept (more is not a key set, it is a mistake)
# Which JWKs can check which algorithm: the JWK's kty and, for elliptic curves, its crv.
_KEY_TYPES: Final[Mapping[str, tuple[str, frozenset[str] | None]]] = {
    **{f"{family}{bits}": ("RSA", None) for family in ("RS", "PS") for bits in (256, 384, 512)},
    "ES256": ("EC", frozenset({"P-256"})),
    "ES384": ("EC", frozenset({"P-384"})),
    "ES512": ("EC", frozenset({"P-521"})),
    "EdDSA": ("OKP", frozenset({"Ed25519", "Ed448"})),
}


class KeysUnavailable(Exception):
    """No keys could be had from the authorization server; the text says why."""


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One usable key of the JWKS: its ``kid`` (None: none given), type, curve, ``alg`` (None: any that
    fits the type) and the public key itself (a ``cryptography`` key)."""

    kid: str | None
    kty: str
    crv: str | None
    alg: str | None
    key: Any

    def fits(self, algorithm: str) -> bool:
        kty, curves = _KEY_TYPES.get(algorithm, ("", None))
        if self.kty != kty or (curves is not None and self.crv not in curves):
            return False
        return self.alg is None or self.alg == algorithm


async def fetch_json(http: httpx2.AsyncClient, method: str, url: str, **request: Any) -> Any:
    """The JSON document at ``url``, read up to ``MAX_DOCUMENT`` bytes; ``KeysUnavailable`` saying what
    went wrong (never with the body of the answer in it)."""
    try:
        async with http.stream(method, url, timeout=FETCH_TIMEOUT, **request) as response:
            if response.status_code != 200:
                raise KeysUnavailable(f"{url} answered HTTP {response.status_code}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT:
                    raise KeysUnavailable(f"{url} answered with over {MAX_DOCUMENT} bytes")
    except httpx2.HTTPError as exc:
        raise KeysUnavailable(f"{url} cannot be reached: {type(exc).__name__}: {exc}") from None
    try:
        return msgspec.json.decode(bytes(body))
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise KeysUnavailable(f"{url} answered with something other than JSON") from None


def metadata_urls(issuer: str) -> list[str]:
    """Where the issuer's metadata may be (RFC 8414 first, then OpenID Connect Discovery)."""
    parts = urlsplit(issuer)
    origin, path = f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/")
    urls = [f"{origin}/.well-known/oauth-authorization-server{path}"]
    if path:
        urls.append(f"{origin}/.well-known/openid-configuration{path}")
    urls.append(f"{origin}{path}/.well-known/openid-configuration")
    return urls


def parse_jwks(document: Any, where: str) -> list[SigningKey]:
    """The usable signing keys of a JWKS document (those of other types, or for encryption, left out);
    ``KeysUnavailable`` when it has none."""
    raw = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(raw, list):
        raise KeysUnavailable(f"{where} is not a JWKS (no 'keys' list)")
    keys: list[SigningKey] = []
    for entry in raw[:MAX_KEYS]:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        kid, alg, crv = entry.get("kid"), entry.get("alg"), entry.get("crv")
        try:
            parsed = jwt.PyJWK(entry)
        except Exception:  # a key PyJWT cannot read (its errors are not one tree): not one to check with
            continue
        if entry.get("kty") not in ("RSA", "EC", "OKP"):
            continue
        keys.append(
            SigningKey(
                kid if isinstance(kid, str) else None,
                str(entry["kty"]),
                crv if isinstance(crv, str) else None,
                alg if isinstance(alg, str) else None,
                parsed.key,
            )
        )
    if not keys:
        raise KeysUnavailable(f"{where} has no public signing key (RSA, EC or OKP)")
    return keys


class IssuerKeys:
    """The keys of ``issuer``, from ``jwks_uri`` (None: the one its metadata names); ``http`` gives the
    HTTP client to fetch with; ``clock``: seconds, monotonic."""

    def __init__(
        self,
        issuer: str,
        jwks_uri: str | None,
        http: Callable[[], httpx2.AsyncClient],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._issuer = issuer
        self._jwks_uri = jwks_uri
        self._http = http
        self._clock = clock
        self._keys: list[SigningKey] | None = None  # None: never fetched
        self._tried: float | None = None  # when the last fetch began
        self._error = "the keys were not fetched yet"
        self._lock: anyio.Lock | None = None

    async def keys_for(self, kid: str | None, algorithm: str) -> list[SigningKey]:
        """The keys a token naming ``kid`` (None: none named) and ``algorithm`` may be signed with: none
        when the JWKS has no such key even after a fetch (one per ``REFETCH_INTERVAL`` at most);
        ``KeysUnavailable`` when no JWKS could be fetched at all."""
        found = self._matching(kid, algorithm)
        if found or not self._due():
            return self._usable(found)
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            found = self._matching(kid, algorithm)  # another request's fetch may have brought it
            if not found and self._due():
                await self._fetch()
                found = self._matching(kid, algorithm)
        return self._usable(found)

    def _usable(self, found: list[SigningKey]) -> list[SigningKey]:
        if self._keys is None:
            raise KeysUnavailable(self._error)
        return found

    def _due(self) -> bool:
        return self._tried is None or self._clock() - self._tried >= REFETCH_INTERVAL

    def _matching(self, kid: str | None, algorithm: str) -> list[SigningKey]:
        keys = self._keys or ()
        return [key for key in keys if (kid is None or key.kid == kid) and key.fits(algorithm)]

    async def _fetch(self) -> None:
        self._tried = self._clock()
        try:
            uri = self._jwks_uri or await self._discover()
            self._keys = parse_jwks(await fetch_json(self._http(), "GET", uri), uri)
            self._jwks_uri = uri
            log.info("fetched %d signing keys of %s from %s", len(self._keys), self._issuer, uri)
        except KeysUnavailable as exc:
            self._error = f"the authorization server's keys cannot be fetched: {exc}"
            kept = "the keys fetched before are kept" if self._keys else "JWTs get 503 meanwhile"
            log.warning("%s (%s; next try in %g s at the earliest)", self._error, kept, REFETCH_INTERVAL)

    async def _discover(self) -> str:
        """The ``jwks_uri`` of the issuer's metadata, whose ``issuer`` must be ours (RFC 8414 §3.3)."""
        problems: list[str] = []
        for url in metadata_urls(self._issuer):
            try:
                document = await fetch_json(self._http(), "GET", url)
            except KeysUnavailable as exc:
                problems.append(str(exc))
                continue
            if not isinstance(document, dict):
                problems.append(f"{url} is not a JSON object")
                continue
            issuer = document.get("issuer")
            if not isinstance(issuer, str) or issuer.rstrip("/") != self._issuer.rstrip("/"):
                problems.append(f"{url} is the metadata of another issuer")
                continue
            uri = document.get("jwks_uri")
            if not isinstance(uri, str) or urlsplit(uri).scheme not in ("http", "https"):
                problems.append(f"{url} names no jwks_uri")
                continue
            return uri
        raise KeysUnavailable("no metadata of the issuer names its keys: " + "; ".join(problems))
