"""Server requests answered by the caller: whose call asked (the worker's rule), and the client
stub's side of it (params in, answers out), against garbage too."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from supervisor.client.answers import SAMPLING, answer_with, request_params
from supervisor.client.errors import SupervisorError
from supervisor.protocol import Answered, Ask, ServerRequest, WorkerEvent, encode
from workers.asking import CURRENT_CALL, Asking, Running

ELICIT = "elicitation/create"


def running(
    call: int, client: str, answers: tuple[str, ...] = (SAMPLING,), deadline: float = 100.0
) -> Running:
    return Running(call, trio.CancelScope(deadline=deadline), client=client, answers=frozenset(answers))


def asking(*calls: Running) -> tuple[Asking, list[WorkerEvent]]:
    sent: list[WorkerEvent] = []
    return Asking(sent.append, {r.call: r for r in calls}), sent


def test_a_request_is_the_one_busy_clients_latest_call_that_answers_it() -> None:
    first, latest, other_kind = running(1, "a"), running(2, "a", deadline=200), running(3, "a", (ELICIT,))
    ask, _ = asking(first, latest, other_kind)
    assert ask.asker(SAMPLING) is latest
    assert ask.asker(ELICIT) is other_kind
    assert asking(running(1, "a", ()))[0].asker(SAMPLING) is None  # its caller answers none


def test_with_two_clients_busy_nobody_is_asked() -> None:
    ask, _ = asking(running(1, "a"), running(2, "b", ()))
    assert ask.asker(SAMPLING) is None


def test_the_call_whose_task_asks_is_asked_whoever_else_is_busy() -> None:
    mine = running(1, "a")
    ask, _ = asking(mine, running(2, "b"))
    token = CURRENT_CALL.set(mine)
    try:
        assert ask.asker(SAMPLING) is mine
        assert ask.asker(ELICIT) is None
    finally:
        CURRENT_CALL.reset(token)


async def test_the_answer_comes_back_and_a_late_or_stray_one_is_dropped() -> None:
    call = running(7, "a", deadline=trio.current_time() + 5)
    ask, sent = asking(call)
    answers: list[Any] = []

    async def wait() -> None:
        answers.append(await ask.ask(SAMPLING, {"maxTokens": 5}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        [event] = sent
        assert (
            isinstance(event, Ask)
            and event.call == 7
            and msgspec.msgpack.decode(event.params) == {"maxTokens": 5}
        )
        ask.answered(Answered(call=7, ask=event.ask + 1, result=msgspec.Raw(encode({"x": 1}))))  # stray
        ask.answered(Answered(call=7, ask=event.ask, result=msgspec.Raw(encode({"role": "assistant"}))))
    assert answers[0].result == {"role": "assistant"}
    ask.answered(Answered(call=7, ask=event.ask))  # late: nobody waits


async def test_the_wait_ends_with_the_call() -> None:
    call = running(7, "a", deadline=trio.current_time() + 0.05)
    ask, _ = asking(call)
    with trio.fail_after(5):
        answer = await ask.ask(SAMPLING, {})
    assert answer is not None and answer.result is None and "did not answer" in (answer.error or "")


def request(params: bytes, method: str = SAMPLING) -> ServerRequest:
    return ServerRequest(id=1, ask=2, method=method, params=msgspec.Raw(params))


def test_a_handlers_text_is_a_sampling_result_and_anything_but_a_dict_is_an_error() -> None:
    answered = answer_with(request(encode({})), "the text")
    assert msgspec.msgpack.decode(answered.result) == {
        "role": "assistant",
        "content": {"type": "text", "text": "the text"},
        "model": "caller",
    }
    assert "returned str, not a dict" in answer_with(request(encode({}), ELICIT), "text").error
    assert "is not JSON" in answer_with(request(encode({})), {"x": object()}).error


@given(st.binary(max_size=64))
def test_any_params_bytes_are_a_dict_or_a_clear_error(data: bytes) -> None:
    try:
        params = request_params(request(data))
    except SupervisorError as exc:
        assert "server request" in str(exc)
    else:
        assert isinstance(params, dict)


def test_params_nested_past_the_decoders_limit_are_a_clear_error() -> None:
    with pytest.raises(SupervisorError, match="nested too deeply"):
        request_params(request(b"\x91" * 5000 + b"\x80"))
