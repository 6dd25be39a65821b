"""The official MCP Inspector (its command-line mode) as a host of the stdio facade: a client nobody
here wrote lists and calls the registry's tools through ``mcp-supervisor mcp``.

The Inspector (``@modelcontextprotocol/inspector`` in tests/npm) is run with the project's Node, not
through npx. Each run starts its own facade as a stdio server, does one request, prints one JSON
object (``--format json``): ``{"result": ...}`` on stdout and, when it fails, ``{"error": {"code",
"message"}}`` on stderr, and exits 0, 5 (the tool's result has ``isError``, or no such tool), or 1
(any other failure, e.g. a JSON-RPC error). ``--tool-arg key=value`` values are parsed as JSON when
they parse (``a=2`` is the number 2, ``text=123`` the number 123), else passed as strings. The
Inspector gives a stdio server only a minimal environment (HOME, PATH, ...) plus its ``-e KEY=VALUE``
values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import NODE, NPM, SupervisorProcess, alive, npm_package, poll, stdio_test_server

pytestmark = pytest.mark.e2e

# The package's `inspector` bin: a launcher that runs the CLI client in-process for --cli.
INSPECTOR = (
    NPM
    / "node_modules"
    / "@modelcontextprotocol"
    / "inspector"
    / "clients"
    / "launcher"
    / "build"
    / "index.js"
)
INSPECTOR_TIMEOUT = 60  # seconds for one Inspector run (a run takes about 1 s)
FACADE_EXIT_TIMEOUT = 10.0  # seconds for a facade to exit once its Inspector has gone


@dataclass
class InspectorRun:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str  # the Inspector's error envelope, and the facade's log (the Inspector passes it through)

    @property
    def result(self) -> dict[str, Any]:
        """The request's result (stdout: one JSON object ``{"result": ...}``)."""
        output = json.loads(self.stdout)
        assert isinstance(output, dict) and isinstance(output.get("result"), dict), self
        return output["result"]

    @property
    def error(self) -> dict[str, Any]:
        """The Inspector's error envelope (one JSON line ``{"error": {...}}`` among stderr's lines)."""
        for line in self.stderr.splitlines():
            if line.startswith("{"):
                envelope = json.loads(line)
                if isinstance(envelope, dict) and isinstance(envelope.get("error"), dict):
                    return envelope["error"]
        raise AssertionError(f"no error envelope on stderr: {self}")

    def __str__(self) -> str:
        return f"{self.command} exited {self.returncode}\nstdout: {self.stdout}\nstderr: {self.stderr}"


class Inspector:
    """Runs the Inspector's CLI against a facade for the supervisor at ``endpoint``."""

    def __init__(self, tmp: Path, endpoint: str) -> None:
        self.entry = npm_package(INSPECTOR)
        self.endpoint = endpoint
        self.home = tmp / "inspector-home"  # the Inspector's catalog and secrets default to ~/.mcp-inspector
        self.home.mkdir(parents=True, exist_ok=True)

    def run(self, *request: str, endpoint_in_env: bool = False) -> InspectorRun:
        """One request (``--method ...`` and its options); the facade finds the supervisor through
        ``--endpoint``, or with ``endpoint_in_env`` through MCP_SUPERVISOR_ENDPOINT given by ``-e``."""
        facade = [sys.executable, "-m", "supervisor", "mcp", "--log-level", "debug"]
        server_env: list[str] = []
        if endpoint_in_env:
            server_env = ["-e", f"MCP_SUPERVISOR_ENDPOINT={self.endpoint}"]
        else:
            facade += ["--endpoint", self.endpoint]
        # Options before `--`, the server's command after it: the facade's own options stay its own.
        command = [
            str(NODE),
            str(self.entry),
            "--cli",
            "--format",
            "json",
            *server_env,
            *request,
            "--",
            *facade,
        ]
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=INSPECTOR_TIMEOUT,
            check=False,
            env={**os.environ, "HOME": str(self.home)},
        )
        return InspectorRun(command, done.returncode, done.stdout, done.stderr)


