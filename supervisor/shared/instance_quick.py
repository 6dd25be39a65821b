"""Valid instances, recognised without ``jsonschema``: a call's arguments (or a result's structured
content) proved valid against the common tool schema in microseconds, with none of the 2 MB
``jsonschema`` loads.

Above: ``workers.calls``, which asks here first and checks with ``jsonschema`` only what is not
proved here (``supervisor.shared.schemas.Validators``), so a stdio worker whose calls are proved
never imports it, and the zygote that forks stdio workers does not preload it. Below:
``supervisor.shared.schema_quick`` (whether the schema is valid) and ``re``.

``proves_instance`` answers True only for an instance that ``jsonschema``'s validator (as
``supervisor.shared.schemas.validator`` builds it: no format checker) accepts, and only against a
schema ``supervisor.shared.schema_quick`` proves valid (so read as 2020-12 or draft-07, whose rules
for these keywords are the same). It knows ``type``, ``properties``, ``required``,
``additionalProperties`` (without ``patternProperties``), ``items`` as one schema (without
``prefixItems``), ``allOf``, ``anyOf``, ``enum`` and ``const`` of scalars, the bounds of strings,
numbers, arrays and objects, ``pattern``, ``multipleOf`` of integers, ``uniqueItems`` of strings,
and the annotations; any other keyword of some draft (``$ref``, ``oneOf``, ``not``, ``if``, ...),
a value it cannot be sure of (a float where an integer is wanted, an ``enum`` of an array), or
nesting deeper than ``MAX_DEPTH``, and it answers False: "not proved", never "invalid". Keys that
are no keyword of any draft are ignored, as ``jsonschema`` ignores them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sized
from typing import Any, Final

from supervisor.shared.schema_quick import KEYWORDS, MAX_DEPTH, proves_valid

__all__ = ["proves_instance"]

_ANNOTATIONS: Final = frozenset(
    {
        "$schema", "$comment", "$defs", "definitions", "title", "description", "default",
        "examples", "deprecated", "readOnly", "writeOnly", "format",
    }
)  # fmt: skip
_Check = Callable[[Any, Any, dict[str, Any], int], bool]  # keyword value, instance, schema, depth
_TYPES: Final[dict[str, Callable[[Any], bool]]] = {
    "null": lambda v: v is None,
    "boolean": lambda v: type(v) is bool,
    "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) in (int, float),
    "string": lambda v: type(v) is str,
    "array": lambda v: type(v) is list,
    "object": lambda v: type(v) is dict,
}
_SCALARS: Final = (str, int, float, bool, type(None))


def proves_instance(schema: Any, instance: Any, *, schema_proved: bool = False) -> bool:
    """True: ``instance`` is valid against ``schema``, as ``jsonschema`` would judge it. False: not
    proved here (it may be valid or not). ``schema_proved``: the caller knows ``proves_valid(schema)``
    (it checks many instances against one schema), so it is not proved again for each."""
    if not isinstance(schema, dict):
        return schema is True
    # A schema proved valid (which also means a draft whose rules are these) is one jsonschema
    # checks without raising: it stops at the first subschema of an anyOf that holds, say, and
    # would raise on a malformed one before it.
    return (schema_proved or proves_valid(schema)) and _proves(schema, instance, 0)


def _proves(schema: Any, instance: Any, depth: int) -> bool:
    if schema is True:
        return True
    if type(schema) is not dict or depth > MAX_DEPTH or (depth and "$schema" in schema):
        return False
    for key, value in schema.items():
        if key in _ANNOTATIONS or key not in KEYWORDS:
            continue  # an annotation, or no keyword of any draft: jsonschema checks nothing
        check = _CHECKS.get(key)
        if check is None or not check(value, instance, schema, depth):
            return False
    return True


def _type(value: Any, instance: Any, _schema: dict[str, Any], _depth: int) -> bool:
    names = value if type(value) is list else [value]
    if not all(type(name) is str and name in _TYPES for name in names):
        return False  # jsonschema raises on a type it does not know
    return any(_TYPES[name](instance) for name in names)


def _properties(value: Any, instance: Any, _schema: dict[str, Any], depth: int) -> bool:
    if type(value) is not dict:
        return False
    if type(instance) is not dict:
        return True
    return all(key not in instance or _proves(sub, instance[key], depth + 1) for key, sub in value.items())


def _required(value: Any, instance: Any, _schema: dict[str, Any], _depth: int) -> bool:
    if type(value) is not list:
        return False
    return type(instance) is not dict or all(type(key) is str and key in instance for key in value)


def _additional(value: Any, instance: Any, schema: dict[str, Any], depth: int) -> bool:
    properties = schema.get("properties", {})
    if "patternProperties" in schema or type(properties) is not dict:
        return False
    if type(instance) is not dict:
        return True
    extras = [key for key in instance if key not in properties]
    if value is False:
        return not extras
    return all(_proves(value, instance[key], depth + 1) for key in extras)


def _items(value: Any, instance: Any, schema: dict[str, Any], depth: int) -> bool:
    if "prefixItems" in schema or type(value) not in (dict, bool):
        return False  # a list of schemas is draft-07's tuple form
    if type(instance) is not list:
        return True
    return all(_proves(value, item, depth + 1) for item in instance)


def _all_of(value: Any, instance: Any, _schema: dict[str, Any], depth: int) -> bool:
    return type(value) is list and all(_proves(sub, instance, depth + 1) for sub in value)


def _any_of(value: Any, instance: Any, _schema: dict[str, Any], depth: int) -> bool:
    return type(value) is list and any(_proves(sub, instance, depth + 1) for sub in value)


def _equal(one: Any, two: Any) -> bool:
    """Equal as jsonschema's ``equal`` says, for scalars (True and 1 differ; 1 and 1.0 do not)."""
    if not (isinstance(one, _SCALARS) and isinstance(two, _SCALARS)):
        return False
    if type(one) is bool or type(two) is bool or one is None or two is None:
        return one is two
    if type(one) is str or type(two) is str:
        return type(one) is type(two) and one == two
    return bool(one == two)  # int and float


