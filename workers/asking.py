"""Server requests answered by the calling client: which call asked, the ``Ask``, and the wait.

Above: ``workers.requests``, whose sampling and elicitation callbacks ask here first
(``Asking.ask``) and fall back to the config's answers when it gives None. Beside it:
``workers.calls``, which keeps each running call (``Running``, with who made it and which requests
its caller answers: ``Invoke.answers``) and marks the call's own task (``CURRENT_CALL``). Below: the
link, through which the ``Ask`` goes to the supervisor (and on to the caller as ``ServerRequest``)
and the caller's ``Answered`` comes back.

Which call asked: MCP gives a server's request no reference to the call it arose in, so:

- a request made through a result that asks for input (2026-07-28 ``input_required``) is answered
  in the call's own task: that call asked;
- otherwise, only when every request the worker serves now comes from one client (always so on a
  ``scope: client`` session) is it that client's: its call that answers such requests and has the
  latest deadline asks. With calls of several clients in flight, nobody can tell whose it is, and
  the config answers it: one agent never sees another's request.

The wait is bounded by that call's deadline, and ends when the call does (answered, timed out,
aborted): the server then gets an error saying so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec
import trio

from supervisor.protocol import Answered, Ask, WorkerEvent, encode
from workers.values import InvalidArguments, decode_arguments

if TYPE_CHECKING:
    from supervisor.shared.spans import Span

__all__ = ["CURRENT_CALL", "Asked", "Asking", "CallerAnswer", "Running"]

log = logging.getLogger("mcp_supervisor.worker")


@dataclass(slots=True, eq=False)
class Asked:
    """A request sent to a caller, until its answer comes (or the call ends)."""

    done: trio.Event = field(default_factory=trio.Event)
    answer: Answered | None = None


@dataclass(slots=True, eq=False)
class Running:
    """A call being served: its id, its scope (the budget's deadline), and whether it was aborted;
    whose it is, which server requests its caller answers, and those sent to it now."""

    call: int
    scope: trio.CancelScope
    aborted: bool = False  # its caller cancelled it: nothing more is sent for it
    client: str = ""
    answers: frozenset[str] = frozenset()
    asks: dict[int, Asked] = field(default_factory=dict)
    span: Span | None = None  # its span, while tracing and its trace is sampled (``workers.calls``)
    trace: dict[str, str] | None = None  # while tracing: the ``_meta`` entries of its trace context
    sent_at: int | None = None  # where its request's line begins in a stdio server's stdin, once queued

    def end(self) -> None:
        """The call is over: whatever it was asked goes unanswered."""
        for asked in self.asks.values():
            asked.done.set()
        self.asks.clear()


CURRENT_CALL: ContextVar[Running | None] = ContextVar("current_call", default=None)
"""The call whose task this is (set by ``workers.calls`` in each call's task)."""


class CallerAnswer(NamedTuple):
    """What the caller answered: the MCP result in its JSON shape, or why there is none."""

    result: dict[str, Any] | None
    error: str | None = None


class Asking:
    """Sends a server's request to the caller of the call it arose in, and waits for the answer."""

    def __init__(self, send: Callable[[WorkerEvent], None], running: Mapping[int, Running]) -> None:
        self._send = send
        self._running = running
        self._next_ask = 0

    def asker(self, method: str) -> Running | None:
        """The call whose caller answers this request, or None (the config answers it)."""
        current = CURRENT_CALL.get()
        if current is not None:
            return current if method in current.answers and not current.aborted else None
        calls = [running for running in self._running.values() if not running.aborted]
        if len({running.client for running in calls}) != 1:
            return None  # nobody busy, or several clients: whose request it is cannot be told
        candidates = [running for running in calls if method in running.answers]
        return max(candidates, key=lambda running: running.scope.deadline, default=None)

    async def ask(self, method: str, params: dict[str, Any]) -> CallerAnswer | None:
        """The caller's answer to the server's ``method`` request; None when no caller answers it."""
        running = self.asker(method)
        if running is None:
            return None
        self._next_ask += 1
        ask, asked = self._next_ask, Asked()
        running.asks[ask] = asked
        log.debug("call %d: %s sent to its caller", running.call, method)
        try:
            self._send(Ask(call=running.call, ask=ask, method=method, params=msgspec.Raw(encode(params))))
            with trio.move_on_at(running.scope.deadline):
                await asked.done.wait()
        finally:
            running.asks.pop(ask, None)
        answer = asked.answer
        if answer is None:
            why = "the call ended" if asked.done.is_set() else "the call's deadline passed"
            return CallerAnswer(None, f"the caller did not answer ({why})")
        if answer.error:
            return CallerAnswer(None, f"the caller could not answer: {answer.error}")
        try:
            return CallerAnswer(decode_arguments(answer.result))
        except InvalidArguments as exc:
            return CallerAnswer(None, f"the caller's answer is not a JSON object: {exc}")

    def answered(self, command: Answered) -> None:
        """The caller's answer; one for a call or a request no longer waited for is dropped."""
        running = self._running.get(command.call)
        asked = None if running is None else running.asks.get(command.ask)
        if asked is None:
            log.debug("answer %d of call %d, which nobody waits for: dropped", command.ask, command.call)
            return
        asked.answer = command
        asked.done.set()