def facade_pids(endpoint: str) -> list[int]:
    """Live ``python -m supervisor mcp`` processes for ``endpoint`` (in their arguments or environment)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0") if endpoint.encode() not in argv else []
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if argv[1:4] != [b"-m", b"supervisor", b"mcp"]:
            continue
        if endpoint.encode() in argv or f"MCP_SUPERVISOR_ENDPOINT={endpoint}".encode() in environ:
            pids.append(int(proc.name))
    return [pid for pid in pids if alive(pid)]


def test_the_inspector_lists_and_calls_tools_through_the_facade(
    start_supervisor: Callable[..., SupervisorProcess], tmp_path: Path
) -> None:
    sup = start_supervisor({"t": stdio_test_server()})
    registry = {tool.name for tool in sup.client.list_tools()}
    inspector = Inspector(tmp_path, sup.endpoint)

    listed = inspector.run("--method", "tools/list")
    assert listed.returncode == 0, listed
    tools = {tool["name"]: tool for tool in listed.result["tools"]}
    assert set(tools) == registry, listed
    assert tools["mcp_t_echo"]["description"] == "Echo the text back."
    assert tools["mcp_t_echo"]["inputSchema"] == {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    assert tools["mcp_t_add"]["inputSchema"] == {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    }
    assert tools["mcp_t_add"]["outputSchema"] == {
        "type": "object",
        "properties": {"sum": {"type": "number"}},
        "required": ["sum"],
    }

    echoed = inspector.run("--method", "tools/call", "--tool-name", "mcp_t_echo", "--tool-arg", "text=hello")
    assert echoed.returncode == 0, echoed
    assert echoed.result["content"] == [{"type": "text", "text": "hello"}], echoed
    assert echoed.result["isError"] is False, echoed

    # The same through the environment the Inspector gives its server (-e), as a host config would.
    echoed = inspector.run(
        "--method",
        "tools/call",
        "--tool-name",
        "mcp_t_echo",
        "--tool-arg",
        "text=from env",
        endpoint_in_env=True,
    )
    assert echoed.returncode == 0, echoed
    assert echoed.result["content"] == [{"type": "text", "text": "from env"}], echoed

    added = inspector.run("--method", "tools/call", "--tool-name", "mcp_t_add", "--tool-arg", "a=2", "b=3")
    assert added.returncode == 0, added
    assert added.result["structuredContent"] == {"sum": 5}, added
    assert added.result["content"] == [{"type": "text", "text": "5"}], added
    assert added.result["isError"] is False, added

    failed = inspector.run(
        "--method", "tools/call", "--tool-name", "mcp_t_fail", "--tool-arg", "message=boom"
    )
    assert failed.returncode == 5, failed  # the Inspector's exit code for a result with isError
    assert failed.result["isError"] is True, failed
    assert failed.result["content"] == [{"type": "text", "text": "boom"}], failed
    assert failed.error["code"] == "tool_is_error", failed

    poll(
        "every facade to exit with its Inspector", lambda: not facade_pids(sup.endpoint), FACADE_EXIT_TIMEOUT
    )
    assert sup.status()["t"].state == "ready"


def test_the_inspector_reports_an_unknown_tool_and_bad_arguments(
    start_supervisor: Callable[..., SupervisorProcess], tmp_path: Path
) -> None:
    sup = start_supervisor({"t": stdio_test_server()})
    inspector = Inspector(tmp_path, sup.endpoint)

    # The Inspector looks the tool up in the facade's tools/list before it calls: no call is sent.
    unknown = inspector.run("--method", "tools/call", "--tool-name", "mcp_t_nope", "--tool-arg", "x=1")
    assert unknown.returncode != 0, unknown
    assert unknown.stdout == "", unknown
    assert unknown.error["code"] == "tool_not_found", unknown
    assert "mcp_t_nope" in unknown.error["message"], unknown

    # text=123 reaches the facade as the number 123: the supervisor's schema check refuses it, and
    # the host hears why (the facade answers bad arguments with a JSON-RPC error).
    bad = inspector.run("--method", "tools/call", "--tool-name", "mcp_t_echo", "--tool-arg", "text=123")
    assert bad.returncode != 0, bad
    assert "text: 123 is not of type 'string'" in bad.error["message"], bad

    poll(
        "every facade to exit with its Inspector", lambda: not facade_pids(sup.endpoint), FACADE_EXIT_TIMEOUT
    )
    assert sup.status()["t"].state == "ready"
