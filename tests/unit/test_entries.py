"""``workers.entries``: a resources, templates or prompts listing's entries, checked with msgspec, are
what the SDK's models make of them: the same entries kept, with the same values, and the same
warnings for those left out."""

from __future__ import annotations

import logging
from typing import Any

import mcp_types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers.entries import Prompt, Resource, ResourceTemplate, dump, entries_of
from workers.listing import Warnings, models_of

_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.5, 1.5, -0.1, 1.0]),
    st.sampled_from(["", "x", "5", "user", "assistant", "light", "true"]),
)
_annotations = st.dictionaries(
    st.sampled_from(["audience", "priority", "lastModified", "other"]),
    st.one_of(_values, st.lists(_values, max_size=2)),
    max_size=3,
)
_argument = st.dictionaries(
    st.sampled_from(["name", "title", "description", "required", "x"]), _values, max_size=4
)
_icon = st.dictionaries(
    st.sampled_from(["src", "mimeType", "sizes", "theme"]),
    st.one_of(_values, st.lists(_values, max_size=2)),
    max_size=4,
)


def _entry(key: str) -> st.SearchStrategy[dict[str, Any]]:
    fields = {
        "name": st.sampled_from(["a", "b"]),
        key: st.sampled_from(["x://a", "x://{id}", "p"]),
        "title": _values,
        "description": _values,
        "mimeType": _values,
        "size": _values,
        "annotations": st.one_of(_annotations, _values),
        "arguments": st.one_of(st.lists(_argument, max_size=2), _values),
        "icons": st.one_of(st.lists(_icon, max_size=1), _values),
        "_meta": st.one_of(st.just({"k": 1}), _values),
    }
    required = {"name": fields.pop("name"), key: fields.pop(key)}
    return st.fixed_dictionaries(required, optional=fields)


def _seen(items: list[Any], model: bool) -> list[dict[str, Any]]:
    def part(value: Any) -> Any:
        if value is None:
            return None
        if model:
            return value.model_dump(by_alias=True, mode="json", exclude_none=True)
        return dump(value)

    return [
        {
            "name": item.name,
            "title": item.title,
            "description": item.description,
            "uri": getattr(item, "uri", None),
            "template": getattr(item, "uri_template", None),
            "mime": getattr(item, "mime_type", None),
            "size": getattr(item, "size", None),
            "annotations": part(getattr(item, "annotations", None)),
            "arguments": [part(argument) for argument in getattr(item, "arguments", None) or ()],
        }
        for item in items
    ]


@pytest.mark.parametrize(
    ("kind", "model", "key"),
    [
        (Resource, mcp_types.Resource, "uri"),
        (ResourceTemplate, mcp_types.ResourceTemplate, "uriTemplate"),
        (Prompt, mcp_types.Prompt, "name"),
    ],
)
@given(data=st.data())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_entries_are_what_the_sdks_models_make_of_them(
    kind: type[Any], model: type[Any], key: str, data: st.DataObject, caplog: pytest.LogCaptureFixture
) -> None:
    entries = data.draw(st.lists(_entry("uri" if key == "name" else key), max_size=3))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        ours = entries_of("x/list", entries, kind, key, Warnings("s"))
        our_warnings = [record.getMessage() for record in caplog.records]
        caplog.clear()
        theirs = models_of("x/list", entries, model, key, Warnings("s"))
        their_warnings = [record.getMessage() for record in caplog.records]
    assert _seen(ours, model=False) == _seen(theirs, model=True)
    assert our_warnings == their_warnings
