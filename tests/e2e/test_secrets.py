"""Secrets given to servers without being written in the config, and never shown anywhere else.

A real supervisor (DEBUG logging, tracing to a collector in this process, the metrics listener and
status page on) runs the test server over stdio with three secrets, one from each source: its
``envFile``, a ``${file:PATH}`` relative to the config, and a ``${credential:NAME}`` read from
``$CREDENTIALS_DIRECTORY`` (set in the supervisor's environment, as systemd's ``LoadCredential=`` does);
and the test server over streamable HTTP, whose bearer token in ``headers`` is a credential too. The
test calls the ``env`` tool (its results are the one place a secret may be seen), fails calls, crashes
a server, restarts workers from the command line and the client, rotates a credential and reloads;
then looks for every secret value in ``status`` (text and ``--json``), ``logs`` (text and ``--json``),
the supervisor's log (its workers' and servers' stderr included), ``/metrics``, the status page, its
``/api/status`` and ``/events``, and every exported span. Any one found fails the test.
"""

from __future__ import annotations

import http.client
import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from supervisor.client.errors import SupervisorError
from tests.e2e.harness import SupervisorProcess, http_test_server, stdio_test_server
from tests.e2e.web import listening, request
from tests.otel import SUPERVISOR, WAIT, WORKER, OtlpReceiver, Received, exporting_to, otlp_receiver

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
CLI_TIMEOUT = 60  # seconds for one command
EVENTS_TIMEOUT = 10.0  # seconds to read the first events of /events


def secret(kind: str) -> str:
    return f"{kind}-{secrets.token_hex(16)}"


@pytest.fixture
def remote_token() -> str:
    return secret("header")


@pytest.fixture
def remote(remote_token: str) -> Iterator[str]:
    """The test server over streamable HTTP, answering only ``Authorization: Bearer <remote_token>``."""
    with http_test_server(TEST_SERVER_REQUIRE_TOKEN=remote_token) as url:
        yield url


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as collector:
        yield collector


def cli(sup: SupervisorProcess, *args: str) -> str:
    """What a command printed (stdout and stderr); it must succeed."""
    command = [sys.executable, "-m", "supervisor", *args, "--endpoint", sup.endpoint]
    done = subprocess.run(command, capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout + done.stderr


def first_events(port: int) -> str:
    """``/events`` until its first state and registry events came (bounded): its snapshot."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=EVENTS_TIMEOUT)
    try:
        conn.request("GET", "/events")
        response = conn.getresponse()
        assert response.status == 200
        received = b""
        deadline = time.monotonic() + EVENTS_TIMEOUT
        while b"event: stats" not in received and time.monotonic() < deadline:
            received += response.read1(65536)
        assert b"event: stats" in received, received[:500]
        return received.decode()
    finally:
        conn.close()


def test_secrets_from_an_env_file_a_file_and_a_credential_reach_servers_and_nothing_else(
    start_supervisor: Start, tmp_path: Path, remote: str, remote_token: str, receiver: OtlpReceiver
) -> None:
    values = {name: secret(name) for name in ("envfile", "file", "credential", "rotated")}
    values["header"] = remote_token
    home, credentials = tmp_path / "sup0", tmp_path / "credentials"
    (home / "tokens").mkdir(parents=True)
    credentials.mkdir()
    (home / "secrets.env").write_text(f"ENVFILE_TOKEN={values['envfile']}\n")
    (home / "tokens" / "file_token").write_text(values["file"] + "\n")
    (credentials / "github_token").write_text(values["credential"] + "\n")
    (credentials / "remote_token").write_text(remote_token + "\r\n")
    local = stdio_test_server(FILE_TOKEN="${file:tokens/file_token}", CRED_TOKEN="${credential:github_token}")
    local["envFile"] = "secrets.env"
    servers = {
        "local": local,
        "remote": {"url": remote, "headers": {"Authorization": "Bearer ${credential:remote_token}"}},
    }
    sup = start_supervisor(
        servers,
        env=exporting_to(receiver, CREDENTIALS_DIRECTORY=str(credentials)),
        settings={"metrics": "127.0.0.1:0", "tracing": True},
    )
    assert sup.config.parent == home
    port = listening(sup)

    def env_of(name: str) -> str:
        return sup.client.call_tool("mcp_local_env", {"name": name}, timeout=10).text

    def delivered(credential: str) -> None:
        """The server has each secret: the env tool's results are the one place they show."""
        assert env_of("ENVFILE_TOKEN") == values["envfile"]
        assert env_of("FILE_TOKEN") == values["file"]
        assert env_of("CRED_TOKEN") == credential
        assert env_of("CREDENTIALS_DIRECTORY") == ""  # the supervisor's own, not passed on
        answer = sup.client.call_tool("mcp_remote_echo", {"text": "authorized"}, timeout=10)
        assert answer.text == "authorized"  # the token went in the header: no 401

    delivered(values["credential"])

    # Things go wrong: calls that fail, a server that crashes, restarts from the command line and
    # the client, a credential rotated and the config reloaded.
    failing = {"mcp_local_fail": {"message": "no"}, "mcp_remote_raise_error": {"message": "x"}}
    failing |= {"mcp_local_crash": {"code": 3}}
    for tool, arguments in failing.items():
        with pytest.raises(SupervisorError):
            sup.client.call_tool(tool, arguments, timeout=10)
    sup.wait_states(local="ready", remote="ready")
    cli(sup, "restart", "local")
    sup.client.restart("remote")
    sup.wait_states(local="ready", remote="ready")
    (credentials / "github_token").write_text(values["rotated"] + "\n")
    summary = json.loads(cli(sup, "reload", "--json"))
    assert summary["changed"] == ["local"] and summary["unchanged"] == ["remote"]
    sup.wait_states(local="ready", remote="ready")
    delivered(values["rotated"])

    # Every place the supervisor shows anything, each checked to hold what it should.
    places: dict[str, str] = {
        "status": cli(sup, "status"),
        "status --json": cli(sup, "status", "--json"),
        "logs local": cli(sup, "logs", "local", "-n", "1000"),
        "logs local --json": cli(sup, "logs", "local", "-n", "1000", "--json"),
        "logs remote": cli(sup, "logs", "remote", "-n", "1000"),
        "logs remote --json": cli(sup, "logs", "remote", "-n", "1000", "--json"),
    }
    for path in ("/metrics", "/", "/api/status"):
        status, _, body = request(port, "GET", path)
        assert status == 200, (path, body[:300])
        places[f"GET {path}"] = body.decode()
    places["GET /events"] = first_events(port)

    def traced(spans: list[Received]) -> bool:
        names = {(span.service, span.name) for span in spans}
        return {(SUPERVISOR, "route mcp_local_env"), (WORKER, "tools/call env")} <= names

    spans = receiver.wait_for("the env calls' spans", traced, WAIT)
    places["spans"] = "\n".join(repr(span) for span in spans)
    sup.stop()
    places["supervisor log"] = sup.log

    assert "local" in places["status"] and "ready" in places["status"]
    assert {row["server"] for row in json.loads(places["status --json"])["servers"]} == {"local", "remote"}
    assert "crashing with 3" in places["logs local"]  # the server's stderr, kept across its crash
    assert "mcp_supervisor_calls_total" in places["GET /metrics"]
    assert "call env" in places["supervisor log"]  # DEBUG: the worker logs each call's arguments
    assert "ENVFILE_TOKEN" in places["supervisor log"]  # ... which name the variable, not its value
    leaks = [
        f"the {kind} secret in {place}"
        for place, text in places.items()
        for kind, value in values.items()
        if value in text
    ]
    assert leaks == [], leaks
