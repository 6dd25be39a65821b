"""The console's timeline: what happened to the servers lately, newest first, in a bounded ring.

Above: the site (``supervisor.ops.web.site``), which hands every ``StateChanged`` the supervisor
publishes to ``state_changed`` and every reload's end to ``reloaded``, serves ``/api/timeline`` from
``newest`` and sends each new entry to the live feed. Below: nothing (pure code: the wall clock is
passed in).

Each state change becomes one entry whose ``kind`` says what it means to an operator:

    crash    the worker ended on its own and will be restarted (``detail``: why, as ``last_error``)
    failed   it ended and will not be restarted (too many restarts, or its policy): why
    restart  an operator's (or a reload's) restart
    stop     stopped (an operator, a reload that disabled it, a finished transient server)
    start    started again after a stop or a failure
    ready    serving (``detail``: after how many restarts, when any)
    login    waiting for an OAuth login
    state    any other change (``detail``: from which state to which)
    reload   the config was reloaded (``server`` is empty; ``detail``: applied, or why not)

A crash and an operator's restart both pass through ``restarting``; a crash counts one more restart,
an operator's restart sets the count back to 0, so the count (kept per server) tells them apart.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Final, Literal

import msgspec

from supervisor.protocol import StateChanged

__all__ = ["TIMELINE", "Entry", "Kind", "Timeline", "classify"]

TIMELINE: Final = 500  # entries kept; the oldest go first

Kind = Literal["crash", "failed", "restart", "stop", "start", "ready", "login", "state", "reload"]


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """One thing that happened: ``time`` in seconds since the epoch; ``server`` empty for the whole."""

    time: float
    server: str
    kind: Kind
    detail: str = ""


def classify(event: StateChanged, restarts_before: int | None) -> tuple[Kind, str]:
    """What a state change means, and its detail; ``restarts_before``: the server's restart count
    at its last change (None: none seen yet)."""
    state, previous, why = event.state, event.previous, event.last_error or ""
    if state == "restarting":
        if restarts_before is not None and event.restarts > restarts_before:
            return "crash", why or "the worker ended"
        return "restart", "from " + previous
    if state == "failed":
        return "failed", why
    if state == "stopped":
        return "stop", "from " + previous
    if state == "starting" and previous in ("stopped", "failed", "needs-login"):
        return "start", "from " + previous
    if state == "ready":
        restarted = f"after {event.restarts} restart{'s' * (event.restarts != 1)}" if event.restarts else ""
        return "ready", restarted
    if state == "needs-login":
        return "login", why
    return "state", f"{previous} → {state}"


class Timeline:
    """The last ``size`` entries, and each server's restart count as its last change said it."""

    def __init__(self, size: int = TIMELINE, wall: Callable[[], float] = time.time) -> None:
        self._entries: deque[Entry] = deque(maxlen=size)
        self._restarts: dict[str, int] = {}
        self._wall = wall

    def __len__(self) -> int:
        return len(self._entries)

    def state_changed(self, event: StateChanged) -> Entry:
        kind, detail = classify(event, self._restarts.get(event.server))
        self._restarts[event.server] = event.restarts
        return self._add(event.server, kind, detail)

    def reloaded(self, rejected: str | None) -> Entry:
        return self._add("", "reload", "applied" if rejected is None else "rejected: " + rejected)

    def newest(self, limit: int | None = None) -> list[Entry]:
        """The entries, newest first (at most ``limit``)."""
        entries = list(reversed(self._entries))
        return entries if limit is None else entries[:limit]

    def _add(self, server: str, kind: Kind, detail: str) -> Entry:
        entry = Entry(time=round(self._wall(), 3), server=server, kind=kind, detail=detail)
        self._entries.append(entry)
        return entry
