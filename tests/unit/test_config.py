"""Behaviour of supervisor.config.load: discovery, whole-file errors, per-server problems, expansion."""

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from supervisor.config.load import (
    DEFAULT_TOOL_TIMEOUT,
    Config,
    ConfigError,
    MissingVariable,
    ServerSpec,
    expand_vars,
    find_config,
    load_config,
    parse_config,
)
from supervisor.daemon.reload_plan import plan_reload

REPO_CONFIG = Path(__file__).resolve().parents[2] / "config" / "mcp.json"


def parse(servers: dict[str, Any], environ: dict[str, str] | None = None) -> Config:
    data = json.dumps({"mcpServers": servers}).encode()
    return parse_config(data, environ={} if environ is None else environ)


def only_problem(config: Config) -> str:
    assert len(config.problems) == 1, config.problems
    return config.problems[0].message


def write(path: Path, servers: dict[str, Any] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": servers or {"s": {"command": "x"}}}))
    return path


# --- discovery -------------------------------------------------------------------------------


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    cwd, home = tmp_path / "work", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    return {
        "cwd": cwd,
        "home": home,
        "env": tmp_path / "elsewhere" / "from-env.json",
        "local": cwd / "mcp.json",
        "config_dir": cwd / "config" / "mcp.json",
        "user": home / ".config" / "mcp-supervisor" / "mcp.json",
    }


def find(places: dict[str, Path], environ: dict[str, str] | None = None) -> Path | None:
    return find_config(environ=environ or {}, cwd=places["cwd"], home=places["home"])


def test_discovery_prefers_env_var_then_cwd_then_config_dir_then_user_config(places: dict[str, Path]) -> None:
    environ = {"MCP_SUPERVISOR_CONFIG": str(places["env"])}
    for key in ("user", "config_dir", "local", "env"):
        write(places[key])
        assert find(places, environ) == places[key]
    places["env"].unlink()
    assert find(places, environ) == places["local"]
    places["local"].unlink()
    assert find(places, environ) == places["config_dir"]
    places["config_dir"].unlink()
    assert find(places, environ) == places["user"]


def test_discovery_returns_none_when_nothing_exists(places: dict[str, Path]) -> None:
    assert find(places, {"MCP_SUPERVISOR_CONFIG": str(places["env"])}) is None


def test_discovery_skips_a_directory_named_mcp_json(places: dict[str, Path]) -> None:
    places["local"].mkdir()
    write(places["config_dir"])
    assert find(places) == places["config_dir"]


def test_relative_env_var_path_is_resolved_against_cwd(places: dict[str, Path]) -> None:
    write(places["cwd"] / "sub" / "x.json")
    assert find(places, {"MCP_SUPERVISOR_CONFIG": "sub/x.json"}) == places["cwd"] / "sub" / "x.json"


def test_explicit_path_is_returned_even_if_missing_and_tilde_uses_home(places: dict[str, Path]) -> None:
    home = places["home"]
    assert find_config("~/a.json", environ={}, cwd=places["cwd"], home=home) == home / "a.json"
    assert find_config("rel.json", environ={}, cwd=places["cwd"], home=home) == places["cwd"] / "rel.json"


def test_load_config_without_any_file_lists_the_places_it_looked(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(places["cwd"])
    environ = {"HOME": str(places["home"]), "MCP_SUPERVISOR_CONFIG": str(places["env"])}
    with pytest.raises(ConfigError) as info:
        load_config(environ=environ)
    for key in ("env", "local", "config_dir", "user"):
        assert str(places[key]) in str(info.value)


def test_load_config_discovers_the_file_from_the_env_var(tmp_path: Path) -> None:
    path = write(tmp_path / "c.json")
    config = load_config(environ={"MCP_SUPERVISOR_CONFIG": str(path)})
    assert config.path == path
    assert list(config.servers) == ["s"]


# --- whole-file errors -----------------------------------------------------------------------


def test_explicit_missing_file_is_an_error_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(ConfigError, match="does not exist") as info:
        load_config(missing, environ={})
    assert str(missing) in str(info.value)


def test_explicit_directory_is_an_error_naming_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory") as info:
        load_config(tmp_path, environ={})
    assert str(tmp_path) in str(info.value)


def test_invalid_json_is_an_error_with_path_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "mcpServers": {\n    "a" {}\n  }\n}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    message = str(info.value)
    assert str(path) in message
    assert "not valid JSON" in message
    assert "line 3, column 9" in message


@pytest.mark.parametrize("data", [b"", b"  \n", b'{"mcpServers": {'])
def test_empty_or_truncated_file_is_invalid_json(data: bytes) -> None:
    with pytest.raises(ConfigError, match="not valid JSON: unexpected end of file"):
        parse_config(data)


@pytest.mark.parametrize("data", [b"[]", b'"mcpServers"', b"null", b"3"])
def test_top_level_that_is_not_an_object_is_an_error(data: bytes) -> None:
    with pytest.raises(ConfigError, match="top level must be a JSON object") as info:
        parse_config(data, path=Path("/x/mcp.json"))
    assert "/x/mcp.json" in str(info.value)


def test_missing_mcp_servers_is_an_error_that_lists_keys_found() -> None:
    with pytest.raises(ConfigError, match='no "mcpServers" object') as info:
        parse_config(b'{"mcp_servers": {}}')
    assert "mcp_servers" in str(info.value)


@pytest.mark.parametrize("value", ["[]", "null", '"x"'])
def test_mcp_servers_that_is_not_an_object_is_an_error(value: str) -> None:
    with pytest.raises(ConfigError, match='"mcpServers" must be an object'):
        parse_config(f'{{"mcpServers": {value}}}'.encode())


def test_vs_code_servers_key_is_accepted_when_mcp_servers_is_absent() -> None:
    config = parse_config(b'{"servers": {"a": {"command": "x"}}, "inputs": []}', environ={})
    assert list(config.servers) == ["a"]


def test_mcp_servers_wins_over_servers_and_other_top_level_keys_are_ignored() -> None:
    data = b'{"servers": {"a": {"command": "x"}}, "mcpServers": {"b": {"command": "y"}}, "z": 1}'
    assert list(parse_config(data, environ={}).servers) == ["b"]


def test_utf8_bom_is_tolerated() -> None:
    assert list(parse_config(b'\xef\xbb\xbf{"mcpServers": {"a": {"command": "x"}}}', environ={}).servers) == [
        "a"
    ]


# --- per-server problems ---------------------------------------------------------------------


def test_unknown_field_typo_is_reported_with_server_and_field_and_others_still_load() -> None:
    config = parse({"time": {"comand": "mcp-server-time"}, "ok": {"command": "x"}})
    message = only_problem(config)
    assert config.problems[0].server == "time"
    assert message.startswith("server 'time': ")
    assert "unknown field 'comand'" in message
    assert "did you mean 'command'" in message
    assert list(config.servers) == ["ok"]


def test_wrong_type_is_reported_with_server_field_and_types() -> None:
    message = only_problem(parse({"t": {"command": "x", "toolTimeout": "soon"}}))
    assert message.startswith("server 't': field 'toolTimeout'")
    assert "float" in message and "str" in message


def test_wrong_type_inside_a_list_names_the_index() -> None:
    assert "field 'args[1]'" in only_problem(parse({"t": {"command": "x", "args": ["a", 2]}}))


def test_server_entry_that_is_not_an_object_is_a_problem() -> None:
    assert only_problem(parse({"t": "mcp-server-time"})) == "server 't': entry must be a JSON object, got str"


def test_empty_and_overlong_server_names_are_problems_but_odd_names_are_fine() -> None:
    config = parse({"": {"command": "x"}, "n" * 65: {"command": "x"}, "my server/v2 ✓": {"command": "x"}})
    assert [p.server for p in config.problems] == ["", "n" * 65]
    assert "empty" in config.problems[0].message
    assert "longer than 64" in config.problems[1].message
    assert list(config.servers) == ["my server/v2 ✓"]


def test_non_positive_tool_timeout_is_a_problem() -> None:
    config = parse({"zero": {"command": "x", "toolTimeout": 0}, "neg": {"command": "x", "toolTimeout": -1}})
    assert [p.server for p in config.problems] == ["zero", "neg"]
    assert all("toolTimeout" in p.message for p in config.problems)


def test_server_with_neither_command_nor_url_is_a_problem() -> None:
    message = only_problem(parse({"empty": {"args": ["a"]}}))
    assert message.startswith("server 'empty': ") and "command" in message and "url" in message


def test_declared_transport_without_what_it_needs_is_a_problem() -> None:
    config = parse({"a": {"type": "stdio", "url": "https://h/mcp"}, "b": {"type": "sse", "command": "x"}})
    assert [p.server for p in config.problems] == ["a", "b"]
    assert '"command"' in config.problems[0].message
    assert '"url"' in config.problems[1].message


def test_url_that_is_not_http_is_a_problem_without_echoing_the_url() -> None:
    message = only_problem(parse({"r": {"url": "ftp://user:hunter2@h/mcp"}}))
    assert "http:// or https://" in message and "hunter2" not in message


# --- transport -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "transport"),
    [
        ({"command": "x"}, "stdio"),
        ({"command": "x", "url": "https://h/mcp"}, "stdio"),
        ({"url": "https://h/mcp"}, "streamable-http"),
        ({"url": "https://h/sse"}, "sse"),
        ({"url": "http://h/sse/?k=v"}, "sse"),
        ({"url": "https://h/sse-ish"}, "streamable-http"),
        ({"url": "https://h/mcp", "type": "http"}, "streamable-http"),
        ({"url": "https://h/mcp", "type": "streamableHttp"}, "streamable-http"),
        ({"url": "https://h/sse", "transport": "streamable-http"}, "streamable-http"),
        ({"url": "https://h/mcp", "type": "sse"}, "sse"),
        ({"command": "x", "type": "stdio", "transport": "stdio"}, "stdio"),
        ({"url": "https://h/mcp", "type": "http", "transport": "streamable-http"}, "streamable-http"),
    ],
)
def test_transport_is_declared_or_inferred(entry: dict[str, Any], transport: str) -> None:
    config = parse({"s": entry})
    assert config.problems == []
    assert config.servers["s"].transport == transport


