"""The mcp-supervisor command, run as a user runs it, against a real supervisor."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import SupervisorProcess

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
CLI_TIMEOUT = 60  # seconds for one CLI command


def cli(*args: str, endpoint: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "supervisor", *args]
    if endpoint is not None:
        command += ["--endpoint", endpoint]
    return subprocess.run(command, capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False)


def test_wait_returns_zero_when_every_server_is_ready(shared: SupervisorProcess) -> None:
    done = cli("wait", "--timeout", "30", endpoint=shared.endpoint)
    assert done.returncode == 0, done.stderr
    assert "all 2 servers ready" in done.stdout


def test_tools_json_lists_names_servers_and_schemas(shared: SupervisorProcess) -> None:
    done = cli("tools", "--json", endpoint=shared.endpoint)
    assert done.returncode == 0, done.stderr
    tools = {tool["name"]: tool for tool in json.loads(done.stdout)}
    assert set(tools["mcp_time_get_current_time"]) == {
        "name",
        "server",
        "original_name",
        "description",
        "input_schema",
    }
    assert tools["mcp_time_get_current_time"]["server"] == "time"
    table = cli("tools", endpoint=shared.endpoint)
    assert table.stdout.splitlines()[0].split() == ["TOOL", "SERVER", "DESCRIPTION"]
    assert "mcp_test_echo" in table.stdout


def test_status_json_has_one_row_per_server(shared: SupervisorProcess) -> None:
    done = cli("status", "--json", endpoint=shared.endpoint)
    assert done.returncode == 0, done.stderr
    rows = {row["server"]: row for row in json.loads(done.stdout)["servers"]}
    assert set(rows) == {"test", "time"}
    expected = {"server", "state", "worker_pid", "server_pid", "restarts", "tools", "last_error"}
    assert expected <= set(rows["time"])
    assert rows["time"]["state"] == "ready" and rows["time"]["tools"] == 2
    assert isinstance(rows["time"]["worker_pid"], int) and isinstance(rows["time"]["server_pid"], int)
    table = cli("status", endpoint=shared.endpoint)
    header = ["SERVER", "STATE", "PID", "SERVER_PID", "RESTARTS", "TOOLS", "RETRY_IN", "LAST_ERROR"]
    assert table.stdout.split()[:8] == header


def test_call_prints_the_text_result(shared: SupervisorProcess) -> None:
    done = cli("call", "mcp_time_get_current_time", '{"timezone": "UTC"}', endpoint=shared.endpoint)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["timezone"] == "UTC"
    as_json = cli("call", "mcp_test_add", '{"a": 1, "b": 2}', "--json", endpoint=shared.endpoint)
    assert json.loads(as_json.stdout)["structured_content"] == {"sum": 3}


@pytest.mark.parametrize(
    ("args", "code", "stderr"),
    [
        (("call", "mcp_nobody_nothing"), 5, "UNKNOWN_TOOL"),
        (("call", "mcp_test_echo", "{not json"), 2, "ARGS_JSON is not valid JSON"),
        (("call", "mcp_test_echo", "[1]"), 2, "must be a JSON object"),
        (("call", "mcp_test_echo", '{"text": "x"}', "--timeout", "-1"), 2, "timeout must be a positive"),
        (("call", "mcp_test_slow", '{"seconds": 30, "tag": "cli"}', "--timeout", "0.5"), 4, "TIMEOUT"),
        (("call", "mcp_test_fail", '{"message": "nope"}'), 1, "TOOL_ERROR"),
        (("restart", "nobody"), 5, "no server named 'nobody'"),
    ],
)
def test_errors_exit_non_zero_with_the_code_on_stderr(
    shared: SupervisorProcess, args: tuple[str, ...], code: int, stderr: str
) -> None:
    done = cli(*args, endpoint=shared.endpoint)
    assert done.returncode == code, (done.stdout, done.stderr)
    assert stderr in done.stderr
    assert "Traceback" not in done.stderr


def test_commands_without_a_supervisor_say_so(tmp_path: Path) -> None:
    done = cli("status", endpoint=f"ipc://{tmp_path}/nobody.sock")
    assert done.returncode == 3
    assert "is 'mcp-supervisor run' running?" in done.stderr
    waited = cli("wait", "--timeout", "0.5", endpoint=f"ipc://{tmp_path}/nobody.sock")
    assert waited.returncode == 3 and "timed out" in waited.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        ("{not json", "not valid JSON"),
        ("[]", "must be a JSON object"),
        ('{"servers_typo": {}}', "mcpServers"),
    ],
)
def test_run_with_a_bad_config_file_exits_2_naming_it(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "mcp.json"
    if content is not None:
        path.write_text(content)
    done = cli("run", str(path), endpoint=f"ipc://{tmp_path}/s.sock")
    assert done.returncode == 2
    assert str(path) in done.stderr and message in done.stderr
    assert "Traceback" not in done.stderr


def test_help_explains_every_command() -> None:
    done = cli("--help")
    for command in ("run", "wait", "tools", "call", "status", "restart", "stop", "start"):
        assert command in done.stdout
    assert "--endpoint" in cli("call", "--help").stdout


def test_bundled_config_runs_both_pypi_servers(tmp_path: Path) -> None:
    """The README's main job: `mcp-supervisor run config/mcp.json`, offline, right after install."""
    repo = Path(__file__).resolve().parents[2]
    endpoint = f"ipc://{tmp_path}/s.sock"
    config = repo / "config" / "mcp.json"
    run = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "run", str(config), "--endpoint", endpoint],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        waited = cli("wait", "--timeout", "60", endpoint=endpoint)
        assert waited.returncode == 0, waited.stderr
        now = cli("call", "mcp_time_get_current_time", '{"timezone": "UTC"}', endpoint=endpoint)
        assert json.loads(now.stdout)["timezone"] == "UTC"
        git = cli("call", "mcp_git_git_status", json.dumps({"repo_path": str(repo)}), endpoint=endpoint)
        assert git.returncode == 0, git.stderr
        assert "branch" in git.stdout.lower()
    finally:
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=30)
    assert run.returncode == 0, stderr
    assert "server 'time' ready" in stderr and "server 'git' ready" in stderr


