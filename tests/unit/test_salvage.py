"""Behaviour of supervisor.protocol.salvage_call: the call id of a command too deep to decode is still
found (so the worker answers it), by a scan that never recurses and never raises."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.protocol import Fetch, Heartbeat, Invoke, decode_worker_command, encode, salvage_call

VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=300)
    | st.binary(max_size=300),
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=5), inner, max_size=20),
    max_leaves=80,
)


def deep(levels: int) -> bytes:
    return b"\x91" * levels + b"\xc0"


@settings(max_examples=500, deadline=None)
@given(VALUES, st.integers(0, 2**63 - 1))
def test_the_call_of_any_invoke_is_found(arguments: Any, call: int) -> None:
    invoke = Invoke(call=call, tool="t", arguments=msgspec.Raw(msgspec.msgpack.encode(arguments)), budget=1.5)
    assert salvage_call(encode(invoke)) == ("Invoke", call)


@pytest.mark.parametrize("levels", [1000, 100_000])
def test_the_call_is_found_past_any_nesting_the_decoder_takes(levels: int) -> None:
    frame = encode(Invoke(call=42, tool="t", arguments=msgspec.Raw(deep(levels)), budget=1.0))
    with pytest.raises(msgspec.DecodeError):
        decode_worker_command(frame)
    assert salvage_call(frame) == ("Invoke", 42)
    fetch = encode(Fetch(call=43, method="prompts/get", budget=1.0, arguments=msgspec.Raw(deep(levels))))
    assert salvage_call(fetch) == ("Fetch", 43)


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_give_a_call_or_none(frame: bytes) -> None:
    found = salvage_call(frame)
    assert found is None or (isinstance(found[0], str) and type(found[1]) is int)


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        encode(Heartbeat()),
        msgspec.msgpack.encode([1, 2]),
        msgspec.msgpack.encode({"type": "Invoke", "call": "7"}),
        msgspec.msgpack.encode({"type": "Invoke", "call": True}),
        msgspec.msgpack.encode({"type": "Invoke", "call": 7})[:-1],  # truncated
        b"\x82\xa4type\xa6Invoke\xa4call\xc1",  # a byte msgpack never uses
        b"\xdf\xff\xff\xff\xff",  # a map that claims four billion pairs
    ],
)
def test_a_frame_without_a_call_gives_none(frame: bytes) -> None:
    assert salvage_call(frame) is None
