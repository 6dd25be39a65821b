"""Valid JSON Schema, recognised without ``jsonschema``: the common tool schema, proved valid in
microseconds and with none of the 2 MB (and metaschemas) ``jsonschema`` loads.

Above: ``supervisor.shared.schemas.json_schema_problem``, which asks here first and checks with
``jsonschema`` only what is not proved here. Below: nothing but ``re``.

``proves_valid`` answers True only for a schema that ``jsonschema``'s ``check_schema`` accepts under
the draft it reads the schema as (``$schema`` absent, 2020-12 or draft-07: the drafts tool schemas
name). It knows the keywords whose rules are the same in both (types, properties, required, items as
one schema, combinators, bounds, enum and const, annotations, ``$defs``/``definitions``, and ``$ref``
where ``jsonschema`` checks no URI format); a keyword of any draft that it does not know (``$id``,
``dependencies``, ``prefixItems``, ...), a value it cannot
be sure of (an integer bound given as 1.0, a ``pattern`` Python does not compile), or a schema
nested deeper than ``MAX_DEPTH``, and it answers False: "not proved", never "invalid". Whatever it
proves is also what a worker's check accepts: both end in ``jsonschema`` for everything else.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from typing import Any, Final

__all__ = ["KEYWORDS", "proves_valid"]

MAX_DEPTH: Final = 64  # nested schemas proved here; deeper ones are left to jsonschema
DRAFTS: Final = frozenset(
    {
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2020-12/schema#",
        "http://json-schema.org/draft-07/schema",
        "http://json-schema.org/draft-07/schema#",
    }
)
TYPES: Final = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})

# Keywords of some draft (3 to 2020-12) whose values have rules; any other key may hold anything.
_CONSTRAINED: Final = frozenset(
    {
        "$schema", "$id", "id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef",
        "$recursiveAnchor", "$vocabulary", "$comment", "$defs", "definitions", "title", "description",
        "default", "deprecated", "readOnly", "writeOnly", "examples", "multipleOf", "maximum",
        "exclusiveMaximum", "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern",
        "additionalItems", "items", "prefixItems", "maxItems", "minItems", "uniqueItems", "contains",
        "maxContains", "minContains", "maxProperties", "minProperties", "required", "additionalProperties",
        "properties", "patternProperties", "dependencies", "dependentRequired", "dependentSchemas",
        "propertyNames", "const", "enum", "type", "format", "contentEncoding", "contentMediaType",
        "contentSchema", "if", "then", "else", "allOf", "anyOf", "oneOf", "not", "unevaluatedItems",
        "unevaluatedProperties", "disallow", "extends", "divisibleBy",
    }
)  # fmt: skip
KEYWORDS: Final = _CONSTRAINED  # every keyword of some draft (``supervisor.shared.instance_quick``)
_STRINGS: Final = frozenset({"title", "description", "$comment", "format"})
_ANY: Final = frozenset({"default", "const"})
_BOOLS: Final = frozenset({"uniqueItems", "deprecated", "readOnly", "writeOnly"})
_NUMBERS: Final = frozenset({"maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum"})
_COUNTS: Final = frozenset(
    {"maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minProperties"}
)
_SUBSCHEMA: Final = frozenset({"items", "additionalProperties", "not", "propertyNames", "contains"})
_SCHEMA_LISTS: Final = frozenset({"allOf", "anyOf", "oneOf"})
_SCHEMA_MAPS: Final = frozenset({"properties", "$defs", "definitions"})


def proves_valid(schema: Any) -> bool:
    """True: ``schema`` (an object) is valid JSON Schema, as ``jsonschema`` would read it. False: not
    proved here (it may be valid or not)."""
    if not isinstance(schema, dict):
        return False
    draft = schema.get("$schema")
    if draft is not None and not (isinstance(draft, str) and draft in DRAFTS):
        return False
    return _valid(schema, 0, root=True)


def _valid(schema: Any, depth: int, root: bool = False) -> bool:
    if isinstance(schema, bool):
        return True
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return False
    for key, value in schema.items():
        if type(key) is not str:
            return False  # not a JSON object
        if key not in _CONSTRAINED:
            continue  # not a keyword of any draft: any value is allowed
        if not _keyword_valid(key, value, depth):
            return False
        if key == "$schema" and not root:
            return False  # a nested $schema: its rules differ between drafts
    return True


def _keyword_valid(key: str, value: Any, depth: int) -> bool:
    if key in _STRINGS:
        return isinstance(value, str)
    if key in _ANY:
        return True
    if key in _BOOLS:
        return type(value) is bool
    if key in _NUMBERS:
        return _number(value)
    if key in _COUNTS:
        return type(value) is int and value >= 0
    if key in _SUBSCHEMA:
        return _valid(value, depth + 1)
    if key in _SCHEMA_LISTS:
        return isinstance(value, list) and bool(value) and all(_valid(v, depth + 1) for v in value)
    if key in _SCHEMA_MAPS:
        return isinstance(value, dict) and all(
            type(k) is str and _valid(v, depth + 1) for k, v in value.items()
        )
    if key == "$schema":
        return isinstance(value, str) and value in DRAFTS
    if key == "type":
        return _type(value)
    if key == "required":
        return _unique_strings(value)
    if key in ("enum", "examples"):
        return isinstance(value, list)
    if key == "multipleOf":
        return _number(value) and value > 0
    if key == "pattern":
        return isinstance(value, str) and _compiles(value)
    if key == "$ref":
        return isinstance(value, str) and not _uri_references_checked()
    return False  # a keyword not proved here


def _number(value: Any) -> bool:
    return type(value) in (int, float) and value == value and value not in (float("inf"), float("-inf"))


def _type(value: Any) -> bool:
    if isinstance(value, str):
        return value in TYPES
    return (
        isinstance(value, list) and bool(value) and _unique_strings(value) and all(v in TYPES for v in value)
    )


def _unique_strings(value: Any) -> bool:
    return (
        isinstance(value, list) and all(isinstance(v, str) for v in value) and len(set(value)) == len(value)
    )


@functools.cache
def _uri_references_checked() -> bool:
    """Whether ``jsonschema``'s check would hold a ``$ref`` to RFC 3986 (its ``uri-reference`` format):
    only where one of the packages it checks them with is installed (looked up, not imported)."""
    return any(importlib.util.find_spec(name) is not None for name in ("rfc3987", "rfc3986_validator"))


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return False
    return True
