"""Turn a server's tool result into the wire's ``ToolResult``: from the SDK's ``CallToolResult``, or
straight from the JSON the server sent (``decode_tool_result``, the hot path).

Every content item is kept in its JSON shape; ``text`` is what an agent that
only reads text should see: the text items joined, a short placeholder for
each non-text item, the structured content as JSON when nothing else was
returned, and "No output returned." when the result is empty
(``supervisor.shared.content``, which the client-side adapters render with too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import msgspec

from supervisor.protocol import ToolResult, total_decoder
from supervisor.shared.content import render_text

if TYPE_CHECKING:
    from mcp_types import CallToolResult

__all__ = ["InvalidResult", "decode_tool_result", "to_tool_result"]

# The string fields each kind of content item must have (an embedded resource: an object).
_ITEM_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "text": ("text",),
    "image": ("data", "mimeType"),
    "audio": ("data", "mimeType"),
    "resource_link": ("uri", "name"),
    "resource": (),
}


class InvalidResult(Exception):
    """A server's answer to ``tools/call`` is not a tool result."""


class _CallToolResult(msgspec.Struct, rename="camel"):
    content: list[dict[str, Any]] | None = None
    structured_content: Any = None
    is_error: bool = False
    result_type: str = "complete"


_decode_call_result = total_decoder(msgspec.json.Decoder(_CallToolResult).decode)  # invalid UTF-8 too


def decode_tool_result(raw: msgspec.Raw | bytes) -> ToolResult | None:
    """The ``ToolResult`` for a ``tools/call`` result as the server wrote it, or None when the server
    asks for input first (a 2026-07-28 ``input_required`` result).

    Checks what the agent relies on (content items of the five MCP kinds with their fields);
    unknown fields are kept as sent. Raises ``InvalidResult`` naming what is wrong.
    """
    try:
        result = _decode_call_result(raw)
    except msgspec.DecodeError as exc:
        raise InvalidResult(str(exc)) from None
    if result.result_type == "input_required":
        return None
    if result.result_type != "complete":
        raise InvalidResult(f"unknown resultType {result.result_type!r}")
    if result.content is None:
        raise InvalidResult("no content")
    for index, item in enumerate(result.content):
        _check_item(index, item)
    return ToolResult(
        content=result.content,
        structured_content=result.structured_content,
        is_error=result.is_error,
        text=render_text(result.content, result.structured_content),
    )


def _check_item(index: int, item: dict[str, Any]) -> None:
    kind = item.get("type")
    fields = _ITEM_FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        raise InvalidResult(f"content[{index}] has unknown type {kind!r}")
    for name in fields:
        if not isinstance(item.get(name), str):
            raise InvalidResult(f"content[{index}] ({kind}) has no string {name!r}")
    if kind == "resource":
        resource = item.get("resource")
        if not (
            isinstance(resource, dict)
            and isinstance(resource.get("uri"), str)
            and isinstance(resource.get("text", resource.get("blob")), str)
        ):
            raise InvalidResult(f"content[{index}] (resource) has no resource with a uri and text or blob")


def to_tool_result(result: CallToolResult) -> ToolResult:
    content = [item.model_dump(by_alias=True, mode="json", exclude_none=True) for item in result.content]
    return ToolResult(
        content=content,
        structured_content=result.structured_content,
        is_error=bool(result.is_error),
        text=render_text(content, result.structured_content),
    )
