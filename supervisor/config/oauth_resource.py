"""The ``oauth`` block of a gateway file: the HTTP facade as an OAuth 2.1 protected resource.

Pure parsing, no I/O but the secrets its ``${...}`` name. Above: ``supervisor.config.gateway``, which
decodes the block as an ``OAuthBlock`` and turns it into an ``OAuthResource`` here; the CLI's ``serve``,
which fills in the listener's own resource URL (``for_listener``); the facade's protected resource
(``supervisor.facade.protected_resource``), which runs it. Below: ``${VAR}`` expansion.

::

    "oauth": {
      "issuer": "https://login.example.com/realms/mcp",   # the authorization server (required)
      "resource": "https://mcp.example.com/mcp",          # this server's canonical URL
      "audience": "https://mcp.example.com/mcp",          # a token's aud must contain it (default: resource)
      "jwksUri": "https://login.example.com/.../certs",   # default: from the issuer's metadata
      "algorithms": ["RS256", "ES256"],                   # default: RS256, ES256, PS256, EdDSA
      "requiredScopes": ["mcp:tools"],                    # every token must have these
      "scopesSupported": ["mcp:tools"],                   # for the metadata (default: requiredScopes)
      "leeway": 30,                                       # seconds of clock skew allowed
      "introspection": {"endpoint": "https://.../introspect", "clientId": "mcp",
                        "clientSecret": "${file:/run/secrets/introspection}", "introspectAll": false}
    }

``resource`` may be left out only when the facade listens on loopback: it is then
``http://HOST:PORT/mcp``. URLs are ``https://``, or ``http://`` to a loopback host.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import msgspec

from supervisor.config.expansion import expand_vars
from supervisor.config.json_input import escape
from supervisor.config.model import ConfigError

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "DEFAULT_ALGORITHMS",
    "Introspection",
    "IntrospectionBlock",
    "OAuthBlock",
    "OAuthResource",
    "OAuthSettingsError",
    "is_loopback",
    "oauth_resource",
]

DEFAULT_ALGORITHMS: Final = ("RS256", "ES256", "PS256", "EdDSA")
ASYMMETRIC_ALGORITHMS: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
DEFAULT_LEEWAY: Final = 30.0  # seconds of clock skew allowed for exp and nbf
MAX_LEEWAY: Final = 300.0  # seconds: more would keep an expired token usable for long
MCP_PATH: Final = "/mcp"  # where the facade serves MCP (supervisor.facade.run.MCP_PATH)


class OAuthSettingsError(ConfigError):
    """What is wrong with an ``oauth`` block; the text names the file and the key."""


_FailFn = Callable[[str, str], OAuthSettingsError]  # (key, why) -> the error to raise


class IntrospectionBlock(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"
):
    endpoint: str
    client_id: str | None = None
    client_secret: str | None = None
    introspect_all: bool = False


class OAuthBlock(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """The block as written (camelCase keys; an unknown key is an error)."""

    issuer: str
    resource: str | None = None
    audience: str | None = None
    jwks_uri: str | None = None
    algorithms: list[str] | None = None
    required_scopes: list[str] = []
    scopes_supported: list[str] | None = None
    leeway: float = DEFAULT_LEEWAY
    introspection: IntrospectionBlock | None = None


@dataclass(frozen=True, slots=True)
class Introspection:
    """RFC 7662: ``endpoint``, asked with HTTP Basic ``client_id``:``client_secret`` (when given) about
    tokens that are not JWTs, or about every token with ``introspect_all``."""

    endpoint: str
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    introspect_all: bool = False


@dataclass(frozen=True, slots=True)
class OAuthResource:
    """The facade as a protected resource: tokens of ``issuer``, for ``audience`` (None: ``resource``),
    signed with one of ``algorithms`` by a key of ``jwks_uri`` (None: the one the issuer's metadata
    names), with every scope of ``required_scopes``; ``resource`` None until ``for_listener`` fills it
    in for a loopback listener."""

    issuer: str
    resource: str | None = None
    audience: str | None = None
    jwks_uri: str | None = None
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    required_scopes: tuple[str, ...] = ()
    scopes_supported: tuple[str, ...] | None = None
    leeway: float = DEFAULT_LEEWAY
    introspection: Introspection | None = None

    @property
    def expected_audience(self) -> str:
        audience = self.audience or self.resource
        if audience is None:
            raise ValueError("the resource is not known yet: call for_listener first")
        return audience

    @property
    def advertised_scopes(self) -> tuple[str, ...] | None:
        """``scopes_supported`` of the metadata: as given, else the required scopes (None: none)."""
        if self.scopes_supported is not None:
            return self.scopes_supported
        return self.required_scopes or None

    def for_listener(self, host: str, port: int, where: str = "gateway file") -> OAuthResource:
        """These settings with ``resource`` filled in: ``http://HOST:PORT/mcp`` of a loopback listener;
        ``OAuthSettingsError`` when the listener is not on loopback and no ``resource`` is given."""
        if self.resource is not None:
            return self
        if not is_loopback(host):
            raise OAuthSettingsError(
                f"{where}: oauth.resource is needed when listening on {host} (not loopback): "
                "the URL clients reach this server at, e.g. https://mcp.example.com/mcp"
            )
        shown = f"[{host}]" if ":" in host else host
        return replace(self, resource=f"http://{shown}:{port}{MCP_PATH}")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name, or an IP address with or without brackets) is this machine's loopback."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def oauth_resource(
    block: OAuthBlock, where: str, environ: Mapping[str, str], folder: Path | None = None
) -> OAuthResource:
    """``block`` checked; ``OAuthSettingsError`` names ``where`` (the file) and the key."""

    def fail(key: str, why: str) -> OAuthSettingsError:
        return OAuthSettingsError(f"{where}: oauth.{key}: {why}")

    issuer = _url(block.issuer, "issuer", fail, query=False)
    resource = None if block.resource is None else _url(block.resource, "resource", fail)
    audience = block.audience
    if audience is not None and (not audience.strip() or audience != audience.strip()):
        raise fail("audience", "is empty or has spaces around it")
    jwks_uri = None if block.jwks_uri is None else _url(block.jwks_uri, "jwksUri", fail)
    algorithms = _algorithms(block.algorithms, fail)
    required = _scopes(block.required_scopes, "requiredScopes", fail)
    supported = block.scopes_supported
    supported_scopes = None if supported is None else _scopes(supported, "scopesSupported", fail)
    if not (math.isfinite(block.leeway) and 0 <= block.leeway <= MAX_LEEWAY):
        raise fail("leeway", f"must be 0 to {MAX_LEEWAY:g} seconds, not {block.leeway}")
    introspection = None
    if block.introspection is not None:
        introspection = _introspection(block.introspection, fail, environ, folder)
    return OAuthResource(
        issuer=issuer,
        resource=resource,
        audience=audience,
        jwks_uri=jwks_uri,
        algorithms=algorithms,
        required_scopes=required,
        scopes_supported=supported_scopes,
        leeway=float(block.leeway),
        introspection=introspection,
    )


def _url(value: str, key: str, fail: _FailFn, query: bool = True) -> str:
    shown = escape(value)
    try:
        parts = urlsplit(value)
        host = parts.hostname or ""
    except ValueError:
        raise fail(key, f"{shown!r} is not a URL") from None
    if parts.scheme not in ("http", "https") or not host or any(c.isspace() for c in value):
        raise fail(key, f"{shown!r} is not an http(s):// URL with a host")
    if parts.scheme == "http" and not is_loopback(host):
        raise fail(key, f"{shown!r}: http:// is only for loopback hosts; use https://")
    if parts.username is not None or parts.password is not None:
        raise fail(key, f"{shown!r} has a user name or password in it")
    if parts.fragment or value.endswith("#"):
        raise fail(key, f"{shown!r} has a fragment (#...)")
    if not query and (parts.query or "?" in value):
        raise fail(key, f"{shown!r} has a query (?...)")
    return value


def _algorithms(given: list[str] | None, fail: _FailFn) -> tuple[str, ...]:
    if given is None:
        return DEFAULT_ALGORITHMS
    if not given:
        raise fail("algorithms", "is empty (leave it out for RS256, ES256, PS256, EdDSA)")
    for name in given:
        shown = escape(name)
        if name.lower() == "none":
            raise fail("algorithms", "'none' (unsigned tokens) is never accepted")
        if name.upper().startswith("HS"):
            raise fail("algorithms", f"{shown!r} is symmetric: its key cannot come from a JWKS")
        if name not in ASYMMETRIC_ALGORITHMS:
            raise fail("algorithms", f"{shown!r} is none of {', '.join(sorted(ASYMMETRIC_ALGORITHMS))}")
    return tuple(dict.fromkeys(given))


def _scopes(given: list[str], key: str, fail: _FailFn) -> tuple[str, ...]:
    for scope in given:
        if not scope or not all(0x21 <= ord(c) <= 0x7E and c not in '"\\' for c in scope):
            raise fail(key, f"{escape(scope)!r} is not a scope (printable ASCII, no spaces or quotes)")
    return tuple(dict.fromkeys(given))


def _introspection(
    block: IntrospectionBlock, fail: _FailFn, environ: Mapping[str, str], folder: Path | None
) -> Introspection:
    endpoint = _url(block.endpoint, "introspection.endpoint", fail)
    if (block.client_id is None) != (block.client_secret is None):
        raise fail("introspection", "give both clientId and clientSecret, or neither")
    values: dict[str, str | None] = {"clientId": block.client_id, "clientSecret": block.client_secret}
    for key, value in values.items():
        if value is None:
            continue
        try:
            value = expand_vars(value, environ, folder=folder)
        except ConfigError as exc:
            raise fail(f"introspection.{key}", str(exc)) from None
        if not value or value != value.strip():
            raise fail(f"introspection.{key}", "is empty or has spaces around it")
        values[key] = value
    return Introspection(endpoint, values["clientId"], values["clientSecret"], block.introspect_all)
