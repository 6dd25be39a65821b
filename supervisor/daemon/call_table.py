"""The call table: the life of every request the supervisor sent to a worker, from admission to answer.

Above: the supervisor's router, which admits a request here, sends it to a worker and remembers it;
the worker link, which settles it with the worker's answer; the deadline timer, which expires it;
and the keepers, whose worker's end fails every call it had. Below: nothing but the ``reply``
function it is given, through which it sends every terminal reply (``CallResult``, ``ErrorReply``,
``Listing``, and ``OVERLOADED`` refusals).

What it keeps: call ids (supervisor-wide, never reused), the pending entries
(``supervisor.daemon.pending``: who asked, which worker incarnation has it), the deadline heap,
gathers (a listing sent to several workers, answered once), and per-client accounting: every
admitted request holds a place toward ``maxCallsPerClient`` and ``maxCallsInFlight`` until its
terminal reply (a gathered listing is one request).

While a meter is attached (``supervisor.ops.metrics.meter``, when the HTTP listener is on), every tool
call it settles is told to it with the time it was sent (``remember``'s ``now``): its answer
(``answer``) or its failure (``fail``: an error from its worker, its deadline, its worker's end, its
caller's cancel). Requests forgotten with a client that does not read are not.

While tracing, a tool call whose trace is sampled carries its span in its pending entry
(``supervisor.shared.tracing``: opened by the router), ended here with the call's terminal reply, or
when its client's requests are dropped.

A caller may cancel its own request (``cancel``): it is answered ``CANCELLED`` at once and
forgotten as if answered, and the supervisor tells its worker (``Abort``). Gathered listings are
not cancellable.

Pure code: times are passed in (``trio.current_time()`` in the supervisor, a fake clock in tests);
an answer from an incarnation that does not have the call, or after the call was answered (or
cancelled), is dropped (``settle`` returns None).
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import msgspec

from supervisor.config.load import SupervisorSettings
from supervisor.daemon.pending import CallMeter, Gather, Pending
from supervisor.protocol import (
    Answer,
    Answered,
    Ask,
    CallProgress,
    CallResult,
    ErrorCode,
    ErrorReply,
    FrontReply,
    FrontStats,
    InvokeProgress,
    Listing,
    ServerFailure,
    ServerRequest,
)
from supervisor.shared import tracing
from supervisor.shared.repeats import Repeats

if TYPE_CHECKING:
    pass

__all__ = ["DEADLINE_MARGIN", "CallTable", "peer"]

DEADLINE_MARGIN: Final = 0.5  # seconds past a call's budget before the supervisor answers TIMEOUT itself

Reply = Callable[[bytes, FrontReply], None]


@dataclass(slots=True)
class _Client:
    """A front peer with requests in flight (forgotten when it has none)."""

    held: int = 0  # requests in flight, toward maxCallsPerClient (a listing sent to many servers is one)
    calls: set[int] = field(default_factory=set)  # their call ids (pending entries)
    cancellable: dict[int, int] = field(default_factory=dict)  # request id -> call id (not gathers)


class CallTable:
    """Requests in flight: admitted, pending at a worker, answered once."""

    def __init__(
        self,
        reply: Reply,
        settings: Callable[[], SupervisorSettings],
        stats: FrontStats,
        repeats: Repeats,
        server_order: Callable[[], Iterable[str]],
        worker_idle: Callable[[bytes], None] = lambda worker: None,
        meter: CallMeter | None = None,
    ) -> None:
        """``settings``: the bounds as they are now (a reload may change them); ``server_order``: the
        order in which a gathered listing's parts are given (the config's); ``worker_idle`` hears that
        a worker incarnation has no request pending any more; ``meter`` measures tool calls."""
        self._worker_idle = worker_idle
        self._meter = meter
        self._reply = reply
        self._settings = settings
        self._stats = stats
        self._repeats = repeats
        self._server_order = server_order
        self._pending: dict[int, Pending] = {}
        self._deadlines: list[tuple[float, int]] = []
        self._by_worker: dict[bytes, set[int]] = {}
        self._clients: dict[bytes, _Client] = {}
        self._held_by: dict[tuple[bytes, str], int] = {}  # (connection, identity) -> requests in flight
        self._held = 0  # requests in flight from every client, toward maxCallsInFlight
        self.requeue: Callable[[Pending], bool] | None = None  # the router's, for calls to retry
        self._next_call = 0

    def __len__(self) -> int:
        """Calls pending at workers."""
        return len(self._pending)

    @property
    def clients(self) -> int:
        """Front peers with requests in flight."""
        return len(self._clients)

    @property
    def held(self) -> int:
        """Requests in flight from every client."""
        return self._held

    # ------------------------------------------------------------ admission

    def admit(self, caller: bytes, id: int, identity: str = "") -> bool:
        """Take a place for a request that goes to a worker; past a bound, answer OVERLOADED (False).
        ``maxCallsPerClient`` counts per client identity on a connection: one connection serving
        many (the facade: a host session each) lets no one of them crowd out the others."""
        settings = self._settings()
        key = (caller, identity)
        held = self._held_by.get(key, 0)
        if held >= settings.max_calls_per_client:
            why = f"this client has {held} requests in flight (maxCallsPerClient)"
        elif self._held >= settings.max_calls_in_flight:
            why = f"{self._held} requests in flight from every client (maxCallsInFlight)"
        else:
            client = self._clients.get(caller)
            if client is None:
                client = self._clients[caller] = _Client()
            client.held += 1
            self._held_by[key] = held + 1
            self._held += 1
            return True
        self._stats.overloaded += 1
        self._repeats.log(
            "requests refused as OVERLOADED", logging.WARNING, "client %s: %s", peer(caller), why
        )
        self._reply(caller, ErrorReply(id=id, code="OVERLOADED", message=f"{why}; try again later"))
        return False

    def release(self, caller: bytes, identity: str = "") -> None:
        """A request admitted by ``admit`` got its terminal reply (or was dropped)."""
        client = self._clients[caller]
        client.held -= 1
        self._held -= 1
        if client.held == 0:
            del self._clients[caller]
        key = (caller, identity)
        left = self._held_by[key] - 1
        if left:
            self._held_by[key] = left
        else:
            del self._held_by[key]

    # ------------------------------------------------------------ pending

    def load(self, worker: bytes) -> int:
        """Requests pending at that worker incarnation."""
        calls = self._by_worker.get(worker)
        return 0 if calls is None else len(calls)

    def is_pending(self, call: int) -> bool:
        return call in self._pending

    def tool_calls_by_server(self) -> dict[str, int]:
        """Tool calls pending (at a worker, or held for one starting), by server."""
        counts: dict[str, int] = {}
        for pending in self._pending.values():
            if pending.gather is None and not pending.what:
                counts[pending.server] = counts.get(pending.server, 0) + 1
        return counts

    def new_call(self) -> int:
        """A call id for a request about to be sent to a worker (never reused)."""
        self._next_call += 1
        return self._next_call

    def remember(self, call: int, pending: Pending, budget: float, now: float) -> float:
        """A request sent to a worker: pending until its answer, its worker's end or its deadline,
        which is returned."""
        pending.call = call
        self._pending[call] = pending
        self._by_worker.setdefault(pending.worker, set()).add(call)
        client = self._clients[pending.caller]
        client.calls.add(call)
        if pending.gather is None:
            client.cancellable[pending.id] = call  # a client that reuses an id cancels its latest
        if self._meter is not None and pending.gather is None and not pending.what:
            pending.started = now
        deadline = now + budget + DEADLINE_MARGIN
        heapq.heappush(self._deadlines, (deadline, call))
        return deadline

    def move(self, call: int, worker: bytes) -> Pending | None:
        """A pending call goes to ``worker`` (one that waited for its server to start); None, with
        nothing done, for a call no longer pending."""
        pending = self._pending.get(call)
        if pending is None:
            return None
        calls = self._by_worker.get(pending.worker)
        if calls is not None:
            calls.discard(call)
            if not calls:
                del self._by_worker[pending.worker]
        pending.worker = worker
        self._by_worker.setdefault(worker, set()).add(call)
        return pending

    def end(self, call: int, code: ErrorCode, message: str) -> None:
        """A pending call fails now with ``code`` (nothing, for a call no longer pending)."""
        pending = self._pending.get(call)
        if pending is not None:
            self._forget(call, pending)
            self.fail(pending, code, message)

    def settle(self, call: int, worker: bytes) -> Pending | None:
        """The pending entry ``worker`` answers, forgotten; None for a call it does not have (late,
        or another incarnation's)."""
        pending = self._pending.get(call)
        if pending is None or pending.worker != worker:
            return None
        self._forget(call, pending)
        return pending

    def cancel(self, caller: bytes, id: int) -> Pending | None:
        """``caller`` cancels its request ``id``: answered ``CANCELLED`` now, its place released, and
        forgotten (a later answer from its worker is dropped); the pending entry, for its worker to be
        told. None, with nothing done, for a request not in flight (answered, never sent, not one that
        went to a worker) or a gathered listing."""
        client = self._clients.get(caller)
        call = None if client is None else client.cancellable.get(id)
        if call is None:
            return None
        pending = self._pending[call]
        self._forget(call, pending)
        what = pending.what or f"tool {pending.tool!r}"
        self.fail(pending, "CANCELLED", f"cancelled by the caller ({what} on server {pending.server!r})")
        return pending

    def progress(self, event: InvokeProgress, worker: bytes) -> tuple[bytes, CallProgress] | None:
        """Where a worker's progress for a call goes: to a caller that asked for it, while the call is
        pending (after its answer, nowhere)."""
        pending = self._pending.get(event.call)
        if pending is None or pending.worker != worker or not pending.progress:
            return None
        reply = CallProgress(id=pending.id, progress=event.progress, total=event.total, message=event.message)
        return pending.caller, reply

    def ask(self, event: Ask, worker: bytes) -> tuple[bytes, ServerRequest] | None:
        """Where a worker's ``Ask`` goes: to the caller of that call while it is pending."""
        pending = self._pending.get(event.call)
        if pending is None or pending.worker != worker:
            return None
        request = ServerRequest(id=pending.id, ask=event.ask, method=event.method, params=event.params)
        return pending.caller, request

    def answered(self, caller: bytes, answer: Answer) -> tuple[bytes, Answered] | None:
        """Where a caller's ``Answer`` goes: to the worker that has its call, while it is pending."""
        client = self._clients.get(caller)
        call = None if client is None else client.cancellable.get(answer.id)
        if call is None:
            return None
        pending = self._pending[call]
        return pending.worker, Answered(call=call, ask=answer.ask, result=answer.result, error=answer.error)

    def next_deadline(self) -> float:
        """The earliest deadline of a call that may still be pending (``inf`` when there is none)."""
        return self._deadlines[0][0] if self._deadlines else math.inf

    def expire(self, now: float) -> list[Pending]:
        """Every call whose deadline has passed, forgotten; the caller answers them (TIMEOUT)."""
        expired: list[Pending] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            _, call = heapq.heappop(self._deadlines)
            pending = self._pending.get(call)
            if pending is not None:  # else answered in time (call ids are never reused)
                self._forget(call, pending)
                expired.append(pending)
        return expired

    def not_run(self, call: int, worker: bytes) -> None:
        """``worker`` never sent ``call`` to its server, which had ended: when the worker is gone the call
        waits for the next server (``requeue``), as a call to retry does, rather than failing with the
        calls the server had."""
        pending = self._pending.get(call)
        if pending is not None and pending.worker == worker and pending.retry is None:
            pending.retry = pending.again

    def worker_gone(self, worker: bytes, code: ErrorCode, message: str) -> None:
        """A worker incarnation ended: every call it had fails with ``code``, but those ``requeue``
        takes back (a call to retry, moved to wait for its server)."""
        for call in sorted(self._by_worker.pop(worker, ())):
            pending = self._pending.get(call)
            if pending is None:
                continue
            if pending.retry is not None and self.requeue is not None and self.requeue(pending):
                continue
            self._forget(call, pending)
            self.fail(pending, code, message)

    def drop_calls_of(self, caller: bytes) -> int:
        """Forget every request in flight of a client that does not read its replies; how many there were.
        Their answers, when they come, are dropped as late answers are."""
        client = self._clients.get(caller)
        if client is None:
            return 0
        dropped = 0
        gathers: list[Gather] = []  # a listing sent to several servers is one request
        for call in list(client.calls):
            pending = self._pending[call]
            self._forget(call, pending)
            if pending.span is not None:
                tracing.end_route(pending.span, "dropped", "the client does not read its replies")
            if pending.gather is not None:
                if any(gather is pending.gather for gather in gathers):
                    continue
                gathers.append(pending.gather)
            dropped += 1
            self.release(caller, pending.identity)
        return dropped

    def _forget(self, call: int, pending: Pending) -> None:
        """A pending request is over (answered, timed out, its worker gone, or its caller's dropped)."""
        del self._pending[call]
        calls = self._by_worker.get(pending.worker)
        if calls is not None:
            calls.discard(call)
            if not calls:
                del self._by_worker[pending.worker]
                self._worker_idle(pending.worker)
        client = self._clients.get(pending.caller)
        if client is not None:
            client.calls.discard(call)
            if client.cancellable.get(pending.id) == call:
                del client.cancellable[pending.id]

    # ------------------------------------------------------------ answers

    def answer(self, pending: Pending, result: msgspec.Raw) -> None:
        """A settled call's result: to its caller, or into its gathered listing."""
        if pending.span is not None:
            tracing.end_route(pending.span, None)
        if self._meter is not None and pending.started is not None:
            self._meter.answered(pending.server, pending.started, result)
        gather = pending.gather
        if gather is None:
            self._reply(pending.caller, CallResult(id=pending.id, result=result))
            self.release(pending.caller, pending.identity)
        else:
            gather.parts[pending.server] = result
            self._gathered(gather)

    def fail(self, pending: Pending, code: ErrorCode, message: str) -> None:
        """A settled call's failure: an error to its caller, or a failure named in its listing."""
        if pending.span is not None:
            tracing.end_route(pending.span, code, message)
        if self._meter is not None and pending.started is not None:
            self._meter.failed(pending.server, pending.started, code)
        gather = pending.gather
        if gather is None or gather.named:
            self._reply(pending.caller, ErrorReply(id=pending.id, code=code, message=message))
            self.release(pending.caller, pending.identity)
        else:
            gather.failures.append(ServerFailure(server=pending.server, code=code, message=message))
            self._gathered(gather)

    def _gathered(self, gather: Gather) -> None:
        gather.waiting -= 1
        if gather.waiting == 0:
            parts = [gather.parts[name] for name in self._server_order() if name in gather.parts]
            self._reply(gather.caller, Listing(id=gather.id, parts=parts, failures=gather.failures))
            self.release(gather.caller, gather.identity)


def peer(routing_id: bytes) -> str:
    """A front peer, as the log names it (its routing id, in hex; at most 16 bytes of it)."""
    return routing_id[:16].hex() or "-"
