"""Several supervisors seen as one: which ones a client federates, and how their registries merge.

Pure code, used by the CLI, the client stubs and the facades. The members come from (first found):
``--endpoint`` (repeatable, each may be a comma list), a federation file (``--federation FILE``), or
``$MCP_SUPERVISOR_ENDPOINT`` (a comma list), else the one default endpoint. A federation file is
JSON::

    {"supervisors": [
        "tcp://10.0.0.1:5555",
        {"endpoint": "tcp://10.0.0.2:5555", "name": "gpu-1", "keys": "/etc/mcp-supervisor/gpu"}
    ]}

``name`` labels a member's servers (the HOST column of ``status``; by default the endpoint's host);
``keys``, a CURVE key directory of its own (by default the command's ``--keys``).

Merging: server names must be unique across the members. A server listed by several members is
owned by the first of them in the order given; the others' copies are left out and reported by
name (``Merged.clashes``), never merged. Tool names (``mcp_{server}_{tool}``) follow their server.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Generic, Protocol, TypeVar
from urllib.parse import urlsplit

import msgspec

from supervisor.shared.paths import ENDPOINT_ENV, default_endpoint

__all__ = [
    "MAX_MEMBERS",
    "FederationError",
    "Member",
    "Merged",
    "Owned",
    "label",
    "members",
    "merge",
    "parse_federation",
    "split_endpoints",
]

MAX_MEMBERS: Final = 64  # supervisors one client federates
MAX_FILE: Final = 1 << 20  # bytes of a federation file


class FederationError(ValueError):
    """The members cannot be made out: says what is wrong, and where."""


@dataclass(frozen=True, slots=True)
class Member:
    """One supervisor of a federation: its front endpoint, its label, its own key directory (or None)."""

    endpoint: str
    name: str
    keys: str | None = None


class _Entry(msgspec.Struct, forbid_unknown_fields=True):
    endpoint: str
    name: str | None = None
    keys: str | None = None


class _File(msgspec.Struct, forbid_unknown_fields=True):
    supervisors: list[str | _Entry]


def label(endpoint: str) -> str:
    """A member's default name: the host of a ``tcp://`` endpoint, ``local`` for ``ipc://``."""
    if endpoint.startswith("ipc://"):
        return "local"
    host = urlsplit(endpoint).hostname if "://" in endpoint else None
    return host or endpoint


def split_endpoints(values: Sequence[str]) -> list[str]:
    """Each value a comma list of endpoints: all of them, in order, blanks dropped."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def members(
    endpoints: Sequence[str] | None = None,
    federation: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[Member]:
    """The supervisors to talk to: ``endpoints`` (``--endpoint`` values), else the ``federation``
    file's, else ``$MCP_SUPERVISOR_ENDPOINT``'s, else the default endpoint alone."""
    env = os.environ if environ is None else environ
    if endpoints and federation is not None:
        raise FederationError("give --endpoint or --federation, not both")
    if federation is not None:
        return parse_federation(_read(Path(federation)), str(federation))
    if endpoints:
        return _checked([Member(e, label(e)) for e in split_endpoints(endpoints)], "--endpoint")
    given = split_endpoints([env.get(ENDPOINT_ENV, "")]) or [default_endpoint(env)]
    return _checked([Member(e, label(e)) for e in given], f"${ENDPOINT_ENV}")


def parse_federation(text: bytes, where: str) -> list[Member]:
    """The members a federation file names (``where``: its path, for errors)."""
    try:
        parsed = msgspec.json.decode(text, type=_File)
    except msgspec.DecodeError as exc:
        raise FederationError(f"{where}: not a federation file: {exc}") from None
    found: list[Member] = []
    for entry in parsed.supervisors:
        if isinstance(entry, str):
            entry = _Entry(endpoint=entry)
        endpoint = entry.endpoint.strip()
        keys = str(Path(entry.keys).expanduser()) if entry.keys else None
        found.append(Member(endpoint, (entry.name or "").strip() or label(endpoint), keys))
    return _checked(found, where)


def _read(path: Path) -> bytes:
    try:
        with path.open("rb") as file:
            text = file.read(MAX_FILE + 1)
    except OSError as exc:
        raise FederationError(f"cannot read the federation file {path}: {exc.strerror or exc}") from None
    if len(text) > MAX_FILE:
        raise FederationError(f"{path}: a federation file is at most {MAX_FILE} bytes")
    return text


def _checked(found: list[Member], where: str) -> list[Member]:
    if not found:
        raise FederationError(f"{where}: no supervisor named")
    if len(found) > MAX_MEMBERS:
        raise FederationError(f"{where}: {len(found)} supervisors; at most {MAX_MEMBERS}")
    seen: set[str] = set()
    for member in found:
        if "://" not in member.endpoint:
            raise FederationError(
                f"{where}: {member.endpoint!r} is no endpoint (tcp://HOST:PORT, ipc://PATH)"
            )
        if member.endpoint in seen:
            raise FederationError(f"{where}: {member.endpoint} is named twice")
        seen.add(member.endpoint)
    names = [member.name for member in found]
    if len(set(names)) < len(names):  # two on one host: the endpoints tell them apart
        found = [Member(m.endpoint, m.endpoint if names.count(m.name) > 1 else m.name, m.keys) for m in found]
    return found


class Owned(Protocol):
    """Anything of a server: a tool, a resource, a prompt, a status row."""

    @property
    def server(self) -> str: ...


T = TypeVar("T", bound=Owned)


@dataclass(slots=True)
class Merged(Generic[T]):
    """The members' entries as one: each server's from its owner only."""

    entries: list[T] = field(default_factory=list)
    owners: dict[str, int] = field(default_factory=dict)  # server -> index of the member that owns it
    clashes: list[tuple[str, int, int]] = field(default_factory=list)  # (server, owner, left out)


def merge(listings: Sequence[Sequence[T] | None]) -> Merged[T]:
    """One listing per member, in the members' order (None: a member not heard from, which owns
    nothing): every entry of a server from the first member that lists it."""
    merged: Merged[T] = Merged()
    for index, listing in enumerate(listings):
        for entry in listing or ():
            owner = merged.owners.setdefault(entry.server, index)
            if owner == index:
                merged.entries.append(entry)
            elif (entry.server, owner, index) not in merged.clashes:
                merged.clashes.append((entry.server, owner, index))
    return merged
