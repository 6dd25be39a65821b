"""The OAuth test server (tests/servers/oauth_server.py) behaves as the token-refresh tests expect.

Each test starts the server as a subprocess with 2-second access tokens. The flow test drives it with
the SDK's own OAuth client (``OAuthClientProvider``); the others talk plain HTTP to its endpoints.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx2
import mcp_types as types
import pytest
import trio
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    OAuthClientMetadata,
)
from pydantic import AnyUrl

from tests.e2e.oauth_hosts import MemoryStorage, UserWhoApproves

ROOT = Path(__file__).resolve().parents[2]
TOKEN_LIFETIME = 2
START_TIMEOUT = 20  # seconds for the server to print its LISTENING line
STOP_TIMEOUT = 10  # seconds for it to exit after SIGTERM
TEST_TIMEOUT = 30
REDIRECT_URI = "http://localhost:3000/callback"


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    """Start the server; yield its base URL; stop it with SIGTERM and check that it exits with 0."""
    process = await trio.lowlevel.open_process(
        [
            sys.executable,
            "-m",
            "tests.servers.oauth_server",
            "--port",
            "0",
            "--token-lifetime",
            str(TOKEN_LIFETIME),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        output = b""
        with trio.fail_after(START_TIMEOUT):
            while b"\n" not in output:
                chunk = await process.stdout.receive_some()
                assert chunk, f"the server exited before listening: {output!r}"
                output += chunk
        line = output.decode().splitlines()[0]
        assert line.startswith("LISTENING http://127.0.0.1:"), line
        yield line.removeprefix("LISTENING ")
        process.terminate()
        with trio.fail_after(STOP_TIMEOUT):
            assert await process.wait() == 0
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
                await process.wait()
            if process.stdout is not None:
                await process.stdout.aclose()


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


async def stats(http: httpx2.AsyncClient) -> dict[str, int]:
    response = await http.get("/test/stats")
    assert response.status_code == 200
    result: dict[str, int] = response.json()
    return result


async def register(http: httpx2.AsyncClient, auth_method: str) -> dict[str, Any]:
    response = await http.post(
        "/register",
        json={
            "redirect_uris": [REDIRECT_URI],
            "token_endpoint_auth_method": auth_method,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
        },
    )
    assert response.status_code == 201, response.text
    client: dict[str, Any] = response.json()
    return client


async def authorize(http: httpx2.AsyncClient, client_id: str, **changes: str | None) -> httpx2.Response:
    """GET /authorize with a valid request for ``client_id``, changed by ``changes`` (None: left out)."""
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT_URI,
        "code_challenge": pkce_pair()[1],
        "code_challenge_method": "S256",
        "state": "the-state",
        **changes,
    }
    query = {key: value for key, value in params.items() if value is not None}
    return await http.get("/authorize", params=query, follow_redirects=False)


async def token(http: httpx2.AsyncClient, client: dict[str, Any], **form: str) -> httpx2.Response:
    """POST /token authenticated the way ``client`` registered."""
    data = {"client_id": client["client_id"], **form}
    headers: dict[str, str] = {}
    method = client["token_endpoint_auth_method"]
    if method == "client_secret_post":
        data["client_secret"] = client["client_secret"]
    elif method == "client_secret_basic":
        credentials = f"{client['client_id']}:{client['client_secret']}".encode()
        headers["Authorization"] = f"Basic {base64.b64encode(credentials).decode()}"
    return await http.post("/token", data=data, headers=headers)


def redirect_query(response: httpx2.Response) -> dict[str, str]:
    assert response.status_code == 302, response.text
    location = response.headers["location"]
    assert location.startswith(REDIRECT_URI + "?"), location
    return {key: values[0] for key, values in parse_qs(urlparse(location).query).items()}


def text_of(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    [item] = result.content
    assert isinstance(item, types.TextContent)
    return item.text


async def wait_out_client_token(provider: OAuthClientProvider) -> None:
    """Wait until the client's own clock says its access token expired (at most TOKEN_LIFETIME + 1 s).

    This waits for a deadline the server announced (``expires_in``), not for some state to appear.
    """
    expiry = provider.context.token_expiry_time
    assert expiry is not None
    remaining = expiry - time.time()
    assert remaining <= TOKEN_LIFETIME + 1
    await trio.sleep(max(remaining, 0) + 0.05)


async def test_sdk_client_authorizes_recovers_from_expiry_refreshes_and_survives_revocation(
    base_url: str,
) -> None:
    storage = MemoryStorage()
    user = UserWhoApproves()
    provider = OAuthClientProvider(
        server_url=f"{base_url}/mcp",
        client_metadata=OAuthClientMetadata(
            client_name="oauth-server-test",
            redirect_uris=[AnyUrl(REDIRECT_URI)],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=user.open,
        callback_handler=user.callback,
    )
    with trio.fail_after(TEST_TIMEOUT):
        async with (
            httpx2.AsyncClient(base_url=base_url) as control,
            httpx2.AsyncClient(auth=provider, timeout=10) as http,
            Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client,
        ):
            # The full flow ran on connecting: 401, discovery, registration, authorization, code exchange.
            assert text_of(await client.call_tool("echo", {"text": "hello"})) == "hello"
            assert storage.client_info is not None and storage.tokens is not None
            assert storage.tokens.expires_in == TOKEN_LIFETIME
            whoami = await client.call_tool("whoami", {})
            assert whoami.structured_content == {
                "client_id": storage.client_info.client_id,
                "scopes": ["mcp:basic"],
            }
            before = await stats(control)
            assert before["authorizations"] == 1
            assert before["unauthorized"] >= 1
            assert before["calls"] == 2
            assert before["refreshes"] == before["refresh_failures"] == 0

            # Expired on the server while the client still trusts its token: the request gets a 401.
            # The SDK's client answers a 401 with a new authorization, never with a refresh.
            assert (await control.post("/test/expire")).status_code == 200
            assert text_of(await client.call_tool("echo", {"text": "after expire"})) == "after expire"
            after_expire = await stats(control)
            assert after_expire["unauthorized"] == before["unauthorized"] + 1
            assert after_expire["authorizations"] == before["authorizations"] + 1
            assert after_expire["calls"] == before["calls"] + 1

            # Expired by its lifetime: the client refreshes before sending, so no 401.
            old_access, old_refresh = storage.tokens.access_token, storage.tokens.refresh_token
            assert old_refresh is not None
            await wait_out_client_token(provider)
            assert text_of(await client.call_tool("echo", {"text": "after refresh"})) == "after refresh"
            refreshed = await stats(control)
            assert refreshed["refreshes"] == 1
            assert refreshed["refresh_failures"] == 0
            assert refreshed["unauthorized"] == after_expire["unauthorized"]
            assert storage.tokens.access_token != old_access
            assert storage.tokens.refresh_token not in (None, old_refresh)

            # The server enforces the lifetime too, and the used refresh token was rotated away.
            expired = await control.post("/mcp", headers={"Authorization": f"Bearer {old_access}"})
            assert expired.status_code == 401
            assert 'error="invalid_token"' in expired.headers["www-authenticate"]
            client_record = storage.client_info.model_dump(mode="json")
            reused = await token(
                control, client_record, grant_type="refresh_token", refresh_token=old_refresh
            )
            assert reused.status_code == 400
            assert reused.json()["error"] == "invalid_grant"

            # Revoked: once its token is due, the client's refresh fails and it authorizes again.
            assert (await control.post("/test/revoke")).status_code == 200
            await wait_out_client_token(provider)
            assert text_of(await client.call_tool("echo", {"text": "after revoke"})) == "after revoke"
            revoked = await stats(control)
            assert revoked["refresh_failures"] == 2  # the rotated token above, then the client's own
            assert revoked["refreshes"] == 1
            assert revoked["authorizations"] == after_expire["authorizations"] + 1
            assert (
                revoked["unauthorized"] == after_expire["unauthorized"] + 2
            )  # the raw request, then the client
            assert revoked["calls"] == after_expire["calls"] + 2


async def test_protected_resource_and_authorization_server_metadata(base_url: str) -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with httpx2.AsyncClient(base_url=base_url) as http:
            for headers in ({}, {"Authorization": "Bearer not-a-token"}):
                refused = await http.post("/mcp", headers=headers, json={})
                assert refused.status_code == 401
                challenge = refused.headers["www-authenticate"]
                assert challenge.startswith("Bearer ")
                assert 'error="invalid_token"' in challenge
                assert f'resource_metadata="{base_url}/.well-known/oauth-protected-resource/mcp"' in challenge

            resource = (await http.get("/.well-known/oauth-protected-resource/mcp")).json()
            assert resource["resource"] == f"{base_url}/mcp"
            assert resource["authorization_servers"] == [base_url]

            server = (await http.get("/.well-known/oauth-authorization-server")).json()
            assert server["issuer"] == base_url
            assert server["authorization_endpoint"] == f"{base_url}/authorize"
            assert server["token_endpoint"] == f"{base_url}/token"
            assert server["registration_endpoint"] == f"{base_url}/register"
            assert server["code_challenge_methods_supported"] == ["S256"]
            assert set(server["grant_types_supported"]) == {"authorization_code", "refresh_token"}

            assert await stats(http) == {
                "authorizations": 0,
                "token_requests": 0,
                "refreshes": 0,
                "refresh_failures": 0,
                "unauthorized": 2,
                "calls": 0,
            }


async def test_authorize_checks_client_redirect_uri_and_pkce(base_url: str) -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with httpx2.AsyncClient(base_url=base_url) as http:
            client = await register(http, "none")
            client_id = client["client_id"]

            unknown_client = await authorize(http, "no-such-client")
            assert unknown_client.status_code == 400
            other_redirect = await authorize(http, client_id, redirect_uri="http://localhost:3000/elsewhere")
            assert other_redirect.status_code == 400

            # With a known client and redirect_uri, errors go back to the client in the redirect.
            for changes in (
                {"code_challenge": None},
                {"code_challenge_method": "plain"},
                {"code_challenge": "too-short-for-s256"},
            ):
                query = redirect_query(await authorize(http, client_id, **changes))
                assert query["error"] == "invalid_request", changes
                assert "code" not in query
                assert query["state"] == "the-state"

            approved = redirect_query(await authorize(http, client_id))
            assert approved["state"] == "the-state"
            assert approved["code"]
            assert (await stats(http))["authorizations"] == 1


@pytest.mark.parametrize("auth_method", ["client_secret_post", "client_secret_basic", "none"])
async def test_token_endpoint_codes_refresh_rotation_and_client_auth(base_url: str, auth_method: str) -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with httpx2.AsyncClient(base_url=base_url) as http:
            client = await register(http, auth_method)
            assert client["token_endpoint_auth_method"] == auth_method
            verifier, challenge = pkce_pair()
            code = redirect_query(await authorize(http, client["client_id"], code_challenge=challenge))[
                "code"
            ]
            exchange = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT_URI}

            wrong_verifier = await token(http, client, **exchange, code_verifier=pkce_pair()[0])
            assert wrong_verifier.status_code == 400
            assert wrong_verifier.json()["error"] == "invalid_grant"
            if auth_method != "none":
                no_secret = await http.post("/token", data={"client_id": client["client_id"], **exchange})
                assert no_secret.status_code == 401
                assert no_secret.json()["error"] == "invalid_client"

            issued = await token(http, client, **exchange, code_verifier=verifier)
            assert issued.status_code == 200, issued.text
            tokens = issued.json()
            assert tokens["token_type"] == "Bearer"
            assert tokens["expires_in"] == TOKEN_LIFETIME
            assert tokens["scope"] == "mcp:basic"
            code_again = await token(http, client, **exchange, code_verifier=verifier)
            assert code_again.status_code == 400
            assert code_again.json()["error"] == "invalid_grant"

            refreshed = await token(
                http, client, grant_type="refresh_token", refresh_token=tokens["refresh_token"]
            )
            assert refreshed.status_code == 200, refreshed.text
            new_tokens = refreshed.json()
            assert new_tokens["expires_in"] == TOKEN_LIFETIME
            assert new_tokens["refresh_token"] != tokens["refresh_token"]
            reused = await token(
                http, client, grant_type="refresh_token", refresh_token=tokens["refresh_token"]
            )
            assert reused.status_code == 400
            assert reused.json()["error"] == "invalid_grant"

            assert (await http.post("/test/revoke")).status_code == 200
            revoked = await token(
                http, client, grant_type="refresh_token", refresh_token=new_tokens["refresh_token"]
            )
            assert revoked.status_code == 400
            assert revoked.json()["error"] == "invalid_grant"

            counts = await stats(http)
            assert counts["refreshes"] == 1
            assert counts["refresh_failures"] == 2
            assert counts["token_requests"] == (7 if auth_method != "none" else 6)
