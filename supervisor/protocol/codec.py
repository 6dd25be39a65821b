"""The base of every wire message, the error codes, and the codecs every link shares.

Messages are msgpack, tagged by class name. New fields always get defaults, so an older peer still
decodes a newer message (unknown fields are skipped). Every decoder is made total by
``total_decoder``: any bytes at all end in a ``msgspec.DecodeError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Final, Literal, TypeGuard, TypeVar

import msgspec

ErrorCode = Literal[
    "UNKNOWN_TOOL",  # no tool of that name in the registry (or no such prompt, or server)
    "UNAVAILABLE",  # the server exists but is not ready (starting, restarting, failed, stopped)
    "TIMEOUT",  # the call's budget ran out; the server was sent notifications/cancelled
    "TOOL_ERROR",  # reserved for callers: the server answered with isError (a result, not an error reply)
    "SERVER_ERROR",  # the MCP server answered with a JSON-RPC error
    "WORKER_CRASHED",  # the worker or its MCP server died while the call was in flight
    "INVALID_ARGUMENTS",  # arguments are not an object, or the server rejected them as invalid params
    "OVERLOADED",  # too many calls in flight
    "BAD_REQUEST",  # a frame that does not decode, or a request that makes no sense
    "INTERNAL",  # a bug in mcp-supervisor; the message says where
    "CANCELLED",  # the caller cancelled the request (``Cancel``); its server was told to cancel it
]
ERROR_CODES: Final[frozenset[str]] = frozenset(ErrorCode.__args__)  # type: ignore[attr-defined]


def is_error_code(code: str) -> TypeGuard[ErrorCode]:
    """Whether a code read off the wire (a ``str`` there, so that a newer peer's code still decodes)
    is one this version knows."""
    return code in ERROR_CODES


WorkerState = Literal["starting", "ready", "restarting", "failed", "stopped", "needs-login"]
STATE_PRECEDENCE: Final[tuple[WorkerState, ...]] = (
    "ready",
    "starting",
    "restarting",
    "needs-login",
    "failed",
    "stopped",
)
"""The states, best first: a pool's state is its best worker's, and summaries list them in this order."""
StateName = Annotated[str, msgspec.Meta(extra={"open_enum": "WorkerState"})]
"""A ``WorkerState`` as the status rows and state events carry it: any string decodes, so that a state
a newer supervisor adds does not make an older client's decoder refuse the whole message."""


class _Message(msgspec.Struct, tag=True, kw_only=True, omit_defaults=True):
    """Base of every wire message; the tag is the class name."""


_encoder = msgspec.msgpack.Encoder()
encode = _encoder.encode

_T = TypeVar("_T")


class MalformedMessage(msgspec.DecodeError):
    """Bytes from another process that are not a message of the kind expected there.

    Every decoder of this module raises it (or another ``msgspec.DecodeError``) for *any* input that
    is not such a message: wrong shape, invalid UTF-8 in a string, nesting deeper than the
    interpreter's recursion limit. Each edge answers it with its own documented error, so a peer's
    bytes can never end the process that reads them."""


def total_decoder(decode: Callable[[bytes], _T]) -> Callable[[bytes], _T]:
    """``decode`` (a msgspec decoder's ``decode``), made total: every failure is a ``DecodeError``.

    msgspec raises ``UnicodeDecodeError`` for a string that is not UTF-8 and ``RecursionError`` for
    deep nesting (about 1000 levels, e.g. 7 KB of ``[[[[...``), neither a ``DecodeError``."""

    def decode_total(data: bytes) -> _T:
        try:
            return decode(data)
        except UnicodeDecodeError as exc:
            raise MalformedMessage(f"a string is not valid UTF-8 ({exc.reason})") from None
        except RecursionError:
            raise MalformedMessage("nested too deeply") from None

    return decode_total
