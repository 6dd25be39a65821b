"""JSON values from other processes, checked without recursion: a caller's arguments and a server's
listing entries.

Above: ``workers.calls`` (a tool call's arguments), ``workers.catalog`` (a prompt's arguments) and
``workers.listing`` (each entry of a server's listing). Below: msgspec.

A caller's arguments arrive as msgpack bytes the supervisor relayed untouched (``msgspec.Raw``).
``decode_arguments`` is total: any bytes give either a dict of JSON values or ``InvalidArguments``
naming the problem (bytes that are not one msgpack value, invalid UTF-8, not a map, a key that is
not a string, a value JSON cannot carry: msgpack bin, ext and timestamps, NaN and infinities), and
nothing nested deeper than ``MAX_ARGUMENT_DEPTH``: deeper would let jsonschema validation or JSON
encoding hit Python's recursion limit. The check is one iterative walk (about a microsecond for
small arguments: this is every call's path).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable
from typing import Any, Final

import msgspec

from supervisor.protocol import total_decoder

__all__ = ["MAX_ARGUMENT_DEPTH", "InvalidArguments", "decode_arguments", "json_problem"]

MAX_ARGUMENT_DEPTH: Final = 64  # levels of objects and arrays in arguments (the arguments object is one)

_decode_msgpack = total_decoder(msgspec.msgpack.Decoder().decode)
_SCALARS: Final = frozenset({str, int, bool, type(None)})
_INT_RANGE: Final = range(-(2**63), 2**64)  # what msgpack (the wire to the supervisor) can carry


class InvalidArguments(Exception):
    """Arguments that are not a JSON object; the message says why (for INVALID_ARGUMENTS)."""


def decode_arguments(raw: bytes | msgspec.Raw) -> dict[str, Any]:
    """The arguments object encoded in ``raw``; raises ``InvalidArguments``, and nothing else."""
    try:
        arguments: Any = _decode_msgpack(raw)
    except msgspec.DecodeError as exc:
        raise InvalidArguments(f"arguments do not decode: {exc}") from None
    if type(arguments) is not dict:
        raise InvalidArguments(f"arguments must be an object, not {type(arguments).__name__}")
    if problem := json_problem(arguments, MAX_ARGUMENT_DEPTH, "arguments"):
        raise InvalidArguments(problem)
    return arguments


def json_problem(value: Any, max_depth: int, name: str) -> str | None:
    """Why ``value`` (called ``name``) is not a JSON value nested at most ``max_depth`` levels, or None.

    Objects must have string keys; a value is an object (dict), an array (list), a string, a finite
    number (an integer within 64 bits, as msgpack carries them), a boolean or null. The walk keeps its
    own stack, so any depth is safe to check.
    """
    if type(value) not in (dict, list):
        return _scalar_problem(value, name)
    stack: list[tuple[dict[Any, Any] | list[Any], int, str]] = [(value, 1, name)]
    while stack:
        node, depth, where = stack.pop()
        if depth > max_depth:
            return f"{name} are nested deeper than {max_depth} levels"
        pairs: Iterable[tuple[Any, Any]]
        if type(node) is dict:
            for key in node:
                if type(key) is not str:
                    return f"{where}: keys must be strings, not {type(key).__name__}"
            pairs = node.items()
        else:
            pairs = enumerate(node)
        for key, item in pairs:
            kind = type(item)
            if kind in _SCALARS:
                if kind is int and item not in _INT_RANGE:
                    return f"{where}/{key}: the integer {item} does not fit in 64 bits"
                continue
            if kind is dict or kind is list:
                stack.append((item, depth + 1, f"{where}/{key}"))
            elif problem := _scalar_problem(item, f"{where}/{key}"):
                return problem
    return None


def _scalar_problem(value: Any, where: str) -> str | None:
    kind = type(value)
    if kind is int and value not in _INT_RANGE:
        return f"{where}: the integer {value} does not fit in 64 bits"
    if kind in _SCALARS or (kind is float and math.isfinite(value)):
        return None
    if kind is float:
        return f"{where}: {value!r} is not JSON"
    if kind is bytes:
        return f"{where}: bytes are not JSON"
    if kind is msgspec.msgpack.Ext:
        return f"{where}: msgpack extension type {value.code} is not JSON"
    if kind is datetime.datetime:
        return f"{where}: a timestamp is not JSON"
    return f"{where}: {kind.__name__} is not JSON"