def _enum(value: Any, instance: Any, _schema: dict[str, Any], _depth: int) -> bool:
    return type(value) is list and any(_equal(instance, each) for each in value)


def _const(value: Any, instance: Any, _schema: dict[str, Any], _depth: int) -> bool:
    return _equal(instance, value)


def _number(value: Any) -> bool:
    return type(value) in (int, float) and value == value


def _bound(compare: Callable[[Any, Any], bool]) -> _Check:
    def check(value: Any, instance: Any, _schema: dict[str, Any], _depth: int) -> bool:
        if not _number(value):
            return False
        return type(instance) not in (int, float) or bool(compare(instance, value))

    return check


def _count(measured: type[Sized], compare: Callable[[int, int], bool]) -> _Check:
    def check(value: Any, instance: Any, _schema: dict[str, Any], _depth: int) -> bool:
        if type(value) is not int:
            return False
        return type(instance) is not measured or bool(compare(len(instance), value))

    return check


def _pattern(value: Any, instance: Any, _schema: dict[str, Any], _depth: int) -> bool:
    if type(value) is not str:
        return False
    if type(instance) is not str:
        return True
    try:
        return re.search(value, instance) is not None
    except (re.error, RecursionError, OverflowError):
        return False


def _multiple_of(value: Any, instance: Any, _schema: dict[str, Any], _depth: int) -> bool:
    if type(value) is not int or value <= 0:
        return False  # a float divisor: jsonschema's float arithmetic is its own
    if type(instance) not in (int, float):
        return True
    return type(instance) is int and instance % value == 0


def _unique_items(value: Any, instance: Any, _schema: dict[str, Any], _depth: int) -> bool:
    if type(value) is not bool:
        return False
    if value is False or type(instance) is not list:
        return True
    return all(type(item) is str for item in instance) and len(set(instance)) == len(instance)


_CHECKS: Final[dict[str, _Check]] = {
    "type": _type,
    "properties": _properties,
    "required": _required,
    "additionalProperties": _additional,
    "items": _items,
    "allOf": _all_of,
    "anyOf": _any_of,
    "enum": _enum,
    "const": _const,
    "minimum": _bound(lambda i, v: i >= v),
    "maximum": _bound(lambda i, v: i <= v),
    "exclusiveMinimum": _bound(lambda i, v: i > v),
    "exclusiveMaximum": _bound(lambda i, v: i < v),
    "minLength": _count(str, lambda n, v: n >= v),
    "maxLength": _count(str, lambda n, v: n <= v),
    "minItems": _count(list, lambda n, v: n >= v),
    "maxItems": _count(list, lambda n, v: n <= v),
    "minProperties": _count(dict, lambda n, v: n >= v),
    "maxProperties": _count(dict, lambda n, v: n <= v),
    "pattern": _pattern,
    "multipleOf": _multiple_of,
    "uniqueItems": _unique_items,
}
