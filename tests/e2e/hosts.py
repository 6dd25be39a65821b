"""Supervisors on three hosts and an agent on a fourth (``tests/e2e/netns.py``), for the tests that
cross network boundaries: each host runs a supervisor bound to its own address, over tcp with CURVE.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from supervisor.security.keys import keygen
from tests.e2e.harness import STOP_TIMEOUT, stdio_test_server
from tests.e2e.netns import Network

HOSTS = ["alpha", "beta", "gamma"]
AGENT = "agent"
PORT = 5555


class Cluster:
    """The network, the keys, and a supervisor per host with one test server named after the host
    (and ``more`` servers of its own: host -> config entries)."""

    def __init__(
        self, network: Network, tmp: Path, more: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        self.network = network
        self.keys = tmp / "keys"
        keygen(self.keys)
        self.stranger = tmp / "stranger"
        keygen(self.stranger, server=False)
        shutil.copy(self.keys / "server.key", self.stranger / "server.key")
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self._tmp = tmp
        for host in HOSTS:
            servers = {host: stdio_test_server(), **(more or {}).get(host, {})}
            (tmp / f"{host}.json").write_text(json.dumps({"mcpServers": servers}))
            self.start(host)

    def start(self, host: str) -> None:
        """Start ``host``'s supervisor (again), its output appended to its log."""
        self.logs[host] = self._tmp / f"{host}.log"
        run = [
            sys.executable,
            "-m",
            "supervisor",
            "run",
            str(self._tmp / f"{host}.json"),
            "--log-level",
            "debug",
        ]
        with self.logs[host].open("ab") as log:
            self.processes[host] = self.network.popen(
                host,
                [*run, "--endpoint", self.endpoint(host), "--keys", str(self.keys)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "XDG_RUNTIME_DIR": str(self._tmp / host)},
            )

    def kill(self, host: str) -> None:
        """SIGKILL ``host``'s supervisor (its workers and servers follow it, as they do its death)."""
        process = self.processes[host]
        process.kill()
        process.wait(STOP_TIMEOUT)

    def wait_ready(self) -> None:
        """Until every host's supervisor has its servers ready (asked from the agent's host)."""
        for host in HOSTS:
            waited = self.agent("wait", "--timeout", "60", host=host, timeout=90)
            assert waited.returncode == 0, (host, waited.stdout, waited.stderr, self.logs[host].read_text())

    def endpoint(self, host: str) -> str:
        return f"tcp://{self.network.address(host)}:{PORT}"

    def agent(
        self, *args: str, host: str, keys: Path | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """``mcp-supervisor ARGS`` from the agent's host, to ``host``'s supervisor."""
        where = ["--endpoint", self.endpoint(host), "--keys", str(keys or self.keys)]
        return self.network.cli(AGENT, *args, *where, timeout=timeout)

    def stop(self) -> None:
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
