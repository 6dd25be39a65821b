"""Generated tools/list pages thrown at a real worker: whatever a page holds (odd schemas, missing
fields, wrong types, duplicate and unicode names, deep nesting), exactly its usable tools are
registered, the server stays ready with the same worker, and its valid tools answer.

One supervisor for the module, serving ``tests/servers/hostile_server.py``; each example writes the
page, has the server announce ``notifications/tools/list_changed`` and waits (bounded) for the
registry to move. A ``marker`` tool, listed first with a new description each time, makes every
listing a change.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.shared.schemas import schema_problem
from tests.e2e.harness import SupervisorProcess, poll
from tests.e2e.test_listing import CONTROL, deep_schema, hostile
from tests.hostile import json_values
from tests.unit.test_listing import served_schema
from workers.listing import MAX_ENTRY_DEPTH
from workers.values import json_problem

pytestmark = pytest.mark.e2e

RELIST_TIMEOUT = 20.0  # seconds for a list_changed to reach the registry
JSON = json_values(max_leaves=10)
PROPERTY = st.sampled_from([{"type": "string"}, {"type": "integer", "minimum": 0}, {"type": "nope"}, {}, 5])
SCHEMAS = st.one_of(
    JSON,
    st.builds(deep_schema, st.integers(1, 40)),  # past MAX_ENTRY_DEPTH from 31 levels on
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["object", "string", 5, None, ["object"]]),
            "properties": st.dictionaries(st.text(max_size=4), PROPERTY, max_size=3) | JSON,
            "required": st.lists(st.text(max_size=4), max_size=2) | JSON,
            "additionalProperties": st.booleans() | JSON,
        },
    ),
)
# Tool names start with "t" so that none sanitizes to the marker's or a control tool's prefixed name.
NAMES = st.one_of(st.builds("t{}".format, st.text(max_size=12)), st.just(""), st.integers(), st.none())
ENTRIES = st.one_of(
    JSON,
    st.fixed_dictionaries(
        {"name": NAMES},
        optional={
            "inputSchema": SCHEMAS,
            "outputSchema": SCHEMAS,
            "description": JSON,
            "title": JSON,
            "annotations": JSON,
        },
    ),
)


@pytest.fixture(scope="module")
def fuzz(
    start_module_supervisor: Callable[..., SupervisorProcess], tmp_path_factory: pytest.TempPathFactory
) -> tuple[SupervisorProcess, Path]:
    pages = tmp_path_factory.mktemp("listing-fuzz") / "pages.json"
    pages.write_text(json.dumps({"tools": [{"name": "marker"}]}))
    return start_module_supervisor({"f": hostile(pages)}, log_level="info"), pages


def usable(entries: list[Any]) -> set[str]:
    """The names of the tools the module's rules serve (``workers.listing``), said again."""
    firsts: dict[str, Any] = {}  # an entry left out as a whole (too deep, not JSON) claims no name
    for entry in entries:
        named = isinstance(entry, dict) and isinstance(entry.get("name"), str) and entry["name"]
        if named and json_problem(entry, MAX_ENTRY_DEPTH, "x") is None:
            firsts.setdefault(entry["name"], entry)
    return {name for name, entry in firsts.items() if schema_problem(served_schema(entry)) is None}


examples = itertools.count()


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ENTRIES, max_size=10))
def test_any_tools_page_registers_exactly_its_usable_tools_and_harms_nothing(
    fuzz: tuple[SupervisorProcess, Path], entries: list[Any]
) -> None:
    sup, pages = fuzz
    before = sup.status()["f"]
    version = sup.client.tool_list().version
    marker = {"name": "marker", "description": f"example {next(examples)}"}
    pages.write_text(json.dumps({"tools": [marker, *entries]}))
    sup.client.call_tool("mcp_f_hostile_changed", {})
    poll("the registry to move", lambda: sup.client.tool_list().version > version, RELIST_TIMEOUT)
    registered = {tool.original_name for tool in sup.client.tool_list().tools if tool.server == "f"}
    assert registered == usable(entries) | {"marker"} | CONTROL
    after = sup.status()["f"]
    assert (after.state, after.worker_pid, after.restarts) == ("ready", before.worker_pid, before.restarts)
    assert sup.client.call_tool("mcp_f_marker", {"any": ["thing"]}).text == '{"any": ["thing"]}'


def test_the_fuzzed_worker_is_the_first_one(fuzz: tuple[SupervisorProcess, Path]) -> None:
    sup, _ = fuzz
    row = sup.status()["f"]
    assert (row.state, row.restarts) == ("ready", 0)
    assert "Traceback" not in sup.log
