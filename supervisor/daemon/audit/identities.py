"""Who called: the identities the audit trail has seen, with their sessions and counts, in a bounded table.

Above: the trail (``supervisor.daemon.audit.trail``), which notes each request it records (``seen``)
and answers ``identities()`` from here (the status page's "which identities are connected"). Below:
nothing (pure code: times are passed in).

Bounded whatever the callers do: at most ``MAX_IDENTITIES`` identities (the one seen longest ago is
forgotten for a new one) and, per identity, its ``MAX_SESSIONS`` latest sessions.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

from supervisor.daemon.audit.record import iso_time

__all__ = ["ACTIVE_WITHIN", "MAX_IDENTITIES", "MAX_SESSIONS", "Identities"]

MAX_IDENTITIES: Final = 1000
MAX_SESSIONS: Final = 32  # sessions kept per identity, the latest
ACTIVE_WITHIN: Final = 300.0  # seconds: an identity seen this recently is active


@dataclass(slots=True)
class _Seen:
    first: float
    last: float
    calls: int = 0
    errors: int = 0  # requests whose outcome was not ok (a tool's error result included)
    sessions: OrderedDict[str, None] = field(default_factory=OrderedDict)  # oldest first


class Identities:
    """Identity -> its sessions, requests, errors, and when it was first and last seen."""

    def __init__(self, limit: int = MAX_IDENTITIES) -> None:
        self._limit = limit
        self._seen: OrderedDict[str, _Seen] = OrderedDict()  # seen longest ago first

    def __len__(self) -> int:
        return len(self._seen)

    def seen(self, identity: str, session: str, ok: bool, now: float) -> None:
        """A request of ``identity`` (in ``session``; ``""``: none) was answered at ``now``."""
        entry = self._seen.get(identity)
        if entry is None:
            if len(self._seen) >= self._limit:
                self._seen.popitem(last=False)
            entry = self._seen[identity] = _Seen(first=now, last=now)
        else:
            self._seen.move_to_end(identity)
            entry.last = max(entry.last, now)
        entry.calls += 1
        entry.errors += not ok
        if session:
            sessions = entry.sessions
            if session in sessions:
                sessions.move_to_end(session)
            else:
                if len(sessions) >= MAX_SESSIONS:
                    sessions.popitem(last=False)
                sessions[session] = None

    def rows(self, now: float) -> list[dict[str, Any]]:
        """Every identity, the one seen last first: ``identity``, ``sessions`` (the latest first),
        ``calls``, ``errors``, ``firstSeen``, ``lastSeen`` (as the trail writes times) and ``active``
        (seen within ``ACTIVE_WITHIN`` seconds of ``now``)."""
        return [
            {
                "identity": identity,
                "sessions": list(reversed(entry.sessions)),
                "calls": entry.calls,
                "errors": entry.errors,
                "firstSeen": iso_time(entry.first),
                "lastSeen": iso_time(entry.last),
                "active": now - entry.last <= ACTIVE_WITHIN,
            }
            for identity, entry in reversed(self._seen.items())
        ]
