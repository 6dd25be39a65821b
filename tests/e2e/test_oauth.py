"""OAuth servers run unattended: a real authorization server (``tests/servers/oauth_server.py``,
the SDK's server-side auth), a real supervisor, and ``mcp-supervisor login`` driven as a person
without a browser drives it (the printed URL visited, the redirect pasted), or through its loopback
port as a browser would."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from supervisor.client.errors import ServerUnavailableError
from tests.e2e.harness import SupervisorProcess, free_port

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
LISTEN_TIMEOUT = 30.0  # seconds for the authorization server to listen
LOGIN_TIMEOUT = 30.0  # seconds for one login, start to end


class AuthServer:
    """``python -m tests.servers.oauth_server`` on a free port."""

    def __init__(self, tmp: Path, lifetime: int, sse: bool = False) -> None:
        self.stderr_path = tmp / "oauth-server.stderr"
        command = [sys.executable, "-m", "tests.servers.oauth_server", "--token-lifetime", str(lifetime)]
        with self.stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                command + ["--sse"] * sse,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                cwd=Path(__file__).resolve().parents[2],
            )
        assert self.process.stdout is not None
        line = _read_line(self.process, self.process.stdout, LISTEN_TIMEOUT)
        assert line.startswith("LISTENING "), (
            f"the authorization server said {line!r}: {self.stderr_path.read_text()}"
        )
        self.base = line.split()[1]
        self.url = f"{self.base}/sse" if sse else f"{self.base}/mcp"

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(f"{self.base}/test/stats", timeout=5) as response:
            return dict(json.loads(response.read()))

    def post(self, what: str) -> None:
        urllib.request.urlopen(
            urllib.request.Request(f"{self.base}/test/{what}", method="POST"), timeout=5
        ).close()

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


def _read_line(process: subprocess.Popen[str], stream: Any, timeout: float) -> str:
    """One line of ``stream``, or the process killed after ``timeout`` (then an empty line)."""
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    try:
        return str(stream.readline()).strip()
    finally:
        timer.cancel()


_LOGIN = (sys.executable, "-m", "supervisor", "login")


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[Callable[..., AuthServer]]:
    started: list[AuthServer] = []

    def start(lifetime: int = 3600, sse: bool = False) -> AuthServer:
        server = AuthServer(tmp_path, lifetime, sse)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


class NoFollow(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def allow(authorization_url: str) -> str:
    """What a person's browser does at the authorization server: the redirect it ends up at."""
    try:
        urllib.request.build_opener(NoFollow).open(authorization_url, timeout=5)
    except urllib.error.HTTPError as exc:
        assert exc.code == 302, exc
        return str(exc.headers["Location"])
    raise AssertionError("the authorization URL did not redirect")


class Setup:
    """A supervisor with one OAuth server ``remote``, and the environment ``login`` needs."""

    def __init__(self, start: Start, tmp: Path, server: AuthServer, **extra: Any) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.env = {"XDG_STATE_HOME": str(tmp / "state-home")}
        oauth = {"redirectUri": f"http://127.0.0.1:{self.port}/callback"}
        entry = {"url": server.url, "oauth": oauth, "toolTimeout": 10} | extra
        self.sup = start({"remote": entry}, wait=False, env=self.env)
        self.token_file = tmp / "state-home" / "mcp-supervisor" / "tokens" / "remote.json"

    def cli(self, *args: str, stdin: int | None = subprocess.DEVNULL) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "supervisor", *args, "--endpoint", self.sup.endpoint]
        return subprocess.Popen(
            command,
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **self.env, "XDG_RUNTIME_DIR": str(self.sup.tmp)},
        )

    def login(self, via: str = "paste") -> str:
        """Run ``login remote``; with ``paste``, the redirect URL goes to its stdin; with ``loopback``, it
        is visited (as the browser would) on the login's own port. Its stdout and stderr."""
        flags = ["--no-browser", "--timeout", str(LOGIN_TIMEOUT)] + (
            ["--no-paste"] if via == "loopback" else []
        )
        login = self.cli("login", "remote", "--config", str(self.sup.config), *flags, stdin=subprocess.PIPE)
        assert login.stdin is not None and login.stderr is not None
        said: list[str] = []
        timer = threading.Timer(LOGIN_TIMEOUT + 5, login.kill)
        timer.start()
        try:
            for line in login.stderr:
                said.append(line)
                if line.startswith("  http"):
                    redirect = allow(line.strip())
                    if via == "paste":
                        login.stdin.write(redirect + "\n")
                        login.stdin.flush()
                    else:
                        with urllib.request.urlopen(redirect, timeout=5) as page:
                            assert b"You can close this tab" in page.read()
            out, _ = login.communicate()
        finally:
            timer.cancel()
        text = out + "".join(said)
        assert login.returncode == 0, text
        return text

    def echo(self, text: str) -> str:
        return self.sup.client.call_tool("mcp_remote_echo", {"text": text}, timeout=10).text


