"""What a server asks of the client during its own calls: sampling and elicitation, answered by the
client's handlers.

Above: the client stubs (``supervisor.client.blocking``, ``supervisor.client.aio``), which run the
handler for a ``ServerRequest`` that arrives while one of their calls waits, and send the ``Answer``;
the MCP facade (``supervisor.facade.callers``), which answers with its hosts. Below: the front
protocol (``supervisor.protocol``). Tool calls say which of these requests their client answers
itself (``CallTool.answers``); the others the supervisor answers by the server's policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import msgspec

from supervisor.client.errors import SupervisorError
from supervisor.protocol import Answer, ServerRequest, total_decoder

__all__ = ["ELICITATION", "SAMPLING", "Handler", "answer_failed", "answer_with", "handlers", "request_params"]

Handler = Callable[[dict[str, Any]], Any]
"""A server request's handler: ``fn(params)`` with the MCP request's params in their JSON shape,
returning the MCP result in its JSON shape (a dict; for sampling also a plain ``str``, the model's
text). For ``AsyncSupervisorClient`` it may be a coroutine function."""

SAMPLING: Final = "sampling/createMessage"
ELICITATION: Final = "elicitation/create"

_encode_result = msgspec.msgpack.Encoder().encode
_decode_params = total_decoder(msgspec.msgpack.Decoder().decode)


def handlers(on_sampling: Handler | None, on_elicitation: Handler | None) -> dict[str, Handler]:
    """A client's server-request handlers by method (the requests it answers itself)."""
    found = {SAMPLING: on_sampling, ELICITATION: on_elicitation}
    return {method: handler for method, handler in found.items() if handler is not None}


def request_params(request: ServerRequest) -> dict[str, Any]:
    """A server request's params; ``SupervisorError`` when they are not a map (a broken peer)."""
    try:
        params = _decode_params(request.params)
    except msgspec.DecodeError as exc:
        raise SupervisorError(f"undecodable params of a server request: {exc}") from None
    if not isinstance(params, dict):
        raise SupervisorError("the params of a server request are not a map")
    return params


def answer_with(request: ServerRequest, outcome: object) -> Answer:
    """The ``Answer`` carrying what a handler returned (a ``str`` for sampling: the model's text)."""
    if isinstance(outcome, str) and request.method == SAMPLING:
        text = {"type": "text", "text": outcome}
        outcome = {"role": "assistant", "content": text, "model": "caller"}
    if not isinstance(outcome, dict):
        kind = type(outcome).__name__
        return answer_failed(request, f"the {request.method} handler returned {kind}, not a dict")
    try:
        result = msgspec.Raw(_encode_result(outcome))
    except (TypeError, OverflowError) as exc:
        return answer_failed(request, f"the {request.method} handler's result is not JSON: {exc}")
    return Answer(id=request.id, ask=request.ask, result=result)


def answer_failed(request: ServerRequest, why: str) -> Answer:
    return Answer(id=request.id, ask=request.ask, error=why[:1000])
