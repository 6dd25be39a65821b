"""Per-server tool views: ``enabledTools`` and ``disabledTools`` decide which tools are registered."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from supervisor.client.errors import UnknownToolError
from tests.e2e.harness import SupervisorProcess, poll, stdio_test_server

pytestmark = pytest.mark.e2e


def test_only_the_tools_a_view_lets_through_are_listed_counted_and_called(
    start_supervisor: Callable[..., SupervisorProcess],
) -> None:
    viewed = {
        **stdio_test_server(TEST_SERVER_EXTRA_TOOLS=3),
        "enabledTools": ["e*", "add", "change_tools", "extra_?"],
        "disabledTools": ["extra_1", "empty"],
    }
    sup = start_supervisor({"v": viewed, "none": {**stdio_test_server(), "enabledTools": []}})
    expected = {f"mcp_v_{name}" for name in ("echo", "add", "env", "change_tools", "extra_0", "extra_2")}
    assert {tool.name for tool in sup.client.list_tools()} == expected
    assert (sup.status()["v"].tools, sup.status()["none"].tools) == (6, 0)
    assert sup.status()["none"].state == "ready"
    assert sup.client.call_tool("mcp_v_echo", {"text": "shown"}).text == "shown"
    for hidden in ("mcp_v_extra_1", "mcp_v_empty", "mcp_v_pid", "mcp_none_echo"):
        with pytest.raises(UnknownToolError, match=hidden):
            sup.client.call_tool(hidden, {"text": "x"})
    assert "server 'v' tool 'extra_1' left out by its enabledTools/disabledTools" in sup.log

    # tools the server adds while running go through the same view
    sup.client.call_tool("mcp_v_change_tools", {"add": ["extra_5", "zzz"], "remove": ["env"]})
    expected = expected - {"mcp_v_env"} | {"mcp_v_extra_5"}
    poll("the change", lambda: {tool.name for tool in sup.client.list_tools()} == expected, 15)
    with pytest.raises(UnknownToolError, match="mcp_v_zzz"):
        sup.client.call_tool("mcp_v_zzz", {"text": "x"})
    assert sup.status()["v"].tools == 6
