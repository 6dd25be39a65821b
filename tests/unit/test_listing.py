"""Behaviour of workers.listing: one bad entry costs only itself, pages are followed with bounds, and
each warning is said once."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_types import Prompt

from supervisor.shared.schemas import schema_problem
from tests.hostile import json_values
from workers.listing import (
    MAX_ENTRY_DEPTH,
    MAX_LIST_PAGES,
    NO_ARGUMENTS,
    ListingFailed,
    Pager,
    Warnings,
    every_entry,
    list_tools,
    models_of,
)
from workers.values import json_problem

OBJECT = {"type": "object", "properties": {"x": {"type": "string"}}}
DEEP: list[Any] = []
for _ in range(70):
    DEEP = [DEEP]


def pager(*pages: Any) -> Pager:
    """A server that answers with ``pages`` in turn (the last one again, once they run out)."""
    answers = list(pages)

    async def page(method: str, params: dict[str, Any]) -> Any:
        return answers.pop(0) if len(answers) > 1 else answers[0]

    return page


def warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]


async def tools_of(*pages: Any, warnings: Warnings | None = None, modern: bool = False) -> dict[str, Any]:
    listed = await list_tools(pager(*pages), warnings or Warnings("s"), modern=modern)
    return {tool.name: tool for tool in listed}


async def test_a_tool_without_a_schema_or_with_an_empty_one_declares_no_arguments() -> None:
    tools = await tools_of(
        {"tools": [{"name": "a"}, {"name": "b", "inputSchema": {}}, {"name": "c", "inputSchema": None}]}
    )
    assert [tools[name].input_schema for name in "abc"] == [NO_ARGUMENTS] * 3


async def test_a_schema_without_a_type_is_an_object_schema() -> None:
    tools = await tools_of(
        {"tools": [{"name": "a", "inputSchema": {"properties": {"x": {"type": "string"}}}}]}
    )
    assert tools["a"].input_schema == {"type": "object", "properties": {"x": {"type": "string"}}}


@pytest.mark.parametrize(
    ("entry", "warning"),
    [
        (
            {"name": "t", "inputSchema": {"type": 5}},
            "server 's' tool 't' left out: inputSchema has type 5, not 'object'",
        ),
        ({"name": "t", "inputSchema": []}, "tool 't' left out: inputSchema is list, not an object"),
        (
            {"name": "t", "inputSchema": {"type": "object", "required": "x"}},
            "tool 't' left out: inputSchema is not valid JSON Schema at required",
        ),
        (
            {"name": "t", "inputSchema": {"type": "object", "$schema": True}},
            "tool 't' left out: inputSchema is not valid JSON Schema at $schema",
        ),
        (7, "server 's' tools/list entry 2 left out: it is int, not an object"),
        ({"name": ""}, "tools/list entry 2 left out: it has no name"),
        ({"name": ["t"]}, "tools/list entry 2 left out: its name is list, not a string"),
        (
            {"name": "t", "_meta": {"a": DEEP}},
            "tools/list entry 2 ('t') left out: its fields are nested deeper than 64 levels",
        ),
        ({"name": "ok", "description": "second"}, "server 's' tool 'ok' listed twice; keeping the first"),
    ],
)
async def test_an_unusable_tool_is_left_out_with_a_warning_and_the_others_are_served(
    caplog: pytest.LogCaptureFixture, entry: Any, warning: str
) -> None:
    tools = await tools_of({"tools": [{"name": "ok", "inputSchema": OBJECT}, entry, {"name": "after"}]})
    assert tools.keys() == {"ok", "after"}
    assert tools["ok"].input_schema == OBJECT
    assert any(warning in message for message in warned(caplog)), warned(caplog)


async def test_fields_of_the_wrong_kind_are_dropped_and_the_tool_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    entry = {"name": "t", "description": 5, "title": [], "annotations": "x", "outputSchema": {"type": 7}}
    tool = (await tools_of({"tools": [entry]}))["t"]
    assert (tool.description, tool.title, tool.annotations, tool.output_schema) == ("", None, None, None)
    messages = warned(caplog)
    assert "server 's' tool 't': its description is int, not str; ignored" in messages
    assert any("its outputSchema is not valid JSON Schema" in message for message in messages)
    assert len(messages) == 4


async def test_fields_of_the_right_kind_are_kept_as_sent() -> None:
    entry = {
        "name": "t",
        "description": "d",
        "title": "T",
        "annotations": {"readOnlyHint": True},
        "inputSchema": OBJECT,
        "outputSchema": {"type": "object"},
        "icons": [],
    }
    tool = (await tools_of({"tools": [entry]}))["t"]
    assert (tool.description, tool.title, tool.annotations) == ("d", "T", {"readOnlyHint": True})
    assert (tool.input_schema, tool.output_schema) == (OBJECT, {"type": "object"})


async def test_an_invalid_x_mcp_header_leaves_a_tool_out_on_2026_sessions_only() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "object", "x-mcp-header": "N"}}}
    page = {"tools": [{"name": "t", "inputSchema": schema}]}
    assert await tools_of(page, modern=True) == {}
    assert (await tools_of(page)).keys() == {"t"}


async def test_a_warning_is_said_once_while_it_recurs_and_again_when_it_comes_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    warnings = Warnings("s")
    bad = {"tools": [{"name": "t", "inputSchema": 5}]}
    for page in (bad, bad, {"tools": []}, bad):
        await tools_of(page, warnings=warnings)
    assert len(warned(caplog)) == 2


async def test_every_page_is_followed() -> None:
    pages = [{"tools": [{"name": f"t{i}"}], "nextCursor": str(i + 1)} for i in range(3)] + [{"tools": []}]
    assert (await tools_of(*pages)).keys() == {"t0", "t1", "t2"}


async def test_a_cursor_that_is_not_a_string_ends_the_listing_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tools = await tools_of({"tools": [{"name": "a"}], "nextCursor": 5}, {"tools": [{"name": "b"}]})
    assert tools.keys() == {"a"}
    assert warned(caplog) == ["server 's' tools/list: nextCursor is int, not a string; listing ends here"]


async def test_a_paginator_that_never_ends_stops_at_the_page_bound(caplog: pytest.LogCaptureFixture) -> None:
    entries = await every_entry(
        "tools/list", "tools", pager({"tools": [1], "nextCursor": "again"}), Warnings("s")
    )
    assert len(entries) == MAX_LIST_PAGES
    assert warned(caplog) == [
        f"server 's' tools/list: still more pages after {MAX_LIST_PAGES}; listing ends here"
    ]


@pytest.mark.parametrize(
    ("page", "problem"),
    [
        (5, "tools/list: the answer is int, not an object"),
        ({}, "tools/list: the answer's tools is NoneType, not an array"),
        ({"tools": {"a": 1}}, "tools/list: the answer's tools is dict, not an array"),
    ],
)
async def test_an_answer_that_is_no_page_fails_the_listing_naming_it(page: Any, problem: str) -> None:
    with pytest.raises(ListingFailed, match=f"^{problem}$"):
        await tools_of(page)


async def test_a_raw_page_is_decoded_entry_by_entry(caplog: pytest.LogCaptureFixture) -> None:
    raw = msgspec.Raw(b'{"tools": [{"name": "a"}, {"name": "b", "description": "caf\xe9"}, {"name": "c"}]}')
    assert (await tools_of(raw)).keys() == {"a", "c"}
    (warning,) = warned(caplog)
    assert warning.startswith(
        "server 's' tools/list entry 2 left out: it does not decode: a string is not valid UTF-8"
    )


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"5", "tools/list: the answer is int, not an object"),
        (b'{"tools": 5}', "tools/list: the answer's tools is int, not an array"),
        (b'{"tools": ["\\ud800"]}', "tools/list: the answer does not decode: "),
        (
            b'{"tools": [], "nextCursor": "\xff"}',
            "tools/list: the answer does not decode: a string is not valid UTF-8",
        ),
        (
            b'{"tools": [' + b"[" * 5000 + b"]" * 5000 + b"]}",
            "tools/list: the answer does not decode: nested too deeply",
        ),
    ],
)
async def test_a_raw_answer_that_is_no_page_fails_the_listing_naming_it(raw: bytes, problem: str) -> None:
    with pytest.raises(ListingFailed) as caught:
        await tools_of(msgspec.Raw(raw))
    assert str(caught.value).startswith(problem)


async def test_prompts_that_do_not_fit_the_model_are_left_out(caplog: pytest.LogCaptureFixture) -> None:
    entries = [{"name": "a"}, {"name": "b", "arguments": 5}, {"name": "c", "arguments": [{"name": "x"}]}]
    prompts = models_of("prompts/list", entries, Prompt, "name", Warnings("s"))
    assert [prompt.name for prompt in prompts] == ["a", "c"]
    assert warned(caplog) == [
        "server 's' prompts/list entry 2 ('b') left out: arguments: Input should be a valid list"
    ]


JSON = json_values(max_leaves=12)
SCHEMAS = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["object", "string", 5, None]),
            "properties": JSON,
            "required": JSON,
        },
    ),
)
ENTRIES = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {"name": st.text(max_size=8) | st.integers()},
        optional={
            "inputSchema": SCHEMAS,
            "outputSchema": SCHEMAS,
            "description": JSON,
            "title": JSON,
            "annotations": JSON,
        },
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ENTRIES, max_size=8))
async def test_any_page_of_entries_gives_the_usable_tools_and_nothing_else(entries: list[Any]) -> None:
    tools = await list_tools(pager({"tools": entries}), Warnings("s"))
    names = [tool.name for tool in tools]
    assert len(names) == len(set(names))
    for tool in tools:
        assert schema_problem(tool.input_schema) is None
        assert isinstance(tool.description, str)
    named = [  # an entry left out as a whole (too deep, an integer past 64 bits) claims no name
        e
        for e in entries
        if isinstance(e, dict)
        and isinstance(e.get("name"), str)
        and e["name"]
        and json_problem(e, MAX_ENTRY_DEPTH, "x") is None
    ]
    firsts = {entry["name"]: entry for entry in reversed(named)}
    assert set(names) == {
        name for name, entry in firsts.items() if schema_problem(served_schema(entry)) is None
    }


def served_schema(entry: dict[str, Any]) -> Any:
    """The module's rule for an inputSchema, said again."""
    schema = entry.get("inputSchema")
    if schema is None or schema == {}:
        return NO_ARGUMENTS
    if isinstance(schema, dict) and "type" not in schema:
        return {"type": "object", **schema}
    return schema