def _secrets(token_file: Path) -> list[str]:
    tokens = json.loads(token_file.read_text())["tokens"]
    return [tokens["access_token"], tokens["refresh_token"]]


def test_login_by_pasting_the_redirect_then_calls_work_and_no_token_shows(
    start_supervisor: Start, auth_server: Callable[..., AuthServer], tmp_path: Path
) -> None:
    server = auth_server()
    setup = Setup(start_supervisor, tmp_path, server)
    row = setup.sup.wait_states(remote="needs-login")["remote"]
    assert row.restarts == 0 and row.last_error is not None
    assert "no token is stored" in row.last_error and "mcp-supervisor login remote" in row.last_error
    with pytest.raises(ServerUnavailableError, match=r"needs login: .*run 'mcp-supervisor login remote'"):
        setup.sup.client.call_tool("mcp_remote_echo", {"text": "x"}, timeout=5)

    said = setup.login("paste")
    assert "logged in to 'remote'" in said and "server 'remote' is starting (it was needs-login)" in said
    setup.sup.wait_states(remote="ready")
    assert setup.echo("hello") == "hello"
    assert stat.S_IMODE(setup.token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(setup.token_file.parent.stat().st_mode) == 0o700

    row = setup.sup.status()["remote"]
    assert row.token_expires_at is not None and 3500 < row.token_expires_at - time.time() <= 3600
    status = setup.cli("status", "--json")
    out, _ = status.communicate(timeout=30)
    assert json.loads(out)["servers"][0]["token_expires_at"] == pytest.approx(row.token_expires_at)
    table = setup.cli("status")
    shown, _ = table.communicate(timeout=30)
    assert "TOKEN" in shown and "60m" in shown
    for secret in _secrets(setup.token_file):  # debug-level log, status, login's own output
        assert secret not in setup.sup.log and secret not in out + shown + said


def test_oauth_over_legacy_sse_logs_in_and_refreshes(
    start_supervisor: Start, auth_server: Callable[..., AuthServer], tmp_path: Path
) -> None:
    server = auth_server(lifetime=2, sse=True)
    setup = Setup(start_supervisor, tmp_path, server)
    assert setup.sup.wait_states(remote="needs-login")["remote"].transport == "sse"
    setup.login()
    setup.sup.wait_states(remote="ready")
    ends = time.monotonic() + 5  # two and a half token lifetimes
    calls = 0
    while time.monotonic() < ends:
        assert setup.echo(f"sse {calls}") == f"sse {calls}"
        calls += 1
        time.sleep(0.05)  # a pace of calls, not a wait for state
    assert server.stats()["refreshes"] >= 2
    assert setup.sup.status()["remote"].restarts == 0


def test_login_through_the_loopback_port(
    start_supervisor: Start, auth_server: Callable[..., AuthServer], tmp_path: Path
) -> None:
    setup = Setup(start_supervisor, tmp_path, auth_server())
    setup.sup.wait_states(remote="needs-login")
    setup.login("loopback")
    setup.sup.wait_states(remote="ready")
    assert setup.echo("through the browser") == "through the browser"


def test_a_token_that_expires_mid_run_is_refreshed_with_no_failed_call(
    start_supervisor: Start, auth_server: Callable[..., AuthServer], tmp_path: Path
) -> None:
    server = auth_server(lifetime=2)
    setup = Setup(start_supervisor, tmp_path, server)
    setup.sup.wait_states(remote="needs-login")
    setup.login()
    setup.sup.wait_states(remote="ready")
    before = server.stats()
    first = json.loads(setup.token_file.read_text())["tokens"]["access_token"]
    ends = time.monotonic() + 7  # three and a half token lifetimes
    calls = 0
    while time.monotonic() < ends:
        assert setup.echo(f"call {calls}") == f"call {calls}"  # any failure fails the test here
        calls += 1
        time.sleep(0.05)  # a pace of calls, not a wait for state
    after = server.stats()
    assert after["refreshes"] - before["refreshes"] >= 3, (before, after)
    assert after["refresh_failures"] == 0 and after["calls"] - before["calls"] == calls
    # Refreshed ahead of expiry: the server never had to refuse an expired token.
    assert after["unauthorized"] == before["unauthorized"], (before, after)
    assert json.loads(setup.token_file.read_text())["tokens"]["access_token"] != first

    # A token the server stops accepting early: refreshed on the 401, and the call still succeeds.
    server.post("expire")
    assert setup.echo("after expire") == "after expire"
    final = server.stats()
    assert final["unauthorized"] > after["unauthorized"] and final["refreshes"] > after["refreshes"]
    assert setup.sup.status()["remote"].restarts == 0


def test_a_revoked_refresh_token_gives_needs_login_and_login_brings_the_server_back(
    start_supervisor: Start, auth_server: Callable[..., AuthServer], tmp_path: Path
) -> None:
    server = auth_server()
    setup = Setup(start_supervisor, tmp_path, server)
    setup.sup.wait_states(remote="needs-login")
    setup.login()
    setup.sup.wait_states(remote="ready")
    assert setup.echo("before") == "before"
    revoked = _secrets(setup.token_file)

    server.post("revoke")
    with pytest.raises(ServerUnavailableError) as caught:
        setup.echo("after revoke")
    assert "needs login: refreshing its token failed (HTTP 400: invalid_grant)" in caught.value.message
    assert "run 'mcp-supervisor login remote'" in caught.value.message
    row = setup.sup.wait_states(remote="needs-login")["remote"]
    assert row.last_error is not None and "invalid_grant" in row.last_error
    assert server.stats()["refresh_failures"] >= 1
    # Not a crash loop: no restarts while it waits for a person.
    assert row.restarts == 0
    with pytest.raises(ServerUnavailableError, match="needs login"):
        setup.echo("still")

    setup.login()
    setup.sup.wait_states(remote="ready")
    assert setup.echo("back") == "back"
    for secret in revoked + _secrets(setup.token_file):
        assert secret not in setup.sup.log


def test_logout_forgets_the_tokens_and_the_server_needs_a_login_again(
    start_supervisor: Start, auth_server: Callable[..., AuthServer], tmp_path: Path
) -> None:
    setup = Setup(start_supervisor, tmp_path, auth_server())
    setup.sup.wait_states(remote="needs-login")
    setup.login()
    setup.sup.wait_states(remote="ready")
    logout = setup.cli("logout", "remote", "--config", str(setup.sup.config))
    out, err = logout.communicate(timeout=30)
    assert logout.returncode == 0, err
    assert "forgot the tokens of 'remote'" in out and "restarted" in out
    assert not setup.token_file.exists()
    setup.sup.wait_states(remote="needs-login")


def test_login_refuses_what_it_cannot_do(start_supervisor: Start, tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "plain": {"url": "http://127.0.0.1:9/mcp"},
                    "svc": {
                        "url": "http://127.0.0.1:9/mcp",
                        "oauth": {"grant": "client_credentials", "clientId": "a", "clientSecret": "b"},
                    },
                    "broken": {"url": "http://127.0.0.1:9/mcp", "oauth": {"grant": "client_credentials"}},
                }
            }
        )
    )

    def login(server: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "supervisor", "login", server, "--config", str(config), "--no-browser"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_RUNTIME_DIR": str(tmp_path)},
            stdin=subprocess.DEVNULL,
        )

    done = login("nope")
    assert done.returncode == 2 and "no server named 'nope' (servers: plain, svc)" in done.stderr
    done = login("plain")
    assert done.returncode == 2 and 'has no "oauth"' in done.stderr
    done = login("broken")
    assert done.returncode == 2 and 'and one of "clientSecret", "privateKey"' in done.stderr
    done = login("svc")
    assert done.returncode == 0 and "needs no login" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_login_that_gets_no_authorization_ends_with_a_clear_error(
    auth_server: Callable[..., AuthServer], tmp_path: Path
) -> None:
    server = auth_server()
    config = tmp_path / "mcp.json"
    port = free_port()
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "remote": {"url": server.url, "oauth": {"redirectUri": f"http://127.0.0.1:{port}/cb"}}
                }
            }
        )
    )
    nowhere = f"ipc://{tmp_path}/none.sock"
    done = subprocess.run(
        [*_LOGIN, "remote", "--config", str(config), "--no-browser", "--timeout", "2", "--endpoint", nowhere],
        input="not a url\nhttp://127.0.0.1/cb?error=access_denied&state=x\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")},
    )
    assert done.returncode == 1, done
    assert "that has no ?code= in it" in done.stderr
    assert "login failed: the authorization server refused: access_denied" in done.stderr
    assert "Traceback" not in done.stderr
    kept = tmp_path / "state" / "mcp-supervisor" / "tokens" / "remote.json"
    assert "tokens" not in (json.loads(kept.read_text()) if kept.exists() else {})  # the registration may be
