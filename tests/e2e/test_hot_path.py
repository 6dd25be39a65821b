"""The worker's hot path on a stdio server: its own ``tools/call``, the server's JSON result checked and
relayed without the SDK's models. Against the hand-written legacy server, which can answer in ways an
SDK server never would: each malformed answer is a SERVER_ERROR naming what is wrong, and the worker
serves on; a structured result is checked against the tool's output schema; an abandoned call sends the
server ``notifications/cancelled`` for its id, and the late answer is dropped; a call that asks for
progress carries its own id as progress token and gets the server's notifications before its answer.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from supervisor.client.errors import ServerError, ToolTimeoutError
from tests.e2e.harness import SupervisorProcess, poll

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
LEGACY_SERVER = Path(__file__).parent.parent / "servers" / "legacy_server.py"
OWN_IDS = 1 << 40  # the worker's own requests have ids above this (workers/own_requests.py)


@pytest.fixture
def legacy(start_supervisor: Start) -> SupervisorProcess:
    return start_supervisor({"old": {"command": sys.executable, "args": [str(LEGACY_SERVER)]}})


@pytest.mark.parametrize(
    ("shape", "problem"),
    [
        ("not_object", " returned an invalid result: Expected `object`, got `int`"),
        ("no_content", " returned an invalid result: no content"),
        ("unknown_type", " returned an invalid result: content[0] has unknown type 'video'"),
        ("text_without_text", " returned an invalid result: content[0] (text) has no string 'text'"),
        (
            "bad_resource",
            " returned an invalid result: content[0] (resource) has no resource with a uri and text or blob",
        ),
        ("bad_error", ": server sent a malformed error (Object missing required field `message`)"),
    ],
)
def test_a_malformed_answer_is_a_server_error_naming_the_problem_and_the_worker_serves_on(
    legacy: SupervisorProcess, shape: str, problem: str
) -> None:
    pid = legacy.status()["old"].worker_pid
    with pytest.raises(ServerError) as caught:
        legacy.client.call_tool("mcp_old_bad", {"shape": shape})
    assert f"server 'old': tool 'bad'{problem}" in str(caught.value)
    assert legacy.client.call_tool("mcp_old_echo", {"text": "still here"}).text == "still here"
    status = legacy.status()["old"]
    assert (status.worker_pid, status.restarts) == (pid, 0)


def test_structured_content_is_checked_against_the_output_schema(legacy: SupervisorProcess) -> None:
    result = legacy.client.call_tool("mcp_old_counted", {"n": 3})
    assert (result.structured_content, result.text) == ({"n": 3}, "3")
    with pytest.raises(ServerError) as caught:
        legacy.client.call_tool("mcp_old_counted", {"n": "three"})
    assert (
        "tool 'counted' returned an invalid result: structuredContent does not match the outputSchema: "
        "n: 'three' is not of type 'integer'"
    ) in str(caught.value)


def test_fields_beyond_the_checked_ones_reach_the_agent_as_sent(legacy: SupervisorProcess) -> None:
    result = legacy.client.call_tool("mcp_old_extras", {})
    assert result.content == [
        {"type": "text", "text": "extra", "annotations": {"priority": 0.5}, "_meta": {"k": "v"}}
    ]


def test_an_abandoned_call_is_cancelled_by_its_id_and_its_late_answer_dropped(
    legacy: SupervisorProcess,
) -> None:
    with pytest.raises(ToolTimeoutError):
        legacy.client.call_tool("mcp_old_sleep", {"seconds": 1.5}, timeout=0.3)
    # The server blocks in its sleep, then answers the abandoned call and reads the cancel.
    cancelled = poll(
        "the server to read the cancel",
        lambda: json.loads(legacy.client.call_tool("mcp_old_cancelled", {}).text) or None,
        10,
    )
    ids = json.loads(legacy.client.call_tool("mcp_old_ids", {}).text)
    assert all(isinstance(id_, int) and id_ > OWN_IDS for id_ in ids), ids
    assert cancelled == [ids[0]]  # the sleep: the first call
    assert legacy.client.call_tool("mcp_old_echo", {"text": "after"}).text == "after"
    assert legacy.status()["old"].restarts == 0
    assert "Traceback" not in legacy.log


def test_a_schema_whose_ref_does_not_resolve_is_dropped_with_a_warning_not_the_worker(
    legacy: SupervisorProcess,
) -> None:
    pid = legacy.status()["old"].worker_pid
    for _ in range(2):
        result = legacy.client.call_tool("mcp_old_refs", {"x": 1})
        assert (result.text, result.structured_content) == ("refs", {"y": 1})
    status = legacy.status()["old"]
    assert (status.worker_pid, status.restarts) == (pid, 0)
    for which in ("inputSchema", "outputSchema"):
        warning = f"tool 'refs': its {which} has a $ref that does not resolve"
        assert legacy.log.count(warning) == 1, legacy.log  # dropped after the first time


def test_a_call_that_asks_for_progress_takes_the_hot_path_with_its_id_as_token(
    legacy: SupervisorProcess,
) -> None:
    notes: list[tuple[float, float | None, str | None]] = []

    def record(progress: float, total: float | None, message: str | None) -> None:
        notes.append((progress, total, message))

    result = legacy.client.call_tool("mcp_old_progress", {"count": 5}, progress=record)
    token = json.loads(result.text)["token"]
    assert isinstance(token, int) and token > OWN_IDS
    assert notes[-1] == (5, 5, "step 5")  # coalesced (5 in a burst), the last one before the answer
    assert [progress for progress, _, _ in notes] == sorted({progress for progress, _, _ in notes})
    notes.clear()
    assert json.loads(legacy.client.call_tool("mcp_old_progress", {"count": 5}).text) == {"token": None}
    assert notes == []
