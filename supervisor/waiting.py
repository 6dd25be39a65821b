"""Tool calls that wait for their server to come back, instead of failing while it (re)starts.

Above: the router, which puts a call here when its server is ``starting`` or ``restarting`` (or is
still ``ready`` while its only worker is ending), and takes the calls back out when the server's state
changes: ``ready`` sends them on their way, ``failed``, ``needs-login`` and ``stopped`` fail them at
once. Beside it: the call table, which has every waiting call as a pending entry of a worker that does
not exist (``worker_of``), so a waiting call's deadline, its caller's ``Cancel`` and a client that
does not read are handled there as for any call; a call that leaves the table meanwhile is simply
skipped when its room is emptied.

A room holds at most ``MAX_WAITING`` calls: past it, ``OVERLOADED``. Pure code: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from supervisor.protocol import CallTool

__all__ = ["MAX_WAITING", "WaitingCall", "WaitingRoom"]

MAX_WAITING: Final = 1000  # calls held for one server while it (re)starts; past it, OVERLOADED


@dataclass(frozen=True, slots=True)
class WaitingCall:
    call: int  # its call id in the call table
    request: CallTool
    client: str  # the identity it is made for
    budget: float  # seconds it was given, from ``arrived``
    arrived: float  # the supervisor's clock when it arrived


class WaitingRoom:
    """Calls waiting for their server, by server."""

    def __init__(self) -> None:
        self._rooms: dict[str, list[WaitingCall]] = {}

    @staticmethod
    def worker_of(server: str) -> bytes:
        """The routing id a waiting call is pending at in the call table: no worker ever has it."""
        return b"\x00waiting/" + server.encode()

    @staticmethod
    def holds(worker: bytes) -> bool:
        """Whether a call pending at ``worker`` is one waiting for its server (``worker_of``)."""
        return worker.startswith(b"\x00waiting/")

    def full(self, server: str) -> bool:
        return len(self._rooms.get(server, ())) >= MAX_WAITING

    def add(self, server: str, waiting: WaitingCall) -> None:
        self._rooms.setdefault(server, []).append(waiting)

    def take(self, server: str) -> list[WaitingCall]:
        """Every call waiting for ``server``, in arrival order; the room is left empty."""
        return self._rooms.pop(server, [])

    def __len__(self) -> int:
        return sum(len(room) for room in self._rooms.values())
