"""Benchmark: what OAuth costs a remote server's calls, and how long a login takes.

    .venv/bin/python -m tests.benchmarks.oauth [--calls N] [--refreshes R] [--logins L]

One real authorization server with its MCP server (``tests/servers/oauth_server.py``, streamable
HTTP, the SDK's server-side auth) and one ``mcp-supervisor run`` holding it as ``remote``. In one run,
side by side:

  steady      ``echo`` through the client stub with a valid token (the bearer header, nothing more)
  after 401   ``echo`` right after the server was told to refuse every current access token
              (``/test/expire``): the worker gets 401, refreshes, and sends the call again
  login       ``mcp-supervisor login remote`` start to exit, the redirect pasted (the authorization
              server approves at once), after ``logout``; then the time until the server is ready

Prints p50/p90 per row. Not a test: pytest only collects test_*.py.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.benchmarks.common import print_table
from tests.e2e.harness import SupervisorProcess
from tests.e2e.test_oauth import AuthServer, allow

CLI = (sys.executable, "-m", "supervisor")


def _quantile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _login(sup: SupervisorProcess, env: dict[str, str]) -> float:
    started = time.perf_counter()
    login = subprocess.Popen(
        [*CLI, "login", "remote", "--config", str(sup.config), "--endpoint", sup.endpoint, "--no-browser"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert login.stdin is not None and login.stderr is not None
    for line in login.stderr:
        if line.startswith("  http"):
            login.stdin.write(allow(line.strip()) + "\n")
            login.stdin.flush()
    login.communicate(timeout=60)
    assert login.returncode == 0, "login failed"
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--refreshes", type=int, default=30)
    parser.add_argument("--logins", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-oauth-") as name:
        tmp = Path(name)
        server = AuthServer(tmp, lifetime=3600)
        env = {"XDG_STATE_HOME": str(tmp / "state-home")}
        port = 33418 + os.getpid() % 1000
        entry = {"url": server.url, "oauth": {"redirectUri": f"http://127.0.0.1:{port}/callback"}}
        sup = SupervisorProcess(tmp / "sup", {"remote": entry}, log_level="info", env=env)
        full_env = {**os.environ, **env, "XDG_RUNTIME_DIR": str(sup.tmp)}
        try:
            sup.wait_states(remote="needs-login")
            logins: list[float] = []
            readies: list[float] = []
            for i in range(args.logins):
                if i:
                    subprocess.run(
                        [*CLI, "logout", "remote", "--config", str(sup.config), "--endpoint", sup.endpoint],
                        env=full_env,
                        capture_output=True,
                        check=True,
                        timeout=60,
                    )
                    sup.wait_states(remote="needs-login")
                logins.append(_login(sup, full_env))
                began = time.perf_counter()
                sup.wait_states(remote="ready")
                readies.append(time.perf_counter() - began)

            def call() -> float:
                began = time.perf_counter()
                assert sup.client.call_tool("mcp_remote_echo", {"text": "hi"}, timeout=10).text == "hi"
                return time.perf_counter() - began

            for _ in range(20):
                call()  # warm-up: connections, caches
            steady = [call() for _ in range(args.calls)]
            refreshed: list[float] = []
            for _ in range(args.refreshes):
                server.post("expire")
                refreshed.append(call())
            stats = server.stats()
        finally:
            sup.stop()
            server.stop()
    rows = [
        [
            "steady call",
            str(len(steady)),
            f"{_quantile(steady, 0.5) * 1e3:.2f}",
            f"{_quantile(steady, 0.9) * 1e3:.2f}",
        ],
        [
            "call after a 401 (refresh, resend)",
            str(len(refreshed)),
            f"{_quantile(refreshed, 0.5) * 1e3:.2f}",
            f"{_quantile(refreshed, 0.9) * 1e3:.2f}",
        ],
        [
            "login (start to exit)",
            str(len(logins)),
            f"{_quantile(logins, 0.5) * 1e3:.0f}",
            f"{_quantile(logins, 0.9) * 1e3:.0f}",
        ],
        [
            "login's exit to ready",
            str(len(readies)),
            f"{_quantile(readies, 0.5) * 1e3:.0f}",
            f"{_quantile(readies, 0.9) * 1e3:.0f}",
        ],
    ]
    print_table(["what", "n", "p50 ms", "p90 ms"], rows)
    print(f"authorization server: {stats}")


if __name__ == "__main__":
    main()
