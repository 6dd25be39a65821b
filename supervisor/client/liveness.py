"""A long wait's watch on the supervisor: pinged when it falls silent, given up on when it does not answer.

Above: the client stubs (``supervisor.client.blocking``, ``supervisor.client.aio``), which ask
``Liveness`` when a ping is due while they wait and tell it what they heard. Below: the requests of
``supervisor.client.exchanges`` (the ``Ping``, and the waits ``LIVENESS_AFTER`` and ``LIVENESS_WAIT``).
"""

from __future__ import annotations

import math

from supervisor.client.errors import SupervisorUnreachableError
from supervisor.client.exchanges import LIVENESS_AFTER, LIVENESS_WAIT, Requests
from supervisor.protocol import FrontReply, FrontRequest

__all__ = ["Liveness"]


class Liveness:
    """A long wait's probe of the supervisor: after ``LIVENESS_AFTER`` seconds without a word from it,
    a ``Ping``; no answer within ``LIVENESS_WAIT`` seconds means it is gone (killed: its ``ipc://``
    socket file stays, and ZeroMQ queues the request for ever), so the wait ends ``UNREACHABLE``
    within seconds rather than at a call's hour. Pure: times are passed in; waits too short to need
    it never ping."""

    def __init__(self, wait: float, endpoint: str) -> None:
        self.on = wait > LIVENESS_AFTER + LIVENESS_WAIT
        self._endpoint = endpoint
        self._heard = -math.inf  # set by the first ``due``
        self._ping: int | None = None  # the id of the ping in flight
        self._sent = 0.0

    def due(self, now: float, requests: Requests) -> FrontRequest | None:
        """The ping to send now, if one is due; raises ``SupervisorUnreachableError`` when the one
        sent went unanswered."""
        if not self.on:
            return None
        if self._heard == -math.inf:
            self._heard = now
        if self._ping is not None:
            if now - self._sent >= LIVENESS_WAIT:
                silent = LIVENESS_AFTER + LIVENESS_WAIT
                why = f"the supervisor at {self._endpoint} stopped answering (not a word for {silent:g} s)"
                raise SupervisorUnreachableError(why)
            return None
        if now - self._heard < LIVENESS_AFTER:
            return None
        ping = requests.ping().request
        self._ping, self._sent = ping.id, now
        return ping

    def heard(self, reply: FrontReply, now: float) -> bool:
        """The supervisor said something; True when it is the answer to our ping (nobody else's)."""
        ours = self._ping is not None and reply.id == self._ping
        self.alive(now)
        return ours

    def alive(self, now: float) -> None:
        """The supervisor is there (it said something): no ping is awaited."""
        self._heard, self._ping = now, None
