"""The stdio facade's first answer, as a host gets it: written before anything heavy is loaded (the
MCP SDK and pydantic, trio, ZeroMQ, the HTTP stack), then the SDK takes over the same connection.

``python -X importtime`` says, on stderr, every module as it is loaded; the facade says, on stderr
too (``--log-level debug``), when it has answered. The request is in the facade's stdin before the
facade starts, as a host's is by the time a facade looks (a host writes ``initialize`` as soon as it
has started its server), so what the log shows before the answer is exactly what the way to it
loads. No timing is asserted: only what is loaded, and in which order."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

import pytest

from tests.e2e.facade import HOST_TIMEOUT, REPO, jsonrpc_line
from tests.e2e.harness import STOP_TIMEOUT, SupervisorProcess, stdio_test_server

pytestmark = pytest.mark.e2e

HEAVY: Final = frozenset(
    {
        "mcp",  # the SDK (and below: what it loads)
        "mcp_types",
        "pydantic",
        "pydantic_core",
        "anyio",
        "trio",
        "zmq",
        "httpx",
        "httpx2",
        "httpcore",
        "httpcore2",
        "starlette",
        "sse_starlette",
        "uvicorn",
        "jsonschema",
        "opentelemetry",
    }
)
"""Top-level packages the first answer must not wait for."""

MODERN_META: Final = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture(scope="module")
def sup(start_module_supervisor: Callable[..., SupervisorProcess]) -> SupervisorProcess:
    return start_module_supervisor({"t": stdio_test_server()})


def conversation(era: str) -> tuple[bytes, bytes]:
    """The host's first request (id 0), and what it sends once answered: a listing (id 1)."""
    if era == "handshake":
        init = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        }
        first = jsonrpc_line({"id": 0, "method": "initialize", "params": init})
        return first, jsonrpc_line({"method": "notifications/initialized"}) + jsonrpc_line(
            {"id": 1, "method": "tools/list"}
        )
    first = jsonrpc_line({"id": 0, "method": "server/discover", "params": {"_meta": MODERN_META}})
    return first, jsonrpc_line({"id": 1, "method": "tools/list", "params": {"_meta": MODERN_META}})


def lines_of(pipe: IO[bytes]) -> tuple[queue.Queue[bytes], threading.Thread]:
    """The lines of ``pipe`` as they come, read (and then closed) by a thread; b"" at the end."""
    lines: queue.Queue[bytes] = queue.Queue()

    def read() -> None:
        with pipe:
            for got in pipe:
                lines.put(got)
        lines.put(b"")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return lines, reader


def answer_to(lines: queue.Queue[bytes], request_id: int) -> dict[str, Any]:
    """The answer with ``request_id`` (notifications meanwhile are skipped), within ``HOST_TIMEOUT``."""
    while True:
        got = lines.get(timeout=HOST_TIMEOUT)
        assert got, "the facade closed stdout"
        message: dict[str, Any] = json.loads(got)
        if message.get("id") == request_id:
            return message


def imported(stderr: list[str]) -> list[str]:
    """The modules that ``-X importtime`` lines name, in the order they were loaded."""
    rows = (row.split("|") for row in stderr if row.startswith("import time:"))
    return [cells[2].strip() for cells in rows if len(cells) == 3 and cells[1].strip().isdecimal()]


@pytest.mark.parametrize("era", ["handshake", "2026-07-28"])
def test_the_first_answer_is_written_before_the_sdk_is_loaded_and_the_sdk_serves_on(
    sup: SupervisorProcess, tmp_path: Path, era: str
) -> None:
    first, then = conversation(era)
    method = json.loads(first)["method"]
    stdin, host_end = os.pipe()
    os.write(host_end, first)  # in the pipe before the facade starts
    stderr_path = tmp_path / "facade.stderr"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "supervisor", "mcp", "--endpoint", sup.endpoint,
             "--log-level", "debug"],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=stderr,
            cwd=REPO,
        )  # fmt: skip
    os.close(stdin)
    assert process.stdout is not None
    lines, reader = lines_of(process.stdout)
    try:
        answer = answer_to(lines, 0)
        assert "result" in answer, answer
        os.write(host_end, then)
        listing = answer_to(lines, 1)
        assert "mcp_t_echo" in {tool["name"] for tool in listing["result"]["tools"]}
    finally:
        os.close(host_end)  # the host goes away: the facade exits
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
            pytest.fail(f"the facade did not exit within {STOP_TIMEOUT} s of its host going away")
        reader.join(STOP_TIMEOUT)
    log = stderr_path.read_text(errors="replace").splitlines()
    said = f"answered {method} (id 0) before loading the SDK"
    answered_at = next((i for i, row in enumerate(log) if said in row), None)
    assert answered_at is not None, "\n".join(log[-40:])
    before, after = imported(log[:answered_at]), imported(log[answered_at:])
    heavy = sorted({name for name in before if name.split(".")[0] in HEAVY})
    assert not heavy, f"loaded before the first answer: {heavy}"
    assert "supervisor.facade.handshake" in before and "mcp" in after  # the log was read right
    assert f"the SDK answers {method} as the facade did" in "\n".join(log)
