"""A gateway file's ``clients`` through a real ``serve --http --gateway FILE``: each principal sees and
may call its own tools, calls as its own client identity, and is held to its own limits (429,
``OVERLOADED``) while the others are served; configured origins get CORS, others none.

Real processes: a supervisor with the stdio test server twice and the session server (``scope:
client``), the facade, and the SDK's ``Client`` as the host (both eras), or raw HTTP where the status
line and headers are the point.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
import trio
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.e2e.facade import HOST_TIMEOUT, HOST_WARNINGS, HttpFacade, http_host, text_of
from tests.e2e.harness import SupervisorProcess, poll, stdio_test_server

pytestmark = [pytest.mark.e2e, *HOST_WARNINGS]

SESSION_SERVER = Path(__file__).parent.parent / "servers" / "session_server.py"
ERAS = ["legacy", "auto"]
ORIGIN = "https://console.example.com"
TOKENS = {
    name: f"{name}-{secrets.token_hex(8)}"
    for name in ("alice", "bob", "carol", "dave", "erin", "frank", "ursula", "loose")
}


@pytest.fixture(scope="module")
def marks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the test server marks its slow calls' start."""
    return tmp_path_factory.mktemp("marks")


@pytest.fixture(scope="module")
def sup(start_module_supervisor: Callable[..., SupervisorProcess], marks: Path) -> SupervisorProcess:
    sup = start_module_supervisor(
        {
            "t": stdio_test_server(TEST_SERVER_STATE_DIR=str(marks), TEST_SERVER_RESOURCES=1),
            "u": stdio_test_server(TEST_SERVER_RESOURCES=1),
            "shell": {"command": sys.executable, "args": [str(SESSION_SERVER)], "scope": "client"},
        }
    )
    sup.wait_tools("mcp_t_echo", "mcp_u_echo")
    return sup


def gateway_file(tmp: Path) -> Path:
    clients = [
        {"name": "alice", "token": TOKENS["alice"], "servers": ["t", "shell"]},
        {"name": "bob", "token": TOKENS["bob"], "tools": ["mcp_u_*"]},
        {"name": "frank", "token": TOKENS["frank"], "tools": ["mcp_u_*"], "limits": {"callsPerMinute": 5}},
        {"name": "carol", "token": TOKENS["carol"], "servers": ["shell"], "identity": "session"},
        {"name": "dave", "token": TOKENS["dave"], "servers": ["t"], "limits": {"concurrent": 1}},
        {"name": "erin", "token": TOKENS["erin"], "servers": ["shell"], "identity": "entry"},
        {"name": "ursula", "token": TOKENS["ursula"], "servers": ["u"]},
    ]
    path = tmp / "gateway.json"
    path.write_text(json.dumps({"clients": clients, "cors": {"origins": [ORIGIN]}}))
    return path


@pytest.fixture(scope="module")
def facade(sup: SupervisorProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpFacade]:
    tmp = tmp_path_factory.mktemp("gateway")
    token_file = tmp / "tokens"
    token_file.write_text(TOKENS["loose"] + "\n")  # a token no clients entry admits
    gateway = gateway_file(tmp)
    facade = HttpFacade(
        tmp, sup.endpoint, None, "--gateway", str(gateway), "--token-file", str(token_file), no_auth=False
    )
    try:
        yield facade
    finally:
        facade.stop()


def host(facade: HttpFacade, who: str, mode: str = "legacy") -> AbstractAsyncContextManager[Client]:
    return http_host(facade.url, TOKENS[who], mode=mode)


