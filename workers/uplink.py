"""The worker's end of the worker link: one DEALER to the supervisor's worker ROUTER.

Above: ``workers.calls``, which takes the calls (``Commands``), and every part of the worker that
reports to the supervisor (``send``, ``fail``). Below: on an ``ipc://`` link (the supervisor's
own), a DEALER that speaks ZMTP itself (``supervisor.shared.zmtp_dealer``), so a worker has no
ZeroMQ context, no I/O thread and no libzmq hop per message; on any other endpoint, libzmq's
DEALER under trio (``supervisor.shared.sockets``). ``WorkerCommand`` in and ``WorkerEvent`` out
(``supervisor.protocol``), with the routing id of this incarnation from the boot line
(``supervisor.shared.boot``).

Heartbeats are answered here, from the moment the worker connects. A command that does not decode
is still answered when it is a call whose id can be found (``salvage_call``), else logged: nothing
the supervisor relays ends the worker.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Protocol, assert_never

import msgspec
import trio

from supervisor.protocol import (
    HEARTBEAT,
    Abort,
    Answered,
    ErrorCode,
    Fetch,
    Heartbeat,
    Interest,
    Invoke,
    InvokeFailed,
    NotRun,
    WorkerEvent,
    decode_worker_command,
    encode,
    salvage_call,
)
from supervisor.shared.boot import WorkerBoot
from supervisor.shared.zmtp_dealer import ZmtpDealer

if TYPE_CHECKING:
    import zmq

__all__ = ["Commands", "Link"]

log = logging.getLogger("mcp_supervisor.worker")


class Commands(Protocol):
    """What the link hands the calls it receives to (``workers.calls.Calls``); each answers on its own."""

    def invoke(self, command: Invoke) -> None: ...
    def fetch(self, command: Fetch) -> None: ...
    def abort(self, command: Abort) -> None: ...
    def answered(self, command: Answered) -> None: ...
    def interest(self, command: Interest) -> None: ...


class Dealer(Protocol):
    """What the link needs of its socket: a ``ZmtpDealer`` or a libzmq ``TrioSocket``."""

    def send_nowait(self, frames: Sequence[bytes]) -> None: ...
    def drain(self) -> list[list[bytes]]: ...
    async def receive_batch(self) -> list[list[bytes]]: ...
    def close(self) -> None: ...


IPC = "ipc://"
UNREAD_BATCHES: Final = 64  # batches of unread commands a worker that ends looks through, at most


class Link:
    """The DEALER, connected with this incarnation's routing id."""

    def __init__(self, socket: Dealer, context: zmq.Context[zmq.Socket[bytes]] | None = None) -> None:
        self._socket = socket
        self._context = context  # libzmq's, on a link that is not ipc: terminated by ``close``

    @classmethod
    def connect(cls, boot: WorkerBoot) -> Link:
        routing_id = boot.identity.encode()
        if boot.endpoint.startswith(IPC):
            return cls(ZmtpDealer.connect(boot.endpoint[len(IPC) :], routing_id=routing_id))
        import zmq  # libzmq only off the ipc link: a stdio worker's zygote does not load it

        from supervisor.shared.sockets import TrioSocket, new_dealer

        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        sock = new_dealer(context, routing_id=routing_id)
        sock.connect(boot.endpoint)
        return cls(TrioSocket(sock), context)

    def send(self, event: WorkerEvent) -> None:
        self._socket.send_nowait([encode(event)])

    def fail(self, call: int, code: ErrorCode, message: str) -> None:
        """Answer ``call`` with an error."""
        self.send(InvokeFailed(call=call, code=code, message=message))

    async def serve(self, commands: Commands) -> None:
        """Commands from the supervisor: heartbeats answered here, calls (and aborts of calls) handed
        to ``commands``."""
        while True:
            for frames in await self._socket.receive_batch():
                try:
                    command = decode_worker_command(frames[-1])
                except msgspec.DecodeError as exc:
                    self._undecodable(frames[-1], exc)
                    continue
                match command:
                    case Invoke():
                        commands.invoke(command)
                    case Fetch():
                        commands.fetch(command)
                    case Abort():
                        commands.abort(command)
                    case Answered():
                        commands.answered(command)
                    case Interest():
                        commands.interest(command)
                    case Heartbeat():
                        self._socket.send_nowait([HEARTBEAT])
                    case _:
                        assert_never(command)

    def refuse_unread(self) -> int:
        """The worker is ending: the calls that reached it and were never read are answered ``NotRun``
        (no server had them: the supervisor sends them to the next one); how many."""
        refused = 0
        for _ in range(UNREAD_BATCHES):
            try:
                batch = self._socket.drain()
            except (OSError, trio.ClosedResourceError):
                break
            if not batch:
                break
            for frames in batch:
                try:
                    command = decode_worker_command(frames[-1])
                except msgspec.DecodeError:
                    continue
                if isinstance(command, Invoke | Fetch):
                    self.send(NotRun(call=command.call))
                    refused += 1
        return refused

    def _undecodable(self, frame: bytes, exc: msgspec.DecodeError) -> None:
        """A command that does not decode: a call is still answered, if its id can be found (arguments
        the supervisor relayed untouched may nest deeper than this process's decoder recurses)."""
        salvaged = salvage_call(frame)
        if salvaged is not None and salvaged[0] in ("Invoke", "Fetch"):
            self.fail(salvaged[1], "INVALID_ARGUMENTS", f"arguments do not decode: {exc}")
        else:
            log.error("undecodable command from the supervisor: %s", exc)

    def close(self) -> None:
        self._socket.close()
        if self._context is not None:
            self._context.term()
