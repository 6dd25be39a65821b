"""VS Code's mcp.json loads as VS Code reads it: ``${env:NAME}``, ``${input:ID}`` from ``inputs``
(answered from the environment or a credentials file, since the supervisor prompts nobody),
``${workspaceFolder}``, ``${userHome}`` and ``envFile``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.config.load import ConfigError, load_config, parse_config
from supervisor.config.vscode import Unanswered, input_env, read_env_file

INPUTS = [
    {"type": "promptString", "id": "api-key", "description": "The API key", "password": True},
    {"type": "promptString", "id": "region"},
]


def vscode(tmp_path: Path, servers: dict[str, Any], inputs: Any = INPUTS) -> Path:
    """A workspace with ``.vscode/mcp.json`` as VS Code writes it."""
    path = tmp_path / "ws" / ".vscode" / "mcp.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"inputs": inputs, "servers": servers}))
    return path


def test_env_input_and_predefined_variables_are_expanded(tmp_path: Path) -> None:
    path = vscode(
        tmp_path,
        {
            "s": {
                "type": "stdio",
                "command": "${userHome}/bin/server",
                "args": ["--root", "${workspaceFolder}/data", "--user", "${env:WHO}"],
                "env": {"KEY": "${input:api-key}", "REGION": "${input:region}"},
            }
        },
    )
    environ = {
        "HOME": "/home/me",
        "WHO": "me",
        input_env("api-key"): "s3cret",
        "MCP_SUPERVISOR_INPUT_REGION": "eu",
    }
    config = load_config(path, environ=environ)
    assert config.problems == []
    spec = config.servers["s"]
    assert spec.command == "/home/me/bin/server"
    assert spec.args == ("--root", f"{tmp_path / 'ws'}/data", "--user", "me")
    assert spec.env == {"KEY": "s3cret", "REGION": "eu"}


def test_an_input_is_answered_from_the_credentials_directory(tmp_path: Path) -> None:
    credentials = tmp_path / "creds"
    credentials.mkdir()
    (credentials / "api-key").write_text("from-file\n")
    path = vscode(tmp_path, {"s": {"command": "x", "env": {"KEY": "${input:api-key}"}}})
    config = load_config(path, environ={"CREDENTIALS_DIRECTORY": str(credentials)})
    assert config.servers["s"].env == {"KEY": "from-file"}


def test_an_input_with_no_answer_refuses_that_server_naming_the_input_and_how(tmp_path: Path) -> None:
    path = vscode(
        tmp_path,
        {"s": {"command": "x", "env": {"KEY": "${input:api-key}"}}, "t": {"command": "y"}},
    )
    config = load_config(path, environ={})
    assert list(config.servers) == ["t"]  # the other server still loads
    [problem] = config.problems
    assert problem.server == "s"
    assert "input 'api-key' (The API key) has no answer" in problem.message
    assert "MCP_SUPERVISOR_INPUT_API_KEY" in problem.message and "CREDENTIALS_DIRECTORY" in problem.message


def test_an_input_not_in_the_inputs_list_and_an_unset_env_variable_are_named(tmp_path: Path) -> None:
    path = vscode(
        tmp_path,
        {
            "a": {"command": "x", "args": ["${input:nope}"]},
            "b": {"command": "x", "env": {"K": "${env:UNSET}"}},
        },
    )
    problems = {p.server: p.message for p in load_config(path, environ={}).problems}
    assert "no input 'nope'" in problems["a"] and "api-key, region" in problems["a"]
    assert "args[0]" in problems["a"]
    assert "${env:UNSET}: variable UNSET is not set" in problems["b"] and "env.K" in problems["b"]


def test_env_file_is_read_relative_to_the_workspace_and_env_wins(tmp_path: Path) -> None:
    path = vscode(
        tmp_path, {"s": {"command": "x", "envFile": "${workspaceFolder}/.env", "env": {"B": "env"}}}
    )
    (tmp_path / "ws" / ".env").write_text("# comment\nexport A=1\nB=\"file\"\n\nC='three words'\n")
    assert load_config(path, environ={}).servers["s"].env == {"A": "1", "B": "env", "C": "three words"}
    relative = vscode(tmp_path, {"s": {"command": "x", "envFile": ".env"}})
    assert load_config(relative, environ={}).servers["s"].env == {"A": "1", "B": "file", "C": "three words"}


def test_a_missing_or_broken_env_file_is_a_problem_naming_it(tmp_path: Path) -> None:
    path = vscode(tmp_path, {"s": {"command": "x", "envFile": "missing.env"}})
    [problem] = load_config(path, environ={}).problems
    assert "envFile" in problem.message and "missing.env" in problem.message
    (tmp_path / "ws" / "bad.env").write_text("A=1\nnot a pair\n")
    broken = vscode(tmp_path, {"s": {"command": "x", "envFile": "bad.env"}})
    [problem] = load_config(broken, environ={}).problems
    assert "line 2 is not NAME=VALUE" in problem.message


def test_a_malformed_inputs_list_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match='"inputs" must be a list'):
        load_config(vscode(tmp_path, {"s": {"command": "x"}}, inputs={"id": "x"}), environ={})


def test_messages_never_show_the_values(tmp_path: Path) -> None:
    path = vscode(tmp_path, {"s": {"command": "x", "env": {"KEY": "${input:api-key}", "R": "${input:nope}"}}})
    [problem] = load_config(path, environ={input_env("api-key"): "s3cret"}).problems
    assert "s3cret" not in problem.message


def test_outside_vscode_variables_a_plain_config_is_unchanged() -> None:
    data = json.dumps({"mcpServers": {"s": {"command": "x", "args": ["${A}", "${env:A}", "${input:i}"]}}})
    [problem] = parse_config(data.encode(), environ={"A": "1"}).problems
    assert "no input 'i'" in problem.message  # an inputs list of none


@given(st.text(max_size=300))
def test_any_env_file_text_is_read_or_refused_naming_the_file(text: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.env"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        try:
            env = read_env_file(path)
        except Unanswered as exc:
            assert str(path) in str(exc)
        else:
            assert all(key.isidentifier() or key.replace("_", "a").isalnum() for key in env)
