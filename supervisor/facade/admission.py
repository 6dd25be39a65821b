"""A gateway client's limits, applied to its HTTP requests: a ``tools/call`` past them is answered
429 at once, with ``Retry-After`` and a JSON-RPC error whose message begins ``OVERLOADED``.

Above: ``supervisor.facade.run.Front``, which sends a limited principal's POSTs through ``admit``.
Below: the principal's ``Limiter`` (``supervisor.facade.access``) and the app behind the front.

Only requests that carry a ``tools/call`` count (a listing, a read, a notification do not). The call
is counted from its request's arrival to the end of its response (for an event stream, its last
event). A body the lane would not read whole (over ``MAX_BODY``) counts as a call.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import msgspec

from supervisor.facade.access import Grant, Limiter
from supervisor.facade.lane_requests import read_body, replaying

__all__ = ["admit"]

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

OVERLOADED_CODE: Final = -32000  # a server error of JSON-RPC's implementation-defined range


class _Request(msgspec.Struct):
    method: str = ""
    id: int | str | None = None


_ONE: Final = msgspec.json.Decoder(_Request)
_MANY: Final = msgspec.json.Decoder(list[_Request])


def _calls(body: bytes | None) -> tuple[int, int | str | None]:
    """How many ``tools/call`` requests ``body`` carries, and the first one's id."""
    if body is None:
        return 1, None
    try:
        requests = _MANY.decode(body) if body.lstrip()[:1] == b"[" else [_ONE.decode(body)]
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return 0, None  # not JSON-RPC: the SDK answers it (an error), and it is no call
    calls = [request for request in requests if request.method == "tools/call"]
    return len(calls), calls[0].id if calls else None


async def admit(
    grant: Grant, app: ASGIApp, scope: MutableMapping[str, Any], receive: Receive, send: Send
) -> None:
    """``app`` answers the request when ``grant``'s limits admit its calls, else 429."""
    limiter = grant.limiter
    assert limiter is not None
    read: list[Message] = []
    count, request_id = _calls(await read_body(receive, read))
    admitted = 0
    try:
        for _ in range(count):
            retry = limiter.admit()
            if retry is not None:
                await _overloaded(send, limiter, retry, grant, request_id)
                return
            admitted += 1
        await app(scope, replaying(read, receive), send)
    finally:
        for _ in range(admitted):
            limiter.release()


async def _overloaded(send: Send, limiter: Limiter, retry: float, grant: Grant, request_id: Any) -> None:
    who = grant.entry if grant.principal in ("", grant.entry) else f"{grant.entry} ({grant.principal})"
    message = f"OVERLOADED: client {who}: {limiter.why(retry)}"
    error = {"code": OVERLOADED_CODE, "message": message, "data": {"retryAfter": round(retry, 3)}}
    body = msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "error": error})
    headers = [
        (b"content-type", b"application/json"),
        (b"retry-after", str(max(1, math.ceil(retry))).encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body})
