"""Through the MCP facade, each host session is a client of its own: its own worker on ``scope:
client`` servers, and the sampling and elicitation requests of its calls answered by that host.

The SDK's ``Client`` as the host, over stdio and over streamable HTTP (handshake era: a 2026-07-28
connection has no channel for requests to the host, and the supervisor's config answers them).
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError

from tests.e2e.facade import HOST_WARNINGS, HttpFacade, http_host, stdio_host, text_of
from tests.e2e.harness import EVERYTHING, NODE, SupervisorProcess, npm_package

pytestmark = [pytest.mark.e2e, *HOST_WARNINGS]

TOKEN = f"facade-test-{secrets.token_hex(8)}"
SESSION_SERVER = Path(__file__).parent.parent / "servers" / "session_server.py"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sup(start_module_supervisor: Callable[..., SupervisorProcess]) -> SupervisorProcess:
    everything = {"command": str(NODE), "args": [str(npm_package(EVERYTHING)), "stdio"], "sampling": "caller"}
    sup = start_module_supervisor(
        {
            "shell": {"command": sys.executable, "args": [str(SESSION_SERVER)], "scope": "client"},
            "ev": everything,
        },
    )
    sup.wait_tools("mcp_ev_trigger-sampling-request", "mcp_ev_trigger-elicitation-request")
    return sup


@pytest.fixture
def http_facade(sup: SupervisorProcess, tmp_path: Path) -> Iterator[HttpFacade]:
    facade = HttpFacade(tmp_path, sup.endpoint, TOKEN)
    try:
        yield facade
    finally:
        facade.stop()


async def sample(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    prompt = params.messages[0].content
    text = prompt.text if isinstance(prompt, types.TextContent) else "?"
    return types.CreateMessageResult(
        role="assistant",
        model="host-model",
        content=types.TextContent(type="text", text=f"host says: {text}"),
    )


async def elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Host"})


HOST_ANSWERS: dict[str, Any] = {"sampling_callback": sample, "elicitation_callback": elicit}


def stdio(endpoint: str, mode: str = "legacy", **options: Any) -> AbstractAsyncContextManager[Client]:
    return stdio_host(endpoint, mode=mode, **options)


def http(url: str, mode: str = "legacy", **options: Any) -> AbstractAsyncContextManager[Client]:
    return http_host(url, TOKEN, mode=mode, **options)


async def counter(host: Client, add: int = 0) -> Any:
    if add:
        await host.call_tool("mcp_shell_counter_add", {"n": add})
    return (await host.call_tool("mcp_shell_counter_get", {})).structured_content


async def test_two_host_sessions_of_one_http_facade_are_two_clients(
    sup: SupervisorProcess, http_facade: HttpFacade
) -> None:
    async with http(http_facade.url) as one, http(http_facade.url) as two:
        assert await counter(one, 3) == {"value": 3}
        assert await counter(two) == {"value": 0}
        assert await counter(two, 5) == {"value": 5}
        assert await counter(one) == {"value": 3}
    clients = [worker.client for worker in sup.status()["shell"].workers]
    assert len(clients) >= 2 and all(client and client.startswith("facade-") for client in clients)


async def test_host_sessions_answered_on_the_fast_path_are_still_clients_of_their_own(
    sup: SupervisorProcess, tmp_path: Path
) -> None:
    facade = HttpFacade(tmp_path, sup.endpoint, TOKEN, "--log-level", "debug")
    try:
        async with http(facade.url) as one, http(facade.url) as two:
            assert await counter(one, 4) == {"value": 4}
            assert await counter(two) == {"value": 0}
            assert await counter(two, 2) == {"value": 2}
            assert await counter(one) == {"value": 4}
        assert "tools/call of protocol 2025-11-25 answered on the fast path" in facade.stderr
    finally:
        facade.stop()


async def test_two_stdio_hosts_are_two_clients(sup: SupervisorProcess) -> None:
    async with stdio(sup.endpoint) as one, stdio(sup.endpoint) as two:
        assert await counter(one, 2) == {"value": 2}
        assert await counter(two) == {"value": 0}


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # auto: 2026-07-28, asked with input_required
@pytest.mark.parametrize("kind", ["stdio", "http"])
async def test_the_hosts_own_sampling_and_elicitation_answer_its_servers_requests(
    sup: SupervisorProcess, http_facade: HttpFacade, kind: str, mode: str
) -> None:
    host_of = (
        stdio(sup.endpoint, mode, **HOST_ANSWERS)
        if kind == "stdio"
        else http(http_facade.url, mode, **HOST_ANSWERS)
    )
    async with host_of as host:
        sampled = await host.call_tool("mcp_ev_trigger-sampling-request", {"prompt": "hi"})
        elicited = await host.call_tool("mcp_ev_trigger-elicitation-request", {})
    assert "host says: Resource trigger-sampling-request context: hi" in text_of(sampled)
    assert "Host" in text_of(elicited) and not elicited.is_error


async def test_a_host_without_sampling_gets_the_configs_answer(sup: SupervisorProcess) -> None:
    async with stdio(sup.endpoint) as host:
        refused = await host.call_tool("mcp_ev_trigger-sampling-request", {"prompt": "hi"})
    assert refused.is_error and "no caller answers it" in text_of(refused)


async def test_a_forged_request_state_is_refused_by_name(sup: SupervisorProcess) -> None:
    async with stdio(sup.endpoint, "auto", **HOST_ANSWERS) as host:
        with pytest.raises(MCPError, match="requestState is unknown or expired"):
            await host.call_tool("mcp_ev_echo", {"message": "x"}, request_state="forged")
        echoed = await host.call_tool("mcp_ev_echo", {"message": "still here"})
    assert "still here" in text_of(echoed)
