"""The CLI as a script uses it, against a real supervisor: ``--json`` on every command, the documented
exit codes (``supervisor.cli.exit_codes``), ``logs`` (a server's stderr kept across crashes, followed with
``-f``, hostile bytes escaped and bounded) and ``shutdown`` (drain, then nothing left running)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from supervisor.client.errors import WorkerCrashedError
from supervisor.daemon.servers.worker_log import MAX_LINE, RING_CHARS, RING_LINES
from supervisor.shared.processes import children
from tests.e2e.harness import SupervisorProcess, alive, poll, stdio_test_server

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
CLI_TIMEOUT = 60  # seconds for one CLI command
STATE_TIMEOUT = 30  # seconds for a server to be ready again
HELLO = "test server says hello"
SUPERVISOR = (sys.executable, "-m", "supervisor")


@pytest.fixture(scope="module")
def sup(start_module_supervisor: Start) -> SupervisorProcess:
    """One supervisor: ``test`` (resources and prompts), ``spare`` (restarted, stopped, started),
    ``crashy`` (crashes), ``hostile`` (writes garbage on stderr) and ``pool`` (two replicas)."""
    return start_module_supervisor(
        {
            "test": stdio_test_server(TEST_SERVER_RESOURCES=1, TEST_SERVER_STARTUP_STDERR=HELLO),
            "spare": stdio_test_server(),
            "crashy": stdio_test_server(TEST_SERVER_STARTUP_STDERR="crashy starts"),
            "hostile": stdio_test_server(),
            "pool": {**stdio_test_server(TEST_SERVER_STARTUP_STDERR="a replica starts"), "replicas": 2},
        },
    )


def cli(
    endpoint: str | None, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SUPERVISOR, *args, *(["--endpoint", endpoint] if endpoint else [])],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
        env=env,
    )


def run_json(endpoint: str | None, *args: str, code: int = 0, env: dict[str, str] | None = None) -> Any:
    """Run a command with ``--json``: its exit code is ``code`` and stdout is one JSON document."""
    done = cli(endpoint, *args, "--json", env=env)
    assert done.returncode == code, (args, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


def texts(sup: SupervisorProcess, server: str) -> list[str]:
    return [line["text"] for line in run_json(sup.endpoint, "logs", server, "-n", "1000")["lines"]]


# ---------------------------------------------------------------- --json documents

TOOL_KEYS = {"name", "server", "original_name", "description", "input_schema"}

DOCUMENTS: list[tuple[tuple[str, ...], Callable[[Any], bool]]] = [
    (("tools",), lambda doc: all(set(tool) >= TOOL_KEYS for tool in doc) and len(doc) > 10),
    (
        ("status",),
        lambda doc: (
            {row["server"] for row in doc["servers"]} == {"test", "spare", "crashy", "hostile", "pool"}
            and {"events", "front", "audit"} <= set(doc)
            and {"path", "lines", "failures", "dropped"} <= set(doc["audit"])
        ),
    ),
    (
        ("wait", "--timeout", "30"),
        lambda doc: doc["ready"] == 5 and {"server", "state"} == set(doc["servers"][0]),
    ),
    (("call", "mcp_test_echo", '{"text": "hi"}'), lambda doc: doc["text"] == "hi" and doc["content"]),
    (("resources", "test"), lambda doc: {"server", "uri", "name"} <= set(doc[0])),
    (("resource-templates", "test"), lambda doc: {"server", "uri_template"} <= set(doc[0])),
    (("prompts", "test"), lambda doc: {"name", "server", "original_name", "arguments"} <= set(doc[0])),
    (("read", "test", "test://doc/1"), lambda doc: doc["text"] == "document 1" and doc["contents"]),
    (("prompt", "mcp_test_greet", '{"name": "Eve"}'), lambda doc: doc["messages"][0]["role"] == "user"),
    (("logs", "test"), lambda doc: doc["server"] == "test" and doc["last"] >= 1 and doc["lines"]),
    (
        ("reload",),
        lambda doc: (
            set(doc) == {"config", "added", "removed", "changed", "unchanged", "settings"}
            and len(doc["unchanged"]) == 5
        ),
    ),
]


@pytest.mark.parametrize(("args", "check"), DOCUMENTS, ids=[" ".join(args[:1]) for args, _ in DOCUMENTS])
def test_every_command_prints_one_json_document_with_its_keys(
    sup: SupervisorProcess, args: tuple[str, ...], check: Callable[[Any], bool]
) -> None:
    document = run_json(sup.endpoint, *args)
    assert check(document), document


def test_restart_stop_and_start_say_the_state_they_left_the_server_in(sup: SupervisorProcess) -> None:
    assert run_json(sup.endpoint, "stop", "spare") == {
        "server": "spare",
        "action": "stop",
        "state": "stopped",
    }
    started = run_json(sup.endpoint, "start", "spare")
    assert started["server"] == "spare" and started["action"] == "start"
    assert started["state"] in ("starting", "ready")
    sup.wait_states(STATE_TIMEOUT, spare="ready")
    restarted = run_json(sup.endpoint, "restart", "spare")
    assert restarted["action"] == "restart" and restarted["state"] in ("restarting", "starting", "ready")
    sup.wait_states(STATE_TIMEOUT, spare="ready")
    human = cli(sup.endpoint, "restart", "spare")  # without --json, as before
    assert (human.returncode, human.stdout) == (0, "restart spare: done\n")
    sup.wait_states(STATE_TIMEOUT, spare="ready")


def test_events_are_json_lines(sup: SupervisorProcess) -> None:
    events = subprocess.Popen(
        [*SUPERVISOR, "events", "--json", "--count", "2", "--endpoint", sup.endpoint],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def restarted_and_seen() -> bool:  # until it has subscribed, a restart's events go by unseen
            sup.client.restart("spare")
            return events.poll() is not None

        poll("the events command to see two events", restarted_and_seen, STATE_TIMEOUT, interval=0.5)
        out, err = events.communicate(timeout=CLI_TIMEOUT)
    finally:
        events.kill()
    assert events.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 2 and all(line["server"] == "spare" for line in lines)
    sup.wait_states(STATE_TIMEOUT, spare="ready")


def test_keygen_and_logout_print_json(tmp_path: Path) -> None:
    keys = run_json(None, "keygen", str(tmp_path / "keys"))
    assert keys["directory"] == str(tmp_path / "keys") and keys["client_only"] is False
    assert {"what": "created", "path": str(tmp_path / "keys" / "server.key_secret")} in keys["files"]
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps({"mcpServers": {"remote": {"url": "http://127.0.0.1:9/mcp", "oauth": True}}})
    )
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    logout = run_json(f"ipc://{tmp_path}/nobody.sock", "logout", "remote", "--config", str(config), env=env)
    assert logout["server"] == "remote" and logout["forgot"] is False
    assert logout["token_file"].startswith(str(tmp_path / "state"))
    assert logout["supervisor"] == "no supervisor is running; the tokens are used when it starts"


# ---------------------------------------------------------------- failures and exit codes

FAILURES: list[tuple[tuple[str, ...], int, str, str]] = [
    (("logs", "nobody"), 5, "UNKNOWN_TOOL", "no server named 'nobody'"),
    (("restart", "nobody"), 5, "UNKNOWN_TOOL", "no server named 'nobody'"),
    (("resources", "nobody"), 5, "UNKNOWN_TOOL", "no server named 'nobody'"),
    (("call", "mcp_test_nope"), 5, "UNKNOWN_TOOL", "mcp_test_nope"),
    (("prompt", "mcp_test_nope"), 5, "UNKNOWN_TOOL", "no prompt named 'mcp_test_nope'"),
    (("call", "mcp_test_echo", "{not json"), 2, "USAGE", "ARGS_JSON is not valid JSON"),
    (
        ("call", "mcp_test_add", '{"a": "one", "b": 2}'),
        2,
        "INVALID_ARGUMENTS",
        "'one' is not of type 'number'",
    ),
    (("call", "mcp_test_echo", "--timeout", "-1"), 2, "USAGE", "timeout must be a positive number"),
    (("logs", "test", "-n", "x"), 2, "USAGE", "invalid int value: 'x'"),
    (("call", "mcp_test_slow", '{"seconds": 30, "tag": "t"}', "--timeout", "0.5"), 4, "TIMEOUT", "0.5 s"),
    (("call", "mcp_test_fail", '{"message": "nope"}'), 1, "TOOL_ERROR", "reported an error"),
    (("call", "mcp_test_raise_error", '{"message": "bad"}'), 1, "SERVER_ERROR", "bad"),
    (("read", "test", "test://missing"), 1, "SERVER_ERROR", "Resource not found"),
]


@pytest.mark.parametrize(("args", "code", "error", "message"), FAILURES, ids=[f[2] for f in FAILURES])
def test_failures_are_one_json_error_with_the_documented_exit_code(
    sup: SupervisorProcess, args: tuple[str, ...], code: int, error: str, message: str
) -> None:
    failure = run_json(sup.endpoint, *args, code=code)["error"]
    assert failure["code"] == error and message in failure["message"], failure
    if error == "TOOL_ERROR":  # an isError result is the error's, whole
        assert failure["result"]["is_error"] is True and failure["result"]["text"] == "nope"
    human = cli(sup.endpoint, *args)  # the same exit code without --json, and one line on stderr
    assert human.returncode == code
    assert human.stderr.splitlines()[-1].startswith("mcp-supervisor")
    assert message in human.stderr and "Traceback" not in human.stderr


def test_no_supervisor_is_exit_3(tmp_path: Path) -> None:
    for args in (("status",), ("logs", "test", "-f"), ("shutdown",)):
        failure = run_json(f"ipc://{tmp_path}/nobody.sock", *args, code=3)["error"]
        assert failure["code"] == "UNREACHABLE" and "is 'mcp-supervisor run' running?" in failure["message"]


def test_wait_that_runs_out_of_time_is_exit_4(start_supervisor: Start) -> None:
    slow = {**stdio_test_server(TEST_SERVER_INIT_DELAY=60), "startTimeout": 120}
    late = start_supervisor({"late": slow}, wait=False)
    late.wait_states(STATE_TIMEOUT, late="starting")
    failure = run_json(late.endpoint, "wait", "--timeout", "1", code=4)["error"]
    assert failure == {"code": "TIMEOUT", "message": "timed out after 1 s waiting for: late (starting)"}


# ---------------------------------------------------------------- logs


def test_logs_keep_what_a_server_wrote_before_it_crashed(sup: SupervisorProcess) -> None:
    before = sup.status()["crashy"].worker_pid
    sup.client.call_tool("mcp_crashy_stderr", {"lines": 1, "text": "about to crash"})
    with pytest.raises(WorkerCrashedError):
        sup.client.call_tool("mcp_crashy_crash", {})
    poll(
        "a new crashy worker", lambda: sup.status()["crashy"].worker_pid not in (None, before), STATE_TIMEOUT
    )
    sup.wait_states(STATE_TIMEOUT, crashy="ready")
    poll("the restarted server's first line", lambda: texts(sup, "crashy").count("crashy starts") == 2, 10)
    lines = run_json(sup.endpoint, "logs", "crashy", "-n", "1000")["lines"]
    said = [line["text"] for line in lines]
    first, second = (i for i, text in enumerate(said) if text == "crashy starts")
    assert first < said.index("about to crash") < said.index("crashing with 3") < second
    assert {"stream": "worker", "level": "ERROR"}.items() <= next(
        line for line in lines if "exited with code 3" in line["text"]
    ).items()
    assert [line["seq"] for line in lines] == sorted(line["seq"] for line in lines)
    human = cli(sup.endpoint, "logs", "crashy", "-n", "1000")
    assert human.returncode == 0 and "crashy: crashing with 3" in human.stdout
    assert "crashy [worker ERROR]: " in human.stdout


def test_logs_label_each_replica(sup: SupervisorProcess) -> None:
    lines = run_json(sup.endpoint, "logs", "pool")["lines"]
    assert {line["worker"] for line in lines if line["text"] == "a replica starts"} == {"pool#1", "pool#2"}


def test_logs_follow_prints_a_new_line(sup: SupervisorProcess) -> None:
    follow = subprocess.Popen(
        [*SUPERVISOR, "logs", "test", "-f", "-n", "1", "--count", "1", "--json", "--endpoint", sup.endpoint],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def written_and_seen() -> bool:  # a line written before it follows is one of the first it shows
            sup.client.call_tool("mcp_test_stderr", {"lines": 1, "text": "a followed line"})
            return follow.poll() is not None

        poll("logs -f to print a new line and exit", written_and_seen, STATE_TIMEOUT, interval=0.5)
        out, err = follow.communicate(timeout=CLI_TIMEOUT)
    finally:
        follow.kill()
    assert follow.returncode == 0, err
    first, new = (json.loads(line) for line in out.splitlines())
    assert new["text"] == "a followed line" and new["seq"] > first["seq"]
    assert set(new) == {"seq", "time", "worker", "stream", "text", "level"}


EVIL = "\x1b[2J\x1b]0;owned\x07 \x9b31m \u202eevil"  # clear the screen, retitle, C1 CSI, right-to-left


def test_hostile_stderr_is_escaped_bounded_and_harms_nothing(sup: SupervisorProcess) -> None:
    before = sup.status()["hostile"].worker_pid
    call = sup.client.call_tool
    call("mcp_hostile_flood_stderr", {"megabytes": 4, "line_length": 4000}, timeout=60)  # 1048 long lines
    poll("the flood's count", lambda: any("not logged (rate limit)" in t for t in texts(sup, "hostile")), 10)
    flooded = [line["text"] for line in run_json(sup.endpoint, "logs", "hostile", "-n", "5000")["lines"]]
    assert len(flooded) <= RING_LINES and sum(map(len, flooded)) <= RING_CHARS
    assert sum(text.startswith("flood ") for text in flooded) > 10
    call("mcp_hostile_stderr", {"lines": 1, "text": EVIL})
    call("mcp_hostile_stderr", {"lines": 0, "text": "", "raw_hex": "ff fe 80 41 0a"})  # not UTF-8
    call("mcp_hostile_stderr", {"lines": 0, "text": "", "raw_hex": "42", "repeat": 1 << 20})  # 1 MiB, no end
    call("mcp_hostile_stderr", {"lines": 1, "text": "its end"})  # ends it: cut, the end is lost
    call("mcp_hostile_stderr", {"lines": 1, "text": "after the long line"})

    def last_line_read() -> list[str]:
        said = texts(sup, "hostile")
        return said if said[-1] == "after the long line" else []

    said = poll("the line after the long one", last_line_read, 10)
    assert EVIL in said  # kept as written; shown escaped
    assert "\ufffd\ufffd\ufffdA" in said
    assert set(said[-2]) == {"B"} and len(said[-2]) <= MAX_LINE
    human = cli(sup.endpoint, "logs", "hostile", "-n", "5000")
    assert human.returncode == 0
    assert not any(char in human.stdout for char in "\x1b\x07\x9b\u202e\r\x00")
    assert "\\x1b[2J\\x1b]0;owned\\x07 \\x9b31m \\u202eevil" in human.stdout
    assert max(len(line) for line in human.stdout.splitlines()) < MAX_LINE + 200
    assert call("mcp_hostile_echo", {"text": "still here"}).text == "still here"
    assert sup.status()["hostile"].worker_pid == before
    assert call("mcp_test_echo", {"text": "fine"}).text == "fine"


# ---------------------------------------------------------------- shutdown


def test_shutdown_drains_the_calls_in_flight_and_leaves_nothing_running(start_supervisor: Start) -> None:
    doomed = start_supervisor({"test": stdio_test_server(), "other": stdio_test_server()})
    pids = [pid for row in doomed.status().values() for pid in (row.worker_pid, row.server_pid)]
    pids += list(children(doomed.process.pid))  # the zygote too
    outcome: dict[str, object] = {}

    def call() -> None:
        outcome["text"] = doomed.client.call_tool("mcp_test_slow", {"seconds": 1.5, "tag": "drain"}).text

    thread = threading.Thread(target=call)
    thread.start()
    poll("the call to be in flight", lambda: "call slow" in doomed.log, 10)
    done = run_json(doomed.endpoint, "shutdown")
    assert done == {"action": "shutdown", "endpoint": doomed.endpoint, "state": "stopped"}
    thread.join(20)
    assert outcome.get("text") == "done drain"
    assert doomed.process.wait(20) == 0
    poll("every worker and server to be gone", lambda: not [pid for pid in pids if alive(pid)], 5)
    assert "shutdown requested; finishing calls in flight" in doomed.log
    assert run_json(doomed.endpoint, "shutdown", code=3)["error"]["code"] == "UNREACHABLE"


def test_shutdown_without_waiting_returns_at_once_and_the_grace_is_used(start_supervisor: Start) -> None:
    doomed = start_supervisor({"test": stdio_test_server()})
    pids = [doomed.status()["test"].worker_pid, doomed.status()["test"].server_pid]
    done = cli(doomed.endpoint, "shutdown", "--no-wait", "--grace", "0.5")
    assert (done.returncode, done.stdout) == (
        0,
        f"shutdown: the supervisor at {doomed.endpoint} is stopping\n",
    )
    assert doomed.process.wait(20) == 0
    poll("every worker and server to be gone", lambda: not [pid for pid in pids if alive(pid)], 5)
    assert "shutdown requested; finishing calls in flight (up to 0.5 s)" in doomed.log
