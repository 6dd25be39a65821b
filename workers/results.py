"""Turn the SDK's ``CallToolResult`` into the wire's ``ToolResult``.

Every content item is kept in its JSON shape; ``text`` is what an agent that
only reads text should see: the text items joined, a short placeholder for
each non-text item, the structured content as JSON when nothing else was
returned, and "No output returned." when the result is empty.
"""

from __future__ import annotations

from typing import Any

import msgspec
from mcp_types import CallToolResult

from supervisor.protocol import ToolResult

__all__ = ["EMPTY_TEXT", "render_text", "to_tool_result"]

EMPTY_TEXT = "No output returned."


def to_tool_result(result: CallToolResult) -> ToolResult:
    content = [item.model_dump(by_alias=True, mode="json", exclude_none=True) for item in result.content]
    return ToolResult(
        content=content,
        structured_content=result.structured_content,
        is_error=bool(result.is_error),
        text=render_text(content, result.structured_content),
    )


def render_text(content: list[dict[str, Any]], structured: Any = None) -> str:
    parts = [_render_item(item) for item in content]
    if not parts and structured is not None:
        return msgspec.json.encode(structured).decode()
    return "\n".join(parts) if parts else EMPTY_TEXT


def _render_item(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind == "text":
        return str(item.get("text", ""))
    if kind in ("image", "audio"):
        data = str(item.get("data", ""))
        size = len(data) * 3 // 4 - data[-2:].count("=")
        return f"[{kind} {item.get('mimeType', '')}, {size} bytes]"
    if kind == "resource_link":
        return f"[resource link {item.get('uri', '')}]"
    if kind == "resource":
        resource = item.get("resource", {})
        if "text" in resource:
            return str(resource["text"])
        mime = f" {resource['mimeType']}" if resource.get("mimeType") else ""
        return f"[resource {resource.get('uri', '')}{mime}]"
    return f"[{kind} content]"
