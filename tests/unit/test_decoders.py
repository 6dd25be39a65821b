"""Every decoder of bytes from another process is total: any input decodes or raises ``msgspec.DecodeError``.

Hypothesis throws arbitrary bytes, arbitrary msgpack (strings that are not UTF-8, keys that are not
strings, bin and ext values, nan) and front requests with fields of the wrong shapes at each decoder
of ``supervisor.protocol``, and at the salvage of a malformed request's id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.daemon.front_door import _salvage_id
from supervisor.protocol import (
    MalformedMessage,
    decode_event,
    decode_front_reply,
    decode_front_request,
    decode_worker_command,
    decode_worker_event,
)
from supervisor.shared.boot import decode_worker_boot
from tests.hostile import deep, front_like, mp, mp_map, mp_str, msgpack_tree

DECODERS: dict[str, Callable[[bytes], Any]] = {
    "front request": decode_front_request,
    "front reply": decode_front_reply,
    "worker command": decode_worker_command,
    "worker event": decode_worker_event,
    "event": decode_event,
    "worker boot line": decode_worker_boot,
}
FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
inputs = st.one_of(st.binary(max_size=300), msgpack_tree(), front_like())


def decodes_or_says_why(decode: Callable[[bytes], Any], data: bytes) -> None:
    try:
        decode(data)
    except msgspec.DecodeError as exc:
        assert str(exc), "a decode error must say what was wrong"


@pytest.mark.parametrize("edge", list(DECODERS))
@FUZZ
@given(data=inputs)
def test_any_bytes_decode_or_raise_decode_error(edge: str, data: bytes) -> None:
    decodes_or_says_why(DECODERS[edge], data)


@FUZZ
@given(data=inputs)
def test_the_id_of_any_malformed_request_is_salvaged_or_zero(data: bytes) -> None:
    assert isinstance(_salvage_id(data), int)


@pytest.mark.parametrize("levels", [500, 1000, 3000, 100_000])
@pytest.mark.parametrize("edge", list(DECODERS))
def test_deep_nesting_anywhere_is_a_decode_error(edge: str, levels: int) -> None:
    decode = DECODERS[edge]
    for data in (
        deep(levels),
        mp_map((mp("type"), mp("Ping")), (mp("id"), mp(1)), (mp("unknown"), deep(levels))),
        mp_map((mp("x"), deep(levels)), (mp("type"), mp("Nope"))),
        b"[" * levels + b"]" * levels,  # the boot line is JSON
    ):
        decodes_or_says_why(decode, data)


@pytest.mark.parametrize(
    "data",
    [
        mp_map((mp("type"), mp("CallTool")), (mp("id"), mp(6)), (mp("name"), mp_str(b"\xff\xfe"))),
        mp_map((mp("id"), mp(7)), (mp("type"), mp_str(b"\xc3\x28"))),
    ],
)
def test_a_string_that_is_not_utf8_is_a_malformed_message_naming_it(data: bytes) -> None:
    with pytest.raises(MalformedMessage, match="not valid UTF-8"):
        decode_front_request(data)


def test_a_boot_line_that_is_not_utf8_is_a_decode_error() -> None:
    with pytest.raises(msgspec.DecodeError):
        decode_worker_boot(b'{"server": "\xff"}\n')
