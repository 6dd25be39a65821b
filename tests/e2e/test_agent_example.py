"""The agent loop of ``examples/agent.py``, run as a user runs it, against a scripted chat server.

The model is ``tests.e2e.scripted_chat.ScriptedChat``: a real HTTP server on loopback that answers
with prepared chat completions and keeps every request. The tools are real: a supervisor with the
test server, reloaded, stopped and kill -9ed under the conversation.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from supervisor.protocol import RegistryChanged
from tests.e2e.harness import SupervisorProcess, poll, stdio_test_server
from tests.e2e.scripted_chat import Reply, ScriptedChat, Step, answer, free_port, tool_calls

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
ROOT = Path(__file__).parent.parent.parent
AGENT = ROOT / "examples" / "agent.py"
AGENT_TIMEOUT = 60.0  # seconds for one run of the agent (each takes about a second)
EVENT_TIMEOUT = 30.0  # seconds for a registry change to be published
NOTE = "(Note from the tool host)"


def agent_env(chat: ScriptedChat | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MCP_SUPERVISOR_"))}
    if chat is not None:
        env |= {"OPENAI_BASE_URL": chat.url, "OPENAI_MODEL": "scripted-model", "OPENAI_API_KEY": "test-key"}
    return env | extra


def run_agent(
    sup: SupervisorProcess, chat: ScriptedChat | None, *args: str, stdin: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the example to its end (bounded); ``--endpoint`` names ``sup``."""
    return subprocess.run(
        [sys.executable, str(AGENT), "--endpoint", sup.endpoint, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=agent_env(chat, **env),
        timeout=AGENT_TIMEOUT,
    )


def wait_registry_change(
    sup: SupervisorProcess, change: Callable[[], object], server: str
) -> RegistryChanged:
    """Make ``change`` and wait (bounded) until the events socket publishes ``server``'s tools changing:
    by then the agent's subscription has it too."""
    with sup.client.watch() as events:
        change()
        deadline = time.monotonic() + EVENT_TIMEOUT
        while (left := deadline - time.monotonic()) > 0:
            event = events.next(timeout=left)
            if isinstance(event, RegistryChanged) and event.server == server:
                return event
    raise AssertionError(f"no RegistryChanged for {server!r} within {EVENT_TIMEOUT} s")


def reload_with(sup: SupervisorProcess, servers: dict[str, Any]) -> None:
    """Rewrite the supervisor's config with ``servers`` and reload it."""
    sup.config.write_text(json.dumps({"mcpServers": servers}).replace("{state}", str(sup.state_dir)))
    sup.client.reload()


def test_a_question_runs_the_tools_the_model_asks_for_and_prints_its_answer(
    shared: SupervisorProcess,
) -> None:
    script = [
        tool_calls(
            ("call_1", "mcp_test_echo", {"text": "hello from the model"}),
            ("call_2", "mcp_test_add", {"a": 2, "b": 3}),
        ),
        answer("The echo said hello, and 2 + 3 = 5."),
    ]
    with ScriptedChat(script) as chat:
        done = run_agent(shared, chat, "What does the echo say, and what is 2 + 3?")
    assert (done.returncode, done.stdout) == (0, "The echo said hello, and 2 + 3 = 5.\n"), done.stderr
    assert chat.problems == [] and len(chat.requests) == 2

    first = chat.requests[0]
    assert first["model"] == "scripted-model" and chat.headers[0]["authorization"] == "Bearer test-key"
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["messages"][1]["content"] == "What does the echo say, and what is 2 + 3?"

    def by_name(tool: dict[str, Any]) -> str:
        return str(tool["function"]["name"])

    # the registry as the client stub's openai_tools() gives it, in a stable order
    assert first["tools"] == sorted(shared.client.openai_tools(), key=by_name)
    assert "mcp_test_echo" in chat.tool_names(0)

    second = chat.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "tool"]
    assert [call["id"] for call in second[2]["tool_calls"]] == ["call_1", "call_2"]
    assert chat.tool_messages(1) == {"call_1": "hello from the model", "call_2": "5"}
    assert chat.notes(1) == []  # nothing changed: no note
    assert "-> mcp_test_echo" in done.stderr and "Traceback" not in done.stderr