def test_type_and_transport_that_disagree_are_a_problem() -> None:
    message = only_problem(parse({"s": {"url": "https://h/mcp", "type": "sse", "transport": "http"}}))
    assert message.startswith("server 's': ") and "disagree" in message


def test_unknown_transport_is_a_problem_naming_the_value_and_accepted_ones() -> None:
    message = only_problem(parse({"s": {"url": "https://h", "transport": "websocket"}}))
    assert "'websocket'" in message
    for accepted in ("stdio", "sse", "streamable-http", "streamableHttp", "http"):
        assert accepted in message


# --- defaults and result shape ---------------------------------------------------------------


def test_defaults_are_thirty_second_timeout_enabled_and_empty_collections() -> None:
    spec = parse({"s": {"command": "x"}}).servers["s"]
    assert spec == ServerSpec(
        name="s",
        transport="stdio",
        command="x",
        args=(),
        env={},
        cwd=None,
        url=None,
        headers={},
        tool_timeout=DEFAULT_TOOL_TIMEOUT,
        disabled=False,
    )
    assert DEFAULT_TOOL_TIMEOUT == 30.0


def test_servers_keep_file_order_and_timeouts_are_floats() -> None:
    config = parse({n: {"command": "x", "toolTimeout": 5} for n in ("zeta", "alpha", "mid")})
    assert list(config.servers) == ["zeta", "alpha", "mid"]
    assert config.servers["zeta"].tool_timeout == 5.0


