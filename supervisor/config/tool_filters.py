"""Per-server tool views: which of a server's own tools its config entry lets through.

A view is the entry's ``enabledTools`` and ``disabledTools``: tool names or ``fnmatch`` globs
(``*``, ``?``, ``[...]``, case-sensitive) matched against the tool's name as its server lists it
(before the ``mcp_{server}_`` prefix). With ``enabledTools``, only tools matching one of its patterns
pass (an empty list: none); then a tool matching any ``disabledTools`` pattern is left out.

Above: the registry (``supervisor.daemon.registry``), which never registers a tool its view hides. Below:
the standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

__all__ = ["matches_any", "tool_allowed"]


def matches_any(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` matches one of the names or ``fnmatch`` globs (case-sensitive) in ``patterns``;
    the MCP facade's ``--tools`` globs match prefixed names with it too."""
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def tool_allowed(name: str, enabled: Iterable[str] | None = None, disabled: Iterable[str] = ()) -> bool:
    """Whether the view (``enabled`` patterns, or ``None`` for all; ``disabled`` patterns) lets the
    server's own tool ``name`` through. ``disabled`` wins over ``enabled``; ``enabled=()`` lets none."""
    if enabled is not None and not matches_any(name, enabled):
        return False
    return not matches_any(name, disabled)
