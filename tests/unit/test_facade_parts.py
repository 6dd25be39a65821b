"""The MCP facade's pure parts: views, the registry search, resource templates, host entries, the bearer
check and the listen address."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.cli.exit_codes import CliError
from supervisor.cli.facade_commands import parse_listen
from supervisor.facade.hosts import HOSTS, Launch, entry
from supervisor.facade.resources import template_pattern
from supervisor.facade.run import BearerAuth
from supervisor.facade.views import SearchIndex, View
from supervisor.protocol import ToolInfo


def tool(server: str, name: str, description: str = "", **properties: str) -> ToolInfo:
    schema = {
        "type": "object",
        "properties": {key: {"type": "string", "description": text} for key, text in properties.items()},
    }
    return ToolInfo(
        name=f"mcp_{server}_{name}",
        server=server,
        original_name=name,
        description=description,
        input_schema=schema,
    )


REGISTRY = [
    tool(
        "time", "get_current_time", "Get current time in a specific timezone", timezone="IANA timezone name"
    ),
    tool("time", "convert_time", "Convert time between timezones", source_timezone="", target_timezone=""),
    tool(
        "git",
        "git_log",
        "Shows the commit logs",
        repo_path="Path to the Git repository",
        max_count="Maximum number of commits to show, counted from the newest one back",
        start_timestamp="Start timestamp for filtering commits: ISO 8601, relative dates or absolute dates",
        end_timestamp="End timestamp for filtering commits: ISO 8601, relative dates or absolute dates",
    ),
    tool("git", "git_show", "Shows the contents of a commit", repo_path="", revision=""),
    tool("everything", "toggle-simulated-logging", "Toggles simulated, random-leveled logging on or off"),
    tool("git", "git_diff_staged", "Shows changes that are staged for commit", repo_path=""),
    tool("git", "git_status", "Shows the working tree status", repo_path=""),
    tool("calc", "add", "Adds two numbers and returns their sum", a="first number", b="second number"),
    tool("files", "read_file", "Read the complete contents of a file", path="the file's path"),
    tool("files", "writeFile", "Create a new file or overwrite one", path="", content=""),
]


# ------------------------------------------------------------------ views


def test_a_view_without_servers_or_globs_shows_everything() -> None:
    assert View().select(REGISTRY) == REGISTRY


def test_servers_view_shows_only_those_servers() -> None:
    names = {t.name for t in View(servers=frozenset({"git"})).select(REGISTRY)}
    assert names == {"mcp_git_git_log", "mcp_git_git_show", "mcp_git_git_diff_staged", "mcp_git_git_status"}


def test_tools_globs_match_prefixed_names_and_combine_with_servers() -> None:
    view = View(servers=frozenset({"git", "time"}), tools=("mcp_git_git_s*", "mcp_time_*", "mcp_calc_*"))
    names = {t.name for t in view.select(REGISTRY)}
    assert names == {
        "mcp_git_git_status",
        "mcp_git_git_show",
        "mcp_time_get_current_time",
        "mcp_time_convert_time",
    }


def test_a_tool_the_registry_does_not_have_may_be_called_when_the_view_would_show_it() -> None:
    # A server restarting has no tools in the registry: the call goes through and the supervisor says why.
    assert View().may_call("mcp_git_git_log", None)
    assert View(servers=frozenset({"git"})).may_call("mcp_git_git_log", None)
    assert not View(servers=frozenset({"time"})).may_call("mcp_git_git_log", None)
    assert not View(tools=("mcp_time_*",)).may_call("mcp_git_git_log", None)
    assert not View(servers=frozenset({"git"})).may_call("mcp_gitx_log", None)


@given(st.lists(st.sampled_from(["time", "git", "calc", "files", "everything", "other"]), unique=True))
def test_shows_and_may_call_agree_for_every_listed_tool(servers: list[str]) -> None:
    view = View(servers=frozenset(servers))
    for info in REGISTRY:
        assert view.shows(info) == view.may_call(info.name, info) == (info.server in servers)


# ------------------------------------------------------------------ search


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("what time is it in Tokyo timezone", "mcp_time_get_current_time"),
        ("show the git commit log", "mcp_git_git_log"),
        ("show git log", "mcp_git_git_log"),  # its long argument descriptions do not dilute its name
        ("add two numbers", "mcp_calc_add"),
        ("changes staged for commit", "mcp_git_git_diff_staged"),
        ("write a file", "mcp_files_writeFile"),
        ("repository path", "mcp_git_git_log"),  # argument descriptions count
    ],
)
def test_search_ranks_the_fitting_tool_in_the_top_three(query: str, expected: str) -> None:
    hits = SearchIndex.build(REGISTRY).search(query, 3)
    assert expected in [hit.tool.name for hit in hits]


def test_search_is_best_first_limited_and_empty_without_a_known_word() -> None:
    index = SearchIndex.build(REGISTRY)
    hits = index.search("time timezone", 10)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    assert hits[0].tool.server == "time"
    assert len(index.search("file", 1)) == 1
    assert index.search("zebra quantum", 10) == []
    assert index.search("   ", 10) == [] and index.search("time", 0) == []


def test_a_prefix_of_a_word_counts_less_than_the_word() -> None:
    index = SearchIndex.build(REGISTRY)
    [whole] = [hit.score for hit in index.search("status", 10) if hit.tool.original_name == "git_status"]
    [prefix] = [hit.score for hit in index.search("stat", 10) if hit.tool.original_name == "git_status"]
    assert 0 < prefix < whole


@given(st.text(max_size=200), st.integers(min_value=-5, max_value=50))
def test_any_query_searches_without_raising(query: str, limit: int) -> None:
    hits = SearchIndex.build(REGISTRY).search(query, limit)
    assert len(hits) <= max(limit, 0)


def test_search_of_an_empty_registry_finds_nothing() -> None:
    assert SearchIndex.build([]).search("anything", 5) == []


# ------------------------------------------------------------------ resource templates


@pytest.mark.parametrize(
    ("template", "uri", "fits"),
    [
        ("test://doc/{n}", "test://doc/77", True),
        ("test://doc/{n}", "test://doc/7/8", False),
        ("file:///{+path}", "file:///a/b/c.txt", True),
        ("repo://{owner}/{name}/issues{?state}", "repo://me/x/issues?state=open", True),
        ("repo://{owner}/{name}", "repo://me", False),
        ("weird://(a)+[b]/{x}", "weird://(a)+[b]/y", True),
    ],
)
def test_a_uri_fits_the_templates_it_can_expand_from(template: str, uri: str, fits: bool) -> None:
    assert bool(template_pattern(template).fullmatch(uri)) is fits


@given(st.text(max_size=60))
def test_any_template_compiles(template: str) -> None:
    template_pattern(template)


# ------------------------------------------------------------------ host entries


COMMAND = ["/opt/venv/bin/mcp-supervisor", "mcp", "--config", "/home/me/mcp.json"]


@pytest.mark.parametrize("host", [h for h in HOSTS if h not in ("claude-code", "vscode")])
def test_stdio_entries_are_mcp_servers_objects_with_the_command(host: str) -> None:
    parsed = json.loads(entry(host, "sup", Launch(command=COMMAND)))
    assert parsed == {"mcpServers": {"sup": {"command": COMMAND[0], "args": COMMAND[1:]}}}


def test_vscode_entry_is_a_servers_object_with_a_type() -> None:
    parsed = json.loads(entry("vscode", "sup", Launch(command=COMMAND)))
    assert parsed == {"servers": {"sup": {"type": "stdio", "command": COMMAND[0], "args": COMMAND[1:]}}}


def test_claude_code_gets_the_command_to_run_and_the_json() -> None:
    text = entry("claude-code", "sup", Launch(command=COMMAND))
    command, _, rest = text.partition("\n\n")
    assert command == "claude mcp add sup -- /opt/venv/bin/mcp-supervisor mcp --config /home/me/mcp.json"
    assert json.loads(rest)["mcpServers"]["sup"]["args"] == COMMAND[1:]


def test_url_entries_carry_the_token_from_the_environment() -> None:
    launch = Launch(url="http://10.0.0.2:8765/mcp", token_env="SUP_TOKEN")
    vscode = json.loads(entry("vscode", "sup", launch))["servers"]["sup"]
    assert vscode == {
        "type": "http",
        "url": "http://10.0.0.2:8765/mcp",
        "headers": {"Authorization": "Bearer ${env:SUP_TOKEN}"},
    }
    cursor = json.loads(entry("cursor", "sup", launch))["mcpServers"]["sup"]
    assert cursor["url"] == launch.url and cursor["headers"]["Authorization"] == "Bearer ${env:SUP_TOKEN}"
    windsurf = json.loads(entry("windsurf", "sup", launch))["mcpServers"]["sup"]
    assert windsurf["serverUrl"] == launch.url
    claude = entry("claude-code", "sup", launch).split("\n\n")[0]
    assert claude.startswith("claude mcp add --transport http sup http://10.0.0.2:8765/mcp --header")


# ------------------------------------------------------------------ bearer tokens and the listen address


def test_bearer_auth_lets_in_exactly_the_tokens() -> None:
    auth = BearerAuth(["first-token", "second"])
    assert (
        auth.allows(b"Bearer first-token")
        and auth.allows(b"bearer second")
        and auth.allows(b"Bearer second ")
    )
    for header in (
        None,
        b"",
        b"Bearer",
        b"Bearer ",
        b"Bearer first",
        b"Basic first-token",
        b"Bearer first-tokenx",
    ):
        assert not auth.allows(header)
    with pytest.raises(ValueError):
        BearerAuth([])
    with pytest.raises(ValueError):
        BearerAuth([""])


@given(st.binary(max_size=80))
def test_no_header_but_a_token_gets_in(header: bytes) -> None:
    token = "s3cret-token"
    allowed = BearerAuth([token]).allows(header)
    assert allowed == (header[:7].lower() == b"bearer " and header[7:].strip() == token.encode())


@pytest.mark.parametrize(
    ("value", "expected"),
    [("127.0.0.1:8765", ("127.0.0.1", 8765)), (":9000", ("127.0.0.1", 9000)), ("[::1]:0", ("[::1]", 0))],
)
def test_listen_addresses(value: str, expected: tuple[str, int]) -> None:
    assert parse_listen(value) == expected


@pytest.mark.parametrize("value", ["8765", "host:", "host:port", "h:70000", ""])
def test_bad_listen_addresses_are_usage_errors_naming_the_value(value: str) -> None:
    with pytest.raises(CliError, match="HOST:PORT") as error:
        parse_listen(value)
    assert error.value.code == 2
