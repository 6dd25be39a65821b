"""Behaviour of supervisor.config.tool_filters: which tools enabledTools and disabledTools let through."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.config.tool_filters import tool_allowed

NAMES = ["echo", "add", "read_file", "write_file", "Read_File", "git_status", "weird name/with.chars"]


def allowed(enabled: list[str] | None = None, disabled: tuple[str, ...] | list[str] = ()) -> list[str]:
    return [name for name in NAMES if tool_allowed(name, enabled, disabled)]


def test_no_view_allows_every_tool() -> None:
    assert allowed() == NAMES


def test_enabled_names_only_those_tools() -> None:
    assert allowed(["echo", "add", "nothing_by_this_name"]) == ["echo", "add"]


def test_disabled_leaves_out_only_those_tools() -> None:
    assert allowed(disabled=["echo", "git_status"]) == [
        "add",
        "read_file",
        "write_file",
        "Read_File",
        "weird name/with.chars",
    ]


def test_disabled_wins_over_enabled() -> None:
    assert allowed(["*_file", "echo"], ["write_*"]) == ["echo", "read_file"]


def test_an_empty_enabled_list_allows_no_tool() -> None:
    assert allowed([]) == []
    assert allowed([], ["echo"]) == []


def test_an_empty_disabled_list_leaves_nothing_out() -> None:
    assert allowed(None, []) == NAMES


@pytest.mark.parametrize(
    ("pattern", "matched"),
    [
        ("*", NAMES),
        ("*_file", ["read_file", "write_file"]),  # case-sensitive: not Read_File
        ("?dd", ["add"]),
        ("[ae]*", ["echo", "add"]),
        ("[!aeg]*", ["read_file", "write_file", "Read_File", "weird name/with.chars"]),
        ("weird name/*", ["weird name/with.chars"]),  # the server's own name, before sanitising
        ("mcp_test_echo", []),  # never the prefixed name
        ("ECHO", []),
    ],
)
def test_patterns_are_case_sensitive_fnmatch_globs_on_the_servers_own_name(
    pattern: str, matched: list[str]
) -> None:
    assert allowed([pattern]) == matched
    assert allowed(disabled=[pattern]) == [name for name in NAMES if name not in matched]


def test_any_iterable_of_patterns_will_do() -> None:
    assert tool_allowed("echo", ("e*",), frozenset({"x"}))
    assert not tool_allowed("echo", iter(["a*"]))


PLAIN = st.characters(blacklist_characters="*?[]")  # no glob syntax: a name is its own pattern
names = st.text(PLAIN, max_size=12)
patterns = st.lists(
    st.text(min_size=1, max_size=6) | st.sampled_from(["*", "?", "[a-c]*", "e*", "*_file"]), max_size=4
)


@given(name=names, enabled=st.none() | patterns, disabled=patterns)
def test_a_view_is_its_enabled_part_and_its_disabled_part(
    name: str, enabled: list[str] | None, disabled: list[str]
) -> None:
    both = tool_allowed(name, enabled, disabled)
    assert both == (tool_allowed(name, enabled) and tool_allowed(name, None, disabled))


@given(name=names, enabled=st.none() | patterns, disabled=patterns, more=patterns)
def test_more_disabled_patterns_never_allow_more_and_more_enabled_ones_never_allow_less(
    name: str, enabled: list[str] | None, disabled: list[str], more: list[str]
) -> None:
    if tool_allowed(name, enabled, [*disabled, *more]):
        assert tool_allowed(name, enabled, disabled)
    if tool_allowed(name, enabled, disabled):
        assert tool_allowed(name, [*(enabled or ["*"]), *more], disabled)


@given(name=names, enabled=st.none() | patterns)
def test_disabled_always_wins(name: str, enabled: list[str] | None) -> None:
    assert not tool_allowed(name, enabled, [name])
    assert not tool_allowed(name, enabled, ["*"])
    assert not tool_allowed(name, [name, "*"], [name])


@given(name=names)
def test_without_patterns_everything_is_allowed_and_an_empty_enabled_list_allows_nothing(name: str) -> None:
    assert tool_allowed(name)
    assert tool_allowed(name, None, [])
    assert tool_allowed(name, [name])
    assert not tool_allowed(name, [])
