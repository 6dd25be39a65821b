"""The client side of the MCP conformance suite: mcp-supervisor as the MCP client under test.

``conformance client --command "python tests/conformance/driver.py"`` runs this
with the scenario's server URL as the last argument and the scenario's name in
``$MCP_CONFORMANCE_SCENARIO``. The driver writes a config with that URL as the
one server ``conf`` (restart ``temporary``: one connection attempt, so a server
that refuses us ends as ``failed`` at once instead of being retried), starts a
real supervisor (``python -m supervisor run``) on a private ipc endpoint in a
fresh temporary directory, waits (bounded) until the server is ready or has
failed, lists the tools and calls the one the scenario asks for through
``SupervisorClient``, then stops the supervisor with SIGINT (bounded wait).

For ``auth/*`` scenarios the server gets an ``"oauth"`` object built from the suite's context
(``$MCP_CONFORMANCE_CONTEXT``; its secrets go in as ``${VAR}``), and the token files go to the
temporary directory. A server in ``needs-login`` is authorized as an operator without a browser
does it: ``mcp-supervisor login conf --no-browser``, the printed URL visited (the suite approves at
once and redirects; the redirect is not followed), its ``Location`` pasted into ``login``. At most
``MAX_LOGINS`` logins, for a step-up at call time too.

Exit status 0 after a clean run (the last stdout line is ``driver: ok``), 1
with a message on stderr when anything failed; the supervisor's log is copied to
stderr either way (the suite keeps it in ``stderr.txt`` with ``-o``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Final

from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import SupervisorError, SupervisorUnreachableError
from supervisor.protocol import ServerStatus, ToolInfo

SERVER: Final = "conf"  # the scenario's server in the config
START_TIMEOUT: Final = 15.0  # the server's startTimeout: initialize and tools/list, then it is failed
READY_TIMEOUT: Final = 20.0  # seconds for the supervisor to start and the server to be ready (or failed)
CALL_TIMEOUT: Final = 10.0  # seconds for the scenario's tool call
STOP_TIMEOUT: Final = 10.0  # seconds for the supervisor to exit after SIGINT
POLL_INTERVAL: Final = 0.05
OK_LINE: Final = "driver: ok"
LOGIN_TIMEOUT: Final = 10.0  # seconds for one login
MAX_LOGINS: Final = 2  # a person tries twice, then gives up
CLIENT_METADATA_URL: Final = "https://conformance-test.local/client-metadata.json"  # the suite's CIMD URL
REDIRECT_URI: Final = "http://127.0.0.1:3000/callback"

# The tool each scenario exposes and the arguments to call it with. Scenarios not listed
# here (auth/*): the first tool the server lists, with no arguments.
SCENARIO_CALLS: Final[dict[str, tuple[str, dict[str, Any]] | None]] = {
    "initialize": None,  # lists no tools; initialize and tools/list are the whole scenario
    "tools_call": ("add_numbers", {"a": 2, "b": 3}),
    "elicitation-sep1034-client-defaults": ("test_client_elicitation_defaults", {}),
    "sse-retry": ("test_reconnection", {}),
}
# What the scenario's tool answers when it went right.
EXPECTED_TEXT: Final = {
    "tools_call": "The sum of 2 and 3 is 5",
    "elicitation-sep1034-client-defaults": "Elicitation completed:",
    "sse-retry": "Reconnection test completed successfully",
}


class DriverError(Exception):
    """The scenario could not be carried out; the message says why."""


def server_config(url: str, scenario: str, context: dict[str, Any] | None = None) -> dict[str, Any]:
    server: dict[str, Any] = {
        "url": url,
        "restart": "temporary",
        "startTimeout": START_TIMEOUT,
        "toolTimeout": CALL_TIMEOUT,
    }
    if scenario.startswith("elicitation-"):
        server["elicitation"] = "defaults"
    if scenario.startswith("auth/"):
        server["oauth"] = oauth_config(url, scenario, context or {})
    return {"supervisor": {"shutdownGrace": 2}, "mcpServers": {SERVER: server}}


def oauth_config(url: str, scenario: str, context: dict[str, Any]) -> dict[str, Any]:
    """The server's ``"oauth"`` for an auth scenario, as a user would write it: the secrets the suite
    hands over in ``$MCP_CONFORMANCE_CONTEXT`` go in as ``${VAR}`` (``secret_env`` sets them)."""
    if "private_key_pem" in context:  # client credentials, private_key_jwt
        return {
            "grant": "client_credentials",
            "clientId": context["client_id"],
            "privateKey": "${CONF_PRIVATE_KEY}",
            "signingAlgorithm": context.get("signing_algorithm", "ES256"),
        }
    if "idp_id_token" in context:  # SEP-990: the issuer is configuration; here it comes from the PRM
        return {
            "grant": "identity_assertion",
            "clientId": context["client_id"],
            "clientSecret": "${CONF_CLIENT_SECRET}",
            "issuer": _advertised_issuer(url),
            "idpTokenEndpoint": context["idp_token_endpoint"],
            "idpClientId": context["idp_client_id"],
            "idpIdToken": "${CONF_ID_TOKEN}",
        }
    if scenario.startswith("auth/client-credentials"):
        return {
            "grant": "client_credentials",
            "clientId": context["client_id"],
            "clientSecret": "${CONF_CLIENT_SECRET}",
        }
    oauth: dict[str, Any] = {"clientMetadataUrl": CLIENT_METADATA_URL, "redirectUri": REDIRECT_URI}
    if "client_id" in context:  # a pre-registered client
        oauth["clientId"] = context["client_id"]
        if context.get("client_secret"):
            oauth["clientSecret"] = "${CONF_CLIENT_SECRET}"
    return oauth


def secret_env(context: dict[str, Any]) -> dict[str, str]:
    names = {
        "client_secret": "CONF_CLIENT_SECRET",
        "private_key_pem": "CONF_PRIVATE_KEY",
        "idp_id_token": "CONF_ID_TOKEN",
    }
    return {env: str(context[key]) for key, env in names.items() if context.get(key)}


def _advertised_issuer(url: str) -> str:
    """The first authorization server of the scenario's protected resource metadata (RFC 9728)."""
    parts = urllib.parse.urlsplit(url)
    prm = f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{parts.path}"
    with urllib.request.urlopen(prm, timeout=5) as response:
        servers = json.loads(response.read())["authorization_servers"]
    return str(servers[0])


