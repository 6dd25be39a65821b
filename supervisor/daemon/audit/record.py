"""One request's line of the audit trail: what is noted when it arrives (``Opened``) and the JSON line
written when its terminal reply goes out (``line``).

Above: the trail (``supervisor.daemon.audit.trail``), which opens a record for each ``CallTool``,
``ReadResource`` and ``GetPrompt`` and closes it with the reply. Below: msgspec and hashlib.

A line is one compact JSON object, its keys in this order: ``time`` (when the request arrived, UTC,
ISO 8601 with milliseconds and ``Z``), ``identity``, ``session``, ``kind`` (``call``, ``read``,
``prompt``), ``tool`` (the prefixed tool or prompt name as asked, or the resource URI), ``server``
(where it was routed; ``""`` when nowhere), ``outcome`` (``ok``; ``tool_error`` for a tool's result with
``isError``; the error code of the reply, e.g. ``UNKNOWN_TOOL``; ``dropped`` when no reply was sent:
its caller did not read its replies, or the supervisor stopped first), ``ms`` (arrival to reply, 3
decimals), ``argBytes`` and ``resultBytes`` (the sizes of the payloads as relayed), ``argDigest``
(``sha256:`` and the hex digest of the argument payload as received; ``""`` for a read, which has
none) and, only for a server whose config says ``"auditArguments": true``, ``arguments`` (decoded).

Never a newline inside a line (JSON escapes it); a string that cannot be encoded as UTF-8 (a lone
surrogate) has it replaced by U+FFFD. A result is never decoded: its ``isError`` flag is read by a
decoder that skips every other field, as the call meter does.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec

from supervisor.protocol import CallResult, CallTool, ErrorReply, FrontReply, GetPrompt, ReadResource

__all__ = ["AUDITED", "Kind", "Opened", "arguments_json", "digest", "iso_time", "line", "outcome_of"]

Kind = Literal["call", "read", "prompt"]
AUDITED: Final[dict[type, Kind]] = {CallTool: "call", ReadResource: "read", GetPrompt: "prompt"}
"""The requests the trail records, and the ``kind`` each one's line says."""

DROPPED: Final = "dropped"  # the outcome of a request that got no reply


class _Line(msgspec.Struct, omit_defaults=True):
    """A line as written: its fields in the trail's key order."""

    time: str
    identity: str
    session: str
    kind: str
    tool: str
    server: str
    outcome: str
    ms: float
    argBytes: int
    resultBytes: int
    argDigest: str
    arguments: msgspec.Raw = msgspec.Raw(b"")  # JSON, with ``auditArguments`` only


@dataclass(slots=True)
class Opened:
    """A request being answered: what its line will say but the outcome and the duration."""

    arrived: float  # seconds since the epoch
    started: float  # the monotonic clock then
    identity: str
    session: str
    kind: Kind
    tool: str
    server: str
    arg_bytes: int = 0
    arg_digest: str = ""
    arguments: bytes = b""  # the arguments as JSON, with ``auditArguments`` only


class _Flag(msgspec.Struct):
    is_error: bool = False  # a ToolResult's flag (omitted when false); every other field is skipped


_decode_flag = msgspec.msgpack.Decoder(_Flag).decode
_encode = msgspec.json.encode


def outcome_of(reply: CallResult | ErrorReply, kind: Kind) -> tuple[str, int]:
    """A terminal reply's outcome and the size of its result payload (0 for an error)."""
    if type(reply) is ErrorReply:
        return reply.code, 0
    assert type(reply) is CallResult
    size = len(reply.result)
    if kind == "call":
        try:
            if _decode_flag(reply.result).is_error:
                return "tool_error", size
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            pass  # not a result this version reads: relayed as it came, and called ok
    return "ok", size


def digest(payload: msgspec.Raw | bytes) -> str:
    """``sha256:`` and the hex digest of a payload's bytes, as received."""
    return "sha256:" + hashlib.sha256(payload).hexdigest()


def arguments_json(payload: msgspec.Raw) -> bytes:
    """Msgpack arguments as JSON (bytes become base64, other keys strings); a value JSON cannot hold
    (an extension type, a map keyed by a map) or bytes that do not decode give a JSON string saying so."""
    try:
        return _encode(msgspec.msgpack.decode(payload))
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return b'"<arguments that do not decode as msgpack>"'
    except (TypeError, msgspec.EncodeError, UnicodeEncodeError):
        return b'"<arguments JSON cannot hold>"'


_second: list[Any] = [None, ""]  # the last whole second formatted, and its text (most lines share it)


def iso_time(seconds: float) -> str:
    """A time since the epoch in UTC, ISO 8601 with milliseconds: ``2025-05-01T12:00:00.250Z``."""
    whole = int(seconds)
    millis = min(int((seconds - whole) * 1000), 999)
    if _second[0] != whole:
        _second[:] = whole, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(whole))
    return f"{_second[1]}{millis:03d}Z"


def line(opened: Opened, outcome: str, seconds: float, result_bytes: int) -> bytes:
    """The request's line, with its newline."""
    record = _Line(
        time=iso_time(opened.arrived),
        identity=opened.identity,
        session=opened.session,
        kind=opened.kind,
        tool=opened.tool,
        server=opened.server,
        outcome=outcome,
        ms=round(seconds * 1000, 3),
        argBytes=opened.arg_bytes,
        resultBytes=result_bytes,
        argDigest=opened.arg_digest,
    )
    if opened.arguments:
        record.arguments = msgspec.Raw(opened.arguments)
    try:
        return _encode(record) + b"\n"
    except UnicodeEncodeError:  # a lone surrogate, from a caller in this process: made U+FFFD
        for field in ("identity", "session", "tool", "server", "outcome"):
            setattr(record, field, _utf8(getattr(record, field)))
        return _encode(record) + b"\n"


def _utf8(text: str) -> str:
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def is_terminal(reply: FrontReply) -> bool:
    """Whether a reply ends a call, read or prompt (progress and server requests do not)."""
    return type(reply) is CallResult or type(reply) is ErrorReply
