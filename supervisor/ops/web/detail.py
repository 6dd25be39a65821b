"""One server as the console's detail panel shows it: its status row, its tools, its recent log lines.

Above: the site (``supervisor.ops.web.site``), which answers ``GET /api/servers/NAME`` with ``detail``.
Below: the supervisor's status row, its registry's ``ToolInfo`` entries and the ``LogLines`` its log
book answers a ``GetLogs`` with: the same lines ``mcp-supervisor logs NAME`` shows. Pure code.

A tool's input schema is summed up as its parameters (``params``: name, type, whether required, the
first line of its description); the whole schema is there too, as the server listed it.
"""

from __future__ import annotations

from typing import Any, Final

from supervisor.protocol import LogLine, ServerStatus, ToolInfo

__all__ = ["LOG_LINES", "MAX_DESCRIPTION", "detail", "params"]

LOG_LINES: Final = 200  # the newest log lines the panel shows
MAX_DESCRIPTION: Final = 160  # characters of a parameter's description kept


def params(schema: object) -> list[dict[str, Any]]:
    """The top-level properties of a JSON Schema object, as ``{name, type, required, description}``;
    none for anything else (a schema that is not an object, a property that is not a schema)."""
    if not isinstance(schema, dict):
        return []
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return []
    required = schema.get("required")
    needed = {name for name in required if isinstance(name, str)} if isinstance(required, list) else set()
    found = []
    for name, prop in properties.items():
        if not isinstance(name, str):
            continue
        prop = prop if isinstance(prop, dict) else {}
        description = prop.get("description")
        first = (
            description.strip().split("\n", 1)[0][:MAX_DESCRIPTION] if isinstance(description, str) else ""
        )
        found.append({"name": name, "type": _type(prop), "required": name in needed, "description": first})
    return found


def _type(prop: dict[str, Any]) -> str:
    kind = prop.get("type")
    if isinstance(kind, list):
        return " | ".join(str(one) for one in kind)
    if isinstance(kind, str):
        if kind == "array" and isinstance(prop.get("items"), dict):
            return _type(prop["items"]) + "[]"
        return kind
    if "enum" in prop and isinstance(prop["enum"], list):
        return " | ".join(repr(one) if isinstance(one, str) else str(one) for one in prop["enum"][:8])
    for combined in ("anyOf", "oneOf"):
        options = prop.get(combined)
        if isinstance(options, list):
            return " | ".join(_type(one) for one in options if isinstance(one, dict)) or "any"
    return "any"


def detail(row: ServerStatus, tools: list[ToolInfo], lines: list[LogLine]) -> dict[str, Any]:
    """``/api/servers/NAME``'s answer: ``server``, ``status`` (its row), ``tools``, ``logs`` (oldest
    first)."""
    return {
        "server": row.server,
        "status": row,
        "tools": [
            {
                "name": tool.name,
                "original_name": tool.original_name,
                "title": tool.title,
                "description": tool.description,
                "params": params(tool.input_schema),
                "input_schema": tool.input_schema,
            }
            for tool in tools
        ],
        "logs": lines,
    }
