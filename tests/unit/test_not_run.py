"""A worker whose server has gone first (closed its stdout or exited) does not send it the calls that come
while the worker ends: each is answered ``NotRun``, so the supervisor can hold it for the next server.

``workers.calls.Calls`` against a fake link and a fake stdio server (``tests.call_fakes``); the whole
path, supervisor included, is ``tests/e2e/test_recovery.py``'s
``test_calls_that_reach_a_worker_after_its_server_broke_run_on_the_next_server``.
"""

from __future__ import annotations

import trio
import trio.testing

from supervisor.protocol import NotRun
from tests.call_fakes import FakeLink, FakeStdio
from tests.unit.test_abort import WAIT, calls_for, invoke


async def test_a_call_that_comes_after_the_server_hung_up_is_not_run_and_not_sent() -> None:
    link, server = FakeLink(), FakeStdio()
    server.hung_up = True
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            calls = calls_for(link, nursery, server, object())
            calls.invoke(invoke(4))
            await trio.testing.wait_all_tasks_blocked()
    assert link.sent == [NotRun(call=4)]
    assert server.lines == [] and calls.running == 0


async def test_while_the_server_is_up_a_call_is_sent_to_it() -> None:
    link, server = FakeLink(), FakeStdio()
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            calls = calls_for(link, nursery, server, object())
            calls.invoke(invoke(4))
            await server.written.wait()
            nursery.cancel_scope.cancel()
    assert server.lines[0]["method"] == "tools/call"
    assert not any(isinstance(event, NotRun) for event in link.sent)


async def _cancelled_by_the_worker_end(read_upto: int | None) -> list[int]:
    """Two calls written to the server, then the worker ends (its nursery is cancelled) after the server
    exited having read ``read_upto`` lines (None: it still runs): the calls answered ``NotRun``."""
    link, server = FakeLink(), FakeStdio()
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            calls = calls_for(link, nursery, server, object())
            for call in (4, 5):  # written in this order
                calls.invoke(invoke(call))
                await trio.testing.wait_all_tasks_blocked()
            assert [line["method"] for line in server.lines] == ["tools/call", "tools/call"]
            server.read_upto = read_upto
            nursery.cancel_scope.cancel()
    assert calls.running == 0
    assert all(isinstance(event, NotRun) for event in link.sent)
    return sorted(event.call for event in link.sent if isinstance(event, NotRun))


async def test_calls_the_worker_end_cancels_whose_requests_the_exited_server_never_read_are_not_run() -> None:
    assert await _cancelled_by_the_worker_end(read_upto=0) == [4, 5]


async def test_a_request_the_server_read_before_it_exited_is_not_called_not_run() -> None:
    """The first line was read (it may have run): only the second is ``NotRun``; the supervisor fails
    the first as the worker's crash."""
    assert await _cancelled_by_the_worker_end(read_upto=1) == [5]


async def test_calls_cancelled_while_the_server_still_runs_are_not_called_not_run() -> None:
    assert await _cancelled_by_the_worker_end(read_upto=None) == []
