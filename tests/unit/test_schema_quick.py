"""The schema check without jsonschema (``supervisor.shared.schema_quick``): what it proves valid,
jsonschema accepts; what it does not prove is left to jsonschema, whose verdict stands."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from typing import Any

import jsonschema.validators
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from supervisor.shared.schema_quick import DRAFTS, MAX_DEPTH, proves_valid
from supervisor.shared.schemas import json_schema_problem, schema_problem, validator_class


def accepted(schema: dict[str, Any]) -> bool:
    """jsonschema's verdict, read as ``supervisor.shared.schemas`` reads a schema."""
    cls = validator_class(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError:
        return False
    return True


# Values of every kind, right and wrong for each keyword: numbers as int, float, bool, strings.
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([0.5, 1.0, -1.0, 0.0, float("inf"), float("nan")]),
    st.sampled_from(["", "x", "object", "string", "integer", "strin", "a(", "^[a-z]+$", "[", "\\d"]),
)
_keys = st.sampled_from(
    [
        "type", "properties", "required", "items", "additionalProperties", "enum", "const",
        "default", "description", "title", "$comment", "format", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "minItems",
        "maxItems", "minProperties", "maxProperties", "uniqueItems", "pattern", "anyOf", "oneOf",
        "allOf", "not", "$defs", "definitions", "examples", "deprecated", "readOnly", "writeOnly",
        "contains", "propertyNames", "$ref", "dependencies", "prefixItems", "if", "$id", "$schema",
        "x-vendor", "nullable", "discriminator",
    ]
)  # fmt: skip


def _values(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        _scalars,
        children,
        st.lists(st.one_of(_scalars, children), max_size=3),
        st.lists(
            st.sampled_from(["array", "boolean", "integer", "null", "number", "object", "string", "x"]),
            max_size=3,
        ),
        st.dictionaries(st.sampled_from(["a", "b", "c"]), children, max_size=3),
        st.sampled_from([*sorted(DRAFTS), "http://json-schema.org/draft-04/schema#", "urn:x"]),
    )


schemas = st.recursive(
    st.one_of(
        st.booleans(), st.just({}), st.fixed_dictionaries({"type": st.sampled_from(["string", "object"])})
    ),
    lambda children: st.dictionaries(_keys, _values(children), max_size=6),
    max_leaves=25,
)


@settings(max_examples=3000, deadline=None)
@given(schemas)
def test_what_it_proves_valid_jsonschema_accepts(schema: Any) -> None:
    if proves_valid(schema):
        assert accepted(schema), schema


@settings(max_examples=500, deadline=None)
@given(schemas)
def test_the_verdict_is_jsonschemas_whether_proved_or_not(schema: Any) -> None:
    # A schema comes from JSON, which has no inf or NaN (the verdicts are kept by the schema's JSON).
    assume(_finite(schema))
    if isinstance(schema, dict):
        assert (json_schema_problem(schema) is None) == accepted(schema), schema


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


# What tool schemas look like: the SDKs' (pydantic, zod-to-json-schema), the reference servers'.
COMMON = [
    {"type": "object", "properties": {}},
    {
        "type": "object",
        "properties": {"message": {"type": "string", "description": "Message to echo"}},
        "required": ["message"],
        "additionalProperties": False,
        "$schema": "http://json-schema.org/draft-07/schema#",
    },
    {
        "properties": {
            "repo_path": {"title": "Repo Path", "type": "string"},
            "max_count": {"default": 10, "title": "Max Count", "type": "integer", "minimum": 1},
            "files": {"items": {"type": "string"}, "title": "Files", "type": "array"},
            "mode": {"enum": ["a", "b"], "type": "string"},
            "when": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}], "default": None},
        },
        "required": ["repo_path"],
        "title": "GitLog",
        "type": "object",
        "$defs": {"Item": {"type": "object", "properties": {"id": {"type": "integer"}}}},
    },
    {
        "type": "object",
        "properties": {"query": {"type": "string", "pattern": "^[a-z ]+$", "minLength": 1, "maxLength": 200}},
        "$schema": "https://json-schema.org/draft/2020-12/schema",
    },
]


def test_the_common_tool_schemas_are_proved_without_jsonschema() -> None:
    for schema in COMMON:
        assert proves_valid(schema), schema
        assert accepted(schema), schema


def test_what_it_does_not_know_it_leaves_to_jsonschema() -> None:
    not_proved = [
        {"type": "object", "properties": {"a": {"$id": "urn:a"}}},
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"},
        {"type": "object", "properties": {"n": {"type": "integer", "minLength": 1.0}}},
        {"type": "object", "properties": {"s": {"type": "string", "pattern": "a("}}},
        {"type": "object", "properties": {"s": {"type": "strin"}}},
        {"type": "object", "dependencies": {"a": ["b"]}},
        {"type": "object", "properties": {"a": {"$schema": "https://json-schema.org/draft/2020-12/schema"}}},
        "not a schema",
    ]
    for schema in not_proved:
        assert not proves_valid(schema), schema
    problem = schema_problem(not_proved[4])
    assert problem is not None
    assert problem.startswith("inputSchema is not valid JSON Schema at properties/s/type: 'strin' is not")
    assert json_schema_problem(not_proved[0]) is None  # valid: jsonschema says so


def test_a_ref_is_proved_where_jsonschema_checks_no_uri_format() -> None:
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}
    checked = any(importlib.util.find_spec(n) is not None for n in ("rfc3987", "rfc3986_validator"))
    assert proves_valid(schema) is not checked
    assert accepted(schema)


def nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def test_a_schema_keyword_that_is_no_string_is_a_problem_named_not_an_exception() -> None:
    for draft in (True, 5, {}, ["x"], None):
        problem = schema_problem({"type": "object", "$schema": draft})
        assert problem is not None and problem.startswith(
            "inputSchema is not valid JSON Schema at $schema"
        ), draft


def test_deep_nesting_is_left_to_jsonschema() -> None:
    assert proves_valid(nested(MAX_DEPTH))
    assert not proves_valid(nested(MAX_DEPTH + 1))
    assert json_schema_problem(nested(MAX_DEPTH + 1)) is None


def test_checking_common_schemas_loads_no_jsonschema() -> None:
    script = (
        "import json, sys; from supervisor.shared.schemas import schema_problem; "
        f"common = json.loads({json.dumps(json.dumps(COMMON))}); "
        "assert all(schema_problem(s) is None for s in common); "
        "print('jsonschema' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"
