"""The call table: admission, pending calls, deadlines on a fake clock, gathers, and answers given once."""

from __future__ import annotations

import logging

import msgspec
import pytest

from supervisor.config.load import SupervisorSettings
from supervisor.daemon.call_table import DEADLINE_MARGIN, CallTable
from supervisor.daemon.pending import Gather, Pending
from supervisor.protocol import (
    CallProgress,
    CallResult,
    ErrorReply,
    FrontReply,
    FrontStats,
    InvokeProgress,
    Listing,
    ServerFailure,
)
from supervisor.shared.repeats import Repeats

A, B = b"agent-a", b"agent-b"  # front routing ids
W1, W2 = b"one/1/aa", b"two/1/bb"  # worker incarnations
SERVERS = ["one", "two", "three"]  # the config's order


class Table:
    """A call table, the replies it sent (caller, reply), and its settings, which a test may change."""

    def __init__(self, *, max_calls_per_client: int = 1000, max_calls_in_flight: int = 10_000) -> None:
        self.sent: list[tuple[bytes, FrontReply]] = []
        self.settings = SupervisorSettings(
            max_calls_per_client=max_calls_per_client, max_calls_in_flight=max_calls_in_flight
        )
        self.stats = FrontStats()
        repeats = Repeats(logging.getLogger("test_calls"), clock=lambda: 0.0)
        self.calls = CallTable(self._reply, lambda: self.settings, self.stats, repeats, lambda: SERVERS)

    def _reply(self, caller: bytes, reply: FrontReply) -> None:
        self.sent.append((caller, reply))

    def send(
        self, caller: bytes, id: int, worker: bytes = W1, *, budget: float = 10.0, now: float = 0.0
    ) -> int:
        """Admit and remember one tool call, as the router does; its call id."""
        assert self.calls.admit(caller, id)
        call = self.calls.new_call()
        server = "one" if worker == W1 else "two"
        self.calls.remember(call, Pending(caller, id, worker, server, "echo", progress=True), budget, now)
        return call


def errors(table: Table) -> list[tuple[bytes, int, str, str]]:
    """The error replies sent: (caller, id, code, message)."""
    return [(c, r.id, r.code, r.message) for c, r in table.sent if isinstance(r, ErrorReply)]


@pytest.fixture
def table() -> Table:
    return Table()


def raw(value: object) -> msgspec.Raw:
    return msgspec.Raw(msgspec.msgpack.encode(value))


def test_an_answer_reaches_its_caller_once_and_a_late_one_is_dropped(table: Table) -> None:
    call = table.send(A, 7)
    pending = table.calls.settle(call, W1)
    assert pending is not None
    table.calls.answer(pending, raw("ok"))
    assert table.sent == [(A, CallResult(id=7, result=raw("ok")))]
    assert table.calls.settle(call, W1) is None  # a second answer to the same call
    assert len(table.calls) == 0 and table.calls.held == 0 and table.calls.clients == 0


def test_an_answer_from_another_incarnation_settles_nothing(table: Table) -> None:
    call = table.send(A, 1, W1)
    assert table.calls.settle(call, W2) is None
    assert len(table.calls) == 1


def test_call_ids_are_never_reused(table: Table) -> None:
    ids = [table.send(A, n) for n in range(5)]
    assert len(set(ids)) == 5


def test_a_call_expires_at_its_budget_plus_the_margin_and_not_before(table: Table) -> None:
    table.send(A, 1, budget=2.0, now=100.0)
    assert table.calls.next_deadline() == pytest.approx(102.0 + DEADLINE_MARGIN)
    assert table.calls.expire(102.0) == []
    expired = table.calls.expire(102.0 + DEADLINE_MARGIN)
    assert [(p.caller, p.id) for p in expired] == [(A, 1)]
    assert len(table.calls) == 0
    assert table.sent == []  # the timer answers TIMEOUT itself, naming the server and what was asked


def test_calls_expire_in_deadline_order_and_answered_ones_are_skipped(table: Table) -> None:
    slow = table.send(A, 1, budget=30.0, now=0.0)
    table.send(A, 2, budget=10.0, now=0.0)
    answered = table.send(A, 3, budget=5.0, now=0.0)
    pending = table.calls.settle(answered, W1)
    assert pending is not None
    table.calls.answer(pending, raw(None))
    assert [p.id for p in table.calls.expire(20.0)] == [2]
    assert table.calls.next_deadline() == pytest.approx(30.0 + DEADLINE_MARGIN)
    assert table.calls.settle(slow, W1) is not None


def test_nothing_pending_means_no_deadline(table: Table) -> None:
    assert table.calls.next_deadline() == float("inf")