def test_bad_tool_calls_become_tool_messages_and_the_loop_goes_on(shared: SupervisorProcess) -> None:
    script = [
        tool_calls(
            ("unknown", "mcp_test_nope", {}),
            ("not_json", "mcp_test_echo", '{"text": '),
            ("not_object", "mcp_test_echo", "[1, 2]"),
            ("schema", "mcp_test_echo", {"text": 7}),
            ("failing", "mcp_test_fail", {"message": "the tool says no"}),
            ("nameless", "", {}),
        ),
        answer("I could not use those tools."),
    ]
    with ScriptedChat(script) as chat:
        done = run_agent(shared, chat, "Try the tools")
    assert (done.returncode, done.stdout) == (0, "I could not use those tools.\n"), done.stderr
    assert chat.problems == []
    results = chat.tool_messages(1)
    assert results["unknown"] == "UNKNOWN_TOOL: no tool named 'mcp_test_nope'"
    assert results["not_json"].startswith("INVALID_ARGUMENTS: the arguments are not JSON")
    assert results["not_object"] == "INVALID_ARGUMENTS: the arguments must be a JSON object"
    assert results["schema"].startswith("INVALID_ARGUMENTS:") and "text" in results["schema"]
    assert results["failing"] == "TOOL_ERROR: the tool says no"
    assert results["nameless"].startswith(("UNKNOWN_TOOL", "BAD_REQUEST"))
    assert shared.client.call_tool("mcp_test_echo", {"text": "unharmed"}).text == "unharmed"


def test_the_step_bound_ends_a_question_that_never_gets_an_answer(shared: SupervisorProcess) -> None:
    again = tool_calls(("again", "mcp_test_echo", {"text": "again"}))
    with ScriptedChat([again, again]) as chat:
        done = run_agent(shared, chat, "Loop for ever", "--max-steps", "2")
    assert done.returncode == 3 and done.stdout == ""
    assert "agent: no final answer within 2 steps" in done.stderr
    assert len(chat.requests) == 2 and chat.problems == []


