"""The worker link: the worker ROUTER's messages in, commands to workers out.

Above: the supervisor, which attaches each new worker incarnation's routing id to its keeper and
detaches it when the incarnation ends. Beside it: the call table, which the workers' answers settle,
and the keepers, which get the life-cycle events (``Started``, ``Ready``, ``ToolsChanged``,
heartbeats). Below: every worker process, a DEALER connected with its incarnation's routing id.

Messages from a routing id that is not attached (a replaced incarnation) are dropped unread; any
message from an attached one counts as a sign of life (``Keeper.heard``). A message that does not
decode, or whose handling fails, is logged and goes no further.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import assert_never

import msgspec
import trio

from supervisor.daemon.call_table import CallTable
from supervisor.daemon.servers.keeper import Keeper
from supervisor.daemon.wishes import Interests
from supervisor.protocol import (
    Ask,
    ErrorCode,
    FrontReply,
    Heartbeat,
    InvokeFailed,
    InvokeProgress,
    InvokeResult,
    Logged,
    NotRun,
    Ready,
    Started,
    ToolsChanged,
    Updated,
    WorkerEvent,
    decode_worker_event,
    is_error_code,
)
from supervisor.shared.repeats import Repeats
from supervisor.shared.sockets import RouterSocket, Unroutable

__all__ = ["WorkerLink"]

log = logging.getLogger("mcp_supervisor")


class WorkerLink:
    """Routes each worker's messages to its keeper or to the call table; sends on ``socket``."""

    def __init__(
        self,
        *,
        calls: CallTable,
        reply: Callable[[bytes, FrontReply], None],
        repeats: Repeats,
        settled: Callable[[], None],
        ready: Callable[[Keeper, bytes, Ready], None],
        interests: Interests,
    ) -> None:
        """``reply`` relays progress to callers; ``settled`` hears that a call was answered; ``ready``
        hands a worker's ``Ready`` on; ``interests`` hears what servers say."""
        self.socket: RouterSocket | None = None
        self._calls = calls
        self._reply = reply
        self._repeats = repeats
        self._settled = settled
        self._interests = interests
        self._ready = ready
        self._by_identity: dict[bytes, Keeper] = {}

    def attach(self, identity: bytes, keeper: Keeper) -> None:
        self._by_identity[identity] = keeper

    def detach(self, identity: bytes) -> None:
        self._by_identity.pop(identity, None)

    def send(self, identity: bytes, payload: bytes) -> None:
        """Send to one worker; raises ``Unroutable`` when it is not connected."""
        assert self.socket is not None
        self.socket.send_nowait([identity, payload])

    def send_if_connected(self, identity: bytes, payload: bytes) -> bool:
        try:
            self.send(identity, payload)
        except Unroutable:
            return False
        return True

    def receive(self, batch: list[list[bytes]]) -> None:
        now = trio.current_time()
        for frames in batch:
            keeper = self._by_identity.get(frames[0])
            if keeper is None or len(frames) != 2:
                continue  # a replaced incarnation, or noise: never delivered to anyone
            keeper.heard(now)
            try:
                event = decode_worker_event(frames[1])
            except msgspec.DecodeError as exc:  # total: any bytes at all end here
                self._repeats.log(
                    f"undecodable messages from the worker of {keeper.name!r}",
                    logging.ERROR,
                    "undecodable message from the worker of %r: %s",
                    keeper.name,
                    exc,
                )
                continue
            try:
                self._on_event(keeper, frames[0], event)
            except Exception:  # boundary: one message's failure must not end the supervisor
                log.exception("handling %s from the worker of %r failed", type(event).__name__, keeper.name)

    def _on_event(self, keeper: Keeper, worker: bytes, event: WorkerEvent) -> None:
        match event:
            case InvokeResult(call=call, result=result):
                pending = self._calls.settle(call, worker)
                if pending is not None:
                    self._settled()
                    self._calls.answer(pending, result)
            case NotRun(call=call):
                self._calls.not_run(call, worker)
            case InvokeFailed(call=call, code=code, message=message):
                pending = self._calls.settle(call, worker)
                if pending is not None:
                    self._settled()
                    if code not in ("UNKNOWN_TOOL", "INVALID_ARGUMENTS"):  # the caller's mistakes
                        what = f"{code} answers from server {keeper.name!r}"
                        self._repeats.log(
                            what, logging.ERROR, "server %r: %s: %s", keeper.name, code, message
                        )
                    known: ErrorCode = "INTERNAL"  # a worker is never newer than its supervisor
                    if is_error_code(code):
                        known = code
                    self._calls.fail(pending, known, f"server {keeper.name!r}: {message}")
            case InvokeProgress():
                relay = self._calls.progress(event, worker)
                if relay is not None:
                    self._reply(*relay)
            case Ask():
                asked = self._calls.ask(event, worker)
                if asked is not None:
                    self._reply(*asked)
            case Started(server_pid=pid):
                keeper.started(pid)
            case Ready():
                self._ready(keeper, worker, event)
            case ToolsChanged():
                keeper.tools_changed(event)
            case Heartbeat():
                keeper.heartbeat_answered()
            case Logged():
                self._interests.logged(keeper.name, event)
            case Updated(uri=uri):
                self._interests.updated(keeper.name, uri)
            case _:
                assert_never(event)
