"""The gateway file of ``serve --http --gateway FILE``: who may connect, what each may see and call,
and how much.

Pure parsing, no I/O but reading the file (and the secrets its ``${...}`` name). Above: the CLI's
``serve`` command, which hands the result to the HTTP facade (``supervisor.facade.access``). Below:
the config's JSON helpers and ``${VAR}`` expansion.

::

    {
      "oauth": {...},                      # the facade as an OAuth protected resource (optional)
      "groupsClaim": "groups",             # the access token's claim that ``group`` entries match
      "cors": {"origins": ["https://console.example.com"]},   # browsers' pages allowed (none: CORS off)
      "clients": [
        {"name": "ci", "token": "${CI_TOKEN}", "servers": ["github"], "limits": {"callsPerMinute": 60}},
        {"name": "eng", "group": "engineering", "tools": ["mcp_github_*", "mcp_fs_read_*"]},
        {"name": "alice", "subject": "alice@example.com", "identity": "entry"},
        {"name": "everyone", "anyone": true, "servers": [], "limits": {"concurrent": 2}}
      ]
    }

A request's principal is given the first entry that matches it, in the file's order: ``token`` (a
bearer token of this entry's own, compared in constant time), ``subject`` (a verified access
token's ``sub``), ``group`` (one of the values of its ``groupsClaim``), ``anyone``. Without a
``clients`` block every principal sees everything, with no limits; with one, a principal no entry
matches is refused (403).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import msgspec

from supervisor.config.expansion import expand_vars
from supervisor.config.json_input import Malformed, decode_json, escape, with_position
from supervisor.config.model import ConfigError
from supervisor.config.oauth_resource import OAuthBlock, OAuthResource, OAuthSettingsError, oauth_resource

__all__ = ["ClientEntry", "Gateway", "GatewayError", "Limits", "load_gateway", "parse_gateway"]

IdentityMode = Literal["subject", "entry", "session"]
IDENTITY_MODES: Final = ("subject", "entry", "session")
MAX_FILE: Final = 1 << 20  # bytes of a gateway file


class GatewayError(ConfigError):
    """What is wrong with a gateway file, said in its terms."""


class _Limits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    calls_per_minute: int | None = None
    concurrent: int | None = None


class _Client(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    token: str | None = None
    subject: str | None = None
    group: str | None = None
    anyone: bool = False
    servers: list[str] | None = None
    tools: list[str] = []
    identity: str = "subject"
    limits: _Limits = _Limits()


class _Cors(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    origins: list[str] = []


class _File(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    oauth: OAuthBlock | None = None
    groups_claim: str = "groups"
    cors: _Cors = _Cors()
    clients: list[_Client] | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """Per principal: calls begun in any minute (a sliding window), calls in flight; None: no bound."""

    calls_per_minute: int | None = None
    concurrent: int | None = None


@dataclass(frozen=True, slots=True)
class ClientEntry:
    """One ``clients`` entry: what it matches (exactly one of ``token``, ``subject``, ``group``,
    ``anyone``), the view it gives (``servers``: None is all; ``tools``: globs, none is all), whose
    session a ``scope: client`` server gives its calls (``identity``: ``subject``, each principal its
    own; ``entry``, one for all the entry's principals; ``session``, each host session its own), and
    its ``limits``, per principal."""

    name: str
    token: str | None = None
    subject: str | None = None
    group: str | None = None
    anyone: bool = False
    servers: frozenset[str] | None = None
    tools: tuple[str, ...] = ()
    identity: IdentityMode = "subject"
    limits: Limits = Limits()


@dataclass(frozen=True, slots=True)
class Gateway:
    """A parsed gateway file; ``oauth``: the facade as an OAuth protected resource (None: no OAuth;
    ``supervisor.config.oauth_resource``); ``clients`` None: no ``clients`` block (everyone sees
    everything)."""

    oauth: OAuthResource | None = None
    groups_claim: str = "groups"
    cors_origins: tuple[str, ...] = ()
    clients: tuple[ClientEntry, ...] | None = None
    path: str = ""


def load_gateway(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Gateway:
    """The gateway file at ``path``; ``GatewayError`` names the file and what is wrong."""
    where = str(path)
    try:
        with open(Path(path).expanduser(), "rb") as file:
            data = file.read(MAX_FILE + 1)
    except OSError as exc:
        raise GatewayError(f"{where}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE:
        raise GatewayError(f"{where}: over {MAX_FILE} bytes")
    folder = Path(path).expanduser().resolve().parent
    return parse_gateway(data, where, os.environ if environ is None else environ, folder)


def parse_gateway(data: bytes, where: str, environ: Mapping[str, str], folder: Path | None = None) -> Gateway:
    try:
        raw = decode_json(data, _File)
    except Malformed as exc:
        raise GatewayError(f"{where}: {exc}") from None
    except msgspec.ValidationError as exc:
        raise GatewayError(f"{where}: {escape(str(exc))}") from None
    except msgspec.DecodeError as exc:
        raise GatewayError(f"{where}: not JSON: {with_position(str(exc), data)}") from None
    if not raw.groups_claim:
        raise GatewayError(f"{where}: groupsClaim is empty")
    try:
        oauth = None if raw.oauth is None else oauth_resource(raw.oauth, where, environ, folder)
    except OAuthSettingsError as exc:
        raise GatewayError(str(exc)) from None
    origins = tuple(_origin(origin, where) for origin in raw.cors.origins)
    clients = None
    if raw.clients is not None:
        clients = tuple(_client(entry, i, where, environ, folder) for i, entry in enumerate(raw.clients))
        _unique(clients, where)
    return Gateway(oauth, raw.groups_claim, origins, clients, where)


def _client(
    raw: _Client, index: int, where: str, environ: Mapping[str, str], folder: Path | None
) -> ClientEntry:
    at = f"{where}: clients[{index}]"
    if not raw.name or not raw.name.isprintable() or len(raw.name) > 128:
        raise GatewayError(f"{at}: name must be 1 to 128 printable characters")
    at = f"{where}: client {raw.name!r}"
    matching = [key for key in ("token", "subject", "group") if getattr(raw, key) is not None]
    matching += ["anyone"] if raw.anyone else []
    if len(matching) != 1:
        said = ", ".join(matching) if matching else "none"
        raise GatewayError(f"{at}: give exactly one of token, subject, group, anyone (given: {said})")
    token = raw.token
    if token is not None:
        try:
            token = expand_vars(token, environ, folder=folder)
        except ConfigError as exc:
            raise GatewayError(f"{at}: token: {exc}") from None
        if not token.strip() or any(c.isspace() for c in token.strip()):
            raise GatewayError(f"{at}: token is empty or has spaces in it")
        token = token.strip()
    if raw.identity not in IDENTITY_MODES:
        said = ", ".join(IDENTITY_MODES)
        raise GatewayError(f"{at}: identity {escape(raw.identity)!r} is none of {said}")
    bounds = (("callsPerMinute", raw.limits.calls_per_minute), ("concurrent", raw.limits.concurrent))
    for key, value in bounds:
        if value is not None and not 1 <= value <= 1_000_000:
            raise GatewayError(f"{at}: limits.{key} must be 1 to 1000000")
    if any(not glob for glob in raw.tools):
        raise GatewayError(f"{at}: tools has an empty pattern")
    servers = None if raw.servers is None else frozenset(raw.servers)
    limits = Limits(raw.limits.calls_per_minute, raw.limits.concurrent)
    mode: IdentityMode = raw.identity  # type: ignore[assignment]  # checked above
    return ClientEntry(
        raw.name, token, raw.subject, raw.group, raw.anyone, servers, tuple(raw.tools), mode, limits
    )


def _unique(clients: tuple[ClientEntry, ...], where: str) -> None:
    names: set[str] = set()
    tokens: set[str] = set()
    for entry in clients:
        if entry.name in names:
            raise GatewayError(f"{where}: two clients are named {entry.name!r}")
        names.add(entry.name)
        if entry.token is not None:
            if entry.token in tokens:
                raise GatewayError(f"{where}: client {entry.name!r} has the token of an entry before it")
            tokens.add(entry.token)


def _origin(origin: str, where: str) -> str:
    scheme, sep, rest = origin.partition("://")
    if origin == "*" or not sep or scheme not in ("http", "https") or not rest or "/" in rest:
        said = escape(origin)
        why = "is not scheme://host[:port] (and '*' is not offered)"
        raise GatewayError(f"{where}: cors origin {said!r} {why}")
    return origin.lower()