async def names(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


MODERN = "2026-07-28"
ENVELOPE = {
    types.PROTOCOL_VERSION_META_KEY: MODERN,
    types.CLIENT_INFO_META_KEY: {"name": "raw", "version": "0"},
    types.CLIENT_CAPABILITIES_META_KEY: {},
}


def post(facade: HttpFacade, who: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    """One 2026-07-28 request (no session, its envelope in ``_meta``), as ``who``."""
    body = {**body, "params": {**body.get("params", {}), "_meta": ENVELOPE}}
    sent = {
        "Authorization": f"Bearer {TOKENS[who]}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": body["method"],
        **headers,
    }
    if body["method"] == "tools/call":
        sent["Mcp-Name"] = body["params"]["name"]
    return httpx.post(facade.url, content=json.dumps(body), headers=sent, timeout=HOST_TIMEOUT)


def call_body(id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}


@pytest.mark.parametrize("mode", ERAS)
async def test_two_clients_see_and_may_call_their_own_tools(facade: HttpFacade, mode: str) -> None:
    async with host(facade, "alice", mode) as alice, host(facade, "bob", mode) as bob:
        alices, bobs = await names(alice), await names(bob)
        assert "mcp_t_echo" in alices and "mcp_shell_counter_get" in alices
        assert not any(name.startswith("mcp_u_") for name in alices)
        assert bobs and all(name.startswith("mcp_u_") for name in bobs)
        assert text_of(await alice.call_tool("mcp_t_echo", {"text": "a"})) == "a"
        assert text_of(await bob.call_tool("mcp_u_echo", {"text": "b"})) == "b"
        for client, hidden in ((alice, "mcp_u_echo"), (bob, "mcp_t_echo"), (bob, "mcp_shell_counter_get")):
            with pytest.raises(MCPError, match=f"Unknown tool: {hidden}"):
                await client.call_tool(hidden, {"text": "x"})


async def test_resources_and_prompts_follow_the_servers_of_the_view(facade: HttpFacade) -> None:
    uri = "test://doc/readme"
    async with host(facade, "alice") as alice, host(facade, "carol") as carol:
        alice_prompts = {p.name for p in (await alice.list_prompts()).prompts}
        assert any(name.startswith("mcp_t_") for name in alice_prompts)
        assert not any(name.startswith("mcp_u_") for name in alice_prompts)
        read = await alice.read_resource(uri)
        assert "document readme" in json.dumps(read.model_dump(mode="json"))
        # carol sees only the shell server, which has no prompts and no documents
        assert not (await carol.list_prompts()).prompts
        assert not (await carol.list_resources()).resources
        with pytest.raises(MCPError, match="Resource not found"):
            await carol.read_resource(uri)
        with pytest.raises(MCPError, match="Unknown prompt"):
            await carol.get_prompt(sorted(alice_prompts)[0], {})
    # t and u both list the document: each client reads it from the server of its own view
    async with host(facade, "ursula") as ursula:
        read = await ursula.read_resource(uri)
        assert "document readme" in json.dumps(read.model_dump(mode="json"))


async def test_a_client_past_its_calls_per_minute_gets_429_while_another_is_served(
    facade: HttpFacade,
) -> None:
    answered = [post(facade, "frank", call_body(n, "mcp_u_echo", {"text": f"b{n}"})) for n in range(5)]
    assert [response.status_code for response in answered] == [200] * 5
    refused = post(facade, "frank", call_body(6, "mcp_u_echo", {"text": "over"}))
    assert refused.status_code == 429, (refused.text, [r.text for r in answered])
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    error = refused.json()["error"]
    assert refused.json()["id"] == 6
    assert error["message"].startswith("OVERLOADED: client frank: 5 calls in the last minute")
    # a listing is no call: frank still lists; alice's calls go on
    listing = post(facade, "frank", {"jsonrpc": "2.0", "id": 7, "method": "tools/list"})
    assert listing.status_code == 200
    for n in range(8):
        served = post(facade, "alice", call_body(n, "mcp_t_echo", {"text": f"a{n}"}))
        assert served.status_code == 200 and "error" not in served.json(), served.text
    async with host(facade, "frank") as frank:  # the SDK's host hears it as the request's error
        with pytest.raises(MCPError, match="OVERLOADED: client frank"):
            await frank.call_tool("mcp_u_echo", {"text": "still over"})


async def test_a_client_at_its_concurrent_limit_gets_429_until_its_call_ends(
    facade: HttpFacade, marks: Path
) -> None:
    tag = f"held-{secrets.token_hex(4)}"
    started = marks / f"{tag}.started"
    results: list[httpx.Response] = []

    def slow() -> None:
        results.append(post(facade, "dave", call_body(1, "mcp_t_slow", {"tag": tag, "seconds": 3})))

    with trio.fail_after(HOST_TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, slow)
            await trio.to_thread.run_sync(poll, "the slow call to start", started.exists, HOST_TIMEOUT)
            refused = await trio.to_thread.run_sync(
                lambda: post(facade, "dave", call_body(2, "mcp_t_echo", {"text": "second"}))
            )
            assert refused.status_code == 429, refused.text
            assert "1 call in flight already" in refused.json()["error"]["message"]
            other = await trio.to_thread.run_sync(
                lambda: post(facade, "alice", call_body(3, "mcp_t_echo", {"text": "alice meanwhile"}))
            )
            assert other.status_code == 200
    assert results[0].status_code == 200
    after = post(facade, "dave", call_body(4, "mcp_t_echo", {"text": "after"}))
    assert after.status_code == 200 and "after" in after.text


async def counter(client: Client, add: int = 0) -> Any:
    if add:
        await client.call_tool("mcp_shell_counter_add", {"n": add})
    return (await client.call_tool("mcp_shell_counter_get", {})).structured_content


async def test_client_identities_decide_whose_session_a_scope_client_server_gives(
    facade: HttpFacade, sup: SupervisorProcess
) -> None:
    # alice (identity: subject): her two host sessions are one client
    async with host(facade, "alice") as one, host(facade, "alice", "auto") as two:
        start = (await counter(one))["value"]
        assert await counter(one, 2) == {"value": start + 2}
        assert await counter(two) == {"value": start + 2}
    # carol (identity: session): each host session its own
    async with host(facade, "carol") as one, host(facade, "carol") as two:
        assert await counter(one, 3) == {"value": 3}
        assert await counter(two) == {"value": 0}
    # erin (identity: entry): one for the entry
    async with host(facade, "erin") as one:
        assert await counter(one, 4) == {"value": 4}
    async with host(facade, "erin") as two:
        assert await counter(two) == {"value": 4}
    clients = {worker.client for worker in sup.status()["shell"].workers}
    assert {"alice", "erin"} <= clients
    assert any(client and client.startswith("facade-") for client in clients)  # carol's sessions


def test_a_token_no_entry_admits_is_403_and_no_token_is_401(facade: HttpFacade) -> None:
    refused = post(facade, "loose", call_body(1, "mcp_t_echo", {"text": "x"}))
    assert refused.status_code == 403
    assert "'token-1' is admitted by none of the gateway's clients" in refused.text
    anonymous = httpx.post(facade.url, content=b"{}", headers={"Content-Type": "application/json"})
    assert anonymous.status_code == 401


def test_a_configured_origin_gets_cors_and_another_gets_none(facade: HttpFacade) -> None:
    preflight = httpx.options(
        facade.url,
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, mcp-protocol-version",
        },
    )
    assert preflight.status_code == 204, preflight.text
    assert preflight.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "authorization" in preflight.headers["access-control-allow-headers"]
    answered = post(facade, "alice", call_body(1, "mcp_t_echo", {"text": "cors"}), Origin=ORIGIN)
    assert answered.status_code == 200 and "cors" in answered.text
    assert answered.headers["access-control-allow-origin"] == ORIGIN
    assert "Mcp-Session-Id" in answered.headers["access-control-expose-headers"]
    refused = post(facade, "alice", call_body(2, "mcp_t_echo", {"text": "x"}), Origin="https://evil.example")
    assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
    other_preflight = httpx.options(
        facade.url, headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    )
    assert other_preflight.status_code == 403
    assert "access-control-allow-origin" not in other_preflight.headers
    same_site = post(facade, "alice", call_body(3, "mcp_t_echo", {"text": "plain"}))
    assert "access-control-allow-origin" not in same_site.headers


def test_a_broken_gateway_file_is_a_usage_error_naming_it(sup: SupervisorProcess, tmp_path: Path) -> None:
    import subprocess

    from tests.e2e.facade import facade_argv

    cases = {
        "{": "not JSON",
        '{"clients": [{"name": "x"}]}': "give exactly one of token, subject, group, anyone",
        '{"clients": [{"name": "x", "anyone": true, "limits": {"callsPerMinute": 0}}]}': (
            "limits.callsPerMinute"
        ),
        '{"clients": [], "colour": 1}': "colour",
        '{"cors": {"origins": ["*"]}}': "'*' is not offered",
    }
    for text, said in cases.items():
        path = tmp_path / "broken.json"
        path.write_text(text)
        argv = facade_argv(sup.endpoint, "serve", "--http", "127.0.0.1:0", "--gateway", str(path))
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (text, done.stderr)
        assert str(path) in done.stderr and said in done.stderr, (text, done.stderr)
        assert "Traceback" not in done.stderr


def test_the_audit_trail_names_each_client_and_host_session(
    facade: HttpFacade, sup: SupervisorProcess
) -> None:
    marker = f"audited-{secrets.token_hex(4)}"
    answered = post(facade, "bob", call_body(1, "mcp_u_echo", {"text": marker}))
    assert answered.status_code == 200

    async def session_call() -> None:
        async with host(facade, "carol") as carol:
            await carol.call_tool("mcp_shell_counter_get", {})

    trio.run(session_call)

    def lines(identity: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in sup.client.audit(identity=identity).records]

    bob = poll("bob's call in the audit trail", lambda: lines("bob") or None, HOST_TIMEOUT)
    assert bob[0]["tool"] == "mcp_u_echo" and bob[0]["server"] == "u" and bob[0]["outcome"] == "ok"
    assert bob[0]["session"].startswith("facade-")  # a stateless request: the facade's own
    carol = poll("carol's call in the audit trail", lambda: lines("carol") or None, HOST_TIMEOUT)
    assert carol[0]["tool"] == "mcp_shell_counter_get"
    assert re.fullmatch(r"facade-\d+-\d+", carol[0]["session"]), carol[0]  # her HTTP host session
    trail = Path(sup.client.front_stats().audit.path)
    assert marker not in "".join(p.read_text() for p in trail.parent.glob(trail.name + "*"))
