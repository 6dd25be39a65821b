"""What each principal may do through the HTTP facade: its view, its client identity, its limits.

Pure logic, no I/O. Above: ``supervisor.facade.run.Front``, which asks ``Access.grant`` for every
authenticated request and puts the ``Grant`` in its scope (``GRANT``), refusing a principal no
``clients`` entry admits (403) and a call past its limits (429); the facade's handlers read the
grant's view and identity (``grant_of``). Below: the gateway file's entries
(``supervisor.config.gateway``) and the facade's views (``supervisor.facade.views``).

- **View.** A principal sees what the facade shows (``--servers``, ``--tools``) narrowed by its entry's
  ``servers`` and ``tools``. A tool outside it is not listed, and calling it is "unknown tool", as for
  any tool the facade does not show.
- **Identity.** On ``scope: client`` servers each identity has its own session. ``subject`` (the
  default): each principal its own, whatever host session it calls from; ``entry``: one for everyone
  the entry admits; ``session``: each host session its own (as without a gateway).
- **Limits.** Per principal and entry: calls begun in the last 60 s (a sliding window) and calls in
  flight. A call past either is refused at once (``Limiter.admit`` says when to retry); it never
  waits, and never counts.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from supervisor.config.gateway import ClientEntry, Gateway, Limits
from supervisor.facade.principal import Principal
from supervisor.facade.views import View

__all__ = ["GRANT", "Access", "Grant", "Limiter", "scope_of"]

GRANT: Final = "mcp_supervisor.grant"  # the key of the request's Grant in its ASGI scope
WINDOW: Final = 60.0  # seconds of the calls-per-minute window
MAX_KEPT: Final = 10_000  # grants (and so limiters) kept, least recently used dropped


class Limiter:
    """One principal's limits: ``admit`` before a call (None: go; else the seconds to wait before
    retrying), ``release`` once it is answered."""

    __slots__ = ("_begun", "_clock", "in_flight", "limits")

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self._clock = clock
        self._begun: deque[float] = deque()  # when the calls of the window began, oldest first
        self.in_flight = 0

    def admit(self) -> float | None:
        now = self._clock()
        begun = self._begun
        while begun and begun[0] <= now - WINDOW:
            begun.popleft()
        per_minute, concurrent = self.limits.calls_per_minute, self.limits.concurrent
        if per_minute is not None and len(begun) >= per_minute:
            return max(begun[0] + WINDOW - now, 0.001)
        if concurrent is not None and self.in_flight >= concurrent:
            return 1.0
        if per_minute is not None:
            begun.append(now)
        self.in_flight += 1
        return None

    def release(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)

    def why(self, retry: float) -> str:
        """Why a call was refused ``retry`` seconds before it may be made again."""
        per_minute, concurrent = self.limits.calls_per_minute, self.limits.concurrent
        if concurrent is not None and self.in_flight >= concurrent and retry == 1.0:
            return f"{_calls(concurrent)} in flight already (the limit)"
        return f"{_calls(per_minute or 0)} in the last minute already (the limit); retry in {retry:.1f} s"


@dataclass(frozen=True, slots=True, eq=False)
class Grant:
    """``entry``: the ``clients`` entry that admitted the principal (None without a ``clients``
    block); ``principal``: who, as the audit trail names it; ``view``: what it sees; ``identity``: its
    client identity on ``scope: client`` servers (None: each host session its own); ``limiter``:
    None when unlimited."""

    entry: str | None
    principal: str
    view: View
    identity: str | None = None
    limiter: Limiter | None = None


class Access:
    """The gateway's ``clients`` over the facade's ``view``: each principal's ``Grant``."""

    def __init__(self, view: View, gateway: Gateway | None = None) -> None:
        self._view = view
        self.use(gateway)
        self.open = Grant(None, "", view)  # no principal (stdio, --no-auth): the facade's view, as before

    def use(self, gateway: Gateway | None) -> None:
        """Grant by ``gateway``'s ``clients`` from now on (None: everyone sees the facade's view)."""
        self._clients = None if gateway is None else gateway.clients
        self._groups_claim = "groups" if gateway is None else gateway.groups_claim
        self._views: dict[str, View] = {}  # entry -> its view within the facade's
        self._grants: OrderedDict[tuple[str | None, str, str], Grant] = OrderedDict()

    def of(self, scope: Mapping[str, Any] | None) -> Grant:
        """The grant ``Front`` put in a request's ``scope``; ``open`` when none."""
        found = None if scope is None else scope.get(GRANT)
        return found if isinstance(found, Grant) else self.open

    @property
    def limited(self) -> bool:
        """Whether any entry has limits (the front then looks at each call)."""
        return any(e.limits != Limits() for e in self._clients or ())

    def grant(self, principal: Principal) -> Grant | None:
        """The grant of ``principal``; None when a ``clients`` block admits it in no entry."""
        entry = None
        if self._clients is not None:
            entry = self._entry(principal)
            if entry is None:
                return None
        key = (None if entry is None else entry.name, principal.via, principal.name)
        grant = self._grants.get(key)
        if grant is not None:
            self._grants.move_to_end(key)
            return grant
        grant = self._grants[key] = self._make(entry, principal)
        if len(self._grants) > MAX_KEPT:
            self._grants.popitem(last=False)
        return grant

    def _entry(self, principal: Principal) -> ClientEntry | None:
        for entry in self._clients or ():
            if entry.token is not None:
                if principal.via == "token" and principal.name == entry.name:
                    return entry
            elif entry.subject is not None:
                if principal.via in ("jwt", "introspection") and principal.name == entry.subject:
                    return entry
            elif entry.group is not None:
                if principal.via in ("jwt", "introspection") and entry.group in self._groups(
                    principal.claims
                ):
                    return entry
            elif entry.anyone:
                return entry
        return None

    def _groups(self, claims: Mapping[str, Any]) -> tuple[str, ...]:
        value = claims.get(self._groups_claim)
        if isinstance(value, str):
            return tuple(value.split())
        if isinstance(value, list | tuple):
            return tuple(v for v in value if isinstance(v, str))
        return ()

    def _make(self, entry: ClientEntry | None, principal: Principal) -> Grant:
        if entry is None:
            return Grant(None, principal.name, self._view)
        view = self._views.get(entry.name)
        if view is None:
            view = self._views[entry.name] = self._view.narrowed(entry.servers, entry.tools)
        identity = {"subject": principal.name or entry.name, "entry": entry.name, "session": None}[
            entry.identity
        ]
        limiter = None if entry.limits == Limits() else Limiter(entry.limits)
        return Grant(entry.name, principal.name, view, identity, limiter)


def scope_of(ctx: Any) -> dict[str, Any] | None:
    """The ASGI scope of the HTTP request an SDK handler's context ``ctx`` came in (None over stdio)."""
    scope = getattr(getattr(ctx, "request", None), "scope", None)
    return scope if isinstance(scope, dict) else None


def _calls(count: int) -> str:
    return "1 call" if count == 1 else f"{count} calls"
