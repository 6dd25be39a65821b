"""Behaviour of workers.values: a caller's arguments decode totally, into a JSON object or one error."""

from __future__ import annotations

import datetime
import math
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.values import MAX_ARGUMENT_DEPTH, InvalidArguments, decode_arguments, json_problem

JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text()
MSGPACK_SCALARS = JSON_SCALARS | st.binary() | st.datetimes(timezones=st.just(datetime.UTC))
MSGPACK_VALUES = st.recursive(
    MSGPACK_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text() | st.integers(-(2**63), 2**63 - 1) | st.booleans(), inner, max_size=4)
    ),
    max_leaves=30,
)


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def is_json(value: Any, depth: int = 1) -> bool:
    """The property, said recursively (fine for the small values generated)."""
    if depth > MAX_ARGUMENT_DEPTH:
        return False
    if isinstance(value, dict):
        return all(type(k) is str and is_json(v, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        return all(is_json(v, depth + 1) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str | int | bool)


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_are_an_arguments_object_or_invalid_arguments(data: bytes) -> None:
    try:
        arguments = decode_arguments(data)
    except InvalidArguments as exc:
        assert str(exc)
    else:
        assert type(arguments) is dict and is_json(arguments)


@settings(max_examples=1000, deadline=None)
@given(MSGPACK_VALUES)
def test_a_msgpack_value_decodes_exactly_when_it_is_a_json_object(value: Any) -> None:
    data = msgspec.msgpack.encode(value)
    expected = isinstance(value, dict) and is_json(value)
    try:
        arguments = decode_arguments(data)
    except InvalidArguments:
        assert not expected
    else:
        assert expected and arguments == value


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "arguments do not decode: Input data was truncated"),
        (b"\x80\x80", "arguments do not decode"),
        (b"\x81\xa4te", "arguments do not decode"),
        (b"\xc1", "arguments do not decode"),
        (b"\x81\xa1a\xa2\xff\xfe", "arguments do not decode: a string is not valid UTF-8"),
        (b"\x81\xa1a" * 5000 + b"\xc0", "arguments do not decode: nested too deeply"),
        (msgspec.msgpack.encode([1]), "arguments must be an object, not list"),
        (msgspec.msgpack.encode(None), "arguments must be an object, not NoneType"),
        (msgspec.msgpack.encode({1: 2}), "arguments: keys must be strings, not int"),
        (
            msgspec.msgpack.encode({"a": [{"b": {True: 1}}]}),
            "arguments/a/0/b: keys must be strings, not bool",
        ),
        (msgspec.msgpack.encode({"a": b"x"}), "arguments/a: bytes are not JSON"),
        (
            msgspec.msgpack.encode({"a": msgspec.msgpack.Ext(5, b"x")}),
            "arguments/a: msgpack extension type 5 is not JSON",
        ),
        (msgspec.msgpack.encode({"a": [math.inf]}), "arguments/a/0: inf is not JSON"),
        (
            msgspec.msgpack.encode(nested(MAX_ARGUMENT_DEPTH + 1)),
            "arguments are nested deeper than 64 levels",
        ),
    ],
)
def test_each_problem_is_named(data: bytes, problem: str) -> None:
    with pytest.raises(InvalidArguments) as caught:
        decode_arguments(data)
    assert str(caught.value).startswith(problem)


def test_arguments_nested_to_the_bound_decode() -> None:
    value = nested(MAX_ARGUMENT_DEPTH)
    assert decode_arguments(msgspec.msgpack.encode(value)) == value


def test_the_depth_check_does_not_recurse() -> None:
    deep: list[Any] = []
    for _ in range(100_000):  # far past the interpreter's recursion limit
        deep = [deep]
    assert json_problem(deep, 200_000, "x") is None
    assert json_problem(deep, 64, "x") == "x are nested deeper than 64 levels"


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 10**30])
def test_an_integer_past_64_bits_is_not_a_value_the_wire_carries(value: int) -> None:
    why = f"the integer {value} does not fit in 64 bits"
    assert json_problem({"a": [value]}, 10, "entry") == f"entry/a/0: {why}"
    assert json_problem(value, 10, "entry") == f"entry: {why}"
    assert json_problem({"a": [2**64 - 1, -(2**63)]}, 10, "entry") is None
