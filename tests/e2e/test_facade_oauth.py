"""``serve --http --gateway FILE`` with an ``oauth`` block: the facade as an OAuth protected resource,
with a real authorization server (``tests/servers/oauth_server.py``), a real supervisor and test server,
and the facade as its own process; hosts are the Python SDK's client with its OAuth client auth, and
the TypeScript SDK's (tests/npm/oauth-client.mjs)."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from tests.e2e.facade import HOST_WARNINGS, REPO, HttpFacade, http_host, text_of
from tests.e2e.harness import NODE, NPM, SupervisorProcess, npm_package, stdio_test_server
from tests.e2e.oauth_hosts import (
    AuthServer,
    MemoryStorage,
    UserWhoApproves,
    gateway_file,
    oauth_host,
    provider_for,
)

pytestmark = [pytest.mark.e2e, *HOST_WARNINGS]

STATIC = f"static-{secrets.token_hex(8)}"  # a bearer token of the token files, beside OAuth
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
MCP_HEADERS = {"accept": "application/json, text/event-stream"}
NODE_TIMEOUT = 90.0  # seconds for the Node client, its whole flow


@pytest.fixture(scope="module")
def sup(start_module_supervisor: Callable[..., SupervisorProcess]) -> SupervisorProcess:
    return start_module_supervisor({"t": stdio_test_server()})


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    """An authorization server that issues RS256 JWTs for any resource."""
    server = AuthServer(tmp_path_factory.mktemp("as"), "--jwt", "--any-resource")
    yield server
    server.stop()


@pytest.fixture
def facades(sup: SupervisorProcess, tmp_path: Path) -> Iterator[Callable[..., HttpFacade]]:
    """``start(oauth, token="")``: ``serve --http --gateway`` with the ``oauth`` block given (and the
    static bearer token ``token``, none when empty), logging at debug."""
    started: list[HttpFacade] = []

    def start(oauth: dict[str, Any], token: str = "") -> HttpFacade:
        gateway = gateway_file(tmp_path, oauth)
        facade = HttpFacade(tmp_path, sup.endpoint, token, "--gateway", gateway, "--log-level", "debug")
        started.append(facade)
        return facade

    yield start
    for facade in started:
        facade.stop()
        assert "Traceback" not in facade.stderr, facade.stderr


def post(url: str, token: str | None = None) -> httpx2.Response:
    headers = MCP_HEADERS | ({"authorization": f"Bearer {token}"} if token is not None else {})
    return httpx2.post(url, json=INITIALIZE, headers=headers, timeout=10)


def metadata_url(url: str) -> str:
    return url.removesuffix("/mcp") + "/.well-known/oauth-protected-resource/mcp"


async def test_an_sdk_host_finds_the_authorization_server_from_the_401_and_calls_tools(
    issuer: AuthServer, facades: Callable[..., HttpFacade]
) -> None:
    facade = facades({"issuer": issuer.base}, token=STATIC)
    assert f"(OAuth access tokens of {issuer.base} and bearer tokens)" in facade.stderr

    refused = post(facade.url)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url(facade.url)}"'
    assert refused.json()["resource_metadata"] == metadata_url(facade.url)
    elsewhere = httpx2.get(metadata_url(facade.url), headers={"host": "rebound.example.com"}, timeout=10)
    assert elsewhere.status_code == 421  # the Host check applies to the metadata too
    for where in (metadata_url(facade.url), metadata_url(facade.url).removesuffix("/mcp")):
        document = httpx2.get(where, timeout=10).json()  # no credentials needed
        assert document == {
            "resource": facade.url,
            "authorization_servers": [issuer.base],
            "bearer_methods_supported": ["header"],
            "resource_name": "mcp-supervisor",
        }

    storage, user = MemoryStorage(), UserWhoApproves()
    before = issuer.stats()
    async with oauth_host(facade.url, provider_for(facade.url, "py-host", storage, user)) as host:
        tools = {tool.name for tool in (await host.list_tools()).tools}
        assert "mcp_t_echo" in tools
        assert text_of(await host.call_tool("mcp_t_echo", {"text": "through oauth"})) == "through oauth"
    assert user.authorizations == 1 and issuer.stats()["authorizations"] == before["authorizations"] + 1
    assert storage.tokens is not None and storage.tokens.access_token.count(".") == 2  # a JWT
    assert "the access token of 'py-host' (jwt) is accepted" in facade.stderr
    assert storage.tokens.access_token not in facade.stderr

    async with http_host(facade.url, STATIC) as host:  # the static bearer token, beside OAuth
        assert text_of(await host.call_tool("mcp_t_echo", {"text": "static"})) == "static"


async def test_an_expired_access_token_is_refreshed_and_the_calls_go_on(
    sup: SupervisorProcess, facades: Callable[..., HttpFacade], tmp_path: Path
) -> None:
    lifetime = 3
    server = AuthServer(tmp_path, "--jwt", "--any-resource", "--token-lifetime", str(lifetime))
    try:
        facade = facades({"issuer": server.base, "leeway": 0})
        storage, user = MemoryStorage(), UserWhoApproves()
        provider = provider_for(facade.url, "refreshing-host", storage, user)
        async with oauth_host(facade.url, provider) as host:
            assert text_of(await host.call_tool("mcp_t_echo", {"text": "one"})) == "one"
            assert storage.tokens is not None
            first = storage.tokens.access_token
            for n in range(2):
                # Waits for the deadline the server announced (expires_in), not for some state to appear.
                expiry = provider.context.token_expiry_time
                assert expiry is not None and expiry - time.time() <= lifetime + 1
                await trio.sleep(max(expiry - time.time(), 0) + 0.1)
                assert text_of(await host.call_tool("mcp_t_echo", {"text": f"after {n}"})) == f"after {n}"
        stats = server.stats()
        assert stats["refreshes"] >= 2 and stats["refresh_failures"] == 0
        assert user.authorizations == 1  # refreshed, never authorized again
        late = post(facade.url, first)
        assert late.status_code == 401
        assert (
            'error="invalid_token", error_description="the token expired"' in late.headers["www-authenticate"]
        )
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("order", "why"),
    [
        ({"aud": "http://127.0.0.1:9/another-mcp"}, "wrong audience: the token is not for {url}"),
        ({"expires_in": -3600}, "the token expired"),
        ({"alg": "none"}, "the token is unsigned (alg none)"),
        ({"key": "other"}, "bad signature: no key of the issuer's JWKS signed this token"),
        ({"iss": "http://127.0.0.1:9"}, "wrong issuer: the token is not from {issuer}"),
        ({"not_before_in": 3600}, "the token is not yet valid (its nbf or iat is in the future)"),
        ({"kid": "rotated-away"}, "unknown key: kid rotated-away is not in the issuer's JWKS"),
        ({"omit": ["sub"]}, "the token has no sub (subject)"),
        ({"opaque": True}, "the token is not a JWT, and this server has no introspection endpoint to ask"),
    ],
)
def test_a_token_that_is_not_for_this_server_is_refused_saying_why(
    issuer: AuthServer, facades: Callable[..., HttpFacade], order: dict[str, Any], why: str
) -> None:
    facade = facades({"issuer": issuer.base, "requiredScopes": ["mcp:basic"]})
    why = why.format(url=facade.url, issuer=issuer.base)
    assert post(facade.url, issuer.mint(aud=facade.url, sub="alice")).status_code == 200  # the control
    refused = post(facade.url, issuer.mint(**{"aud": facade.url, "sub": "alice"} | order))
    assert refused.status_code == 401, refused.text
    where = metadata_url(facade.url)
    challenge = f'Bearer error="invalid_token", error_description="{why}", resource_metadata="{where}"'
    assert refused.headers["www-authenticate"] == challenge
    assert refused.json() == {
        "error": "invalid_token",
        "error_description": why,
        "resource_metadata": metadata_url(facade.url),
    }


def test_a_token_without_the_required_scope_is_403_naming_it(
    issuer: AuthServer, facades: Callable[..., HttpFacade]
) -> None:
    facade = facades({"issuer": issuer.base, "requiredScopes": ["mcp:basic", "mcp:admin"]})
    refused = post(facade.url, issuer.mint(aud=facade.url, scope="mcp:basic"))
    assert refused.status_code == 403
    challenge = refused.headers["www-authenticate"]
    assert 'error="insufficient_scope", error_description="the token lacks the scope mcp:admin"' in challenge
    assert 'scope="mcp:basic mcp:admin"' in challenge
    assert post(facade.url, issuer.mint(aud=facade.url, scope="mcp:admin mcp:basic")).status_code == 200
    assert 'Bearer resource_metadata="' in post(facade.url).headers["www-authenticate"]
    assert 'scope="mcp:basic mcp:admin"' in post(facade.url).headers["www-authenticate"]


def test_keys_that_cannot_be_fetched_are_503_with_the_reason_logged_once(
    issuer: AuthServer, facades: Callable[..., HttpFacade]
) -> None:
    facade = facades({"issuer": issuer.base, "jwksUri": f"{issuer.base}/no-such-jwks"})
    for _ in range(3):
        refused = post(facade.url, issuer.mint(aud=facade.url))
        assert refused.status_code == 503 and refused.headers["retry-after"] == "30"
        assert refused.json() == {
            "error": "temporarily_unavailable",
            "error_description": "the authorization server's keys cannot be fetched: "
            f"{issuer.base}/no-such-jwks answered HTTP 404",
        }
    warnings = [
        line for line in facade.stderr.splitlines() if "WARNING" in line and "cannot be fetched" in line
    ]
    assert len(warnings) == 1, warnings
    assert post(facade.url).status_code == 401  # no token: nothing to fetch keys for


async def test_opaque_tokens_are_introspected(
    sup: SupervisorProcess, facades: Callable[..., HttpFacade], tmp_path: Path
) -> None:
    server = AuthServer(tmp_path, "--any-resource", "--introspection-client", "gateway:introspection-secret")
    try:
        (tmp_path / "secret").write_text("introspection-secret\n")
        introspection = {
            "endpoint": f"{server.base}/introspect",
            "clientId": "gateway",
            "clientSecret": f"${{file:{tmp_path / 'secret'}}}",
        }
        facade = facades({"issuer": server.base, "introspection": introspection})
        storage, user = MemoryStorage(), UserWhoApproves()
        async with oauth_host(facade.url, provider_for(facade.url, "opaque-host", storage, user)) as host:
            assert text_of(await host.call_tool("mcp_t_echo", {"text": "introspected"})) == "introspected"
        assert storage.tokens is not None and "." not in storage.tokens.access_token
        assert "the access token of 'opaque-host' (introspection) is accepted" in facade.stderr
        other = post(facade.url, server.mint(opaque=True, aud="http://127.0.0.1:9/mcp"))
        assert other.status_code == 401 and other.json()["error_description"].startswith("wrong audience")
        unknown = post(facade.url, "not-a-token-it-issued")
        assert unknown.status_code == 401 and unknown.json()["error_description"].startswith(
            "the token is not active"
        )
    finally:
        server.stop()


def test_a_listener_off_loopback_needs_the_resource_named(issuer: AuthServer, tmp_path: Path) -> None:
    gateway = gateway_file(tmp_path, {"issuer": issuer.base})
    argv = [sys.executable, "-m", "supervisor", "serve", "--endpoint", f"ipc://{tmp_path}/none.sock"]
    done = subprocess.run(
        [*argv, "--http", "0.0.0.0:0", "--gateway", gateway],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 2, done.stderr
    assert (
        f"--gateway {gateway}: oauth.resource is needed when listening on 0.0.0.0 (not loopback)"
        in done.stderr
    )
    assert "LISTENING" not in done.stderr


def test_the_typescript_sdk_authorizes_through_discovery_and_calls_a_tool(
    issuer: AuthServer, facades: Callable[..., HttpFacade]
) -> None:
    script = npm_package(NPM / "oauth-client.mjs")
    npm_package(NPM / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json")
    facade = facades({"issuer": issuer.base})
    done = subprocess.run(
        [str(NODE), str(script), facade.url, "mcp_t_echo", json.dumps({"text": "from node"}), "ts-host"],
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT,
        cwd=NPM,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["authorized"] is True and out["discovered"] == issuer.base
    assert "mcp_t_echo" in out["tools"]
    assert out["result"]["content"] == [{"type": "text", "text": "from node"}]
    assert "the access token of 'ts-host' (jwt) is accepted" in facade.stderr