def test_server_spec_is_msgspec_encodable() -> None:
    spec = parse({"s": {"command": "x", "args": ["a"], "env": {"K": "v"}}}).servers["s"]
    encoded = msgspec.json.decode(msgspec.json.encode(spec))
    assert encoded["args"] == ["a"] and encoded["env"] == {"K": "v"} and encoded["transport"] == "stdio"


def test_example_config_from_the_docs_loads() -> None:
    data = b"""{"mcpServers": {
       "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"],
                "env": {"K": "${HOME}"}, "toolTimeout": 10},
       "remote": {"url": "https://example.com/mcp",
                  "headers": {"Authorization": "Bearer ${TOKEN:-none}"}, "type": "streamable-http"},
       "off": {"command": "x", "disabled": true}}}"""
    config = parse_config(data, environ={"HOME": "/home/me"})
    assert config.problems == []
    assert config.servers["time"].env == {"K": "/home/me"}
    assert config.servers["time"].tool_timeout == 10.0
    assert config.servers["remote"].headers == {"Authorization": "Bearer none"}
    assert config.servers["off"].disabled is True


# --- expansion -------------------------------------------------------------------------------


def test_expand_vars_handles_plain_default_and_non_special_forms() -> None:
    environ = {"A": "1", "EMPTY": ""}
    assert expand_vars("${A}-${B:-two}-${EMPTY:-dflt}-${A:-x}", environ) == "1-two-dflt-1"
    assert expand_vars("${EMPTY}|${B:-}", environ) == "|"
    assert expand_vars("$A $ $$ ${A", environ) == "$A $ $$ ${A"
    assert expand_vars("${not-a-name} ${}", environ) == "${not-a-name} ${}"


