"""workers.requests.fill_defaults: a form's content from its schema's defaults."""

from typing import Any

import pytest

from workers.requests import fill_defaults


@pytest.mark.parametrize(
    ("schema", "content", "missing"),
    [
        ({"type": "object", "properties": {}}, {}, []),
        (
            {
                "properties": {
                    "name": {"type": "string", "default": "John Doe"},
                    "age": {"type": "integer", "default": 30},
                    "off": {"type": "boolean", "default": False},
                    "none": {"type": "string", "default": None},
                    "free": {"type": "string"},
                },
                "required": ["name", "age"],
            },
            {"name": "John Doe", "age": 30, "off": False, "none": None},
            [],
        ),
        ({"properties": {"a": {"type": "string"}}, "required": ["a", "b"]}, {}, ["a", "b"]),
        ({"properties": "bad", "required": "bad"}, {}, []),
        ({"properties": {"a": "not a schema"}, "required": ["a"]}, {}, ["a"]),
    ],
)
def test_fill_defaults(schema: dict[str, Any], content: dict[str, Any], missing: list[str]) -> None:
    assert fill_defaults(schema) == (content, missing)
