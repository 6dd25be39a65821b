"""The config file's JSON, decoded totally, and what is wrong with it said in the file's terms.

Above: ``supervisor.config.load``, which parses the file with ``decode_json`` and ``fields_of``, checks
numbers with ``check_numbers``, and phrases its messages with these helpers: a msgspec message
turned into one naming the field as written (``explain``, with a "did you mean" for an unknown
field), a byte offset turned into a line and column (``position``), control characters escaped
(``escape``). Below: msgspec, and the data model (``supervisor.config.model``) whose fields the
messages name.
"""

import math
import re
from collections.abc import Callable
from typing import Any

import msgspec

from supervisor.config.audit_entry import AuditConfig
from supervisor.config.model import RootEntry, SamplingHook, ServerConfig
from supervisor.config.restart_policy import POLICY_KEYS

__all__ = ["Malformed", "check_numbers", "decode_json", "escape", "explain", "fields_of"]
__all__ += ["got", "nesting", "position", "with_position"]

_AT_RE = re.compile(r"(?P<text>.*?)(?: - at `\$(?P<path>[^`]*)`)?", re.DOTALL)
_GOT_RE = re.compile(r"got `([^`]*)`")
_INT_RANGE = range(-(2**63), 2**63)  # what msgpack carries; a larger integer is a typo, never a setting


def got(message: object) -> str:
    match = _GOT_RE.search(str(message))
    return match.group(1) if match else "something else"


def with_position(message: str, data: bytes) -> str:
    match = re.search(r"\(byte (\d+)\)", message)
    if match is None:
        return "unexpected end of file" if "truncated" in message else message
    return message.replace(match.group(0), f"({position(data, int(match.group(1)))})")


class Malformed(msgspec.DecodeError):
    """Bytes msgspec cannot even skip (too deep, or a string not UTF-8); as
    ``supervisor.protocol.MalformedMessage``, kept apart: the config needs nothing of the wire."""


def decode_json(data: bytes, type: Any = Any) -> Any:
    """``msgspec.json.decode``, total: invalid UTF-8 and deep nesting are ``Malformed`` (a DecodeError)."""
    try:
        return msgspec.json.decode(data, type=type)
    except UnicodeDecodeError as exc:
        raise Malformed(f"a string is not valid UTF-8 ({exc.reason})") from None
    except RecursionError:
        raise Malformed("nested too deeply") from None


def fields_of(raw: bytes, fail: Callable[[str], Exception]) -> Any:
    """A JSON value; a number out of range (``1e999``, which msgspec will not make ``inf``) is reported
    through ``fail`` naming the top-level field it is in."""
    try:
        return decode_json(raw)
    except msgspec.ValidationError as exc:  # the only one decoding to Any raises: "Number out of range"
        try:
            fields = decode_json(raw, dict[str, msgspec.Raw])
        except msgspec.ValidationError:
            raise fail(explain(str(exc))) from None
        for key, value in fields.items():
            try:
                decode_json(value)
            except msgspec.ValidationError:
                raise fail(f"field {key!r}: number out of range") from None
        raise fail(explain(str(exc))) from None


def check_numbers(value: msgspec.Struct, fail: Callable[[str], Exception], prefix: str = "") -> None:
    """Every float of ``value`` (and of structs in it) is finite, every int fits in 64 bits."""
    for info in msgspec.structs.fields(value):
        item = getattr(value, info.name)
        name = f"{prefix}{info.encode_name}"
        if isinstance(item, msgspec.Struct):
            check_numbers(item, fail, f"{name}.")
        elif isinstance(item, float) and not math.isfinite(item):
            raise fail(f"field {name!r}: must be a finite number of seconds, got {item}")
        elif isinstance(item, int) and not isinstance(item, bool) and item not in _INT_RANGE:
            raise fail(f"field {name!r}: number out of range")


def escape(text: str) -> str:
    """``text`` with every non-printable character (newline, escape, ...) as its Python escape, so a
    message never carries control characters into a log or a terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def nesting(data: bytes) -> tuple[int, int]:
    """How deeply arrays and objects nest in JSON text, and the offset where that depth is first reached."""
    depth = deepest = where = 0
    in_string = escaped = False
    for offset, byte in enumerate(data):
        if in_string:
            escaped, in_string = (False, True) if escaped else (byte == 0x5C, byte != 0x22)  # \ and "
        elif byte == 0x22:
            in_string = True
        elif byte in b"[{":
            depth += 1
            if depth > deepest:
                deepest, where = depth, offset
        elif byte in b"]}":
            depth -= 1
    return deepest, where


def position(data: bytes, offset: int) -> str:
    line, line_start = data.count(b"\n", 0, offset) + 1, data.rfind(b"\n", 0, offset) + 1
    column = len(data[line_start:offset].decode("utf-8", "replace")) + 1
    return f"line {line}, column {column}"


_NESTED: dict[str, type[msgspec.Struct]] = {
    "roots": RootEntry,
    "sampling": SamplingHook,
    "audit": AuditConfig,
}


def explain(message: str, struct: type[msgspec.Struct] = ServerConfig) -> str:
    """Turn a msgspec validation message into one that names the field in the file."""
    match = _AT_RE.fullmatch(message)
    text, path = (match.group("text"), (match.group("path") or "").lstrip(".")) if match else (message, "")
    unknown = re.fullmatch(r"Object contains unknown field `(.*)`", text, re.DOTALL)
    if unknown:
        name = unknown.group(1)
        nested = _NESTED.get(re.split(r"[.\[]", path)[0]) if path else None
        known = [f.encode_name for f in msgspec.structs.fields(nested or struct)]
        known += [] if nested else sorted(POLICY_KEYS)
        import difflib  # only for a config with a mistake in it

        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known fields: {', '.join(known)}"
        return f"unknown field {name!r}{f' in {path}' if path else ''} ({hint})"
    text = escape(text.replace("`", "'"))
    text = text[:1].lower() + text[1:]
    if path and path != "[...]":  # "[...]": a key of a mapping msgspec does not name
        return f"field {path!r}: {text}"
    return (
        f"entry must be a JSON object, got {got(message)}" if text.startswith("expected 'object'") else text
    )