def test_expanded_values_are_not_expanded_again() -> None:
    assert expand_vars("${A}", {"A": "${B}", "B": "no"}) == "${B}"


def test_expand_vars_raises_missing_variable_with_its_name() -> None:
    with pytest.raises(MissingVariable) as info:
        expand_vars("x ${NOPE} y", {})
    assert info.value.name == "NOPE"
    assert isinstance(info.value, ConfigError)


def test_variables_are_expanded_in_every_field() -> None:
    entry = {
        "command": "${BIN}/server",
        "args": ["--root", "${ROOT}", "${MISSING:-fallback}"],
        "env": {"TOKEN": "${SECRET}"},
        "cwd": "${ROOT}/run",
    }
    remote = {"url": "https://${HOST}/mcp", "headers": {"Authorization": "Bearer ${SECRET}"}}
    environ = {"BIN": "/opt/bin", "ROOT": "/srv", "SECRET": "s3", "HOST": "example.com"}
    config = parse({"local": entry, "remote": remote}, environ)
    assert config.problems == []
    local = config.servers["local"]
    assert (local.command, local.args, local.env, local.cwd) == (
        "/opt/bin/server",
        ("--root", "/srv", "fallback"),
        {"TOKEN": "s3"},
        "/srv/run",
    )
    assert config.servers["remote"].url == "https://example.com/mcp"
    assert config.servers["remote"].headers == {"Authorization": "Bearer s3"}


def test_tilde_is_expanded_in_command_and_cwd_only() -> None:
    entry = {"command": "~/bin/srv", "cwd": "~", "args": ["~/x"], "env": {"P": "~/y"}}
    spec = parse({"s": entry}, {"HOME": "/home/me"}).servers["s"]
    assert (spec.command, spec.cwd, spec.args, spec.env) == (
        "/home/me/bin/srv",
        "/home/me",
        ("~/x",),
        {"P": "~/y"},
    )


def test_unclosed_variable_reference_is_left_as_is() -> None:
    spec = parse({"s": {"command": "x", "args": ["${HOME", "a${"], "env": {"K": "${X"}}}).servers["s"]
    assert spec.args == ("${HOME", "a${") and spec.env == {"K": "${X"}


