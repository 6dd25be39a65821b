"""Tools and tool results in the formats model APIs take: OpenAI's function calling and Anthropic's
tool use. Pure functions, no I/O.

Above: ``SupervisorClient.openai_tools()`` / ``anthropic_tools()`` (and the async client's), the
registry-style tool sets of ``supervisor.adapters.toolset``, and agent loops that hand a call's
outcome back to a model (``anthropic_tool_result``, ``openai_tool_message``). Below: the registry
entries and call results of ``supervisor.protocol`` (``ToolInfo``, ``ToolResult``) and the errors of
``supervisor.client.errors``.

A tool's name must match ``^[a-zA-Z0-9_-]{1,64}$`` in both APIs: the registry's
``mcp_{server}_{tool}`` names do by construction. Its schema must be a JSON Schema object: the
registry serves ``{"type": "object", "properties": {}}`` for a tool that declares no arguments, and
so do these functions for an entry without one. A tool that cannot be expressed (a name or schema
no registry makes) raises ``ValueError`` naming it.

Results: Anthropic's ``tool_result`` carries text and images (JPEG, PNG, GIF, WebP, as base64
blocks); OpenAI's ``tool`` message (Chat Completions) carries text only. What a format cannot carry
(audio, other images, blobs, resource links) becomes one line of text naming it, as the worker's
``ToolResult.text`` renders it (one rendering for both: ``supervisor.shared.content``).
"""

from __future__ import annotations

import re
from typing import Any, Final

from supervisor.client.errors import SupervisorError, ToolExecutionError
from supervisor.protocol import ToolInfo, ToolResult
from supervisor.shared.content import EMPTY_TEXT, item_text

__all__ = [
    "ANTHROPIC_IMAGE_TYPES",
    "NO_OUTPUT",
    "TOOL_NAME",
    "anthropic_tool",
    "anthropic_tool_result",
    "input_schema_of",
    "openai_tool",
    "openai_tool_message",
    "result_text",
]

TOOL_NAME: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # OpenAI's and Anthropic's rule, matched whole
ANTHROPIC_IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
NO_OUTPUT: Final = EMPTY_TEXT  # a result with nothing to show (as the worker renders it)
ERROR_PREFIX: Final = "Error: "  # OpenAI's tool message has no error flag: its text says so

Outcome = ToolResult | SupervisorError  # what a call gave: its result, or the error it raised


def input_schema_of(tool: ToolInfo) -> dict[str, Any]:
    """The tool's input schema as both APIs take it: a JSON Schema object with ``properties``."""
    schema = tool.input_schema
    if not isinstance(schema, dict):
        raise ValueError(f"tool {tool.name!r}: input_schema is {type(schema).__name__}, not an object")
    if schema.get("type", "object") != "object":
        raise ValueError(f"tool {tool.name!r}: input_schema has type {schema.get('type')!r}, not 'object'")
    if not isinstance(schema.get("properties", {}), dict):
        raise ValueError(f"tool {tool.name!r}: input_schema's properties are not an object")
    required = schema.get("required", [])
    if not (isinstance(required, list) and all(isinstance(name, str) for name in required)):
        raise ValueError(f"tool {tool.name!r}: input_schema's required is not a list of names")
    return {"type": "object", "properties": {}, **schema}


def _checked_name(tool: ToolInfo) -> str:
    if not isinstance(tool, ToolInfo):
        raise TypeError(f"expected a ToolInfo, not {type(tool).__name__}")
    if not isinstance(tool.name, str) or not TOOL_NAME.fullmatch(tool.name):
        raise ValueError(f"tool name {tool.name!r} is not 1 to 64 of [a-zA-Z0-9_-]")
    return tool.name


def _description(tool: ToolInfo) -> str:
    return tool.description or tool.title or ""


def openai_tool(tool: ToolInfo) -> dict[str, Any]:
    """A tool in OpenAI's function-calling format (Chat Completions):
    ``{"type": "function", "function": {"name", "description", "parameters"}}``."""
    name = _checked_name(tool)
    function = {"name": name, "description": _description(tool), "parameters": input_schema_of(tool)}
    return {"type": "function", "function": function}


