"""Secrets kept out of the config file: ``${file:PATH}`` and ``${credential:NAME}`` (systemd's
``$CREDENTIALS_DIRECTORY``) in every field that takes ``${VAR}``; the rules of their values (one trailing
newline dropped, never expanded again); and every way a file gives no value, each a problem of its
server naming the field, the path and the reason, never what the file holds."""

from __future__ import annotations

import errno
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.config import expansion
from supervisor.config.expansion import MAX_SECRET_FILE, SecretError
from supervisor.config.load import Config, expand_vars, load_config, parse_config
from supervisor.daemon.reload_plan import plan_reload

SECRET = "ghp-s3cr3t-Value-0042"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations" / "configuration.md"


def load(folder: Path, servers: dict[str, Any], environ: dict[str, str] | None = None) -> Config:
    """The config file ``folder/mcp.json`` with these servers, loaded."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return load_config(path, environ={} if environ is None else environ)


def put(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_bytes(content.encode())
    else:
        path.write_bytes(content)
    return path


def refused(config: Config, server: str = "s") -> str:
    """The one problem of ``config``, which refuses ``server``; its message."""
    assert server not in config.servers
    [problem] = config.problems
    assert problem.server == server
    assert f"server {server!r}: " in problem.message
    return problem.message


# --- the forms ---------------------------------------------------------------------------------


def test_a_file_is_read_in_every_field_that_takes_variables(tmp_path: Path) -> None:
    put(tmp_path / "token", SECRET + "\n")
    put(tmp_path / "bin", "/usr/bin/server\n")
    put(tmp_path / "dir", str(tmp_path) + "\n")
    put(tmp_path / "extra.env", "FROM_ENV_FILE=yes\n")
    put(tmp_path / "envfile-path", str(tmp_path / "extra.env"))
    t = f"${{file:{tmp_path}/token}}"
    servers = {
        "local": {
            "command": f"${{file:{tmp_path}/bin}}",
            "args": ["--token-file-says", t],
            "env": {"GITHUB_TOKEN": t, "MIXED": f"a-{t}-b"},
            "envFile": f"${{file:{tmp_path}/envfile-path}}",
            "cwd": f"${{file:{tmp_path}/dir}}",
            "sampling": {"command": f"${{file:{tmp_path}/bin}}", "args": [t]},
        },
        "remote": {
            "url": f"https://example.com/mcp?k={t}",
            "headers": {"Authorization": f"Bearer {t}"},
        },
        "oauth": {
            "url": "https://example.com/mcp",
            "oauth": {"grant": "client_credentials", "clientId": "svc", "clientSecret": t},
        },
    }
    config = load(tmp_path, servers)
    assert config.problems == []
    local, remote = config.servers["local"], config.servers["remote"]
    assert local.command == "/usr/bin/server" and local.cwd == str(tmp_path)
    assert local.args == ("--token-file-says", SECRET)
    assert local.env == {"FROM_ENV_FILE": "yes", "GITHUB_TOKEN": SECRET, "MIXED": f"a-{SECRET}-b"}
    assert local.sampling is not None and local.sampling.args == [SECRET]
    assert remote.url == f"https://example.com/mcp?k={SECRET}"
    assert remote.headers == {"Authorization": f"Bearer {SECRET}"}
    oauth = config.servers["oauth"].oauth
    assert oauth is not None and oauth.client_secret == SECRET
    assert SECRET not in repr(config.servers["oauth"])  # args and url show in a repr: not for secrets


def test_a_path_may_name_variables_start_with_a_tilde_or_be_relative_to_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, creds, conf = tmp_path / "home", tmp_path / "creds", tmp_path / "etc" / "conf"
    put(home / ".secrets" / "a", "from home")
    put(creds / "github_token", "from the credentials directory")
    put(conf / "tokens" / "c", "beside the config")
    monkeypatch.chdir(tmp_path)  # not where a relative path is read from
    env = {
        "A": "${file:~/.secrets/a}",
        "B": "${file:${CREDENTIALS_DIRECTORY}/github_token}",
        "C": "${file:tokens/c}",
        "D": "${file:./tokens/${WHICH:-c}}",
        "E": "${file:${env:HOME}/.secrets/a}",
    }
    environ = {"HOME": str(home), "CREDENTIALS_DIRECTORY": str(creds)}
    config = load(conf, {"s": {"command": "x", "env": env}}, environ)
    assert config.problems == []
    assert config.servers["s"].env == {
        "A": "from home",
        "B": "from the credentials directory",
        "C": "beside the config",
        "D": "beside the config",
        "E": "from home",
    }


def test_without_a_config_file_a_relative_path_is_read_from_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(tmp_path / "token", SECRET)
    monkeypatch.chdir(tmp_path)
    data = json.dumps({"mcpServers": {"s": {"command": "x", "env": {"T": "${file:token}"}}}}).encode()
    assert parse_config(data, environ={}).servers["s"].env == {"T": SECRET}
    assert expand_vars("<${file:token}>", {}, folder=None) == f"<{SECRET}>"


def test_a_credential_is_the_file_of_that_name_in_the_credentials_directory(tmp_path: Path) -> None:
    put(tmp_path / "creds" / "github_token", SECRET + "\r\n")
    environ = {"CREDENTIALS_DIRECTORY": str(tmp_path / "creds"), "WHICH": "github_token"}
    servers = {
        "s": {"command": "x", "env": {"GITHUB_TOKEN": "${credential:github_token}"}},
        "r": {"url": "https://example.com/mcp", "headers": {"X-Token": "${credential:${WHICH}}"}},
    }
    config = load(tmp_path, servers, environ)
    assert config.problems == []
    assert config.servers["s"].env == {"GITHUB_TOKEN": SECRET}
    assert config.servers["r"].headers == {"X-Token": SECRET}


@pytest.mark.parametrize(
    ("content", "value"),
    [
        ("tok", "tok"),
        ("tok\n", "tok"),
        ("tok\r\n", "tok"),
        ("tok\n\n", "tok\n"),
        ("tok\r\n\r\n", "tok\r\n"),
        ("tok\n\r\n", "tok\n"),
        ("tok\r", "tok\r"),
        ("two\nlines\n", "two\nlines"),
        ("\n", ""),
        ("", ""),
        (" spaced \t", " spaced \t"),
        ("${HOME} $X ${file:/etc/passwd} ${credential:x} ${input:y}", None),
    ],
)
def test_one_trailing_newline_is_dropped_and_nothing_else_changes(
    tmp_path: Path, content: str, value: str | None
) -> None:
    path = put(tmp_path / "f", content)
    got = expand_vars(f"${{file:{path}}}", {"HOME": "/h", "X": "x"}, folder=tmp_path)
    assert got == (content if value is None else value)  # a file's text is never expanded again


def test_the_example_of_the_docs_loads_with_its_files_in_place(tmp_path: Path) -> None:
    example = DOCS.read_text().split("\n## Secrets\n", 1)[1].split("```json\n", 1)[1].split("```", 1)[0]
    home, credentials, folder = tmp_path / "home", tmp_path / "credentials", tmp_path / "etc"
    put(home / ".config" / "mcp-supervisor" / "search_token", "search-token\n")
    put(credentials / "github_token", "github-token\n")
    put(folder / "notes.env", "NOTES_KEY=notes-key\n")
    put(folder / "mcp.json", example)
    environ = {"HOME": str(home), "CREDENTIALS_DIRECTORY": str(credentials)}
    config = load_config(folder / "mcp.json", environ=environ)
    assert config.problems == []
    assert config.servers["github"].env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "github-token"}
    assert config.servers["search"].headers == {"Authorization": "Bearer search-token"}
    assert config.servers["notes"].env == {"NOTES_KEY": "notes-key"}


def test_the_message_the_docs_show_is_the_one_given(tmp_path: Path) -> None:
    entry = {"command": "x", "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${credential:github_token}"}}
    data = json.dumps({"mcpServers": {"github": entry}}).encode()
    directory = tmp_path / "mcp-supervisor.service"  # where systemd would have put it: not there
    message = refused(parse_config(data, environ={"CREDENTIALS_DIRECTORY": str(directory)}), "github")
    shown = message.replace(str(directory), "/run/credentials/mcp-supervisor.service")
    assert f"`{shown}`" in " ".join(DOCS.read_text().split())


def test_file_and_credential_followed_by_a_dash_are_still_variables_with_a_default() -> None:
    assert expand_vars("${file:-plain}|${credential:-also}", {}) == "plain|also"
    assert expand_vars("${file}", {"file": "a variable"}) == "a variable"


def test_a_disabled_server_reads_no_file_and_keeps_its_text(tmp_path: Path) -> None:
    entry = {"command": "x", "env": {"T": "${file:/nonexistent/token}", "C": "${credential:c}"}}
    config = load(tmp_path, {"s": entry | {"disabled": True}})
    assert config.problems == []
    assert config.servers["s"].env == entry["env"]


def test_a_reload_reads_the_file_again_and_a_changed_secret_changes_the_server(tmp_path: Path) -> None:
    token = put(tmp_path / "token", "one\n")
    servers = {"s": {"command": "x", "env": {"T": "${file:token}"}}, "u": {"command": "y"}}
    before = load(tmp_path, servers)
    token.write_text("two\n")
    after = load(tmp_path, servers)
    assert after.servers["s"].env == {"T": "two"}
    plan = plan_reload(before, after)
    assert plan.changed == ["s"] and plan.unchanged == ["u"]


# --- errors: a problem of that server, naming the field, the path and why -------------------------


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda d: d / "missing", "no such file"),
        (lambda d: put(d / "sub" / "f", "x").parent, "is a directory"),
        (lambda d: put(d / "bad", b"\xff\xfe" + SECRET.encode()), "not UTF-8 text"),
        (lambda d: put(d / "nul", SECRET + "\0more"), "holds a NUL character"),
        (lambda d: put(d / "plain", SECRET) / "below", "a part of the path is not a directory"),
        (lambda d: put(d / "big", "x" * (MAX_SECRET_FILE + 1)), "larger than 1048576 bytes (1 MiB)"),
    ],
    ids=["missing", "directory", "not-utf8", "nul", "not-a-directory", "too-large"],
)
def test_a_file_with_no_value_refuses_its_server_naming_field_path_and_reason(
    tmp_path: Path, make: Any, reason: str
) -> None:
    path = make(tmp_path)
    servers = {"s": {"command": "x", "env": {"GITHUB_TOKEN": f"${{file:{path}}}"}}, "ok": {"command": "y"}}
    config = load(tmp_path, servers)
    assert list(config.servers) == ["ok"]  # the other server still loads
    message = refused(config)
    assert f"env.GITHUB_TOKEN: ${{file:{path}}}: {path}: {reason}" in message
    assert SECRET not in message and "ghp" not in message


def test_a_file_of_exactly_the_bound_is_read(tmp_path: Path) -> None:
    path = put(tmp_path / "big", "x" * MAX_SECRET_FILE)
    assert len(expand_vars(f"${{file:{path}}}", {})) == MAX_SECRET_FILE


def test_a_fifo_is_refused_at_once_never_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    message = refused(load(tmp_path, {"s": {"command": "x", "args": [f"${{file:{fifo}}}"]}}))
    assert f"args[0]: ${{file:{fifo}}}: {fifo}: not a regular file" in message


def test_an_unreadable_file_is_permission_denied(tmp_path: Path) -> None:
    path = put(tmp_path / "locked", SECRET)
    path.chmod(0)
    ref = f"${{file:{path}}}"
    if os.geteuid() != 0:
        message = refused(load(tmp_path, {"s": {"url": "https://h/mcp", "headers": {"X": ref}}}))
        assert f"headers.X: {ref}: {path}: permission denied" in message
        return
    # root reads a file of mode 0000: read it as nobody, in a child (denied the file or a folder on its way)
    readable, writable = os.pipe()
    with warnings.catch_warnings():  # a child that only reads a file: threads of the suite's do not matter
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            nobody = 65534
            os.setgroups([])
            os.setresgid(nobody, nobody, nobody)
            os.setresuid(nobody, nobody, nobody)
            try:
                said = f"read {expand_vars(ref, {})!r}"
            except SecretError as exc:
                said = str(exc)
            os.write(writable, said.encode())
        finally:
            os._exit(0)
    os.close(writable)
    with os.fdopen(readable, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    assert said == f"{ref}: {path}: permission denied"


def test_permission_denied_is_named_so_whatever_the_os_says(monkeypatch: pytest.MonkeyPatch) -> None:
    def deny(path: Any, flags: int) -> int:
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    with monkeypatch.context() as patched:
        patched.setattr(expansion.os, "open", deny)
        with pytest.raises(SecretError) as raised:
            expand_vars("${file:/x/y}", {})
    assert str(raised.value) == "${file:/x/y}: /x/y: permission denied"


@pytest.mark.parametrize(
    ("environ", "written", "expected"),
    [
        ({}, "gh", "${credential:gh}: $CREDENTIALS_DIRECTORY is not set: systemd sets it"),
        ({"CREDENTIALS_DIRECTORY": ""}, "gh", "$CREDENTIALS_DIRECTORY is not set"),
        ({"CREDENTIALS_DIRECTORY": "/c"}, "a/b", "'a/b' is not a credential name"),
        ({"CREDENTIALS_DIRECTORY": "/c"}, "..", "'..' is not a credential name"),
        ({"CREDENTIALS_DIRECTORY": "/c"}, ".", "'.' is not a credential name"),
        ({"CREDENTIALS_DIRECTORY": "/c"}, "", "'' is not a credential name"),
        ({"CREDENTIALS_DIRECTORY": "/c"}, "${NAME}", "'x/y' is not a credential name"),
        ({"CREDENTIALS_DIRECTORY": "/nonexistent"}, "gh", "/nonexistent/gh: no such file (does the service"),
    ],
)
def test_a_credential_without_a_value_says_why(environ: dict[str, str], written: str, expected: str) -> None:
    data = json.dumps({"mcpServers": {"s": {"command": "x", "env": {"T": f"${{credential:{written}}}"}}}})
    message = refused(parse_config(data.encode(), environ=environ | {"NAME": "x/y"}))
    assert f"env.T: ${{credential:{written}}}: " in message
    assert expected in message
    if "not set" in expected:
        assert "LoadCredential=" in message and "LoadCredentialEncrypted=" in message


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("${file:}", "${file:}: no path"),
        ("${file:/x", "${file:/x: no closing }"),
        ("${file:${file:/x}}", "a path cannot hold another ${file:} or ${credential:}"),
        ("${file:${NOPE}/x}", "variable NOPE in env.T is not set"),
        ("${file:${env:NOPE}/x}", "env.T: ${env:NOPE}: variable NOPE is not set"),
    ],
)
def test_a_malformed_reference_is_a_problem_naming_it(written: str, expected: str) -> None:
    data = json.dumps({"mcpServers": {"s": {"command": "x", "env": {"T": written}}}})
    assert expected in refused(parse_config(data.encode(), environ={}))


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (SECRET + "\n\n", "holds a line break"),
        (SECRET + "\r\n\r\n", "holds a line break"),
        (SECRET + "\x1b", "holds a control character"),
        (SECRET + "\u00e9", "holds a character that is not ASCII"),
        (SECRET + " \n", "starts or ends with a space or tab"),
        ("\t" + SECRET, "starts or ends with a space or tab"),
    ],
)
def test_a_header_value_no_http_request_can_carry_is_refused_without_showing_it(
    tmp_path: Path, content: str, what: str
) -> None:
    path = put(tmp_path / "token", content)
    server = {"url": "https://h/mcp", "headers": {"Authorization": f"${{file:{path}}}"}}
    message = refused(load(tmp_path, {"s": server}))
    assert f"headers.Authorization: the value {what}, which no HTTP header can" in message
    assert SECRET not in message


def test_a_tab_inside_a_header_value_is_fine(tmp_path: Path) -> None:
    config = load(tmp_path, {"s": {"url": "https://h/mcp", "headers": {"X": "a\tb"}}})
    assert config.servers["s"].headers == {"X": "a\tb"}


def test_a_path_that_holds_a_nul_is_refused(tmp_path: Path) -> None:
    data = json.dumps({"mcpServers": {"s": {"command": "x", "env": {"T": "${file:/a\u0000b}"}}}})
    assert "the path holds a NUL character" in refused(parse_config(data.encode(), environ={}))


# --- properties --------------------------------------------------------------------------------

_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=200)


@given(_TEXT.filter(lambda text: not text.endswith("\n")))
def test_any_text_is_the_value_as_it_is_and_no_message_ever_shows_it(text: str) -> None:
    secret = "s3cr3t:" + text  # one mark every leak would show
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        path = put(folder / "secret", secret)
        put(folder / "with-nul", secret + "\0")
        put(folder / "not-utf8", secret.encode() + b"\xff")
        ref = f"${{file:{path}}}"
        servers = {
            "env": {"command": "x", "env": {"T": ref}},
            "args": {"command": "x", "args": [ref]},
            "header": {"url": "https://h/mcp", "headers": {"H": ref}},
            "url": {"url": ref},
            "cwd": {"command": "x", "cwd": ref},
            "nul": {"command": "x", "env": {"T": f"${{file:{folder / 'with-nul'}}}"}},
            "bytes": {"command": "x", "env": {"T": f"${{file:{folder / 'not-utf8'}}}"}},
            "oauth": {"url": "https://h/mcp", "oauth": {"clientSecret": ref}},
        }
        config = load(folder, servers)
    assert config.servers["env"].env == {"T": secret}
    assert config.servers["args"].args == (secret,)
    assert config.servers["cwd"].cwd == secret
    if "header" in config.servers:
        assert config.servers["header"].headers == {"H": secret}
    assert {"url", "nul", "bytes", "oauth"} <= {problem.server for problem in config.problems}
    for problem in config.problems:
        assert "s3cr3t" not in problem.message, problem