def authorize(authorization_url: str) -> str:
    """What a person's browser does: visit the authorization URL (the suite's authorization server
    approves at once) and end up at the redirect URL, which is returned, not followed."""

    class NoFollow(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoFollow)
    try:
        opener.open(authorization_url, timeout=5)
    except urllib.error.HTTPError as exc:
        location = exc.headers.get("Location")
        if exc.code in (301, 302, 303, 307, 308) and location:
            return str(location)
        raise DriverError(f"the authorization URL answered HTTP {exc.code}") from None
    raise DriverError("the authorization URL did not redirect")


class Supervisor:
    """A ``python -m supervisor run`` process with its config, socket, token files and log in ``tmp``."""

    def __init__(self, tmp: Path, config: dict[str, Any], secrets: dict[str, str] | None = None) -> None:
        self.config = tmp / "mcp.json"
        self.config.write_text(json.dumps(config))
        self.endpoint = f"ipc://{tmp}/supervisor.sock"
        self.log_path = tmp / "supervisor.log"
        # The worker socket and the token files go in tmp too.
        self.env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp), "XDG_STATE_HOME": str(tmp / "state")}
        self.env |= secrets or {}
        command = [sys.executable, "-m", "supervisor", "run", str(self.config), "--endpoint", self.endpoint]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [*command, "--log-level", "debug"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        self.client = SupervisorClient(self.endpoint, request_timeout=5.0)

    def login(self) -> None:
        """``mcp-supervisor login conf``, driven as a person without a browser drives it: open the URL it
        prints elsewhere, allow, and paste the address the browser ends up at."""
        command = [sys.executable, "-m", "supervisor", "login", SERVER, "--config", str(self.config)]
        command += ["--endpoint", self.endpoint, "--no-browser", "--timeout", str(LOGIN_TIMEOUT)]
        login = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )
        assert login.stdin is not None and login.stderr is not None
        try:
            with Deadline(LOGIN_TIMEOUT + 5, login):
                said: list[str] = []
                for line in login.stderr:
                    said.append(line)
                    if line.startswith("  http"):
                        login.stdin.write(authorize(line.strip()) + "\n")
                        login.stdin.flush()
                out, _ = login.communicate()
        finally:
            if login.poll() is None:
                login.kill()
                login.wait()
        print(f"login: {out.strip()} {''.join(said).strip()}", flush=True)
        if login.returncode != 0:
            raise DriverError(f"login exited {login.returncode}: {''.join(said).strip()}")

    def wait_settled(self, timeout: float) -> ServerStatus:
        """Poll until the server is ``ready``, ``failed``, ``stopped`` or ``needs-login``; its status row."""
        deadline = time.monotonic() + timeout
        last: ServerStatus | None = None
        while True:
            if self.process.poll() is not None:
                raise DriverError(f"the supervisor exited with status {self.process.returncode}")
            try:
                last = next(row for row in self.client.status() if row.server == SERVER)
            except SupervisorUnreachableError:
                pass  # not listening yet
            except StopIteration:
                raise DriverError(f"the supervisor has no server {SERVER!r} (config rejected?)") from None
            if last is not None and last.state in ("ready", "failed", "stopped", "needs-login"):
                return last
            if time.monotonic() > deadline:
                state = last.state if last is not None else "no answer from the supervisor"
                raise DriverError(f"server not ready within {timeout:g} s (state: {state})")
            time.sleep(POLL_INTERVAL)

    def stop(self) -> None:
        """SIGINT and a bounded wait; raises if it did not exit cleanly. Never leaves it running."""
        self.client.close()
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGINT)
                try:
                    self.process.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    raise DriverError(
                        f"the supervisor did not exit within {STOP_TIMEOUT:g} s of SIGINT"
                    ) from None
        finally:
            if self.process.poll() is None:  # timed out, or we were interrupted while waiting
                self.process.kill()
                self.process.wait()
        if self.process.returncode != 0:
            raise DriverError(f"the supervisor exited with status {self.process.returncode}")


