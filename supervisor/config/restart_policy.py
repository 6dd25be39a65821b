"""Restart policy for one worker (one_for_one, as in OTP): the settings, as a config entry spells them.

The logic that applies them is ``supervisor.daemon.servers.restarts``.

The first restart after a failure is immediate; later ones back off from
``initial_delay`` doubling to ``max_delay`` with +/- ``jitter``. Staying ready
for ``reset_after`` seconds forgets past failures. More than ``max_restarts``
failures within ``window`` seconds means the server is given up on (``failed``)
until an operator restarts it.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

__all__ = ["POLICY_KEYS", "Restart", "RestartPolicy"]


Restart = Literal["permanent", "transient", "temporary"]
_Seconds = Annotated[float, msgspec.Meta(ge=0)]
_Positive = Annotated[float, msgspec.Meta(gt=0)]

# How each field is spelled in the config file (top-level "supervisor" defaults, or a server entry).
_NAMES = {
    "restart": "restart",
    "initial_delay": "backoffInitial",
    "max_delay": "backoffMax",
    "jitter": "backoffJitter",
    "reset_after": "backoffResetAfter",
    "max_restarts": "maxRestarts",
    "window": "restartWindow",
    "start_timeout": "startTimeout",
    "ping_interval": "pingInterval",
}


class RestartPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename=_NAMES):
    """How one server is supervised; every field can be set per server or as a default."""

    restart: Restart = "permanent"  # transient: only after an abnormal exit; temporary: never
    initial_delay: _Seconds = 0.5  # seconds before the second restart in a row
    max_delay: _Seconds = 30.0  # cap on the doubling
    jitter: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.1  # +/- fraction of the delay
    reset_after: _Seconds = 60.0  # seconds of ready that forgive earlier failures
    max_restarts: Annotated[int, msgspec.Meta(ge=0)] = 5  # more failures than this within `window` -> failed
    window: _Positive = 60.0
    start_timeout: _Positive = 30.0  # seconds for spawn + initialize + tools/list
    ping_interval: _Positive | None = None  # seconds between MCP pings to the server; None: no pings


POLICY_KEYS: Final = frozenset(_NAMES.values())
