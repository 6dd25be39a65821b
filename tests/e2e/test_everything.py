"""The official reference server, ``@modelcontextprotocol/server-everything``, over stdio, SSE and
streamable HTTP: one supervisor serves it three times (one server per transport), and every test
runs against each.

The npm package comes from tests/npm (``npm ci`` in tests/run.sh); its HTTP servers listen on
127.0.0.1 on a port the kernel picks. Besides the reference tools, the tests check what a worker
answers when the server asks something of its client: roots, elicitation, sampling.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from supervisor.client.errors import ToolTimeoutError
from tests.e2e.harness import EVERYTHING, NODE, NodeHttpServer, SupervisorProcess, npm_package

pytestmark = pytest.mark.e2e

TRANSPORTS = ["stdio", "sse", "http"]
SAMPLER = """
import json, sys
request = json.load(sys.stdin)
text = request["messages"][-1]["content"]["text"]
content = {"type": "text", "text": "sampled: " + text}
print(json.dumps({"role": "assistant", "model": "test-sampler", "content": content}))
"""


CONDITIONAL = ("get-roots-list", "trigger-elicitation-request", "trigger-sampling-request")


# Its own fixture, not start_module_supervisor: the roots name the supervisor's own directory (read back
# as everything.tmp), and the two HTTP servers start before the supervisor and stop after it.
@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SupervisorProcess]:
    """server-everything as ``ev_stdio``, ``ev_sse`` and ``ev_http`` (roots and a sampling program
    configured), and as ``bare`` on stdio (nothing configured; elicitation accepted with defaults)."""
    tmp = tmp_path_factory.mktemp("everything")
    sampler = tmp / "sampler.py"
    sampler.write_text(SAMPLER)
    sse = NodeHttpServer(tmp, EVERYTHING, "sse")
    http = NodeHttpServer(tmp, EVERYTHING, "streamableHttp")
    asks: dict[str, Any] = {
        "roots": [str(tmp), {"uri": "file:///srv/data", "name": "data"}],
        "sampling": {"command": sys.executable, "args": [str(sampler)], "timeout": 30},
        "toolTimeout": 20,
    }
    stdio = {"command": str(NODE), "args": [str(npm_package(EVERYTHING)), "stdio"]}
    sup = SupervisorProcess(
        tmp,
        {
            "ev_stdio": {**stdio, **asks},
            "ev_sse": {"url": f"http://127.0.0.1:{sse.port}/sse", **asks},
            "ev_http": {"url": f"http://127.0.0.1:{http.port}/mcp", **asks},
            "bare": {**stdio, "elicitation": "defaults"},
        },
    )
    try:
        sup.wait_states()
        # the tools that depend on what a client offers come just after the handshake
        conditional = [f"mcp_ev_{transport}_{tool}" for transport in TRANSPORTS for tool in CONDITIONAL]
        sup.wait_tools("mcp_bare_trigger-elicitation-request", *conditional)
        yield sup
    finally:
        sup.stop()
        sse.stop()
        http.stop()


def _call(sup: SupervisorProcess, transport: str, tool: str, arguments: dict[str, Any] | None = None,
          **kwargs: Any) -> Any:  # fmt: skip
    return sup.client.call_tool(f"mcp_ev_{transport}_{tool}", arguments or {}, **kwargs)


def test_each_transport_is_served_with_the_reference_tools(everything: SupervisorProcess) -> None:
    rows = everything.status()
    assert {name: row.transport for name, row in rows.items() if name != "bare"} == {
        "ev_stdio": "stdio",
        "ev_sse": "sse",
        "ev_http": "streamable-http",
    }
    assert all(row.state == "ready" and row.restarts == 0 for row in rows.values())
    tools = {tool.name for tool in everything.client.list_tools()}
    for transport in TRANSPORTS:
        for tool in ("echo", "get-sum", "get-tiny-image", "get-structured-content", "get-resource-links"):
            assert f"mcp_ev_{transport}_{tool}" in tools


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_reference_tools_return_every_content_type(everything: SupervisorProcess, transport: str) -> None:
    assert (
        _call(everything, transport, "echo", {"message": f"over {transport}"}).text
        == f"Echo: over {transport}"
    )
    assert "4.5" in _call(everything, transport, "get-sum", {"a": 2, "b": 2.5}).text

    image = _call(everything, transport, "get-tiny-image").content
    png = [item for item in image if item["type"] == "image"]
    assert len(png) == 1 and png[0]["mimeType"] == "image/png" and png[0]["data"]

    weather = _call(everything, transport, "get-structured-content", {"location": "Chicago"})
    assert set(weather.structured_content) >= {"temperature", "conditions", "humidity"}
    assert json.loads(weather.content[0]["text"]) == weather.structured_content

    links = _call(everything, transport, "get-resource-links", {"count": 3}).content
    assert [item["uri"].startswith("demo://") for item in links if item["type"] == "resource_link"] == [
        True
    ] * 3

    embedded = _call(
        everything, transport, "get-resource-reference", {"resourceType": "Text", "resourceId": 2}
    )
    resources = [item["resource"] for item in embedded.content if item["type"] == "resource"]
    assert [resource["uri"] for resource in resources] == ["demo://resource/dynamic/text/2"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_long_running_operation_completes_or_times_out_at_its_deadline(
    everything: SupervisorProcess, transport: str
) -> None:
    done = _call(everything, transport, "trigger-long-running-operation", {"duration": 0.4, "steps": 2})
    assert "completed" in done.text.lower()
    with pytest.raises(ToolTimeoutError, match=rf"ev_{transport}"):
        _call(
            everything, transport, "trigger-long-running-operation", {"duration": 60, "steps": 60}, timeout=1
        )
    # The session is unharmed: the next call is answered, and nothing was restarted.
    assert _call(everything, transport, "echo", {"message": "after"}).text == "Echo: after"
    assert everything.status()[f"ev_{transport}"].restarts == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_roots_come_from_the_config(everything: SupervisorProcess, transport: str) -> None:
    text = _call(everything, transport, "get-roots-list").text
    assert f"URI: {everything.tmp.as_uri()}" in text
    assert "2. data\n   URI: file:///srv/data" in text


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_elicitation_is_declined_with_a_log_line(everything: SupervisorProcess, transport: str) -> None:
    answer = _call(everything, transport, "trigger-elicitation-request")
    assert '"action": "decline"' in answer.text
    assert f"[ev_{transport}] server asked for input ('Please provide inputs" in everything.log


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sampling_is_answered_by_the_configured_program(
    everything: SupervisorProcess, transport: str
) -> None:
    answer = _call(everything, transport, "trigger-sampling-request", {"prompt": f"hi from {transport}"})
    assert f"sampled: Resource trigger-sampling-request context: hi from {transport}" in answer.text
    assert '"model": "test-sampler"' in answer.text


def test_without_roots_or_sampling_configured_neither_is_offered(everything: SupervisorProcess) -> None:
    """server-everything lists its roots and sampling tools only to clients that offer them."""
    tools = {tool.name for tool in everything.client.list_tools() if tool.server == "bare"}
    assert "mcp_bare_echo" in tools and "mcp_bare_trigger-elicitation-request" in tools
    assert not {"mcp_bare_get-roots-list", "mcp_bare_trigger-sampling-request"} & tools


def test_elicitation_with_defaults_declines_a_form_whose_required_field_has_none(
    everything: SupervisorProcess,
) -> None:
    answer = everything.client.call_tool("mcp_bare_trigger-elicitation-request", {})
    assert '"action": "decline"' in answer.text
    assert (
        "[bare] server asked for input ('Please provide inputs for the following fields:'): declined, "
        in (everything.log)
    )