def test_dollar_in_url_inference_uses_expanded_url() -> None:
    spec = parse({"s": {"url": "${BASE}/sse"}}, {"BASE": "https://h"}).servers["s"]
    assert (spec.url, spec.transport) == ("https://h/sse", "sse")


def test_unset_variable_without_default_disables_only_that_server() -> None:
    servers = {
        "remote": {"url": "https://h/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
        "local": {"command": "x"},
    }
    config = parse(servers)
    assert config.problems[0].server == "remote"
    assert only_problem(config) == (
        "server 'remote': variable TOKEN in headers.Authorization is not set "
        "(write ${TOKEN:-default} to give a default)"
    )
    assert list(config.servers) == ["local"]


@pytest.mark.parametrize(
    ("entry", "where"),
    [
        ({"command": "${V}"}, "command"),
        ({"command": "x", "args": ["a", "${V}"]}, "args[1]"),
        ({"command": "x", "env": {"KEY": "${V}"}}, "env.KEY"),
        ({"command": "x", "cwd": "${V}"}, "cwd"),
        ({"url": "${V}"}, "url"),
    ],
)
def test_missing_variable_message_names_the_field(entry: dict[str, Any], where: str) -> None:
    assert f"variable V in {where} is not set" in only_problem(parse({"s": entry}))


def test_disabled_server_is_kept_unexpanded_and_missing_variables_are_not_problems() -> None:
    entry = {"command": "~/${BIN}", "env": {"K": "${NOPE}"}, "url": "${BASE}/sse", "disabled": True}
    config = parse({"off": entry})
    assert config.problems == []
    spec = config.servers["off"]
    assert spec.disabled is True
    assert (spec.command, spec.env, spec.url) == ("~/${BIN}", {"K": "${NOPE}"}, "${BASE}/sse")


def test_disabled_server_with_only_a_templated_url_is_kept() -> None:
    config = parse({"off": {"url": "${BASE}", "disabled": True}})
    assert config.problems == [] and config.servers["off"].transport == "streamable-http"


def test_problem_messages_never_contain_env_or_header_values() -> None:
    secret = "sk-live-VERY-SECRET"
    environ = {"SECRET": secret}
    servers = {
        "a": {"command": "x", "env": {"API_KEY": secret, "OTHER": "${MISSING}"}},
        "b": {"url": "https://h/mcp", "headers": {"X-Key": secret, "Y": "${SECRET}${GONE}"}},
        "c": {"command": "x", "env": {"API_KEY": secret}, "transport": "bogus"},
        "d": {"command": "x", "headers": {"X-Key": secret}, "toolTimeout": -5},
        "e": {"url": secret, "headers": {"X-Key": secret}},
        "f": {"command": "x", "env": {"API_KEY": secret, "N": 5}},
    }
    config = parse(servers, environ)
    assert [p.server for p in config.problems] == list(servers)
    for problem in config.problems:
        assert secret not in problem.message
        assert "\n" not in problem.message
    assert "MISSING" in config.problems[0].message and "env.OTHER" in config.problems[0].message
    assert "GONE" in config.problems[1].message and "headers.Y" in config.problems[1].message


def test_server_spec_repr_hides_env_and_header_values() -> None:
    spec = parse({"s": {"url": "https://h/mcp", "headers": {"Authorization": "Bearer sk-123"}}}).servers["s"]
    assert "sk-123" not in repr(spec)


# --- the repository's own config -------------------------------------------------------------


def test_repository_config_loads_with_no_problems_and_at_least_two_enabled_servers() -> None:
    if not REPO_CONFIG.is_file():
        pytest.skip(f"{REPO_CONFIG} does not exist yet")
    config = load_config(REPO_CONFIG)
    assert config.problems == []
    assert len([s for s in config.servers.values() if not s.disabled]) >= 2


def test_policy_defaults_come_from_the_supervisor_object_and_servers_override_them() -> None:
    data = b"""{
      "supervisor": {"shutdownGrace": 2, "heartbeatTimeout": 4, "maxRestarts": 2, "startTimeout": 9},
      "mcpServers": {
        "a": {"command": "x"},
        "b": {"command": "y", "restart": "transient", "startTimeout": 3, "pingInterval": 10}
      }
    }"""
    config = parse_config(data, environ={})
    assert config.settings.shutdown_grace == 2 and config.settings.heartbeat_timeout == 4
    a, b = config.servers["a"].policy, config.servers["b"].policy
    assert (a.restart, a.max_restarts, a.start_timeout, a.ping_interval) == ("permanent", 2, 9, None)
    assert (b.restart, b.max_restarts, b.start_timeout, b.ping_interval) == ("transient", 2, 3, 10)
    assert config.problems == []


def test_bad_policy_field_of_a_server_is_a_problem_naming_it() -> None:
    data = b"""{"mcpServers": {"a": {"command": "x", "startTimeout": 0},
                               "b": {"command": "y", "restart": "no"}}}"""
    config = parse_config(data, environ={})
    messages = [problem.message for problem in config.problems]
    assert any("'a'" in m and "startTimeout" in m for m in messages)
    assert any("'b'" in m and "restart" in m for m in messages)


def test_unknown_supervisor_setting_rejects_the_file() -> None:
    with pytest.raises(ConfigError, match="shutdownGrase"):
        parse_config(b'{"supervisor": {"shutdownGrase": 1}, "mcpServers": {}}', environ={})


def test_roots_elicitation_and_sampling_are_read_and_expanded() -> None:
    entry = {
        "command": "x",
        "roots": ["/srv/a", "~/work", {"uri": "file:///data", "name": "data"}, "${PROJECT}"],
        "elicitation": "defaults",
        "sampling": {"command": "~/bin/sampler", "args": ["--model", "${MODEL:-small}"], "timeout": 5},
    }
    spec = parse({"s": entry}, {"HOME": "/home/u", "PROJECT": "/p r"}).servers["s"]
    assert [(root.uri, root.name) for root in spec.roots] == [
        ("file:///srv/a", None),
        ("file:///home/u/work", None),
        ("file:///data", "data"),
        ("file:///p%20r", None),
    ]
    assert spec.elicitation == "defaults"
    assert spec.sampling is not None
    assert (spec.sampling.command, spec.sampling.args, spec.sampling.timeout) == (
        "/home/u/bin/sampler",
        ["--model", "small"],
        5,
    )
    bare = parse({"s": {"command": "x"}}).servers["s"]
    assert (bare.roots, bare.elicitation, bare.sampling) == ((), "decline", None)


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (
            {"roots": ["relative/dir"]},
            "roots[0] must be an absolute path (or a file:// URI), got 'relative/dir'",
        ),
        (
            {"roots": ["/ok", "https://x/y"]},
            "roots[1] must be a file:// URI or an absolute path, got 'https://x/y'",
        ),
        ({"roots": [{"uri": "/a", "nam": "x"}]}, "unknown field 'nam' in roots[0] (did you mean 'name'?)"),
        ({"roots": [{"uri": "rel"}]}, "roots[0].uri must be an absolute path"),
        ({"roots": "/a"}, "field 'roots': expected 'array', got 'str'"),
        ({"elicitation": "accept"}, "field 'elicitation': invalid enum value 'accept'"),
        ({"sampling": {"args": []}}, "field 'sampling': object missing required field 'command'"),
        (
            {"sampling": {"command": "s", "timout": 1}},
            "unknown field 'timout' in sampling (did you mean 'timeout'?)",
        ),
        ({"sampling": {"command": "s", "timeout": 0}}, "field 'sampling.timeout': expected 'float' > 0.0"),
        ({"sampling": {"command": "${NOPE}"}}, "variable NOPE in sampling.command is not set"),
    ],
)
def test_bad_roots_elicitation_or_sampling_is_a_problem_naming_the_field(
    entry: dict[str, Any], problem: str
) -> None:
    assert problem in only_problem(parse({"s": {"command": "x", **entry}}))


