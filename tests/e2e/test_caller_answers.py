"""Server requests answered by the calling client: sampling and elicitation reach the agent that
made the call (its stub's ``on_sampling`` / ``on_elicitation``), and its answer goes back to the server.

Two real servers: server-everything (Node, which asks with requests on the session, as handshake-era
servers do) and the Python SDK's ``tests/servers/session_server.py`` (on 2026-07-28, which asks through
results that require input).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from supervisor.client import AsyncSupervisorClient, SupervisorClient
from supervisor.client.errors import ServerError, ToolTimeoutError
from supervisor.protocol import Answer, CallResult, ErrorReply, ServerRequest, ToolResult, encode
from tests.e2e.harness import EVERYTHING, NODE, SupervisorProcess, npm_package, poll, raw_call, raw_client

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
SESSION_SERVER = Path(__file__).parent.parent / "servers" / "session_server.py"
NO_RAISE: dict[str, Any] = {"timeout": 30, "raise_on_error": False}
PY = {"command": sys.executable, "args": [str(SESSION_SERVER)], "sampling": "caller"}


def everything() -> dict[str, Any]:
    return {"command": str(NODE), "args": [str(npm_package(EVERYTHING)), "stdio"], "sampling": "caller"}


def client(sup: SupervisorProcess, **handlers: Any) -> SupervisorClient:
    return SupervisorClient(sup.endpoint, request_timeout=10.0, keys=False, **handlers)


def test_sampling_and_elicitation_are_answered_by_the_calling_client(start_supervisor: Start) -> None:
    sup = start_supervisor({"py": PY, "ev": everything()})
    sup.wait_tools("mcp_ev_trigger-sampling-request", "mcp_ev_trigger-elicitation-request")
    asked: list[tuple[str, dict[str, Any]]] = []

    def sample(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(("sampling", params))
        prompt = params["messages"][0]["content"]["text"]
        return {
            "role": "assistant",
            "model": "agent-model",
            "content": {"type": "text", "text": f"re: {prompt}"},
        }

    def elicit(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(("elicitation", params))
        return {"action": "accept", "content": {"name": "Ada"}}

    with client(sup, on_sampling=sample, on_elicitation=elicit) as agent:
        # The Python server on 2026-07-28 (input required) ...
        result = agent.call_tool("mcp_py_sample", {"prompt": "hi"}, timeout=30)
        assert result.structured_content == {"model": "agent-model", "text": "re: hi"}
        result = agent.call_tool("mcp_py_elicit", {"message": "Who?"}, timeout=30)
        assert result.structured_content == {"action": "accept", "content": {"name": "Ada"}}
        # ... and server-everything, asking on its session.
        result = agent.call_tool("mcp_ev_trigger-sampling-request", {"prompt": "yo"}, timeout=30)
        assert "re: Resource trigger-sampling-request context: yo" in result.text
        result = agent.call_tool("mcp_ev_trigger-elicitation-request", {}, timeout=30)
        assert "Ada" in result.text
    assert [kind for kind, _ in asked] == ["sampling", "elicitation", "sampling", "elicitation"]
    assert asked[0][1]["maxTokens"] == 50 and asked[1][1]["message"] == "Who?"
    assert "sampling request answered by the caller" in sup.log


def test_an_async_client_answers_with_coroutines_and_plain_text(start_supervisor: Start) -> None:
    sup = start_supervisor({"py": PY})

    async def sample(params: dict[str, Any]) -> str:
        await trio.sleep(0.01)
        return "just text"

    async def main() -> None:
        async with AsyncSupervisorClient(sup.endpoint, keys=False, on_sampling=sample) as agent:
            with trio.fail_after(30):
                result = await agent.call_tool("mcp_py_sample", {"prompt": "hi"}, timeout=30)
        assert result.structured_content == {"model": "caller", "text": "just text"}

    trio.run(main)


def test_without_handlers_the_config_answers(start_supervisor: Start) -> None:
    sup = start_supervisor({"py": PY, "ev": everything()})
    sup.wait_tools("mcp_ev_trigger-sampling-request")
    with client(sup) as agent:
        declined = agent.call_tool("mcp_py_elicit", {"message": "Who?"}, timeout=30)
        assert declined.structured_content == {"action": "decline", "content": None}
        # "sampling": "caller" and no handler: refused; the server decides what that means for its tool
        refused = agent.call_tool("mcp_ev_trigger-sampling-request", {"prompt": "x"}, **NO_RAISE)
        assert refused.is_error and "no caller answers it" in refused.text
        # (a 2026-07-28 client retries the call with the answers: a refusal fails the call itself)
        with pytest.raises(ServerError, match="no caller answers it"):
            agent.call_tool("mcp_py_sample", {"prompt": "hi"}, timeout=30)


def test_a_failing_handler_and_a_bad_answer_are_errors_for_the_server(start_supervisor: Start) -> None:
    sup = start_supervisor({"ev": everything()})
    sup.wait_tools("mcp_ev_trigger-sampling-request")

    def broken(params: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("no model here")

    with client(sup, on_sampling=broken, on_elicitation=lambda params: {"action": "maybe"}) as agent:
        failed = agent.call_tool(
            "mcp_ev_trigger-sampling-request", {"prompt": "x"}, timeout=30, raise_on_error=False
        )
        assert failed.is_error and "RuntimeError: no model here" in failed.text
        bad = agent.call_tool("mcp_ev_trigger-elicitation-request", {}, **NO_RAISE)
        assert bad.is_error and "the caller's answer is no ElicitResult" in bad.text
    assert sup.status()["ev"].restarts == 0


def test_a_handler_slower_than_the_call_is_bounded_by_its_deadline(start_supervisor: Start) -> None:
    sup = start_supervisor({"ev": everything()})
    sup.wait_tools("mcp_ev_trigger-sampling-request")
    release = threading.Event()

    def slow(params: dict[str, Any]) -> str:
        release.wait(10)
        return "too late"

    with client(sup, on_sampling=slow) as agent, pytest.raises(ToolTimeoutError):
        agent.call_tool("mcp_ev_trigger-sampling-request", {"prompt": "x"}, timeout=1)
    release.set()
    with client(sup, on_sampling=lambda params: "in time") as agent:
        assert (
            "in time" in agent.call_tool("mcp_ev_trigger-sampling-request", {"prompt": "y"}, timeout=30).text
        )


def test_a_request_is_never_sent_to_a_caller_while_another_clients_call_is_in_flight(
    start_supervisor: Start,
) -> None:
    """MCP does not say which call a server's request arose in: with two clients' calls in flight on
    one session, neither may see it (it could hold the other's data); the config answers it."""
    sup = start_supervisor({"ev": everything()})
    sup.wait_tools("mcp_ev_trigger-sampling-request")
    seen: list[dict[str, Any]] = []
    with client(sup) as other, client(sup, on_sampling=lambda params: seen.append(params) or "mine") as agent:
        busy = threading.Thread(
            target=lambda: other.call_tool(
                "mcp_ev_trigger-long-running-operation", {"duration": 3, "steps": 3}, timeout=30
            )
        )
        busy.start()
        poll("the other client's call in flight", lambda: sup.client.front_stats().in_flight >= 1, 10)
        refused = agent.call_tool(
            "mcp_ev_trigger-sampling-request", {"prompt": "x"}, timeout=30, raise_on_error=False
        )
        busy.join(30)
    assert refused.is_error and "no caller answers it" in refused.text
    assert seen == []


def test_answers_that_misbehave_harm_nobody(start_supervisor: Start) -> None:
    """By hand on the wire: answers for the wrong request, for a call not in flight, and one nested
    past what anything decodes; each is dropped or refused, the call still gets its one reply, and
    the worker and supervisor carry on."""
    sup = start_supervisor({"ev": everything()})
    sup.wait_tools("mcp_ev_trigger-sampling-request")
    worker = sup.status()["ev"].worker_pid
    with raw_client(sup.endpoint) as raw:
        raw.send(Answer(id=99, ask=1, result=msgspec.Raw(encode({"x": 1}))))  # no such call: dropped
        call = raw_call(1, "mcp_ev_trigger-sampling-request", {"prompt": "x"}, timeout=30)
        call.answers = ["sampling/createMessage"]
        raw.send(call)
        asked = raw.recv(30)
        assert isinstance(asked, ServerRequest) and asked.id == 1 and asked.method == "sampling/createMessage"
        assert msgspec.msgpack.decode(asked.params)["maxTokens"] == 100
        raw.send(Answer(id=1, ask=asked.ask + 7, result=msgspec.Raw(encode({"x": 1}))))  # no such ask
        raw.send(Answer(id=1, ask=asked.ask, result=msgspec.Raw(b"\x81\xa1a" + b"\x91" * 3000 + b"\xc0")))
        refused = raw.recv(30)  # past what the supervisor's decoder recurses: not even read
        assert isinstance(refused, ErrorReply) and (refused.code, refused.message) == (
            "BAD_REQUEST",
            "nested too deeply",
        )
        raw.send(Answer(id=1, ask=asked.ask, result=msgspec.Raw(b"\x81\xa1a" + b"\x91" * 100 + b"\xc0")))
        reply = raw.recv(30)
        assert isinstance(reply, CallResult), reply
        result = msgspec.msgpack.decode(reply.result, type=ToolResult)
        assert result.is_error and "the caller's answer is not a JSON object" in result.text
        assert "nested deeper than 64 levels" in result.text
        assert sup.status()["ev"].worker_pid == worker
        # the next call asks again, and a good answer is taken
        call = raw_call(2, "mcp_ev_trigger-sampling-request", {"prompt": "y"}, timeout=30)
        call.answers = ["sampling/createMessage"]
        raw.send(call)
        asked = raw.recv(30)
        assert isinstance(asked, ServerRequest)
        good = {"role": "assistant", "model": "m", "content": {"type": "text", "text": "fine"}}
        raw.send(Answer(id=2, ask=asked.ask, result=msgspec.Raw(encode(good))))
        reply = raw.recv(30)
        assert isinstance(reply, CallResult)
        assert "fine" in msgspec.msgpack.decode(reply.result, type=ToolResult).text
