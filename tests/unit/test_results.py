"""Behaviour of workers.results: the text an agent reads, and the wire ToolResult built from the SDK's
``CallToolResult`` or straight from the JSON a server sent (the hot path)."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pytest
from mcp_types import (
    Annotations,
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from supervisor.protocol import ToolResult, encode
from supervisor.shared.content import EMPTY_TEXT, render_text
from workers.results import InvalidResult, decode_tool_result, to_tool_result

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()  # 24 bytes, no padding
WAV = base64.b64encode(b"RIFF" + b"\x00" * 8).decode()  # 12 bytes, no padding


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


# --- render_text -----------------------------------------------------------------------------


def test_text_items_are_joined_with_newlines() -> None:
    assert render_text([text("one"), text("two"), text("three")]) == "one\ntwo\nthree"


def test_single_text_item_is_returned_as_is() -> None:
    assert render_text([text("  spaced\n")]) == "  spaced\n"


def test_empty_content_renders_no_output_returned() -> None:
    assert render_text([]) == EMPTY_TEXT == "No output returned."


def test_empty_text_item_is_not_treated_as_no_output() -> None:
    assert render_text([text("")]) == ""


def test_image_gets_a_placeholder_with_mime_type_and_size() -> None:
    rendered = render_text([{"type": "image", "data": PNG, "mimeType": "image/png"}])
    assert rendered == "[image image/png, 24 bytes]"


def test_audio_gets_a_placeholder_with_mime_type_and_size() -> None:
    rendered = render_text([{"type": "audio", "data": WAV, "mimeType": "audio/wav"}])
    assert rendered == "[audio audio/wav, 12 bytes]"


def test_image_placeholder_reports_the_decoded_size_of_padded_base64() -> None:
    data = base64.b64encode(b"hello").decode()
    assert (
        render_text([{"type": "image", "data": data, "mimeType": "image/png"}])
        == "[image image/png, 5 bytes]"
    )


def test_resource_link_gets_a_placeholder_with_its_uri() -> None:
    rendered = render_text([{"type": "resource_link", "uri": "file:///tmp/report.pdf", "name": "report"}])
    assert rendered == "[resource link file:///tmp/report.pdf]"


def test_embedded_text_resource_renders_its_text() -> None:
    item = {
        "type": "resource",
        "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "contents"},
    }
    assert render_text([item]) == "contents"


def test_embedded_blob_resource_gets_a_placeholder_with_uri_and_mime_type() -> None:
    item = {
        "type": "resource",
        "resource": {"uri": "file:///a.bin", "mimeType": "application/zip", "blob": "AA=="},
    }
    assert render_text([item]) == "[resource file:///a.bin application/zip]"


def test_unknown_content_type_gets_a_generic_placeholder() -> None:
    assert render_text([{"type": "hologram", "data": "x"}]) == "[hologram content]"


def test_mixed_content_renders_each_item_on_its_own_line_in_order() -> None:
    content = [
        text("before"),
        {"type": "image", "data": PNG, "mimeType": "image/png"},
        {"type": "resource_link", "uri": "https://example.com/x"},
        text("after"),
    ]
    assert (
        render_text(content)
        == "before\n[image image/png, 24 bytes]\n[resource link https://example.com/x]\nafter"
    )


def test_structured_only_result_renders_as_json() -> None:
    structured = {"temperature": 21.5, "unit": "C", "tags": ["a", "b"]}
    rendered = render_text([], structured)
    assert json.loads(rendered) == structured


def test_structured_content_that_is_not_an_object_renders_as_json() -> None:
    assert render_text([], [1, "two"]) == '[1,"two"]'
    assert render_text([], 0) == "0"
    assert render_text([], False) == "false"


def test_structured_content_is_not_rendered_when_there_is_other_content() -> None:
    assert render_text([text("the text")], {"x": 1}) == "the text"


def test_structured_content_none_with_empty_content_is_no_output() -> None:
    assert render_text([], None) == EMPTY_TEXT


# --- to_tool_result --------------------------------------------------------------------------


def test_text_result_becomes_a_tool_result_with_the_text() -> None:
    result = to_tool_result(CallToolResult(content=[TextContent(text="hello")]))
    assert result == ToolResult(content=[{"type": "text", "text": "hello"}], text="hello")
    assert result.is_error is False
    assert result.structured_content is None


def test_every_content_item_is_kept_in_its_json_shape() -> None:
    sdk = CallToolResult(
        content=[
            TextContent(text="hi", annotations=Annotations(audience=["user"], last_modified="2025-01-01")),
            ImageContent(data=PNG, mime_type="image/png"),
            AudioContent(data=WAV, mime_type="audio/wav"),
            ResourceLink(name="report", uri="file:///r.pdf", mime_type="application/pdf", size=10),
            EmbeddedResource(
                resource=TextResourceContents(uri="file:///t.txt", mime_type="text/plain", text="body")
            ),
            EmbeddedResource(
                resource=BlobResourceContents(uri="file:///b.bin", mime_type="application/zip", blob="AA==")
            ),
        ]
    )
    result = to_tool_result(sdk)
    assert result.content == [
        {"type": "text", "text": "hi", "annotations": {"audience": ["user"], "lastModified": "2025-01-01"}},
        {"type": "image", "data": PNG, "mimeType": "image/png"},
        {"type": "audio", "data": WAV, "mimeType": "audio/wav"},
        {
            "type": "resource_link",
            "name": "report",
            "uri": "file:///r.pdf",
            "mimeType": "application/pdf",
            "size": 10,
        },
        {"type": "resource", "resource": {"uri": "file:///t.txt", "mimeType": "text/plain", "text": "body"}},
        {
            "type": "resource",
            "resource": {"uri": "file:///b.bin", "mimeType": "application/zip", "blob": "AA=="},
        },
    ]
    assert result.text == "\n".join(
        [
            "hi",
            "[image image/png, 24 bytes]",
            "[audio audio/wav, 12 bytes]",
            "[resource link file:///r.pdf]",
            "body",
            "[resource file:///b.bin application/zip]",
        ]
    )


def test_content_items_use_camel_case_keys_and_leave_out_unset_fields() -> None:
    result = to_tool_result(CallToolResult(content=[ImageContent(data=PNG, mime_type="image/png")]))
    (item,) = result.content
    assert "mimeType" in item
    assert "mime_type" not in item
    assert "annotations" not in item
    assert "_meta" not in item and "meta" not in item


def test_item_meta_is_kept_under_its_wire_name() -> None:
    result = to_tool_result(CallToolResult(content=[TextContent(text="x", _meta={"k": "v"})]))
    assert result.content == [{"type": "text", "text": "x", "_meta": {"k": "v"}}]


def test_structured_content_is_kept() -> None:
    structured = {"rows": [{"id": 1}, {"id": 2}], "total": 2}
    result = to_tool_result(
        CallToolResult(content=[TextContent(text="2 rows")], structured_content=structured)
    )
    assert result.structured_content == structured
    assert result.text == "2 rows"


def test_structured_only_result_text_is_its_json() -> None:
    result = to_tool_result(CallToolResult(content=[], structured_content={"ok": True}))
    assert result.content == []
    assert result.structured_content == {"ok": True}
    assert json.loads(result.text) == {"ok": True}


def test_empty_result_says_no_output_returned() -> None:
    result = to_tool_result(CallToolResult(content=[]))
    assert result.content == []
    assert result.text == EMPTY_TEXT


def test_is_error_is_kept() -> None:
    result = to_tool_result(CallToolResult(content=[TextContent(text="it broke")], is_error=True))
    assert result.is_error is True
    assert result.text == "it broke"


def test_tool_result_from_sdk_survives_the_wire() -> None:
    sdk = CallToolResult(
        content=[TextContent(text="t"), ImageContent(data=PNG, mime_type="image/png")],
        structured_content={"n": 1},
        is_error=True,
    )
    result = to_tool_result(sdk)
    assert msgspec.msgpack.decode(encode(result), type=ToolResult) == result


# --- decode_tool_result ------------------------------------------------------------------------

SDK_RESULTS = [
    CallToolResult(content=[TextContent(text="hello")]),
    CallToolResult(
        content=[
            TextContent(text="hi", annotations=Annotations(audience=["user"]), _meta={"k": "v"}),
            ImageContent(data=PNG, mime_type="image/png"),
            AudioContent(data=WAV, mime_type="audio/wav"),
            ResourceLink(name="report", uri="file:///r.pdf", mime_type="application/pdf", size=10),
            EmbeddedResource(resource=TextResourceContents(uri="file:///t.txt", text="body")),
            EmbeddedResource(resource=BlobResourceContents(uri="file:///b.bin", blob="AA==")),
        ]
    ),
    CallToolResult(content=[], structured_content={"ok": True}),
    CallToolResult(content=[TextContent(text="2")], structured_content={"sum": 2}),
    CallToolResult(content=[TextContent(text="it broke")], is_error=True),
    CallToolResult(content=[]),
]


@pytest.mark.parametrize("sdk", SDK_RESULTS, ids=lambda sdk: ",".join(i.type for i in sdk.content) or "empty")
def test_the_hot_path_builds_the_tool_result_the_sdk_path_builds(sdk: CallToolResult) -> None:
    sent = sdk.model_dump_json(by_alias=True, exclude_none=True).encode()
    assert decode_tool_result(sent) == to_tool_result(sdk)
    assert decode_tool_result(msgspec.Raw(sent)) == to_tool_result(sdk)


def test_the_hot_path_keeps_fields_it_does_not_know_as_sent() -> None:
    item = {"type": "text", "text": "x", "annotations": {"priority": 0.5}, "x-vendor": [1, None]}
    result = decode_tool_result(json.dumps({"content": [item], "_meta": {"m": 1}}).encode())
    assert result is not None
    assert result.content == [item]


def test_an_input_required_result_is_left_to_the_session() -> None:
    sent = {"resultType": "input_required", "requestState": "opaque"}
    assert decode_tool_result(json.dumps(sent).encode()) is None


@pytest.mark.parametrize(
    ("sent", "problem"),
    [
        (5, "Expected `object`, got `int`"),
        (None, "Expected `object`, got `null`"),
        ({}, "no content"),
        ({"content": "text"}, "Expected `array | null`, got `str` - at `$.content`"),
        ({"content": [5]}, "Expected `object`, got `int` - at `$.content[0]`"),
        ({"content": [], "isError": "yes"}, "Expected `bool`, got `str` - at `$.isError`"),
        ({"content": [], "resultType": "later"}, "unknown resultType 'later'"),
        ({"content": [{"text": "no type"}]}, "content[0] has unknown type None"),
        ({"content": [text("ok"), {"type": "video"}]}, "content[1] has unknown type 'video'"),
        ({"content": [{"type": "text"}]}, "content[0] (text) has no string 'text'"),
        ({"content": [{"type": "text", "text": 5}]}, "content[0] (text) has no string 'text'"),
        ({"content": [{"type": "image", "data": PNG}]}, "content[0] (image) has no string 'mimeType'"),
        (
            {"content": [{"type": "audio", "mimeType": "audio/wav"}]},
            "content[0] (audio) has no string 'data'",
        ),
        (
            {"content": [{"type": "resource_link", "uri": "u"}]},
            "content[0] (resource_link) has no string 'name'",
        ),
        (
            {"content": [{"type": "resource", "resource": {"text": "t"}}]},
            "content[0] (resource) has no resource with a uri and text or blob",
        ),
        (
            {"content": [{"type": "resource", "resource": {"uri": "u"}}]},
            "content[0] (resource) has no resource with a uri and text or blob",
        ),
        (
            {"content": [{"type": "resource"}]},
            "content[0] (resource) has no resource with a uri and text or blob",
        ),
    ],
)
def test_a_malformed_result_is_invalid_and_says_what_is_wrong(sent: Any, problem: str) -> None:
    with pytest.raises(InvalidResult) as caught:
        decode_tool_result(json.dumps(sent).encode())
    assert str(caught.value) == problem


def test_a_result_that_is_not_json_is_invalid() -> None:
    with pytest.raises(InvalidResult, match="JSON is malformed"):
        decode_tool_result(b"{nope")
