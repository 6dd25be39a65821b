"""The front door: the front ROUTER's messages in, and every reply out.

Above: agents and the CLI, each a DEALER with its own routing id. Below: the supervisor's dispatch
(``handle``), which gets every request that decoded, and the call table, whose replies come back
out through ``reply``.

Nothing a client sends gets past here as an exception: a message of the wrong number of frames is
dropped and counted; one that does not decode as a request is answered ``BAD_REQUEST`` (with its id,
when one can be salvaged) and counted; a request whose handling fails is answered ``INTERNAL``
(but for a ``Cancel``, which never gets a reply of its own).
A client that does not read its replies fills its queue (``maxQueuedReplies``): the reply is
dropped, and so are its requests in flight (``not_reading``), so it cannot grow our memory.
While the audit trail (``supervisor.daemon.audit.trail``) is on, it hears of every call, read and
prompt decoded here, every reply sent, and every client whose requests were dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec

from supervisor.daemon.audit.record import AUDITED
from supervisor.daemon.audit.trail import Trail
from supervisor.daemon.call_table import peer
from supervisor.protocol import (
    Cancel,
    ErrorCode,
    ErrorReply,
    FrontReply,
    FrontRequest,
    FrontStats,
    decode_front_request,
    encode,
    total_decoder,
)
from supervisor.protocol.scan import top_level_fields
from supervisor.shared.repeats import Repeats
from supervisor.shared.sockets import QueueFull, RouterSocket, Unroutable

__all__ = ["FrontDoor"]

log = logging.getLogger("mcp_supervisor")


class FrontDoor:
    """Decodes requests for ``handle`` and sends replies on ``socket`` (set once it is bound)."""

    def __init__(
        self,
        *,
        stats: FrontStats,
        repeats: Repeats,
        handle: Callable[[bytes, FrontRequest], None],
        not_reading: Callable[[bytes], int],
        queued_replies: Callable[[], int],
    ) -> None:
        """``not_reading(caller)`` drops a client's requests in flight and says how many there were;
        ``queued_replies()`` is the bound on a client's unread replies (for the log)."""
        self.socket: RouterSocket | None = None
        self._stats = stats
        self._repeats = repeats
        self._handle = handle
        self._not_reading = not_reading
        self._queued_replies = queued_replies
        self._trail: Trail | None = None  # the audit trail, while it is on

    def audit(self, trail: Trail) -> None:
        """From now on the trail hears of every call, read and prompt, and every reply."""
        if trail.on:
            self._trail = trail
            trail.peer_name = self.peer_name

    def peer_name(self, caller: bytes) -> str:
        """A connection's name for the audit trail: a CURVE client's public key (z85), else ``local``."""
        user_ids = getattr(self.socket, "user_ids", None)
        return "local" if user_ids is None else user_ids.get(caller, "curve")

    def receive(self, batch: list[list[bytes]]) -> None:
        for frames in batch:
            if len(frames) != 2:
                self._stats.malformed += 1
                self._repeats.log(
                    "malformed front messages",
                    logging.WARNING,
                    "client %s: dropped a message of %d frames (expected 2)",
                    peer(frames[0]),
                    len(frames),
                )
                continue
            caller, payload = frames
            try:
                request = decode_front_request(payload)
            except msgspec.DecodeError as exc:  # total: any bytes at all end here
                self._malformed(caller, payload, str(exc))
                continue
            if self._trail is not None and type(request) in AUDITED:
                self._trail.opened(caller, request)
            try:
                self._handle(caller, request)
            except Exception as exc:  # boundary: one request's failure must not end the supervisor
                log.exception("handling %s from client %s failed", type(request).__name__, peer(caller))
                if not isinstance(request, Cancel):  # a Cancel gets no reply of its own, ever
                    what = f"{type(request).__name__}: {type(exc).__name__}"
                    self.error(caller, request.id, "INTERNAL", what)

    def _malformed(self, caller: bytes, payload: bytes, why: str) -> None:
        """A front message that is not a request: BAD_REQUEST to its sender, a warning, nothing else."""
        self._stats.malformed += 1
        self._repeats.log(
            "malformed requests",
            logging.WARNING,
            "client %s: malformed request (%d bytes): %s",
            peer(caller),
            len(payload),
            why,
        )
        self.reply(caller, ErrorReply(id=_salvage_id(payload), code="BAD_REQUEST", message=why))

    def error(self, caller: bytes, id: int, code: ErrorCode, message: str) -> None:
        self.reply(caller, ErrorReply(id=id, code=code, message=message))

    def reply(self, caller: bytes, reply: FrontReply) -> None:
        assert self.socket is not None
        if self._trail is not None:
            self._trail.replied(caller, reply)
        try:
            self.socket.send_nowait([caller, encode(reply)])
        except QueueFull:
            self._dropped(caller)
        except Unroutable:
            log.debug("caller went away before its reply (id %d)", reply.id)

    def _dropped(self, caller: bytes) -> None:
        """A client's reply queue is full: it does not read. Drop the reply and its requests in flight
        (their answers too, when they come), so that what it leaves unread cannot grow our memory."""
        dropped = self._not_reading(caller)
        if self._trail is not None:
            self._trail.forgotten(caller)
        self._stats.dropped_replies += 1
        self._stats.dropped_calls += dropped
        self._repeats.log(
            "replies dropped",
            logging.WARNING,
            "client %s does not read its replies (%d queued): a reply dropped, and %d requests in flight",
            peer(caller),
            self._queued_replies(),
            dropped,
        )


class _Id(msgspec.Struct):
    id: int = 0


_decode_id = total_decoder(msgspec.msgpack.Decoder(_Id).decode)


def _salvage_id(payload: bytes) -> int:
    """The request id from a message that did not decode as a request, or 0: read by msgspec, else
    (a value nested too deeply, a key that is not a string) by a bounded scan of the top level."""
    try:
        return _decode_id(payload).id
    except msgspec.DecodeError:
        pass
    id = top_level_fields(payload, ("id",)).get("id")
    return id if type(id) is int and -(2**63) <= id < 2**64 else 0
