"""JSON Schema for tools: whether a schema is usable, and the one way a validator is built for it.

Above: ``supervisor.daemon.registry`` (its own guard on the tools it names), ``workers.listing`` (which
leaves out a tool whose ``inputSchema`` is unusable) and ``workers.calls`` (a call's arguments and
result checked against the tool's schemas). Below: ``supervisor.shared.schema_quick``,
``supervisor.shared.instance_quick`` and ``jsonschema``.

A schema is read as the draft its ``$schema`` names, else as 2020-12 (``validator_class``), whether
it is being checked or used to check; so a schema the supervisor accepts is one a worker can use.
Checking asks ``supervisor.shared.schema_quick`` first, which proves the common tool schema valid
without ``jsonschema``; checking an instance against a schema (``Validators``, a worker's calls) asks
``supervisor.shared.instance_quick`` first, which proves common arguments valid. ``jsonschema``
(about 2 MB, with its metaschemas) is imported only for a schema or an instance they do not prove.
So a supervisor whose servers' tools have common schemas never loads it, nor does a stdio worker
whose calls have common arguments.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Final

import msgspec

from supervisor.shared.instance_quick import proves_instance
from supervisor.shared.schema_quick import proves_valid

if TYPE_CHECKING:
    import jsonschema.protocols

__all__ = ["Validators", "json_schema_problem", "schema_problem", "validator", "validator_class"]

SCHEMA_VERDICTS: Final = 4096  # schemas whose check is remembered (by their JSON)
_encode_json = msgspec.json.Encoder(order="deterministic").encode


def validator_class(schema: dict[str, Any]) -> type[jsonschema.protocols.Validator]:
    """The validator of the draft ``schema`` names in ``$schema``, else of 2020-12 (also for a
    ``$schema`` that is no string: 2020-12's check then says so, where jsonschema's lookup would raise)."""
    import jsonschema.validators

    if not isinstance(schema.get("$schema", ""), str):
        return jsonschema.Draft202012Validator
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)


def validator(schema: dict[str, Any] | None) -> jsonschema.protocols.Validator | None:
    """A validator for a schema found valid (``json_schema_problem``); None for no schema."""
    if schema is None:
        return None
    return validator_class(schema)(schema)


class Validators:
    """Some tools' schemas, to check instances against (a call's arguments, a result's structured
    content). What ``supervisor.shared.instance_quick`` proves valid is valid without ``jsonschema``;
    a tool's validator is built (and ``jsonschema`` imported) the first time an instance is not
    proved. So a worker whose calls are all proved never loads ``jsonschema``, and one that needs it
    builds no validator for a tool nobody calls (a validator and its registry are its own memory)."""

    def __init__(self, schemas: dict[str, dict[str, Any] | None]) -> None:
        self._schemas = schemas
        self._built: dict[str, jsonschema.protocols.Validator | None] = {}
        self._proved: dict[str, bool] = {}  # tool -> its schema proved valid (once, not at every call)

    def __contains__(self, tool: str) -> bool:
        return tool in self._schemas

    def schema(self, tool: str) -> dict[str, Any] | None:
        """``tool``'s schema; None for a tool without one (or unknown, or dropped)."""
        return self._schemas.get(tool)

    def proves(self, tool: str, instance: Any) -> bool:
        """Whether ``instance`` is known valid without a validator: no schema, or proved valid."""
        schema = self._schemas.get(tool)
        if schema is None:
            return True
        proved = self._proved.get(tool)
        if proved is None:
            proved = self._proved[tool] = proves_valid(schema)
        return proved and proves_instance(schema, instance, schema_proved=True)

    def get(self, tool: str) -> jsonschema.protocols.Validator | None:
        """The validator of ``tool``'s schema; None for a tool without one (or unknown, or dropped)."""
        if tool not in self._built:
            self._built[tool] = validator(self._schemas.get(tool))
        return self._built[tool]

    def drop(self, tool: str) -> None:
        """Check nothing against ``tool``'s schema from now on."""
        if tool in self._schemas:
            self._schemas[tool] = None
        self._built[tool] = None


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is not a usable tool ``inputSchema``, or None when it is."""
    if not isinstance(schema, dict):
        return f"inputSchema is {type(schema).__name__}, not an object"
    if schema.get("type", "object") != "object":
        return f"inputSchema has type {schema.get('type')!r}, not 'object'"
    problem = json_schema_problem(schema)
    return f"inputSchema {problem}" if problem else None


def json_schema_problem(schema: dict[str, Any]) -> str | None:
    """Why ``schema`` is not valid JSON Schema (of the draft it names, else 2020-12), or None.

    Checking a schema against its metaschema costs about a millisecond; the verdicts on the
    ``SCHEMA_VERDICTS`` schemas checked last are kept, so listing the same tools again is cheap.
    """
    if proves_valid(schema):
        return None
    try:
        key = _encode_json(schema)
    except (TypeError, ValueError):  # not JSON (a test's Python object): check it as it is
        return _check_schema(schema)
    return _cached_check(key)


@functools.lru_cache(maxsize=SCHEMA_VERDICTS)
def _cached_check(key: bytes) -> str | None:
    return _check_schema(msgspec.json.decode(key))


def _check_schema(schema: dict[str, Any]) -> str | None:
    import jsonschema.exceptions

    try:
        validator_class(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "(root)"
        return f"is not valid JSON Schema at {where}: {exc.message}"
    return None
