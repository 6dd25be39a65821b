"""Behaviour of supervisor.protocol.salvage_call and the front door's id salvage: the call id of a
command, and the id of a request, too deep to decode are still found (so the answer can be matched),
by a scan (supervisor.protocol.scan) that never recurses, never raises and has a bounded cost."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.daemon.front_door import _salvage_id
from supervisor.protocol import (
    Fetch,
    Heartbeat,
    Invoke,
    decode_front_request,
    decode_worker_command,
    encode,
    salvage_call,
)
from supervisor.protocol.scan import SCAN_BUDGET, top_level_fields

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


# ---------------------------------------------------------------- the front door's request id


def front_map(*pairs: tuple[bytes, bytes]) -> bytes:
    return bytes([0x80 | len(pairs)]) + b"".join(key + value for key, value in pairs)


def mp(value: Any) -> bytes:
    return msgspec.msgpack.encode(value)


@pytest.mark.parametrize("levels", [1000, 5000])
def test_the_id_of_a_request_too_deep_to_decode_is_found_before_or_after_the_deep_part(levels: int) -> None:
    before = front_map((mp("type"), mp("Ping")), (mp("id"), mp(7)), (mp("x"), deep(levels)))
    after = front_map((mp("type"), mp("Ping")), (mp("x"), deep(levels)), (mp("id"), mp(8)))
    for frame, id in ((before, 7), (after, 8)):
        with pytest.raises(msgspec.DecodeError):
            decode_front_request(frame)
        assert _salvage_id(frame) == id


def test_the_id_beside_a_key_that_is_not_a_string_is_found() -> None:
    assert _salvage_id(front_map((mp("type"), mp("Ping")), (mp("id"), mp(12)), (mp(3), mp(1)))) == 12


def test_an_id_past_the_scan_budget_is_not_looked_for() -> None:
    """A hostile frame costs a bounded scan: past SCAN_BUDGET items, the id is given up (0)."""
    wide = b"\xdd" + (SCAN_BUDGET + 10).to_bytes(4, "big") + b"\xc0" * (SCAN_BUDGET + 10)
    frame = front_map((mp("x"), deep(2000)), (mp("y"), wide), (mp("id"), mp(9)))
    assert _salvage_id(frame) == 0
    assert top_level_fields(frame, ("id",), budget=SCAN_BUDGET * 3) == {"id": 9}


@pytest.mark.parametrize(
    ("id", "found"), [("nine", 0), (1.5, 0), (True, 0), (2**64 - 1, 2**64 - 1), (-(2**63), -(2**63))]
)
def test_only_an_integer_id_is_salvaged(id: Any, found: int) -> None:
    assert _salvage_id(front_map((mp("id"), mp(id)), (mp("x"), deep(2000)))) == found


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_give_an_integer_id(frame: bytes) -> None:
    assert type(_salvage_id(frame)) is int
    assert isinstance(top_level_fields(frame, ("id", "type")), dict)


@settings(max_examples=300, deadline=None)
@given(VALUES, st.integers(-(2**63), 2**64 - 1))
def test_the_scan_reads_what_msgspec_reads(value: Any, id: int) -> None:
    frame = front_map((mp("v"), mp(value)), (mp("id"), mp(id)))
    # compared as msgpack: nan is not equal to itself
    assert mp(top_level_fields(frame, ("id", "v"))) == mp(msgspec.msgpack.decode(frame))
