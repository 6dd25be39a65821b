"""The query strings of the console's JSON paths, read strictly: an unknown or malformed parameter is
an error that names it.

Above: the paths (``supervisor.ops.web.app``), which answer 400 with the message. Below: the
standard library's ``urllib.parse``. Pure code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl

__all__ = ["AUDIT_LIMIT", "AUDIT_PARAMETERS", "AuditQuery", "QueryError", "audit_query"]

AUDIT_LIMIT: Final = 1000  # records one /api/audit answers with, at most
AUDIT_DEFAULT: Final = 100  # records when the query does not say
AUDIT_PARAMETERS: Final = ("since", "identity", "tool", "limit")
MAX_PARAMETER: Final = 256  # characters of one parameter's value


class QueryError(ValueError):
    """A query string that cannot be read; the message names the parameter and what was wrong."""


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """``/api/audit``'s filters: records of the last ``since`` seconds (None: any age), of one
    ``identity``, of tools whose name matches the glob ``tool``, the newest ``limit`` of them."""

    since: float | None = None
    identity: str | None = None
    tool: str | None = None
    limit: int = AUDIT_DEFAULT


def audit_query(query: str) -> AuditQuery:
    """Read ``since``, ``identity``, ``tool`` and ``limit`` from a query string (raises ``QueryError``)."""
    values = _parameters(query, AUDIT_PARAMETERS)
    since = values.get("since")
    limit = values.get("limit")
    return AuditQuery(
        since=None if since is None else _seconds("since", since),
        identity=values.get("identity"),
        tool=values.get("tool"),
        limit=AUDIT_DEFAULT if limit is None else _count("limit", limit, AUDIT_LIMIT),
    )


def _parameters(query: str, known: tuple[str, ...]) -> dict[str, str]:
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query), errors="strict")
    except (ValueError, UnicodeDecodeError) as exc:
        raise QueryError(f"the query string is malformed ({exc})") from None
    values: dict[str, str] = {}
    for name, value in pairs:
        if name not in known:
            raise QueryError(f"unknown parameter {name[:40]!r} (this path takes {', '.join(known)})")
        if name in values:
            raise QueryError(f"the parameter {name!r} is given twice")
        if len(value) > MAX_PARAMETER:
            raise QueryError(f"the parameter {name!r} is longer than {MAX_PARAMETER} characters")
        if value:
            values[name] = value
    return values


def _seconds(name: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise QueryError(f"{name} must be a number of seconds, not {value[:40]!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise QueryError(f"{name} must be a number of seconds of 0 or more, not {value[:40]!r}")
    return seconds


def _count(name: str, value: str, most: int) -> int:
    if not value.isascii() or not value.isdigit():
        raise QueryError(f"{name} must be a whole number, not {value[:40]!r}")
    count = int(value)
    if not 1 <= count <= most:
        raise QueryError(f"{name} must be from 1 to {most}, not {count}")
    return count