def test_bad_endpoints_are_clear_errors_not_hangs() -> None:
    status = cli("status", endpoint="not-an-endpoint")
    assert status.returncode == 2 and "'not-an-endpoint' is no endpoint (tcp://HOST:PORT" in status.stderr
    unknown = cli("status", endpoint="udp://a:1")
    assert unknown.returncode == 3 and "cannot connect to 'udp://a:1'" in unknown.stderr
    config = Path(__file__).resolve().parents[2] / "config" / "mcp.json"
    run = cli("run", str(config), "--insecure", endpoint="tcp://999.1.1.1:1")
    assert run.returncode == 1 and "cannot listen on tcp://999.1.1.1:1" in run.stderr


def test_a_servers_escape_sequences_reach_no_terminal_raw(start_supervisor: Start) -> None:
    """A server writes terminal escapes (retitle the window, clear the screen, a CSI in C1) on stderr
    and crashes: ``status``, the failed ``call``, ``events`` and the supervisor's own log show them
    escaped."""
    from supervisor.client.errors import WorkerCrashedError
    from tests.e2e.harness import stdio_test_server

    hostile = "\x1b]0;pwned\x07\x1b[2J\u009b31m\u202eevil"
    sup = start_supervisor({"x": stdio_test_server()})
    sup.client.call_tool("mcp_x_stderr", {"lines": 1, "text": hostile})
    events = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "events", "--count", "2", "--endpoint", sup.endpoint],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        with pytest.raises(WorkerCrashedError):
            sup.client.call_tool("mcp_x_crash", {})
        status = cli("status", endpoint=sup.endpoint)
        called = cli("call", "mcp_x_crash", "{}", endpoint=sup.endpoint)
        watched, _ = events.communicate(timeout=CLI_TIMEOUT)
    finally:
        events.kill()
        events.wait()
    # the server's row: its escaped error, or (on a busy machine, restarted already) its state
    assert re.search(r"^x +(restarting|starting|ready) ", status.stdout, re.MULTILINE), status.stdout
    for shown in (status.stdout, status.stderr, called.stdout, called.stderr, watched, sup.log):
        assert "\x1b" not in shown and "\x07" not in shown and "\u009b" not in shown and "\u202e" not in shown
    assert "\\x1b]0;pwned" in sup.log  # escaped, not dropped
