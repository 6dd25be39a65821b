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