def test_one_client_past_its_bound_is_refused_as_overloaded_while_another_is_not() -> None:
    table = Table(max_calls_per_client=2)
    table.send(A, 1)
    table.send(A, 2)
    assert not table.calls.admit(A, 3)
    [(caller, id, code, message)] = errors(table)
    assert (caller, id, code) == (A, 3, "OVERLOADED")
    assert "maxCallsPerClient" in message
    assert table.stats.overloaded == 1
    assert table.calls.admit(B, 1)


def test_each_identity_on_one_connection_has_a_bound_of_its_own() -> None:
    """A facade serves many host sessions over one connection: one busy host crowds out no other."""
    table = Table(max_calls_per_client=2)
    for id in (1, 2):
        assert table.calls.admit(A, id, "host-1")
    assert not table.calls.admit(A, 3, "host-1")
    assert table.calls.admit(A, 4, "host-2")  # another host on the same connection
    assert [(id, code) for _, id, code, _ in errors(table)] == [(3, "OVERLOADED")]
    pending = Pending(A, 1, W1, "one", "echo", identity="host-1")
    call = table.calls.new_call()
    table.calls.remember(call, pending, 10.0, 0.0)
    table.calls.end(call, "TIMEOUT", "late")  # its place goes back to host-1, not to another
    assert table.calls.admit(A, 5, "host-1")
    assert not table.calls.admit(A, 6, "host-1")
    assert table.calls.admit(A, 7, "host-2") and not table.calls.admit(A, 8, "host-2")


def test_everyone_past_the_in_flight_bound_is_refused_until_a_place_is_released() -> None:
    table = Table(max_calls_in_flight=2)
    first = table.send(A, 1)
    table.send(B, 1)
    assert not table.calls.admit(B, 2)
    assert "maxCallsInFlight" in errors(table)[-1][3]
    pending = table.calls.settle(first, W1)
    assert pending is not None
    table.calls.answer(pending, raw(1))
    assert table.calls.admit(B, 2)


def test_a_worker_that_ends_fails_every_call_it_had_and_no_other(table: Table) -> None:
    table.send(A, 1, W1)
    table.send(B, 2, W1)
    other = table.send(A, 3, W2)
    table.calls.worker_gone(W1, "WORKER_CRASHED", "server 'one': worker was killed by SIGKILL")
    assert sorted(error[:3] for error in errors(table)) == [
        (A, 1, "WORKER_CRASHED"),
        (B, 2, "WORKER_CRASHED"),
    ]
    assert len(table.calls) == 1 and table.calls.settle(other, W2) is not None


def test_a_gathered_listing_is_answered_once_in_config_order_naming_the_server_that_failed(
    table: Table,
) -> None:
    assert table.calls.admit(A, 9)
    gather = Gather(A, 9, named=False, waiting=3)
    pendings = {}
    for server, worker in (("three", b"w3"), ("one", b"w1"), ("two", b"w2")):
        call = table.calls.new_call()
        table.calls.remember(call, Pending(A, 9, worker, server, "prompts/list", gather=gather), 5.0, 0.0)
        pendings[server] = (call, worker)
    for server in ("three", "one"):
        call, worker = pendings[server]
        pending = table.calls.settle(call, worker)
        assert pending is not None
        table.calls.answer(pending, raw([server]))
        assert table.sent == []  # not before every server has answered
    call, worker = pendings["two"]
    pending = table.calls.settle(call, worker)
    assert pending is not None
    table.calls.fail(pending, "TIMEOUT", "server 'two' did not answer in time")
    failure = ServerFailure(server="two", code="TIMEOUT", message="server 'two' did not answer in time")
    assert table.sent == [(A, Listing(id=9, parts=[raw(["one"]), raw(["three"])], failures=[failure]))]
    assert table.calls.held == 0


def test_a_listing_of_one_named_server_that_fails_is_an_error(table: Table) -> None:
    assert table.calls.admit(A, 4)
    call = table.calls.new_call()
    gather = Gather(A, 4, named=True, waiting=1)
    table.calls.remember(call, Pending(A, 4, W1, "one", "resources/list", gather=gather), 5.0, 0.0)
    table.calls.worker_gone(W1, "WORKER_CRASHED", "gone")
    assert table.sent == [(A, ErrorReply(id=4, code="WORKER_CRASHED", message="gone"))]


