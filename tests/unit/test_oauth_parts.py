"""The pure parts of OAuth: the ``"oauth"`` config object, the token file, the pasted redirect, the
storage the SDK sees. The flows themselves run against real authorization servers in
``tests/e2e/test_oauth.py`` and the conformance suite."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl

from supervisor.cli.login import parse_redirect
from supervisor.cli.watch_commands import _token_left
from supervisor.config.load import Config, OAuthSpec, parse_config
from supervisor.security.tokens import TokenFile, state_dir
from workers.oauth import FileStorage

URL = "https://mcp.example.com/mcp"


def parse(server: dict[str, Any], environ: dict[str, str] | None = None) -> Config:
    data = json.dumps({"mcpServers": {"s": {"url": URL} | server}}).encode()
    return parse_config(data, environ={} if environ is None else environ)


def problem(server: dict[str, Any]) -> str:
    config = parse(server)
    assert not config.servers and len(config.problems) == 1, config
    return config.problems[0].message


# ---------------------------------------------------------------- config


def test_oauth_true_takes_every_default() -> None:
    spec = parse({"oauth": True}).servers["s"]
    assert spec.oauth == OAuthSpec()
    assert spec.oauth.redirect_uri == "http://127.0.0.1:33418/callback"
    assert parse({"oauth": False}).servers["s"].oauth is None


def test_oauth_secrets_are_expanded_and_kept_out_of_repr() -> None:
    config = parse(
        {"oauth": {"grant": "client_credentials", "clientId": "${ID}", "clientSecret": "${SECRET}"}},
        {"ID": "svc", "SECRET": "s3cr3t-value"},
    )
    oauth = config.servers["s"].oauth
    assert oauth is not None and oauth.client_id == "svc" and oauth.client_secret == "s3cr3t-value"
    assert "s3cr3t-value" not in repr(config.servers["s"])


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        (
            {"oauth": {"grant": "client_credentials"}},
            'needs "clientId" and one of "clientSecret", "privateKey"',
        ),
        ({"oauth": {"grant": "identity_assertion", "clientId": "a"}}, '"clientSecret" and "issuer"'),
        ({"oauth": {"clientSecret": "x"}}, '"clientSecret" needs the "clientId"'),
        ({"oauth": {"clientMetadataUrl": "http://x.example/c.json"}}, "must be an https:// URL with a path"),
        ({"oauth": {"clientMetadataUrl": "https://x.example"}}, "must be an https:// URL with a path"),
        ({"oauth": {"redirectUri": "urn:ietf:wg:oauth:2.0:oob"}}, '"redirectUri" must be an http://'),
        ({"oauth": {"privateKey": "PEM"}}, "is for grant client_credentials"),
        ({"oauth": {"tokenEndpointAuthMethod": "private_key_jwt"}}, 'needs "privateKey"'),
        ({"oauth": {"grant": "device_code"}}, "oauth.grant"),
        ({"oauth": {"clientID": "x"}}, "clientID"),
        ({"oauth": True, "headers": {"authorization": "Bearer x"}}, "give only one of them"),
        ({"oauth": {"clientSecret": "${NOPE}", "clientId": "a"}}, "variable NOPE in oauth.client_secret"),
    ],
)
def test_oauth_problems_name_the_field(server: dict[str, Any], expected: str) -> None:
    message = problem(server)
    assert expected in message, message


def test_a_stdio_server_has_no_oauth() -> None:
    config = parse_config(
        json.dumps({"mcpServers": {"s": {"command": "x", "oauth": True}}}).encode(), environ={}
    )
    assert '"oauth" is for remote servers' in config.problems[0].message


# ---------------------------------------------------------------- the token file


def test_the_token_file_is_private_atomic_and_bound_to_its_url(tmp_path: Path) -> None:
    file = TokenFile("github/main", URL, tmp_path / "tokens")
    assert file.read() == {} and file.expires_at() is None
    file.set_tokens({"access_token": "a"}, expires_in=60)
    assert file.path.parent == tmp_path / "tokens" and file.path.name == "github%2Fmain.json"
    assert stat.S_IMODE(file.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(file.path.parent.stat().st_mode) == 0o700
    expires = file.expires_at()
    assert expires is not None and 55 < expires - time.time() <= 60
    assert [p.name for p in file.directory.iterdir()] == [file.path.name]  # no temporary left behind
    assert TokenFile("github/main", "https://elsewhere.example/mcp", tmp_path / "tokens").read() == {}
    file.update(scope_needed="a b")
    assert file.read()["tokens"] == {"access_token": "a"} and file.read()["scope_needed"] == "a b"
    file.update(scope_needed=None)
    assert "scope_needed" not in file.read()
    assert file.remove() and not file.remove()


@pytest.mark.parametrize("content", [b"", b"{", b"[]", b'{"format": 99}', b"\xff\xfe", b'{"format": 1}'])
def test_a_broken_token_file_reads_as_none(tmp_path: Path, content: bytes) -> None:
    file = TokenFile("s", URL, tmp_path)
    file.path.write_bytes(content)
    assert file.read() == {} and file.expires_at() is None


def test_the_state_directory_follows_xdg(tmp_path: Path) -> None:
    assert state_dir({"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "mcp-supervisor"
    assert state_dir({"HOME": str(tmp_path)}) == tmp_path / ".local/state/mcp-supervisor"
    assert (
        state_dir({"HOME": str(tmp_path), "XDG_STATE_HOME": "relative"})
        == tmp_path / ".local/state/mcp-supervisor"
    )


def test_the_storage_the_sdk_sees(tmp_path: Path) -> None:
    async def main() -> None:
        file = TokenFile("s", URL, tmp_path)
        storage = FileStorage(file)
        assert await storage.get_tokens() is None and await storage.get_client_info() is None
        await storage.set_tokens(OAuthToken(access_token="at", refresh_token="rt", expires_in=30))
        await storage.set_client_info(OAuthClientInformationFull(client_id="c", redirect_uris=[AnyUrl(URL)]))
        again = FileStorage(TokenFile("s", URL, tmp_path))
        tokens = await again.get_tokens()
        assert tokens is not None and tokens.refresh_token == "rt"
        client = await again.get_client_info()
        assert client is not None and client.client_id == "c"
        assert await FileStorage(file, fresh=True).get_tokens() is None  # login asks anew
        # A pre-registered client is the config's: its secret never goes to the file.
        mine = OAuthClientInformationFull(
            client_id="pre", client_secret="sekrit", redirect_uris=[AnyUrl(URL)]
        )
        preregistered = FileStorage(file, mine)
        assert await preregistered.get_client_info() is mine
        await preregistered.set_client_info(mine)
        assert "sekrit" not in file.path.read_text()
        file.path.write_text(json.dumps(file.read() | {"tokens": {"token_type": 5}}))
        assert await again.get_tokens() is None  # unreadable: as if there were none

    trio.run(main)


# ---------------------------------------------------------------- the pasted redirect


def test_a_pasted_redirect_url_or_query() -> None:
    got = parse_redirect("  http://127.0.0.1:33418/callback?code=abc&state=xyz&iss=https%3A%2F%2Fas\n")
    assert got is not None and (got.code, got.state, got.iss, got.error) == ("abc", "xyz", "https://as", None)
    got = parse_redirect("?code=abc&state=s")
    assert got is not None and got.code == "abc"
    got = parse_redirect("http://x/cb?error=access_denied&error_description=no+thanks&state=s")
    assert got is not None and got.error == "access_denied: no thanks" and got.code is None
    assert parse_redirect("http://127.0.0.1:33418/callback") is None
    assert parse_redirect("yes") is None


@given(st.text())
def test_parse_redirect_never_raises(text: str) -> None:
    got = parse_redirect(text)
    assert got is None or got.code is not None or got.error is not None


def test_token_left_reads_for_people() -> None:
    now = time.time()
    assert _token_left(None) == "-"
    assert _token_left(now - 1) == "expired"
    assert _token_left(now + 90) in ("89s", "90s")
    assert _token_left(now + 3000) == "50m"
    assert _token_left(now + 3 * 3600 + 60) == "3h"


def test_no_stray_permissions_on_a_new_state_dir(tmp_path: Path) -> None:
    file = TokenFile("s", URL, tmp_path / "a" / "tokens")
    file.set_tokens({"access_token": "x"}, None)
    assert file.expires_at() is None
    assert not os.access(file.path, os.X_OK)