# --- tool views ------------------------------------------------------------------------------


NOT_EMPTY = "must be a non-empty tool name or glob pattern"


def test_enabled_and_disabled_tools_are_read_into_the_spec() -> None:
    entry = {"command": "x", "enabledTools": ["read_*", "list_dir"], "disabledTools": ["read_secret?"]}
    spec = parse({"s": entry}).servers["s"]
    assert spec.enabled_tools == ("read_*", "list_dir")
    assert spec.disabled_tools == ("read_secret?",)
    assert msgspec.json.decode(msgspec.json.encode(spec))["enabled_tools"] == ["read_*", "list_dir"]


def test_without_tool_views_every_tool_is_enabled_and_none_disabled() -> None:
    spec = parse({"s": {"command": "x"}}).servers["s"]
    assert (spec.enabled_tools, spec.disabled_tools) == (None, ())


def test_an_empty_enabled_tools_list_is_kept_apart_from_an_absent_one() -> None:
    spec = parse({"s": {"command": "x", "enabledTools": [], "disabledTools": []}}).servers["s"]
    assert (spec.enabled_tools, spec.disabled_tools) == ((), ())


def test_tool_view_patterns_are_not_expanded() -> None:
    spec = parse({"s": {"command": "x", "disabledTools": ["${X}", "~/*"]}}, {"X": "1"}).servers["s"]
    assert spec.disabled_tools == ("${X}", "~/*")


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"enabledTools": "read_*"}, "field 'enabledTools': expected 'array | null', got 'str'"),
        ({"disabledTools": "read_*"}, "field 'disabledTools': expected 'array', got 'str'"),
        ({"enabledTools": ["a", 1]}, "field 'enabledTools[1]': expected 'str', got 'int'"),
        ({"disabledTools": [None]}, "field 'disabledTools[0]': expected 'str', got 'null'"),
        ({"disabledTools": {"a": 1}}, "field 'disabledTools': expected 'array', got 'object'"),
        (
            {"enabledTools": ["a", ""]},
            "field 'enabledTools[1]': must be a non-empty tool name or glob pattern",
        ),
        ({"disabledTools": [""]}, "field 'disabledTools[0]': must be a non-empty tool name or glob pattern"),
        ({"enabledTool": ["a"]}, "unknown field 'enabledTool' (did you mean 'enabledTools'?)"),
    ],
)
def test_a_bad_tool_view_is_a_problem_naming_the_server_and_the_field(
    entry: dict[str, Any], problem: str
) -> None:
    config = parse({"s": {"command": "x", **entry}, "ok": {"command": "y", "enabledTools": ["a"]}})
    assert only_problem(config) == f"server 's': {problem}"
    assert config.problems[0].server == "s"
    assert list(config.servers) == ["ok"]


def test_a_reload_that_changes_a_tool_view_changes_that_server_only() -> None:
    base: dict[str, dict[str, Any]] = {
        "a": {"command": "x", "enabledTools": ["read_*"]},
        "b": {"command": "y"},
    }
    old = parse(base)
    assert plan_reload(old, parse(base)).unchanged == ["a", "b"]
    edits: list[dict[str, Any]] = [
        {"enabledTools": ["read_*", "list_dir"]},
        {"enabledTools": []},
        {"enabledTools": None},
        {"disabledTools": ["read_secret"]},
    ]
    for edit in edits:
        entry = {key: value for key, value in {**base["a"], **edit}.items() if value is not None}
        plan = plan_reload(old, parse({**base, "a": entry}))
        assert (plan.changed, plan.unchanged) == (["a"], ["b"]), edit
