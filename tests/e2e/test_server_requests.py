"""What a worker answers when its server asks the client for something: elicitation and sampling.

The happy paths over every transport are in test_everything.py; here are the decisions and the
failures: forms accepted with their defaults (or not), and sampling programs that fail, hang or
print nonsense, each refused with an error that says so.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import EVERYTHING, NODE, SupervisorProcess, npm_package, poll, stdio_test_server

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "Ada"},
        "age": {"type": "integer", "default": 36},
        "vip": {"type": "boolean", "default": True},
        "note": {"type": "string"},
    },
    "required": ["name", "age"],
}
SAMPLER = """
import sys, time
mode = sys.argv[1]
sys.stdin.read()
if mode == "fail":
    sys.stderr.write("no model configured\\n")
    sys.exit(2)
if mode == "hang":
    time.sleep(600)
print("this is not JSON")
"""


def test_elicitation_accepts_a_form_with_its_defaults_only_when_configured(start_supervisor: Start) -> None:
    sup = start_supervisor(
        {"eager": {**stdio_test_server(), "elicitation": "defaults"}, "plain": stdio_test_server()}
    )
    accepted = sup.client.call_tool("mcp_eager_ask", {"message": "Who are you?", "schema": FORM})
    assert accepted.structured_content == {
        "action": "accept",
        "content": {"name": "Ada", "age": 36, "vip": True},
    }
    assert (
        "[eager] server asked for input ('Who are you?'): accepted with the schema's defaults for name"
        in sup.log
    )

    no_default = {**FORM, "required": ["name", "note"]}
    declined = sup.client.call_tool("mcp_eager_ask", {"message": "And your note?", "schema": no_default})
    assert declined.structured_content == {"action": "decline", "content": None}
    assert "('And your note?'): declined, no default for required field(s) note" in sup.log

    plain = sup.client.call_tool("mcp_plain_ask", {"message": "Who are you?", "schema": FORM})
    assert plain.structured_content == {"action": "decline", "content": None}
    assert (
        """[plain] server asked for input ('Who are you?'): declined; "elicitation": "defaults" """ in sup.log
    )


def test_url_elicitation_is_always_declined(start_supervisor: Start) -> None:
    everything = {
        "command": str(NODE),
        "args": [str(npm_package(EVERYTHING)), "stdio"],
        "elicitation": "defaults",
    }
    sup = start_supervisor({"ev": everything})
    sup.wait_tools("mcp_ev_trigger-url-elicitation")
    answer = sup.client.call_tool("mcp_ev_trigger-url-elicitation", {"url": "https://example.com/login"})
    assert "decline" in answer.text
    assert (
        "[ev] server asked for a URL to be opened ('Please open the link to complete this action.')"
        in sup.log
    )


def _sampler_procs(script: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if proc.name.isdigit() and str(script).encode() in cmdline:
            found.append(int(proc.name))
    return found


def test_a_failing_hanging_or_garbled_sampling_program_is_refused_with_the_reason(
    start_supervisor: Start, tmp_path: Path
) -> None:
    script = tmp_path / "sampler.py"
    script.write_text(SAMPLER)
    everything = {"command": str(NODE), "args": [str(npm_package(EVERYTHING)), "stdio"]}

    def hook(mode: str, timeout: float = 30) -> dict[str, Any]:
        return {
            **everything,
            "sampling": {"command": sys.executable, "args": [str(script), mode], "timeout": timeout},
        }

    sup = start_supervisor({"fail": hook("fail"), "hang": hook("hang", 1), "garbled": hook("garbled")})
    expected = {
        "fail": "sampling program exited with status 2 ('no model configured')",
        "hang": "sampling program timed out after 1 s",
        "garbled": "sampling program printed no CreateMessageResult",
    }
    for server, reason in expected.items():
        result = sup.client.call_tool(
            f"mcp_{server}_trigger-sampling-request", {"prompt": "hi"}, raise_on_error=False
        )
        assert result.is_error and reason in result.text, (server, result.text)
        assert f"[{server}] sampling request refused: {reason}" in sup.log
    poll("the hanging sampling program to be killed", lambda: not _sampler_procs(script), 10)
    assert all(row.state == "ready" and row.restarts == 0 for row in sup.status().values())