def anthropic_tool(tool: ToolInfo) -> dict[str, Any]:
    """A tool in Anthropic's format: ``{"name", "description", "input_schema"}`` (no description
    when the tool has none)."""
    name = _checked_name(tool)
    described = {"description": text} if (text := _description(tool)) else {}
    return {"name": name, **described, "input_schema": input_schema_of(tool)}


def anthropic_tool_result(outcome: Outcome, tool_use_id: str) -> dict[str, Any]:
    """The ``tool_result`` block answering ``tool_use_id``: the result's text and images as content
    blocks, ``is_error`` when the tool reported an error or the call failed (the error's code and
    message as its text). Put it in the next user message's ``content``."""
    _check_id(tool_use_id, "tool_use_id")
    result, failure = _split(outcome)
    if result is None:
        content: list[dict[str, Any]] = [_text_block(str(failure))]
    else:
        content = [block for item in result.content if (block := _anthropic_block(item)) is not None]
        if not content:
            content = [_text_block(_fallback(result))]
    block = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    return {**block, "is_error": True} if failure is not None or (result and result.is_error) else block


def openai_tool_message(outcome: Outcome, tool_call_id: str) -> dict[str, Any]:
    """The Chat Completions message answering ``tool_call_id``: ``{"role": "tool", "tool_call_id",
    "content"}``, its content the result as text (``result_text``), starting with ``Error: `` when
    the tool reported an error or the call failed."""
    _check_id(tool_call_id, "tool_call_id")
    result, failure = _split(outcome)
    text = str(failure) if result is None else result_text(result)
    if failure is not None or (result is not None and result.is_error):
        text = ERROR_PREFIX + text
    return {"role": "tool", "tool_call_id": tool_call_id, "content": text}


def result_text(result: ToolResult) -> str:
    """A result as text: each content item on its own line, what is not text named in brackets
    (``[image image/png, 67 bytes]``); a result whose items show nothing shows its ``text``, else
    ``NO_OUTPUT``."""
    lines = [item_text(item) for item in result.content]
    return "\n".join(lines) if any(line.strip() for line in lines) else _fallback(result)


def _fallback(result: ToolResult) -> str:
    """What a result whose items show nothing shows: its ``text`` (structured content), else ``NO_OUTPUT``."""
    return result.text if result.text.strip() else NO_OUTPUT


def _split(outcome: Outcome) -> tuple[ToolResult | None, SupervisorError | None]:
    """The result to show (a ``ToolExecutionError`` carries one) and the error, if any."""
    if isinstance(outcome, ToolExecutionError):
        return outcome.result, outcome
    if isinstance(outcome, SupervisorError):
        return None, outcome
    if isinstance(outcome, ToolResult):
        return outcome, None
    raise TypeError(f"expected a ToolResult or a SupervisorError, not {type(outcome).__name__}")


def _check_id(value: str, what: str) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, not {value!r}")


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _image_block(mime: str, data: str) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}


def _anthropic_block(item: dict[str, Any]) -> dict[str, Any] | None:
    """One MCP content item as an Anthropic content block (None for blank text, which it refuses)."""
    image = _image_of(item)
    if image is not None:
        return _image_block(*image)
    text = item_text(item)
    return _text_block(text) if text.strip() else None


def _image_of(item: dict[str, Any]) -> tuple[str, str] | None:
    """The media type and base64 data of an image Anthropic takes: an image item, or an embedded
    resource's blob."""
    resource = item.get("resource")
    if item.get("type") == "image":
        mime, data = item.get("mimeType"), item.get("data")
    elif item.get("type") == "resource" and isinstance(resource, dict):
        mime, data = resource.get("mimeType"), resource.get("blob")
    else:
        return None
    if isinstance(mime, str) and mime in ANTHROPIC_IMAGE_TYPES and isinstance(data, str) and data:
        return mime, data
    return None