def _interrupted(signum: int, frame: object) -> None:
    """SIGTERM (the suite's timeout) or SIGHUP: unwind, so that the supervisor is stopped."""
    signal.signal(signum, signal.SIG_IGN)  # once: let the clean-up run
    raise DriverError(f"interrupted by {signal.Signals(signum).name}")


class Deadline:
    """Kill ``process`` if the block takes longer than ``seconds`` (a hung read then ends)."""

    def __init__(self, seconds: float, process: subprocess.Popen[str]) -> None:
        self.timer = threading.Timer(seconds, process.kill)

    def __enter__(self) -> None:
        self.timer.start()

    def __exit__(self, *exc: object) -> None:
        self.timer.cancel()


def run_scenario(sup: Supervisor, scenario: str) -> None:
    row = sup.wait_settled(READY_TIMEOUT)
    for _ in range(MAX_LOGINS):
        if row.state != "needs-login":
            break
        print(f"server needs login: {row.last_error}", flush=True)
        sup.login()
        row = sup.wait_settled(READY_TIMEOUT)
    if row.state != "ready":
        raise DriverError(f"server {row.state}: {row.last_error or 'no error recorded'}")
    tools: list[ToolInfo] = [tool for tool in sup.client.list_tools() if tool.server == SERVER]
    print(f"tools: {', '.join(tool.original_name for tool in tools) or 'none'}")
    if scenario in SCENARIO_CALLS:
        wanted = SCENARIO_CALLS[scenario]
        if wanted is None:
            return
        original, arguments = wanted
        tool = next((tool for tool in tools if tool.original_name == original), None)
        if tool is None:
            raise DriverError(f"the server lists no tool {original!r}")
    elif tools:
        tool, arguments = tools[0], {}
    else:
        return
    for attempt in range(MAX_LOGINS + 1):
        try:
            result = sup.client.call_tool(tool.name, arguments, timeout=CALL_TIMEOUT)
            break
        except SupervisorError as exc:
            row = sup.wait_settled(READY_TIMEOUT)
            if row.state != "needs-login" or attempt == MAX_LOGINS:  # else: a step-up, authorized by login
                raise DriverError(f"calling {tool.name}: {exc.code}: {exc}") from exc
            print(f"server needs login: {row.last_error}", flush=True)
            sup.login()
            if sup.wait_settled(READY_TIMEOUT).state != "ready":
                raise DriverError(f"calling {tool.name}: {exc.code}: {exc}") from exc
    print(f"{tool.name}: {result.text}")
    expected = EXPECTED_TEXT.get(scenario)
    if expected is not None and expected not in result.text:
        raise DriverError(f"{tool.name} answered {result.text!r}, expected {expected!r}")


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: driver.py [...] SERVER_URL (the conformance suite appends the URL)", file=sys.stderr)
        return 2
    url, scenario = argv[-1], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupted)
    print(f"scenario {scenario or '(unnamed)'} at {url}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="mcpconf-"))  # short: ipc socket paths are limited to ~100 bytes
    sup: Supervisor | None = None
    failure: str | None = None
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    try:
        sup = Supervisor(tmp, server_config(url, scenario, context), secret_env(context))
        run_scenario(sup, scenario)
    except (DriverError, SupervisorError) as exc:
        failure = str(exc)
    finally:
        if sup is not None:
            try:
                sup.stop()
            except DriverError as exc:
                failure = failure or str(exc)
            log = sup.log_path.read_text(errors="replace")
            sys.stderr.write(log)
            leaked = [env for env, value in secret_env(context).items() if value in log]
            if leaked:  # a secret of the config in the (debug-level) log
                failure = failure or f"the supervisor's log shows the value of {', '.join(leaked)}"
        shutil.rmtree(tmp, ignore_errors=True)
    if failure is not None:
        print(f"driver: FAILED: {failure}", file=sys.stderr)
        return 1
    print(OK_LINE)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
