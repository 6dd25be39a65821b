"""The one task that receives: the worker ROUTER and the front ROUTER, drained in turn.

Above: the supervisor, which runs ``serve`` as one of its tasks, and the keepers, which ask
``caught_up`` (through the supervisor) before judging a worker silent. Below: the two sockets, read
through one ``Poller`` (``supervisor.shared.sockets``), and whoever handles each batch: the worker
link (``supervisor.daemon.worker_link``) first, then the front door (``supervisor.daemon.front_door``).
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from supervisor.shared.sockets import Poller, RouterSocket

__all__ = ["Receiver"]

Batch = list[list[bytes]]  # multipart messages, as one wake-up of the poller took them


class Receiver:
    """Receives on both ROUTERs; counts the front's messages."""

    def __init__(self, link: Callable[[Batch], None], front: Callable[[Batch], None]) -> None:
        self._link = link
        self._front = front
        self.received = 0  # front messages received since the start (for the metrics)
        self._poller: Poller | None = None
        self._served: trio.Event | None = None  # set after the next pass, if anyone waits

    async def serve(self, front: RouterSocket, link: RouterSocket) -> None:
        """Each wake-up drains the worker link, then the front."""
        self._poller = poller = Poller([front, link])
        while True:
            front_batch, link_batch = await poller.receive()
            if link_batch:
                self._link(link_batch)
            if front_batch:
                self.received += len(front_batch)
                self._front(front_batch)
            if self._served is not None:
                self._served.set()
                self._served = None

    async def caught_up(self) -> None:
        """Return once every message that reached the sockets before this call has been handled.

        A supervisor starved of CPU (many servers starting on few cores) may wake to find a timer
        expired and the worker's answers still queued: a keeper asks this before judging a worker
        silent. Two full passes of the receiving task: the first may finish a batch taken earlier."""
        for _ in range(2):
            if self._served is None:
                self._served = trio.Event()
            served = self._served
            if self._poller is not None:
                self._poller.wake()
            await served.wait()
