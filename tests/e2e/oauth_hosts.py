"""OAuth for the HTTP facade's end-to-end tests: the test authorization server as a process
(``tests/servers/oauth_server.py``), a gateway file that points the facade at it, and the Python SDK's
client auth (``OAuthClientProvider``) that authorizes a host unattended."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, urlparse

import httpx2
import trio
from mcp import Client
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

from tests.e2e.facade import HOST_LIFETIME, REPO

LISTEN_TIMEOUT: Final = 30.0  # seconds for the authorization server to listen
REDIRECT_URI: Final = "http://127.0.0.1:1/callback"  # never listened on: the code is read off the redirect


class AuthServer:
    """``python -m tests.servers.oauth_server ARGS`` on a free port; ``base`` is its issuer."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.stderr_path = tmp / f"auth-server-{len(list(tmp.glob('auth-server-*')))}.stderr"
        with self.stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.servers.oauth_server", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                cwd=REPO,
            )
        assert self.process.stdout is not None
        timer = threading.Timer(LISTEN_TIMEOUT, self.process.kill)
        timer.start()
        try:
            line = self.process.stdout.readline().strip()
        finally:
            timer.cancel()
        assert line.startswith("LISTENING "), (
            f"the authorization server said {line!r}: {self.stderr_path.read_text()}"
        )
        self.base = line.split()[1]

    def stats(self) -> dict[str, int]:
        return dict(httpx2.get(f"{self.base}/test/stats", timeout=5).json())

    def mint(self, **order: Any) -> str:
        """A token made to ``order`` (tests/servers/oauth_server.py, ``/test/mint``)."""
        answer = httpx2.post(f"{self.base}/test/mint", json=order, timeout=5)
        assert answer.status_code == 200, answer.text
        return str(answer.json()["access_token"])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def gateway_file(tmp: Path, oauth: dict[str, Any], **more: Any) -> str:
    path = tmp / f"gateway-{len(list(tmp.glob('gateway-*')))}.json"
    path.write_text(json.dumps({"oauth": oauth, **more}))
    return str(path)


class MemoryStorage(TokenStorage):
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class UserWhoApproves:
    """Opens the authorization URL (the test server approves at once) and reads the code off the redirect."""

    def __init__(self) -> None:
        self.location = ""
        self.authorizations = 0

    async def open(self, authorization_url: str) -> None:
        async with httpx2.AsyncClient() as http:
            response = await http.get(authorization_url, follow_redirects=False)
        assert response.status_code == 302, response.text
        self.location = response.headers["location"]
        self.authorizations += 1

    async def callback(self) -> AuthorizationCodeResult:
        query = parse_qs(urlparse(self.location).query)
        return AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0])


def provider_for(
    url: str, client_name: str, storage: MemoryStorage, user: UserWhoApproves
) -> OAuthClientProvider:
    return OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name=client_name,
            redirect_uris=[AnyUrl(REDIRECT_URI)],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=user.open,
        callback_handler=user.callback,
    )


@asynccontextmanager
async def oauth_host(url: str, provider: OAuthClientProvider) -> AsyncIterator[Client]:
    """A host on streamable HTTP whose requests carry the access tokens ``provider`` gets and refreshes."""
    async with httpx2.AsyncClient(auth=provider, timeout=30) as http:
        with trio.fail_after(HOST_LIFETIME):
            async with Client(streamable_http_client(url, http_client=http)) as client:
                yield client
