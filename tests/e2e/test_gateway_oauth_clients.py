"""A gateway's ``clients`` matched by verified access tokens: a JWT's subject and its group claim
choose the view, the client identity and the limits, with a real authorization server
(``tests/servers/oauth_server.py --jwt``), a real supervisor and the facade as its own process.

The hosts log in through discovery (the Python SDK's client auth: the server names each client's
subject by its ``client_name``), or send tokens the server minted to order (a group claim, a subject
no entry admits)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.e2e.facade import HOST_TIMEOUT, HOST_WARNINGS, HttpFacade, http_host, text_of
from tests.e2e.harness import SupervisorProcess, stdio_test_server
from tests.e2e.oauth_hosts import AuthServer, MemoryStorage, UserWhoApproves, oauth_host, provider_for

pytestmark = [pytest.mark.e2e, *HOST_WARNINGS]

SESSION_SERVER = Path(__file__).parent.parent / "servers" / "session_server.py"
MODERN = "2026-07-28"


@pytest.fixture(scope="module")
def sup(start_module_supervisor: Callable[..., SupervisorProcess]) -> SupervisorProcess:
    sup = start_module_supervisor(
        {
            "t": stdio_test_server(),
            "u": stdio_test_server(),
            "shell": {"command": sys.executable, "args": [str(SESSION_SERVER)], "scope": "client"},
        }
    )
    sup.wait_tools("mcp_t_echo", "mcp_u_echo")
    return sup


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    server = AuthServer(tmp_path_factory.mktemp("as"), "--jwt", "--any-resource")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def facade(
    sup: SupervisorProcess, issuer: AuthServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HttpFacade]:
    tmp = tmp_path_factory.mktemp("gateway")
    clients = [
        {"name": "alice", "subject": "alice", "servers": ["t", "shell"]},
        {"name": "bob", "subject": "bob", "servers": ["u", "shell"]},
        {"name": "engineering", "group": "engineering", "servers": ["u"], "limits": {"callsPerMinute": 3}},
    ]
    gateway = tmp / "gateway.json"
    gateway.write_text(json.dumps({"oauth": {"issuer": issuer.base, "leeway": 0}, "clients": clients}))
    facade = HttpFacade(tmp, sup.endpoint, None, "--gateway", str(gateway), no_auth=False)
    try:
        yield facade
    finally:
        facade.stop()
        assert "Traceback" not in facade.stderr, facade.stderr


async def test_subjects_who_log_in_see_their_own_views_and_sessions(
    facade: HttpFacade, sup: SupervisorProcess
) -> None:
    alice_storage, bob_storage = MemoryStorage(), MemoryStorage()
    alice = provider_for(facade.url, "alice", alice_storage, UserWhoApproves())
    bob = provider_for(facade.url, "bob", bob_storage, UserWhoApproves())
    async with oauth_host(facade.url, alice) as as_alice, oauth_host(facade.url, bob) as as_bob:
        alices = {tool.name for tool in (await as_alice.list_tools()).tools}
        bobs = {tool.name for tool in (await as_bob.list_tools()).tools}
        assert "mcp_t_echo" in alices and not any(name.startswith("mcp_u_") for name in alices)
        assert "mcp_u_echo" in bobs and not any(name.startswith("mcp_t_") for name in bobs)
        assert text_of(await as_alice.call_tool("mcp_t_echo", {"text": "alice"})) == "alice"
        with pytest.raises(MCPError, match="Unknown tool: mcp_t_echo"):
            await as_bob.call_tool("mcp_t_echo", {"text": "bob"})
        # each subject is one client of the scope: client server
        await as_alice.call_tool("mcp_shell_counter_add", {"n": 7})
        bob_count = (await as_bob.call_tool("mcp_shell_counter_get", {})).structured_content
        assert bob_count == {"value": 0}
    async with oauth_host(
        facade.url, provider_for(facade.url, "alice", alice_storage, UserWhoApproves())
    ) as again:
        assert (await again.call_tool("mcp_shell_counter_get", {})).structured_content == {"value": 7}
    clients = {worker.client for worker in sup.status()["shell"].workers}
    assert {"alice", "bob"} <= clients


def call(facade: HttpFacade, token: str, id: int) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {
            "name": "mcp_u_echo",
            "arguments": {"text": f"call {id}"},
            "_meta": {
                types.PROTOCOL_VERSION_META_KEY: MODERN,
                types.CLIENT_INFO_META_KEY: {"name": "raw", "version": "0"},
                types.CLIENT_CAPABILITIES_META_KEY: {},
            },
        },
    }
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "mcp_u_echo",
    }
    return httpx.post(facade.url, content=json.dumps(body), headers=headers, timeout=HOST_TIMEOUT)


async def test_a_group_claim_admits_each_member_with_a_limit_of_their_own(
    facade: HttpFacade, issuer: AuthServer
) -> None:
    carol = issuer.mint(aud=facade.url, sub="carol", groups=["staff", "engineering"])
    dan = issuer.mint(aud=facade.url, sub="dan", groups=["engineering"])
    assert [call(facade, carol, n).status_code for n in range(3)] == [200, 200, 200]
    refused = call(facade, carol, 4)
    assert refused.status_code == 429 and "OVERLOADED: client engineering (carol)" in refused.text
    assert call(facade, dan, 5).status_code == 200  # his own limit
    async with http_host(facade.url, dan) as host:
        tools = {tool.name for tool in (await host.list_tools()).tools}
        assert tools and all(name.startswith("mcp_u_") for name in tools)


def test_a_verified_subject_no_entry_admits_is_403(facade: HttpFacade, issuer: AuthServer) -> None:
    mallory = issuer.mint(aud=facade.url, sub="mallory", groups=["sales"])
    refused = call(facade, mallory, 1)
    assert (
        refused.status_code == 403
        and "'mallory' is admitted by none of the gateway's clients" in refused.text
    )
    other_audience = issuer.mint(aud="https://elsewhere.example/mcp", sub="alice")
    assert call(facade, other_audience, 2).status_code == 401
