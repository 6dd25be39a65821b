"""Bytes nobody polite would send: raw msgpack builders and Hypothesis strategies for the decoders' tests.

``mp_str`` writes a msgpack string around any bytes (UTF-8 or not), ``deep`` nests arrays; the
strategies generate arbitrary msgpack trees (any value msgpack can hold, strings that are not UTF-8,
keys that are not strings) and front requests of the right tags with fields of the wrong shapes.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import strategies as st

__all__ = [
    "FRONT_TAGS",
    "deep",
    "front_like",
    "json_values",
    "mp",
    "mp_array",
    "mp_map",
    "mp_str",
    "msgpack_tree",
]

# Every front request but those that change what runs (Stop, Restart, Start, Reload): a fuzzer that
# stops the server it then checks proves nothing. (A Cancel touches only its sender's own requests.)
FRONT_TAGS = (
    "ListTools",
    "CallTool",
    "GetStatus",
    "Ping",
    "ListResources",
    "ListResourceTemplates",
    "ListPrompts",
    "ReadResource",
    "GetPrompt",
    "Cancel",
)
FIELDS = ("id", "name", "arguments", "timeout", "progress", "server", "uri", "type")


def mp(value: Any) -> bytes:
    return msgspec.msgpack.encode(value)


def mp_str(data: bytes) -> bytes:
    """A msgpack str holding ``data`` as it is (valid UTF-8 or not)."""
    if len(data) < 32:
        return bytes([0xA0 | len(data)]) + data
    if len(data) < 1 << 8:
        return b"\xd9" + bytes([len(data)]) + data
    if len(data) < 1 << 16:
        return b"\xda" + len(data).to_bytes(2, "big") + data
    return b"\xdb" + len(data).to_bytes(4, "big") + data


def mp_array(items: list[bytes]) -> bytes:
    """A msgpack array of already encoded items."""
    head = bytes([0x90 | len(items)]) if len(items) < 16 else b"\xdc" + len(items).to_bytes(2, "big")
    return head + b"".join(items)


def mp_map(*pairs: tuple[bytes, bytes]) -> bytes:
    """A msgpack map of already encoded keys and values."""
    head = bytes([0x80 | len(pairs)]) if len(pairs) < 16 else b"\xde" + len(pairs).to_bytes(2, "big")
    return head + b"".join(key + value for key, value in pairs)


def deep(levels: int, leaf: bytes = b"\xc0") -> bytes:
    """``levels`` nested one-element arrays around ``leaf`` (nil): 1000 levels is 1 KB."""
    return b"\x91" * levels + leaf


_leaves = st.one_of(
    st.none().map(mp),
    st.booleans().map(mp),
    st.integers(min_value=-(2**63), max_value=2**64 - 1).map(mp),
    st.floats().map(mp),  # nan and the infinities too
    st.text(max_size=20).map(mp),
    st.binary(max_size=20).map(mp),  # msgpack bin: not JSON
    st.binary(max_size=20).map(mp_str),  # a string that is usually not UTF-8
    st.builds(
        lambda code, data: mp(msgspec.msgpack.Ext(code, data)), st.integers(0, 127), st.binary(max_size=8)
    ),
)


def msgpack_tree(max_leaves: int = 30) -> st.SearchStrategy[bytes]:
    """Any msgpack value, encoded: nested arrays and maps (with keys of any kind) of any leaves."""
    return st.recursive(
        _leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=5).map(mp_array),
            st.lists(st.tuples(children, children), max_size=5).map(lambda pairs: mp_map(*pairs)),
        ),
        max_leaves=max_leaves,
    )


@st.composite
def front_like(draw: st.DrawFn) -> bytes:
    """A map tagged as a front request, its fields any mix of right names, wrong names and wrong shapes."""
    tag = draw(st.sampled_from(FRONT_TAGS))
    names = st.one_of(
        st.sampled_from(FIELDS).map(mp), st.text(max_size=8).map(mp), st.binary(max_size=8).map(mp_str)
    )
    values = st.one_of(msgpack_tree(10), st.integers(0, 2**31).map(mp), st.text(max_size=30).map(mp))
    fields = draw(st.lists(st.tuples(names, values), max_size=6))
    position = draw(st.integers(0, len(fields)))
    fields.insert(position, (mp("type"), mp(tag)))
    return mp_map(*fields)


def json_values(max_leaves: int = 10) -> st.SearchStrategy[object]:
    """Any JSON value (finite numbers, short strings, small arrays and objects)."""
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=max_leaves,
    )
