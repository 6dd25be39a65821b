"""The worker link: each worker process (a DEALER) talks to the supervisor's worker ROUTER.

The supervisor sends ``WorkerCommand``; the worker sends ``WorkerEvent``. ``salvage_call`` finds the
call id of a command too deep to decode, so that the call can still be answered.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from supervisor.protocol.codec import _Message, encode, total_decoder
from supervisor.protocol.payloads import WorkerTool


class Invoke(_Message):
    """Supervisor -> worker: call ``tool`` (the server's own name) within ``budget`` seconds.

    With ``progress``, the worker asks the server for progress and relays it as ``InvokeProgress``.
    """

    call: int
    tool: str
    arguments: msgspec.Raw
    budget: float
    progress: bool = False
    client: str = ""  # whose call it is (server requests go to a caller only when one client is busy)
    answers: list[str] = []  # server requests its caller answers (``Ask``), as in ``CallTool``
    traceparent: str = ""  # W3C trace context of the supervisor's span for the call, while tracing
    tracestate: str = ""


class Heartbeat(_Message):
    """Either direction: I am alive."""


FetchMethod = Literal[
    "resources/list", "resources/templates/list", "prompts/list", "resources/read", "prompts/get"
]


class Fetch(_Message):
    """Supervisor -> worker: one resources or prompts request within ``budget`` seconds.

    ``target`` is the URI for ``resources/read`` and the prompt's name for ``prompts/get``
    (its prefixed name when ``prefixed``). Answered like ``Invoke``: ``InvokeResult`` (an encoded
    list of entries for the list methods, a ``ResourceResult`` or ``PromptResult``) or ``InvokeFailed``.
    """

    call: int
    method: FetchMethod
    budget: float
    target: str = ""
    prefixed: bool = False
    arguments: msgspec.Raw = msgspec.Raw(b"\x80")  # msgpack {}: the prompt's arguments
    client: str = ""


class Abort(_Message):
    """Supervisor -> worker: stop working on ``call`` (an ``Invoke`` or a ``Fetch``) and send nothing for
    it: its caller cancelled it and has been answered. The server is sent the MCP cancellation. An
    ``Abort`` for a call the worker no longer has is ignored."""

    call: int


class Answered(_Message):
    """Supervisor -> worker: the caller's answer to the worker's ``Ask`` (as ``Answer`` carries it)."""

    call: int
    ask: int
    result: msgspec.Raw = msgspec.Raw(b"\xc0")  # msgpack nil
    error: str = ""


WorkerCommand = Invoke | Heartbeat | Fetch | Abort | Answered


class Ready(_Message):
    """Worker -> supervisor: the session is initialized and these are all its tools."""

    tools: list[WorkerTool]
    server_pid: int | None = None
    server_name: str = ""
    server_version: str = ""


class Started(_Message):
    """Worker -> supervisor: the server process exists (sent before initialize, so its pid is known early)."""

    server_pid: int


class InvokeResult(_Message):
    call: int
    result: msgspec.Raw  # an encoded ToolResult


class InvokeFailed(_Message):
    call: int
    code: str  # one of ERROR_CODES (``is_error_code``); a str on the wire, as ``ErrorReply.code`` is
    message: str


class ToolsChanged(_Message):
    """Worker -> supervisor: the server's tools changed (it said so, or a refresh found it); all of them."""

    tools: list[WorkerTool]


class InvokeProgress(_Message):
    """A progress notification for a call whose ``Invoke`` asked for it (coalesced by the worker)."""

    call: int
    progress: float
    total: float | None = None
    message: str | None = None


class Ask(_Message):
    """Worker -> supervisor: the server asks ``method`` (of ``ASKABLE``) during ``call``, whose caller
    answers such requests; relayed to it as ``ServerRequest``, answered with ``Answered``."""

    call: int
    ask: int
    method: str
    params: msgspec.Raw


WorkerEvent = Started | Ready | InvokeResult | InvokeFailed | InvokeProgress | Heartbeat | ToolsChanged | Ask

_worker_command = msgspec.msgpack.Decoder(WorkerCommand)
_worker_event = msgspec.msgpack.Decoder(WorkerEvent)
decode_worker_command = total_decoder(_worker_command.decode)
decode_worker_event = total_decoder(_worker_event.decode)
HEARTBEAT: Final = encode(Heartbeat())  # the same bytes every time, both ways

# msgpack type bytes beyond the fixed ranges: how many bytes follow; (length width, bytes between the
# length and the payload) for strings, bin and ext; (count width, values per count) for containers.
_MP_FIXED: Final = {
    **{0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8},
    **{0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17},  # fixext: its type byte, then its data
}
_MP_SIZED: Final = {
    **{0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0), 0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1)},
    **{0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0)},
}
_MP_COUNTED: Final = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}
_MP_MAPS: Final = {0xDE: 2, 0xDF: 4}  # map16, map32: their count's width


def _skip_msgpack(data: bytes, pos: int) -> int:
    """Where the msgpack value at ``pos`` ends, found without recursion; raises ``ValueError`` or
    ``IndexError`` for bytes that are not one value."""
    remaining = 1
    while remaining:
        remaining -= 1
        kind = data[pos]
        pos += 1
        if kind <= 0x7F or kind >= 0xE0 or kind in (0xC0, 0xC2, 0xC3):
            continue
        if kind <= 0x8F:
            remaining += 2 * (kind & 0x0F)
        elif kind <= 0x9F:
            remaining += kind & 0x0F
        elif kind <= 0xBF:
            pos += kind & 0x1F
        elif kind in _MP_FIXED:
            pos += _MP_FIXED[kind]
        elif kind in _MP_SIZED:
            width, extra = _MP_SIZED[kind]
            pos += width + extra + int.from_bytes(data[pos : pos + width], "big")
        elif kind in _MP_COUNTED:
            width, per = _MP_COUNTED[kind]
            remaining += per * int.from_bytes(data[pos : pos + width], "big")
            pos += width
        else:
            raise ValueError(f"not msgpack: byte {kind:#x}")
        if pos > len(data):
            raise ValueError("truncated")
    return pos


def salvage_call(frame: bytes) -> tuple[str, int] | None:
    """The type tag and ``call`` of a worker command that does not decode (its arguments nested
    deeper than msgspec recurses, say), found by a scan of its top level that does not recurse, so
    the call can still be answered; None when the frame has no such fields."""
    try:
        head = frame[0]
        if 0x80 <= head <= 0x8F:
            pos, pairs = 1, head & 0x0F
        elif head in _MP_MAPS:
            width = _MP_MAPS[head]
            pos, pairs = 1 + width, int.from_bytes(frame[1 : 1 + width], "big")
        else:
            return None
        fields: dict[str, Any] = {}
        for _ in range(min(pairs, 64)):  # a command has a handful of fields
            end = _skip_msgpack(frame, pos)
            key = msgspec.msgpack.decode(frame[pos:end])
            pos, end = end, _skip_msgpack(frame, end)
            if key in ("type", "call"):
                fields[key] = msgspec.msgpack.decode(frame[pos:end])
            pos = end
    except (IndexError, ValueError, RecursionError):  # msgspec's DecodeError is a ValueError
        return None
    kind, call = fields.get("type"), fields.get("call")
    return (kind, call) if isinstance(kind, str) and type(call) is int else None
