"""MCP content items as text: the one rendering a result's ``text`` is made of.

Above: the worker, which fills ``ToolResult.text`` (and a prompt's text) with it
(``workers.results``, ``workers.catalog``); the adapters (``supervisor.adapters.formats``), which
show a result's items to a model API that takes text as the worker shows them. Below: nothing but
msgspec (pure functions over the items' JSON shapes).

An item becomes one line: a text item its text, an embedded resource its text (or a bracketed line
naming its URI and type), every other kind a short bracketed placeholder (``[image image/png, 67
bytes]``, ``[resource link URI]``). Items of any shape are rendered, never refused: the checks of
what a server sent are the worker's (``workers.results``).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = ["EMPTY_TEXT", "base64_size", "item_text", "render_text"]

EMPTY_TEXT: Final = "No output returned."  # a result with nothing to show


def render_text(content: list[dict[str, Any]], structured: Any = None) -> str:
    """A result's text: its items' lines joined, the structured content as JSON when there is no
    item, else ``EMPTY_TEXT``."""
    parts = [item_text(item) for item in content]
    if not parts and structured is not None:
        return msgspec.json.encode(structured).decode()
    return "\n".join(parts) if parts else EMPTY_TEXT


def item_text(item: dict[str, Any]) -> str:
    """One MCP content item as text."""
    kind = item.get("type")
    if kind == "text":
        return str(item.get("text", ""))
    if kind in ("image", "audio"):
        data = str(item.get("data", ""))
        return f"[{kind} {item.get('mimeType', '')}, {base64_size(data)} bytes]"
    if kind == "resource_link":
        return f"[resource link {item.get('uri', '')}]"
    if kind == "resource":
        resource = item.get("resource")
        resource = resource if isinstance(resource, dict) else {}
        if "text" in resource:
            return str(resource["text"])
        mime = f" {resource['mimeType']}" if resource.get("mimeType") else ""
        return f"[resource {resource.get('uri', '')}{mime}]"
    return f"[{kind} content]"


def base64_size(data: str) -> int:
    """How many bytes base64 ``data`` holds (from its length and padding, without decoding it)."""
    return len(data) * 3 // 4 - data[-2:].count("=")