def test_dropping_a_client_that_does_not_read_counts_a_gathered_listing_once(table: Table) -> None:
    table.send(A, 1)
    table.send(A, 2)
    assert table.calls.admit(A, 3)
    gather = Gather(A, 3, named=False, waiting=2)
    late = []
    for worker in (W1, W2):
        call = table.calls.new_call()
        table.calls.remember(call, Pending(A, 3, worker, "x", "prompts/list", gather=gather), 5.0, 0.0)
        late.append((call, worker))
    kept = table.send(B, 1)
    assert table.calls.drop_calls_of(A) == 3
    assert table.calls.held == 1 and table.calls.clients == 1
    assert all(table.calls.settle(call, worker) is None for call, worker in late)  # their answers: dropped
    assert table.calls.settle(kept, W1) is not None
    assert table.calls.drop_calls_of(A) == 0


def test_progress_goes_to_a_caller_that_asked_while_its_call_is_pending(table: Table) -> None:
    call = table.send(A, 5)
    event = InvokeProgress(call=call, progress=1.0, total=3.0, message="one")
    assert table.calls.progress(event, W1) == (A, CallProgress(id=5, progress=1.0, total=3.0, message="one"))
    assert table.calls.progress(event, W2) is None  # not that incarnation's call
    pending = table.calls.settle(call, W1)
    assert pending is not None
    assert table.calls.progress(event, W1) is None  # after its answer


def test_progress_is_not_relayed_to_a_caller_that_did_not_ask(table: Table) -> None:
    assert table.calls.admit(A, 6)
    call = table.calls.new_call()
    table.calls.remember(call, Pending(A, 6, W1, "one", "echo"), 5.0, 0.0)
    assert table.calls.progress(InvokeProgress(call=call, progress=1.0), W1) is None


def test_a_cancelled_call_is_answered_cancelled_once_and_its_place_released() -> None:
    table = Table(max_calls_per_client=1)
    call = table.send(A, 7)
    pending = table.calls.cancel(A, 7)
    assert pending is not None and (pending.call, pending.worker, pending.id) == (call, W1, 7)
    [(caller, id, code, message)] = errors(table)
    assert (caller, id, code) == (A, 7, "CANCELLED")
    assert "cancelled by the caller" in message and "'one'" in message
    assert len(table.calls) == 0 and table.calls.held == 0 and table.calls.clients == 0
    assert table.calls.admit(A, 8)  # the place it held is free again


def test_after_a_cancel_the_workers_answer_progress_and_deadline_are_dropped(table: Table) -> None:
    call = table.send(A, 7, budget=1.0)
    assert table.calls.cancel(A, 7) is not None
    sent = list(table.sent)
    assert table.calls.settle(call, W1) is None  # the worker's late answer
    assert table.calls.progress(InvokeProgress(call=call, progress=1.0), W1) is None
    assert table.calls.expire(100.0) == []
    table.calls.worker_gone(W1, "WORKER_CRASHED", "gone")
    assert table.calls.cancel(A, 7) is None  # a second Cancel
    assert table.sent == sent  # nothing more than the one CANCELLED


def test_a_cancel_of_a_request_not_in_flight_does_nothing(table: Table) -> None:
    answered = table.send(A, 1)
    pending = table.calls.settle(answered, W1)
    assert pending is not None
    table.calls.answer(pending, raw("ok"))
    kept = table.send(A, 2)
    sent = list(table.sent)
    assert table.calls.cancel(A, 1) is None  # answered already
    assert table.calls.cancel(A, 99) is None  # never sent
    assert table.calls.cancel(B, 2) is None  # another client's id: each cancels only its own
    assert table.sent == sent
    assert table.calls.held == 1 and table.calls.settle(kept, W1) is not None


def test_a_gathered_listing_is_not_cancellable(table: Table) -> None:
    assert table.calls.admit(A, 3)
    gather = Gather(A, 3, named=False, waiting=2)
    for worker in (W1, W2):
        call = table.calls.new_call()
        table.calls.remember(call, Pending(A, 3, worker, "x", "prompts/list", gather=gather), 5.0, 0.0)
    assert table.calls.cancel(A, 3) is None
    assert table.sent == [] and len(table.calls) == 2 and table.calls.held == 1


def test_a_cancelled_fetch_names_what_was_asked(table: Table) -> None:
    assert table.calls.admit(A, 4)
    call = table.calls.new_call()
    pending = Pending(A, 4, W1, "one", "resources/read", "resources/read test://doc/1")
    table.calls.remember(call, pending, 5.0, 0.0)
    assert table.calls.cancel(A, 4) is pending
    [(_, _, code, message)] = errors(table)
    assert code == "CANCELLED" and "resources/read test://doc/1" in message


def test_dropping_a_client_forgets_what_it_could_cancel(table: Table) -> None:
    table.send(A, 1)
    assert table.calls.drop_calls_of(A) == 1
    assert table.calls.cancel(A, 1) is None and table.sent == []
