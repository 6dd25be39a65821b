"""Instances checked without jsonschema (``supervisor.shared.instance_quick``): what it proves valid,
jsonschema's validator accepts; what it does not prove is left to jsonschema, whose verdict stands."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.shared.instance_quick import proves_instance
from supervisor.shared.schema_quick import MAX_DEPTH
from supervisor.shared.schemas import Validators, validator


def valid(schema: Any, instance: Any) -> bool:
    """jsonschema's verdict, with the validator a worker builds (``supervisor.shared.schemas``)."""
    if isinstance(schema, bool):
        return schema
    check = validator(schema)
    assert check is not None
    return bool(check.is_valid(instance))


_names = st.sampled_from(["a", "b", "c", "d"])
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([0.5, 1.0, -1.0, 0.0, 2.0, 1e300, 2**70]),
    st.sampled_from(["", "x", "ab", "abc", "a b", "é", "1", "A"]),
)
instances = st.recursive(
    _scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(_names, children, max_size=4)),
    max_leaves=12,
)
_types = st.sampled_from(["null", "boolean", "integer", "number", "string", "array", "object", "x"])
_BOUNDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]
_COUNTS = ["minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"]
_IGNORED = ["description", "title", "default", "format", "examples", "x-vendor", "nullable"]
_DEFERRED = ["$ref", "$id", "patternProperties", "prefixItems", "dependencies", "if", "contains"]


def _keyword_values(children: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[str, Any]]:
    """A keyword and a value for it: mostly right, sometimes of the wrong type."""
    counts = st.one_of(st.integers(min_value=0, max_value=4), st.sampled_from([1.0, -1, True, "2"]))
    bounds = st.one_of(st.integers(min_value=-2, max_value=2), st.sampled_from([0.5, 1.0, True, "1"]))
    return st.one_of(
        st.tuples(st.just("type"), st.one_of(_types, st.lists(_types, max_size=3), st.just(3))),
        st.tuples(
            st.just("properties"), st.one_of(st.dictionaries(_names, children, max_size=3), st.just([]))
        ),
        st.tuples(st.just("required"), st.one_of(st.lists(_names, max_size=3), st.just([1]), st.just("a"))),
        st.tuples(st.just("additionalProperties"), children),
        st.tuples(st.just("items"), st.one_of(children, st.lists(children, max_size=2))),
        st.tuples(st.sampled_from(["allOf", "anyOf", "oneOf"]), st.lists(children, max_size=3)),
        st.tuples(st.just("not"), children),
        st.tuples(st.just("enum"), st.one_of(st.lists(instances, max_size=3), _scalars)),
        st.tuples(st.just("const"), instances),
        st.tuples(st.sampled_from(_BOUNDS), bounds),
        st.tuples(st.sampled_from(["multipleOf"]), st.sampled_from([1, 2, 3, 0.5, 0.1, True, 0, -2])),
        st.tuples(
            st.sampled_from(_COUNTS),
            counts,
        ),
        st.tuples(st.just("pattern"), st.sampled_from(["^a", "b$", "[", "\\d", "^$", 3])),
        st.tuples(st.just("uniqueItems"), st.sampled_from([True, False, 1])),
        st.tuples(
            st.sampled_from(_IGNORED),
            st.one_of(_scalars, st.just("email")),
        ),
        st.tuples(
            st.sampled_from(_DEFERRED),
            st.one_of(st.just("#/$defs/a"), st.just({"a": {}}), children),
        ),
        st.tuples(
            st.just("$schema"),
            st.sampled_from(
                [
                    "http://json-schema.org/draft-07/schema#",
                    "https://json-schema.org/draft/2020-12/schema",
                    "http://json-schema.org/draft-04/schema#",
                ]
            ),
        ),
    )


schemas = st.recursive(
    st.one_of(st.booleans(), st.just({}), st.fixed_dictionaries({"type": _types})),
    lambda children: st.lists(_keyword_values(children), max_size=5).map(dict),
    max_leaves=20,
)


@settings(max_examples=5000, deadline=None)
@given(schemas, instances)
def test_what_it_proves_valid_jsonschema_accepts(schema: Any, instance: Any) -> None:
    if proves_instance(schema, instance):
        assert valid(schema, instance), (schema, instance)


