"""Small process helpers shared by the supervisor and its workers."""

from __future__ import annotations

import os
import signal
from contextlib import suppress

__all__ = ["kill_group"]


def kill_group(pgid: int, sig: signal.Signals) -> None:
    """Signal a whole process group (a server and every child it started), if any of it is left."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