def test_interactive_mode_keeps_the_conversation_and_survives_a_chat_error(shared: SupervisorProcess) -> None:
    script: list[Step] = [Reply(503, b'{"error": {"message": "try again"}}'), answer("one"), answer("two")]
    with ScriptedChat(script) as chat:
        done = run_agent(shared, chat, stdin="lost\nfirst\n\nsecond\nexit\nnever asked\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "> > one\n> > two\n> "  # the failed question, the empty line: no answer
    assert "agent: " in done.stderr and "answered 503: try again" in done.stderr
    assert chat.problems == [] and len(chat.requests) == 3
    # the failed question is dropped; the answered one stays in the conversation
    assert [(m["role"], m["content"]) for m in chat.requests[2]["messages"][1:]] == [
        ("user", "first"),
        ("assistant", "one"),
        ("user", "second"),
    ]


def test_tools_a_reload_adds_or_removes_reach_the_next_request_with_a_note(start_supervisor: Start) -> None:
    servers = {"test": stdio_test_server()}
    sup = start_supervisor(servers)

    def add_a_server(request: dict[str, Any]) -> dict[str, Any]:
        assert "mcp_extra_echo" not in {t["function"]["name"] for t in request["tools"]}
        added = wait_registry_change(
            sup,
            functools.partial(reload_with, sup, {**servers, "extra": stdio_test_server()}),
            "extra",
        )
        assert "mcp_extra_echo" in {tool.name for tool in added.added}
        return tool_calls(("before", "mcp_test_echo", {"text": "one"}))

    def remove_it(request: dict[str, Any]) -> dict[str, Any]:
        wait_registry_change(sup, functools.partial(reload_with, sup, servers), "extra")
        return tool_calls(("gone", "mcp_extra_echo", {"text": "two"}))

    script: list[Step] = [add_a_server, remove_it, answer("done")]
    with ScriptedChat(script) as chat:
        done = run_agent(sup, chat, "Use whatever tools there are")
    assert (done.returncode, done.stdout) == (0, "done\n"), done.stderr
    assert chat.problems == []

    extra = {tool.name for tool in sup.client.list_tools()} ^ chat.tool_names(0)
    assert extra == set(), "the registry is back to the first request's tools"
    added = chat.tool_names(1) - chat.tool_names(0)
    assert "mcp_extra_echo" in added and chat.tool_names(1) >= chat.tool_names(0)
    assert chat.notes(1) == [f"{NOTE} Tools now available: {', '.join(sorted(added))}."]
    assert chat.requests[1]["messages"][-1]["content"] == chat.notes(1)[0]  # just before the request

    assert chat.tool_names(2) == chat.tool_names(0)
    assert chat.notes(2)[1] == f"{NOTE} Tools removed: {', '.join(sorted(added))}."
    assert chat.tool_messages(2)["gone"] == "UNKNOWN_TOOL: no tool named 'mcp_extra_echo'"
    assert "** Tools now available: mcp_extra_" in done.stderr


def test_a_worker_killed_mid_call_is_a_tool_message_and_its_restart_serves_the_next_call(
    start_supervisor: Start,
) -> None:
    sup = start_supervisor({"test": stdio_test_server(TEST_SERVER_STATE_DIR="{state}")})
    worker = sup.status()["test"].worker_pid
    assert worker is not None

    def after_the_crash(request: dict[str, Any]) -> dict[str, Any]:
        sup.wait_states(test="ready")
        sup.wait_tools("mcp_test_echo")
        return tool_calls(("after", "mcp_test_echo", {"text": "back again"}))

    script: list[Step] = [
        tool_calls(("during", "mcp_test_slow", {"seconds": 60, "tag": "doomed"})),
        after_the_crash,
    ]
    with ScriptedChat([*script, answer("recovered")]) as chat:
        agent = subprocess.Popen(
            [sys.executable, str(AGENT), "--endpoint", sup.endpoint, "Call the slow tool"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=agent_env(chat),
        )
        try:
            started = sup.state_dir / "doomed.started"
            poll(
                "the slow call to reach the server", lambda: started.exists() or agent.poll() is not None, 30
            )
            os.kill(worker, signal.SIGKILL)
            stdout, stderr = agent.communicate(timeout=AGENT_TIMEOUT)
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.communicate()
    assert (agent.returncode, stdout) == (0, "recovered\n"), stderr
    assert chat.problems == [] and len(chat.requests) == 3
    assert chat.tool_messages(1)["during"].startswith("WORKER_CRASHED: ")
    assert chat.tool_messages(2)["after"] == "back again"
    assert "mcp_test_echo" in chat.tool_names(2)
    if "mcp_test_echo" not in chat.tool_names(1):  # the crash reached the agent before its request
        assert any("Tools removed" in note and "mcp_test_echo" in note for note in chat.notes(1))
        assert any("Tools now available" in note and "mcp_test_echo" in note for note in chat.notes(2))
    status = sup.status()["test"]
    assert (status.state, status.restarts) == ("ready", 1) and status.worker_pid != worker


def test_unavailable_and_timeout_are_tool_messages_and_the_loop_goes_on(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server()})

    def stop_the_server(request: dict[str, Any]) -> dict[str, Any]:
        sup.client.stop("test")
        sup.wait_states(test="stopped")
        return tool_calls(("stopped", "mcp_test_echo", {"text": "x"}))

    def start_it_again(request: dict[str, Any]) -> dict[str, Any]:
        sup.client.start("test")
        sup.wait_states(test="ready")
        sup.wait_tools("mcp_test_slow")
        return tool_calls(("slow", "mcp_test_slow", {"seconds": 30, "tag": "late"}))

    with ScriptedChat([stop_the_server, start_it_again, answer("gave up")]) as chat:
        done = run_agent(sup, chat, "Be patient", "--tool-timeout", "1")
    assert (done.returncode, done.stdout) == (0, "gave up\n"), done.stderr
    assert chat.problems == []
    assert chat.tool_messages(1)["stopped"].startswith("UNAVAILABLE: ")
    assert chat.tool_messages(2)["slow"].startswith("TIMEOUT: ")
    assert sup.client.call_tool("mcp_test_echo", {"text": "fine"}).text == "fine"


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (
            Reply(500, b'{"error": {"message": "the model is overloaded"}}'),
            "answered 500: the model is overloaded",
        ),
        (Reply(404, b'{"error": "no such model"}'), "answered 404: no such model"),
        (Reply(401, b"Unauthorized", "text/plain"), "answered 401: Unauthorized"),
        (Reply(502, b""), "answered 502: Bad Gateway"),
        (
            Reply(200, b"<html>not json</html>", "text/html"),
            "answered without a message: '<html>not json</html>'",
        ),
        (Reply(200, b'{"choices": []}'), "answered without a message"),
        (Reply(200, b"\xff\xfe garbage"), "answered without a message"),
        (Reply(200, b'{"choices": [{"message": "hi"}]}'), "answered with a malformed message"),
        (
            Reply(200, b'{"choices": [{"message": {"tool_calls": "all"}}]}'),
            "answered with a malformed message",
        ),
        (
            Reply(200, b'{"choices": [{"message": {"tool_calls": [1]}}]}'),
            "answered with malformed tool calls",
        ),
    ],
)
def test_a_chat_endpoint_that_fails_is_a_clear_error(
    shared: SupervisorProcess, reply: Reply, said: str
) -> None:
    with ScriptedChat([reply]) as chat:
        done = run_agent(shared, chat, "Hello?")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"agent: {chat.url}/chat/completions {said}"), done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_an_unreachable_chat_endpoint_is_a_clear_error(shared: SupervisorProcess) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    done = run_agent(shared, None, "Hello?", OPENAI_BASE_URL=url, OPENAI_MODEL="m")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"agent: cannot reach {url}/chat/completions: "), done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "env", "code", "said"),
    [
        ((), {}, 1, "agent: set OPENAI_BASE_URL and OPENAI_MODEL"),
        ((), {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}, 1, "agent: set OPENAI_BASE_URL and OPENAI_MODEL"),
        (
            (),
            {"OPENAI_BASE_URL": "http://[::1/v1", "OPENAI_MODEL": "m"},
            1,
            "agent: OPENAI_BASE_URL is not a URL (",
        ),
        (
            (),
            {"OPENAI_BASE_URL": "localhost:8000/v1", "OPENAI_MODEL": "m"},
            1,
            "agent: OPENAI_BASE_URL is not an http:// or https:// URL: 'localhost:8000/v1'",
        ),
        (
            ("--endpoint", "ipc:///nonexistent/sup.sock"),
            {"OPENAI_BASE_URL": "http://x/v1", "OPENAI_MODEL": "m"},
            1,
            "agent: UNREACHABLE: ",
        ),
        (("--max-steps", "0"), {}, 2, "--max-steps must be at least 1"),
        (("--tool-timeout", "nan"), {}, 2, "--tool-timeout must be a positive number"),
        (("--max-steps", "many"), {}, 2, "invalid int value: 'many'"),
    ],
)
def test_bad_configuration_and_usage_are_clear_errors(
    shared: SupervisorProcess, args: tuple[str, ...], env: dict[str, str], code: int, said: str
) -> None:
    done = run_agent(shared, None, *args, "Hello?", **env)
    assert done.returncode == code and done.stdout == ""
    assert said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_example_passes_mypy_strict() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(AGENT)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
