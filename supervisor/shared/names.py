"""Tool names: ``mcp_{server}_{tool}``, made safe for every model API, and unique.

Every character outside ``[A-Za-z0-9_-]`` becomes ``_``, runs of ``_`` collapse, leading and
trailing ``_`` go, and the result is cut at 64 characters. When two tools map to one name, the
later one gets a stable suffix derived from (server, tool). The supervisor's registry
(``supervisor.daemon.registry``) names tools so, a worker names its prompts so
(``workers.catalog``), and the facade finds a name's server with ``server_of``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Container, Iterable
from typing import Final

__all__ = ["MAX_NAME_LENGTH", "free_name", "prefixed_name", "prefixed_names", "sanitize", "server_of"]

MAX_NAME_LENGTH: Final = 64  # what OpenAI-style function calling accepts
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_UNDERSCORES = re.compile(r"_{2,}")


def sanitize(name: str) -> str:
    """Apply the naming rules to any string (without the length cut)."""
    return _UNDERSCORES.sub("_", _UNSAFE.sub("_", name)).strip("_")


def prefixed_name(server: str, tool: str) -> str:
    return sanitize(f"mcp_{server}_{tool}")[:MAX_NAME_LENGTH].rstrip("_")


def _suffixed(base: str, server: str, tool: str, attempt: int) -> str:
    digest = hashlib.sha1(f"{server}\0{tool}\0{attempt}".encode()).hexdigest()[:8]
    return f"{base[: MAX_NAME_LENGTH - 9].rstrip('_')}_{digest}"


def prefixed_names(server: str, names: Iterable[str]) -> dict[str, str]:
    """Prefixed name -> name for one server's prompts, named as its tools are (a name that two
    of them map to goes to the first; the later ones get the stable suffix)."""
    result: dict[str, str] = {}
    for name in names:
        result[free_name(server, name, result)] = name
    return result


def free_name(server: str, name: str, taken: Container[str]) -> str:
    """``name``'s prefixed name, or, when ``taken`` has it, the first of its stably suffixed ones
    that ``taken`` lacks."""
    base = prefixed_name(server, name) or "mcp"
    candidate, attempt = base, 0
    while candidate in taken:
        candidate = _suffixed(base, server, name, attempt)
        attempt += 1
    return candidate


def server_of(name: str, servers: Iterable[str]) -> str | None:
    """The server whose prefix (``mcp_{server}_``) a prefixed name carries; the longest one wins
    when several do (servers ``a`` and ``a_b``), or None."""
    owners = [server for server in servers if name.startswith(sanitize(f"mcp_{server}") + "_")]
    return max(owners, key=lambda server: len(sanitize(server)), default=None)
