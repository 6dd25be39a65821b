"""The deadline timer: a call its worker does not answer in time is answered ``TIMEOUT`` here.

Above: the supervisor, which runs ``run`` as one of its tasks; the router, which tells it of every
call's deadline as it remembers the call (``added``: the timer's next wake-up may be sooner). Below:
the call table (``supervisor.daemon.call_table``), which keeps the deadlines (a margin past each
call's budget) and hands back the calls past theirs; the servers, which say why a call that waited
for its server (``supervisor.daemon.waiting``) never reached a worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import trio

from supervisor.daemon.call_table import CallTable
from supervisor.daemon.servers.pool import Server
from supervisor.daemon.waiting import WaitingRoom
from supervisor.shared.repeats import Repeats

__all__ = ["DeadlineTimer"]


class DeadlineTimer:
    """Wakes at the earliest deadline of a call in flight, and fails every call past its own."""

    def __init__(
        self,
        calls: CallTable,
        servers: Mapping[str, Server],
        repeats: Repeats,
        settled: Callable[[], None],
    ) -> None:
        """``settled`` hears that a call was answered (a drain may be waiting for the last one)."""
        self._calls = calls
        self._servers = servers
        self._repeats = repeats
        self._settled = settled
        self._timer: trio.CancelScope | None = None

    def added(self, deadline: float) -> None:
        """A call was remembered with this deadline: wake for it, if it is the earliest."""
        if self._timer is not None and deadline < self._timer.deadline:
            self._timer.deadline = deadline

    async def run(self) -> None:
        while True:
            with trio.CancelScope(deadline=self._calls.next_deadline()) as timer:
                self._timer = timer
                await trio.sleep_forever()
            self._timer = None
            for pending in self._calls.expire(trio.current_time()):
                self._settled()
                what = pending.what or f"tool {pending.tool!r}"
                self._repeats.log(
                    f"calls to server {pending.server!r} its worker did not answer by the deadline",
                    logging.ERROR,
                    "server %r %s: worker gave no answer by the deadline",
                    pending.server,
                    what,
                )
                message = f"server {pending.server!r} did not answer {what} in time"
                server = self._servers.get(pending.server)
                if WaitingRoom.holds(pending.worker) and server is not None:  # it never reached a worker
                    message = f"{server.why_unavailable()}: not ready within the deadline of {what}"
                self._calls.fail(pending, "TIMEOUT", message)