# Tool schemas as SDKs write them (pydantic, zod-to-json-schema), with arguments callers send.
PROVED = [
    ({"type": "object", "properties": {}}, {}),
    (
        {
            "type": "object",
            "properties": {"message": {"type": "string", "description": "Message to echo"}},
            "required": ["message"],
            "additionalProperties": False,
            "$schema": "http://json-schema.org/draft-07/schema#",
        },
        {"message": "hi"},
    ),
    (
        {
            "properties": {
                "repo_path": {"title": "Repo Path", "type": "string"},
                "max_count": {"default": 10, "title": "Max Count", "type": "integer", "minimum": 1},
                "files": {"items": {"type": "string"}, "title": "Files", "type": "array"},
                "mode": {"enum": ["a", "b"], "type": "string"},
                "when": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]},
            },
            "required": ["repo_path"],
            "title": "GitLog",
            "type": "object",
            "$defs": {"Item": {"type": "object", "properties": {"id": {"type": "integer"}}}},
        },
        {"repo_path": "/r", "max_count": 5, "files": ["a", "b"], "mode": "b", "when": None},
    ),
    (
        {
            "type": "object",
            "properties": {"query": {"type": "string", "pattern": "^[a-z ]+$", "minLength": 1}},
            "$schema": "https://json-schema.org/draft/2020-12/schema",
        },
        {"query": "two words", "extra": [1, {"x": None}]},
    ),
    ({"type": "object", "properties": {"n": {"type": "number", "multipleOf": 2}}}, {"n": 4}),
]


def test_the_common_arguments_are_proved_without_jsonschema() -> None:
    for schema, instance in PROVED:
        assert proves_instance(schema, instance), (schema, instance)
        assert valid(schema, instance)


def test_what_it_does_not_know_it_leaves_to_jsonschema() -> None:
    not_proved = [
        ({"type": "object", "properties": {"n": {"type": "integer"}}}, {"n": 1.0}),  # valid: 1.0 is integral
        ({"type": "object", "properties": {"x": {"$ref": "#/$defs/x"}}, "$defs": {"x": {}}}, {"x": 1}),
        ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, "x"),
        ({"type": "object", "patternProperties": {"^a": {}}, "additionalProperties": False}, {"a": 1}),
        ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}, {}),
        ({"type": "array", "uniqueItems": True}, [1, 2]),
        ({"enum": [[1]]}, [1]),
        ({"type": "number", "multipleOf": 0.1}, 0.3),
        ({"type": ["string", "strin"]}, "x"),
    ]
    for schema, instance in not_proved:
        assert not proves_instance(schema, instance), (schema, instance)
    assert valid(*not_proved[0]) and valid(*not_proved[1])
    invalid = [
        ({"type": "object", "required": ["a"]}, {}),
        ({"type": "object", "additionalProperties": False}, {"a": 1}),
        ({"type": "string", "maxLength": 1}, "ab"),
        ({"enum": [1]}, True),  # True is no 1 to jsonschema
        ({"const": None}, False),
    ]
    for schema, instance in invalid:
        assert not proves_instance(schema, instance), (schema, instance)
        assert not valid(schema, instance)


def nested(levels: int) -> tuple[dict[str, Any], dict[str, Any]]:
    schema: dict[str, Any] = {"type": "object"}
    instance: dict[str, Any] = {}
    for _ in range(levels):
        schema, instance = {"type": "object", "properties": {"a": schema}}, {"a": instance}
    return schema, instance


def test_deep_nesting_is_left_to_jsonschema() -> None:
    assert proves_instance(*nested(MAX_DEPTH))
    assert not proves_instance(*nested(MAX_DEPTH + 1))


def test_validators_prove_first_and_build_a_validator_only_for_what_is_not_proved() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    checks = Validators({"t": schema, "free": None})
    assert "t" in checks and "free" in checks and "other" not in checks
    assert checks.proves("t", {"n": 1}) and checks.proves("free", {"n": "anything"})
    assert not checks.proves("t", {"n": "x"})
    check = checks.get("t")
    assert check is not None and not check.is_valid({"n": "x"})
    checks.drop("t")
    assert checks.schema("t") is None and checks.get("t") is None and checks.proves("t", {"n": "x"})
    unproved = Validators({"r": {"type": "object", "$ref": "#/$defs/x", "$defs": {"x": {}}}})
    assert not unproved.proves("r", {}) and not unproved.proves("r", {})  # its verdict kept, still no


def test_checking_common_arguments_loads_no_jsonschema() -> None:
    script = (
        "import json, sys; from supervisor.shared.schemas import Validators; "
        f"cases = json.loads({json.dumps(json.dumps(PROVED))}); "
        "checks = Validators({str(i): s for i, (s, _) in enumerate(cases)}); "
        "assert all(checks.proves(str(i), a) for i, (_, a) in enumerate(cases)); "
        "print('jsonschema' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"
