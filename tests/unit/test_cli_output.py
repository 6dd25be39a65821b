"""The CLI's pure parts: escaping text for a terminal, JSON output, the exit-code table, and ``main``'s
failures before any supervisor is asked (usage errors, an endpoint nobody listens on)."""

from __future__ import annotations

import io
import json
import unicodedata
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.cli.exit_codes import EXIT_CODES, CliError, ExitCode, exit_code_for
from supervisor.cli.main import build_parser, main
from supervisor.cli.output import print_json, print_json_line
from supervisor.protocol import ERROR_CODES
from supervisor.shared.terminal import printable

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def unsafe(char: str) -> bool:
    """What must never reach a terminal raw: a control character but the tab, or a bidi override."""
    return (unicodedata.category(char) == "Cc" and char != "\t") or char in BIDI


# ------------------------------------------------------------ escaping


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[2J\x1b]0;owned\x07", "\\x1b[2J\\x1b]0;owned\\x07"),  # clear screen, retitle the window
        ("a\rb\nc\x00d", "a\\x0db\\x0ac\\x00d"),  # a carriage return cannot hide what came before
        ("\x7f\x9b31m", "\\x7f\\x9b31m"),  # DEL, and C1's CSI
        ("abc\u202edcba", "abc\\u202edcba"),  # right-to-left override
        ("tab\tkept, é ✓ 日本 🙂", "tab\tkept, é ✓ 日本 🙂"),
    ],
)
def test_printable_escapes_control_characters_but_the_tab(text: str, shown: str) -> None:
    assert printable(text) == shown


@given(st.text())
def test_printable_leaves_nothing_unsafe_and_only_changes_unsafe_characters(text: str) -> None:
    shown = printable(text)
    assert not any(unsafe(char) for char in shown)
    if not any(unsafe(char) for char in text):
        assert shown == text


def printed(printer: Callable[[object], None], data: object) -> str:
    with redirect_stdout(io.StringIO()) as out:
        printer(data)
    return out.getvalue()


@given(st.recursive(st.text() | st.integers() | st.none(), lambda inner: st.lists(inner, max_size=3)))
def test_json_output_has_no_raw_control_character_and_reads_back_as_it_was(data: object) -> None:
    for printer in (print_json, print_json_line):
        out = printed(printer, {"data": data})
        assert json.loads(out) == {"data": data}
        assert not any(unicodedata.category(char) == "Cc" and char != "\n" for char in out)
    assert printed(print_json_line, {"data": data}).count("\n") == 1  # one line per object: a stream


# ------------------------------------------------------------ exit codes


def test_every_wire_error_code_has_its_exit_code() -> None:
    expected = {
        "UNKNOWN_TOOL": ExitCode.NOT_FOUND,
        "TIMEOUT": ExitCode.TIMEOUT,
        "INVALID_ARGUMENTS": ExitCode.USAGE,
        "BAD_REQUEST": ExitCode.USAGE,
        "UNAVAILABLE": ExitCode.FAILED,
        "TOOL_ERROR": ExitCode.FAILED,
        "SERVER_ERROR": ExitCode.FAILED,
        "WORKER_CRASHED": ExitCode.FAILED,
        "OVERLOADED": ExitCode.FAILED,
        "INTERNAL": ExitCode.FAILED,
        "CANCELLED": ExitCode.FAILED,
    }
    assert set(expected) == ERROR_CODES
    assert {code: exit_code_for(code) for code in ERROR_CODES} == expected
    assert exit_code_for("UNREACHABLE") == exit_code_for("UNAUTHENTICATED") == ExitCode.UNREACHABLE
    assert exit_code_for("A_CODE_FROM_A_NEWER_SUPERVISOR") == ExitCode.FAILED


def test_the_help_shows_every_exit_code_with_what_it_means() -> None:
    epilog = build_parser().epilog or ""
    assert set(EXIT_CODES) == set(ExitCode)
    for code, meaning in EXIT_CODES.items():
        assert f"  {int(code):<4} {meaning}" in epilog.splitlines()


def test_a_cli_error_names_its_exit_code_unless_told_otherwise() -> None:
    assert (CliError("x").code, CliError("x").error) == (ExitCode.FAILED, "FAILED")
    timed_out = CliError("x", ExitCode.TIMEOUT)
    assert (timed_out.code, timed_out.error) == (4, "TIMEOUT")
    assert CliError("x", ExitCode.FAILED, error="UNAVAILABLE").error == "UNAVAILABLE"


# ------------------------------------------------------------ main, before any supervisor


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["call", "--json"], "the following arguments are required: name"),
        (["logs", "--json"], "the following arguments are required: SERVER"),
        (["logs", "x", "-n", "many", "--json"], "argument -n/--lines: invalid int value: 'many'"),
        (["host-config", "cursor", "--json"], "unrecognized arguments: --json"),
        (["nonsense", "--json"], "invalid choice: 'nonsense'"),
    ],
)
def test_usage_errors_with_json_are_one_json_error_on_stdout_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == ExitCode.USAGE
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert error["code"] == "USAGE" and message in error["message"]
    assert err == ""


def test_usage_errors_without_json_are_the_usage_on_stderr_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs"]) == ExitCode.USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("usage: mcp-supervisor logs")
    assert "mcp-supervisor logs: error: the following arguments are required: SERVER" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["logs", "x", "-n", "-1"], "-n must be 0 or more lines, not -1"),
        (["logs", "x", "--count", "3"], "--count N (N >= 1) is for -f: stop after N new lines"),
        (["logs", "x", "-f", "--count", "0"], "--count N (N >= 1) is for -f: stop after N new lines"),
        (["shutdown", "--grace", "-1"], "--grace must be 0 to 86400 seconds, not -1"),
        (["shutdown", "--grace", "nan"], "--grace must be 0 to 86400 seconds, not nan"),
        (["call", "mcp_x_y", "[1, 2]"], "ARGS_JSON must be a JSON object, not list"),
    ],
)
def test_bad_input_is_refused_before_any_request(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = f"ipc://{tmp_path}/nobody.sock"  # were it asked, the exit code would be 3
    assert main([*argv, "--json", "--endpoint", endpoint]) == ExitCode.USAGE
    assert json.loads(capsys.readouterr().out) == {"error": {"code": "USAGE", "message": message}}
    assert main([*argv, "--endpoint", endpoint]) == ExitCode.USAGE
    assert capsys.readouterr().err == f"mcp-supervisor: error: {message}\n"


@pytest.mark.parametrize(
    "argv",
    [["status"], ["logs", "x"], ["shutdown"], ["restart", "x"], ["wait", "--timeout", "0.3"], ["reload"]],
)
def test_no_supervisor_is_exit_3_with_a_json_error(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--json", "--endpoint", f"ipc://{tmp_path}/nobody.sock"]) == ExitCode.UNREACHABLE
    out, err = capsys.readouterr()
    error = json.loads(out)["error"]
    assert error["code"] == "UNREACHABLE" and str(tmp_path) in error["message"]
    assert err == ""
