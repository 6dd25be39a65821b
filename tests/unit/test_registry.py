"""Behaviour of supervisor.daemon.registry: naming rules, routing by lookup, collisions, schema checks."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest

from supervisor.daemon.registry import Registry, Route
from supervisor.protocol import WorkerTool
from supervisor.shared.names import MAX_NAME_LENGTH, prefixed_name, prefixed_names, sanitize, server_of
from supervisor.shared.schemas import schema_problem

OBJECT: dict[str, Any] = {"type": "object", "properties": {}}
SAFE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def tool(name: str, schema: Any = OBJECT, **kwargs: Any) -> WorkerTool:
    return WorkerTool(name=name, input_schema=schema, **kwargs)


def names(registry: Registry) -> list[str]:
    return [info.name for info in registry.tools()]


@pytest.fixture
def caplog_registry(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger="mcp_supervisor.registry")
    return caplog


def warnings_text(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


# --- naming rules ----------------------------------------------------------------------------


def test_unsafe_characters_in_server_and_tool_become_single_underscores() -> None:
    assert prefixed_name("my server", "weird name/with.chars") == "mcp_my_server_weird_name_with_chars"


def test_every_character_outside_the_safe_set_becomes_underscore() -> None:
    assert sanitize("a.b/c d:e@f") == "a_b_c_d_e_f"


def test_hyphens_letters_and_digits_are_kept() -> None:
    assert sanitize("Tool-Name_42") == "Tool-Name_42"


def test_runs_of_underscores_collapse_to_one() -> None:
    assert sanitize("a___b..c") == "a_b_c"


def test_leading_and_trailing_underscores_are_stripped() -> None:
    assert sanitize("__a b__") == "a_b"
    assert prefixed_name("_srv_", "..tool..") == "mcp_srv_tool"


def test_non_ascii_characters_are_replaced() -> None:
    assert prefixed_name("café", "naïve") == "mcp_caf_na_ve"


def test_sanitize_does_not_cut_long_names() -> None:
    assert len(sanitize("x" * 200)) == 200


def test_prefixed_name_is_cut_at_64_characters() -> None:
    name = prefixed_name("server", "t" * 200)
    assert len(name) == MAX_NAME_LENGTH == 64
    assert name == ("mcp_server_" + "t" * 200)[:64]


def test_short_prefixed_name_is_not_padded_or_cut() -> None:
    assert prefixed_name("s", "echo") == "mcp_s_echo"


# --- registration and lookup -----------------------------------------------------------------


def test_registered_tool_is_found_by_its_prefixed_name() -> None:
    registry = Registry()
    registry.replace("my server", [tool("weird name/with.chars")])
    assert registry.lookup("mcp_my_server_weird_name_with_chars") == Route(
        "my server", "weird name/with.chars"
    )


def test_lookup_of_unknown_name_is_none() -> None:
    registry = Registry()
    registry.replace("s", [tool("echo")])
    assert registry.lookup("mcp_s_nope") is None
    assert registry.lookup("echo") is None


def test_tool_info_keeps_original_name_server_and_metadata() -> None:
    registry = Registry()
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    (info,), _ = registry.replace(
        "srv",
        [
            tool(
                "do.it",
                schema,
                description="does it",
                title="Do It",
                output_schema={"type": "object"},
                annotations={"readOnlyHint": True},
            )
        ],
    )
    assert info.name == "mcp_srv_do_it"
    assert info.server == "srv"
    assert info.original_name == "do.it"
    assert info.description == "does it"
    assert info.input_schema == schema
    assert info.title == "Do It"
    assert info.output_schema == {"type": "object"}
    assert info.annotations == {"readOnlyHint": True}


def test_replace_returns_the_entries_it_registered() -> None:
    registry = Registry()
    infos, _ = registry.replace("s", [tool("a"), tool("b", "bad")])
    assert [i.name for i in infos] == ["mcp_s_a"]


def test_count_is_the_number_of_registered_tools_of_a_server() -> None:
    registry = Registry()
    registry.replace("s", [tool("a"), tool("b"), tool("c", {"type": "string"})])
    assert registry.count("s") == 2
    assert registry.count("unknown") == 0


def test_tools_are_listed_in_server_then_listing_order() -> None:
    registry = Registry()
    registry.replace("zeta", [tool("z2"), tool("z1")])
    registry.replace("alpha", [tool("b"), tool("a")])
    assert [(i.server, i.original_name) for i in registry.tools()] == [
        ("zeta", "z2"),
        ("zeta", "z1"),
        ("alpha", "b"),
        ("alpha", "a"),
    ]


def test_empty_registry_lists_no_tools() -> None:
    assert Registry().tools() == []


def test_replace_drops_the_servers_old_tools() -> None:
    registry = Registry()
    registry.replace("s", [tool("old"), tool("kept")])
    registry.replace("s", [tool("kept"), tool("new")])
    assert registry.lookup("mcp_s_old") is None
    assert registry.lookup("mcp_s_kept") == Route("s", "kept")
    assert registry.lookup("mcp_s_new") == Route("s", "new")
    assert sorted(names(registry)) == ["mcp_s_kept", "mcp_s_new"]
    assert registry.count("s") == 2


def test_replace_of_one_server_leaves_other_servers_alone() -> None:
    registry = Registry()
    registry.replace("a", [tool("x")])
    registry.replace("b", [tool("y")])
    registry.replace("a", [])
    assert registry.lookup("mcp_b_y") == Route("b", "y")
    assert names(registry) == ["mcp_b_y"]


def test_remove_drops_all_of_a_servers_tools() -> None:
    registry = Registry()
    registry.replace("a", [tool("x"), tool("y")])
    registry.replace("b", [tool("z")])
    registry.remove("a")
    assert registry.lookup("mcp_a_x") is None
    assert registry.lookup("mcp_a_y") is None
    assert registry.count("a") == 0
    assert names(registry) == ["mcp_b_z"]


def test_remove_of_unknown_server_is_a_no_op() -> None:
    registry = Registry()
    registry.replace("a", [tool("x")])
    version = registry.version
    registry.remove("nobody")
    assert registry.version == version
    assert names(registry) == ["mcp_a_x"]


def test_version_grows_by_one_on_every_change_and_only_then() -> None:
    registry = Registry()
    assert registry.version == 0
    registry.replace("a", [tool("x")])
    registry.replace("b", [tool("y")])
    assert registry.version == 2
    _, diff = registry.replace("a", [tool("x")])  # the same tools again: nothing changed
    assert diff is None and registry.version == 2
    registry.remove("a")
    registry.replace("b", [])
    assert registry.version == 4
    assert registry.remove("a") is None and registry.version == 4


def test_diffs_name_added_removed_and_changed_tools() -> None:
    registry = Registry()
    _, diff = registry.replace("s", [tool("keep"), tool("drop"), tool("edit")])
    assert diff is not None and [info.name for info in diff.added] == [
        "mcp_s_keep",
        "mcp_s_drop",
        "mcp_s_edit",
    ]
    edited = WorkerTool(name="edit", description="new words", input_schema={"type": "object"})
    _, diff = registry.replace("s", [tool("keep"), edited, tool("new")])
    assert diff is not None
    assert [info.name for info in diff.added] == ["mcp_s_new"]
    assert diff.removed == ["mcp_s_drop"]
    assert [(info.name, info.description) for info in diff.changed] == [("mcp_s_edit", "new words")]
    diff = registry.remove("s")
    assert diff is not None and sorted(diff.removed) == ["mcp_s_edit", "mcp_s_keep", "mcp_s_new"]


def test_tools_listing_reflects_changes_after_being_read() -> None:
    registry = Registry()
    registry.replace("a", [tool("x")])
    assert names(registry) == ["mcp_a_x"]
    registry.replace("b", [tool("y")])
    assert names(registry) == ["mcp_a_x", "mcp_b_y"]
    registry.remove("a")
    assert names(registry) == ["mcp_b_y"]


# --- collisions ------------------------------------------------------------------------------


def test_colliding_names_from_two_servers_keep_both_tools_with_stable_suffix() -> None:
    registry = Registry()
    registry.replace("a_b", [tool("c")])
    registry.replace("a", [tool("b_c")])
    first, second = registry.tools()
    assert first.name == "mcp_a_b_c"
    assert second.name != first.name
    assert second.name.startswith("mcp_a_b_c_")
    assert registry.lookup(first.name) == Route("a_b", "c")
    assert registry.lookup(second.name) == Route("a", "b_c")


def test_colliding_names_within_one_server_keep_both_tools() -> None:
    registry = Registry()
    registry.replace("s", [tool("b_c"), tool("b.c"), tool("b c")])
    infos = registry.tools()
    assert len(infos) == 3
    assert len({i.name for i in infos}) == 3
    for info in infos:
        assert registry.lookup(info.name) == Route("s", info.original_name)


def test_suffix_is_the_same_in_a_fresh_registry_for_the_same_inputs() -> None:
    def build() -> list[str]:
        registry = Registry()
        registry.replace("a_b", [tool("c")])
        registry.replace("a", [tool("b_c")])
        return names(registry)

    assert build() == build()


def test_suffix_depends_on_the_server_and_tool_it_is_for() -> None:
    r1, r2 = Registry(), Registry()
    for registry, (server, name) in ((r1, ("a", "b_c")), (r2, ("a.b", "c"))):
        registry.replace("a_b", [tool("c")])
        registry.replace(server, [tool(name)])
    assert names(r1)[1] != names(r2)[1]


def test_collision_logs_a_warning_naming_both_tools(caplog_registry: pytest.LogCaptureFixture) -> None:
    registry = Registry()
    registry.replace("a_b", [tool("c")])
    registry.replace("a", [tool("b_c")])
    (message,) = warnings_text(caplog_registry)
    assert "'a_b'" in message and "'c'" in message
    assert "'a'" in message and "'b_c'" in message
    assert "mcp_a_b_c" in message
    assert names(registry)[1] in message


def test_no_warning_when_names_do_not_collide(caplog_registry: pytest.LogCaptureFixture) -> None:
    Registry().replace("s", [tool("a"), tool("b")])
    assert warnings_text(caplog_registry) == []


def test_truncation_collision_keeps_both_long_tools(caplog_registry: pytest.LogCaptureFixture) -> None:
    registry = Registry()
    common = "x" * 80
    registry.replace("s", [tool(common + "_one"), tool(common + "_two")])
    infos = registry.tools()
    assert len(infos) == 2
    assert infos[0].name != infos[1].name
    assert registry.lookup(infos[0].name) == Route("s", common + "_one")
    assert registry.lookup(infos[1].name) == Route("s", common + "_two")
    (message,) = warnings_text(caplog_registry)
    assert common + "_one" in message and common + "_two" in message


def test_names_never_exceed_64_characters_even_when_suffixed() -> None:
    registry = Registry()
    long_server = "server-" * 12
    tools = [tool("t" * 100 + str(i)) for i in range(5)]
    registry.replace(long_server, tools)
    registry.replace(long_server + "!", tools)  # sanitizes to the same prefix -> more collisions
    infos = registry.tools()
    assert len(infos) == 10
    assert len({i.name for i in infos}) == 10
    for info in infos:
        assert len(info.name) <= MAX_NAME_LENGTH
        assert SAFE_NAME.match(info.name), info.name
        assert registry.lookup(info.name) == Route(info.server, info.original_name)


def test_suffixed_long_name_does_not_contain_a_double_underscore() -> None:
    registry = Registry()
    # "mcp_s_" + 48 "y" puts an underscore at index 54, where a suffixed name is cut
    base_tool = "y" * 48 + "_" + "z" * 30
    registry.replace("s", [tool(base_tool), tool(base_tool + ".")])
    suffixed = names(registry)[1]
    assert len(suffixed) <= MAX_NAME_LENGTH
    assert "__" not in suffixed
    assert registry.lookup(suffixed) == Route("s", base_tool + ".")


def _suffixed_name_for_a_b_c() -> str:
    registry = Registry()
    registry.replace("a_b", [tool("c")])
    registry.replace("a", [tool("b_c")])
    return names(registry)[1]


def test_suffixed_name_that_is_already_taken_gets_another_suffix() -> None:
    first_choice = _suffixed_name_for_a_b_c()
    registry = Registry()
    # server "a_b" already owns both the base name and the first suffixed candidate
    squatter = first_choice.removeprefix("mcp_a_b_")
    registry.replace("a_b", [tool("c"), tool(squatter)])
    registry.replace("a", [tool("b_c")])
    infos = registry.tools()
    assert [i.name for i in infos][:2] == ["mcp_a_b_c", first_choice]
    assert infos[2].name not in {"mcp_a_b_c", first_choice}
    assert len(infos[2].name) <= MAX_NAME_LENGTH
    assert registry.lookup(infos[2].name) == Route("a", "b_c")


def test_name_that_equals_another_tools_suffixed_name_is_itself_suffixed() -> None:
    suffixed = _suffixed_name_for_a_b_c()
    registry = Registry()
    registry.replace("a_b", [tool("c")])
    registry.replace("a", [tool("b_c")])
    # "a.b" + "c_<hex>" sanitizes to exactly the suffixed name already in use
    registry.replace("a.b", [tool(suffixed.removeprefix("mcp_a_b_"))])
    infos = registry.tools()
    assert len({i.name for i in infos}) == len(infos) == 3
    assert registry.lookup(suffixed) == Route("a", "b_c")
    for info in infos:
        assert registry.lookup(info.name) == Route(info.server, info.original_name)


def test_removed_servers_name_is_free_again() -> None:
    registry = Registry()
    registry.replace("a_b", [tool("c")])
    registry.replace("a", [tool("b_c")])
    registry.remove("a_b")
    registry.replace("a", [tool("b_c")])
    assert registry.lookup("mcp_a_b_c") == Route("a", "b_c")


# --- duplicates and schemas ------------------------------------------------------------------


def test_duplicate_tool_names_from_one_server_keep_the_first(
    caplog_registry: pytest.LogCaptureFixture,
) -> None:
    registry = Registry()
    registry.replace("s", [tool("dup", description="first"), tool("dup", description="second")])
    (info,) = registry.tools()
    assert info.description == "first"
    (message,) = warnings_text(caplog_registry)
    assert "'s'" in message and "'dup'" in message


def test_same_tool_name_on_two_servers_is_not_a_duplicate() -> None:
    registry = Registry()
    registry.replace("a", [tool("echo")])
    registry.replace("b", [tool("echo")])
    assert names(registry) == ["mcp_a_echo", "mcp_b_echo"]


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (None, "NoneType"),
        ([], "list"),
        ("object", "str"),
        ({"type": "string"}, "'string'"),
        ({"type": "array", "items": {}}, "'array'"),
        ({"type": "object", "properties": {"x": {"type": "not-a-type"}}}, "properties/x/type"),
        ({"type": "object", "required": "x"}, "required"),
    ],
    ids=["none", "list", "string", "type-string", "type-array", "bad-property-type", "bad-required"],
)
def test_invalid_input_schema_is_left_out_with_a_warning_naming_server_and_tool(
    caplog_registry: pytest.LogCaptureFixture, schema: Any, why: str
) -> None:
    registry = Registry()
    infos, _ = registry.replace("srv", [tool("good"), tool("broken", schema)])
    assert [i.original_name for i in infos] == ["good"]
    assert registry.lookup("mcp_srv_broken") is None
    assert registry.lookup("mcp_srv_good") == Route("srv", "good")
    (message,) = warnings_text(caplog_registry)
    assert "'srv'" in message and "'broken'" in message
    assert why in message


def test_schema_without_type_is_accepted() -> None:
    registry = Registry()
    registry.replace("s", [tool("loose", {"properties": {"x": {"type": "string"}}})])
    assert registry.lookup("mcp_s_loose") == Route("s", "loose")


def test_empty_schema_object_is_accepted() -> None:
    assert schema_problem({}) is None


def test_valid_object_schema_has_no_problem() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0}, "s": {"type": ["string", "null"]}},
        "required": ["n"],
        "additionalProperties": False,
    }
    assert schema_problem(schema) is None


def test_schema_declaring_an_older_draft_is_checked_against_that_draft() -> None:
    assert schema_problem({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}) is None
    problem = schema_problem(
        {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": 3}
    )
    assert problem is not None


def test_tool_left_out_for_its_schema_does_not_block_a_later_valid_tool() -> None:
    registry = Registry()
    registry.replace("s", [tool("a", 5), tool("b"), tool("c", {"type": "number"}), tool("d")])
    assert names(registry) == ["mcp_s_b", "mcp_s_d"]
    assert registry.count("s") == 2


def test_a_name_cut_at_64_characters_never_ends_in_an_underscore() -> None:
    name = prefixed_name("s", "a" * 57 + ".b")
    assert not name.endswith("_")
    assert name == "mcp_s_" + "a" * 57


# --- prompt names ----------------------------------------------------------------------------


def test_prompts_are_named_as_tools_are() -> None:
    assert prefixed_names("files", ["summarize", "plain prompt/v1"]) == {
        "mcp_files_summarize": "summarize",
        "mcp_files_plain_prompt_v1": "plain prompt/v1",
    }


def test_prompts_that_map_to_one_name_keep_both_the_later_with_a_stable_suffix() -> None:
    first = prefixed_names("s", ["a b", "a.b"])
    assert list(first.values()) == ["a b", "a.b"]
    plain, suffixed = list(first)
    assert plain == "mcp_s_a_b" and re.fullmatch(r"mcp_s_a_b_[0-9a-f]{8}", suffixed)
    assert prefixed_names("s", ["a b", "a.b"]) == first


def test_long_prompt_names_are_cut_and_stay_distinct() -> None:
    names = prefixed_names("server", ["x" * 100, "x" * 99])
    assert len(names) == 2 and all(len(name) <= MAX_NAME_LENGTH for name in names)


def test_a_prefixed_name_resolves_to_the_server_whose_prefix_it_carries() -> None:
    assert server_of("mcp_files_summarize", ["time", "files"]) == "files"
    assert server_of("mcp_my_server_p", ["my.server"]) == "my.server"  # the prefix is sanitised
    assert server_of("mcp_files", ["files"]) is None  # no prompt part
    assert server_of("summarize", ["files"]) is None
    assert server_of("mcp_other_p", ["files"]) is None


def test_the_longest_server_prefix_wins() -> None:
    assert server_of("mcp_a_b_c", ["a", "a_b"]) == "a_b"
    assert server_of("mcp_a_c", ["a", "a_b"]) == "a"


# --- tool views (enabledTools, disabledTools) ------------------------------------------------

VIEWED = ["read_file", "write_file", "list_dir", "delete_file", "echo"]


def viewed(enabled: list[str] | None = None, disabled: list[str] | None = None) -> Registry:
    registry = Registry()
    registry.replace("fs", [tool(name) for name in VIEWED], enabled=enabled, disabled=disabled or ())
    return registry


def originals(registry: Registry) -> list[str]:
    return [info.original_name for info in registry.tools()]


def test_without_a_view_every_tool_is_registered() -> None:
    assert originals(viewed()) == VIEWED


def test_enabled_tools_registers_only_the_tools_it_names() -> None:
    registry = viewed(enabled=["echo", "list_dir"])
    assert originals(registry) == ["list_dir", "echo"]
    assert registry.count("fs") == 2


def test_disabled_tools_leaves_out_the_tools_it_names() -> None:
    assert originals(viewed(disabled=["delete_file", "echo"])) == ["read_file", "write_file", "list_dir"]


def test_disabled_tools_wins_over_enabled_tools() -> None:
    assert originals(viewed(enabled=["*_file", "echo"], disabled=["delete_*", "echo"])) == [
        "read_file",
        "write_file",
    ]


def test_view_patterns_are_globs_on_the_servers_own_tool_names() -> None:
    assert originals(viewed(enabled=["*_fil?"])) == ["read_file", "write_file", "delete_file"]
    assert originals(viewed(enabled=["[lr]*"])) == ["read_file", "list_dir"]
    assert originals(viewed(enabled=["mcp_fs_*"])) == []  # never the prefixed name
    assert originals(viewed(enabled=["ECHO"])) == []  # case-sensitive


def test_an_empty_enabled_tools_list_registers_no_tool() -> None:
    registry = viewed(enabled=[])
    infos, diff = registry.replace("fs", [tool(name) for name in VIEWED], enabled=[])
    assert infos == [] and diff is None
    assert registry.tools() == [] and registry.count("fs") == 0


def test_a_hidden_tool_is_never_routed() -> None:
    registry = viewed(disabled=["delete_file"])
    assert registry.lookup("mcp_fs_delete_file") is None
    assert registry.lookup("mcp_fs_read_file") == Route("fs", "read_file")


def test_a_hidden_tool_takes_no_name_so_the_tool_it_would_collide_with_gets_no_suffix(
    caplog_registry: pytest.LogCaptureFixture,
) -> None:
    registry = Registry()
    infos, _ = registry.replace("s", [tool("b.c"), tool("b_c")], disabled=["b.c"])
    assert [(i.name, i.original_name) for i in infos] == [("mcp_s_b_c", "b_c")]
    assert warnings_text(caplog_registry) == []  # no collision, nothing suffixed


def test_a_hidden_tool_is_neither_a_duplicate_nor_checked_for_its_schema(
    caplog_registry: pytest.LogCaptureFixture,
) -> None:
    registry = Registry()
    registry.replace("s", [tool("ok"), tool("off", "bad"), tool("off")], disabled=["off"])
    assert names(registry) == ["mcp_s_ok"]
    assert warnings_text(caplog_registry) == []


def test_a_hidden_tool_is_logged_once_at_debug_level(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="mcp_supervisor.registry")
    registry = Registry()
    for extra in ([], ["new"], ["new", "newer"]):  # the server's tools change twice: still once
        registry.replace("fs", [tool(name) for name in [*VIEWED, *extra]], disabled=["delete_file"])
    hidden = [r for r in caplog.records if "left out by its enabledTools/disabledTools" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in hidden] == [
        (logging.DEBUG, "server 'fs' tool 'delete_file' left out by its enabledTools/disabledTools")
    ]


def test_a_view_that_changes_changes_the_registry_and_its_version() -> None:
    registry = viewed(enabled=["echo"])
    version = registry.version
    _, diff = registry.replace("fs", [tool(name) for name in VIEWED], enabled=["echo", "list_dir"])
    assert diff is not None and [i.original_name for i in diff.added] == ["list_dir"]
    assert registry.version == version + 1
    _, diff = registry.replace("fs", [tool(name) for name in VIEWED], disabled=["*"])
    assert diff is not None and sorted(diff.removed) == ["mcp_fs_echo", "mcp_fs_list_dir"]
    assert registry.tools() == []


def test_a_view_of_one_server_leaves_other_servers_alone() -> None:
    registry = viewed(enabled=[])
    registry.replace("other", [tool("delete_file")])
    assert names(registry) == ["mcp_other_delete_file"]
