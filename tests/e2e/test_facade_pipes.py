"""The stdio facade against hosts that misuse its pipes: one that never reads what it is sent, and one
that goes away with calls in flight. Real processes: a supervisor running the test server, and
``mcp-supervisor mcp`` spoken to by hand over raw pipes."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from tests.e2e.facade import REPO, facade_argv, jsonrpc_line
from tests.e2e.harness import STOP_TIMEOUT, SupervisorProcess, poll, rss_kb, stdio_test_server

pytestmark = pytest.mark.e2e

PROTOCOL = "2025-11-25"
FLOOD = 5_000  # requests from a host that never reads
ECHO = "x" * 20_000  # each answer some 20 kB: 100 MB in all, were they all kept
GROWTH_LIMIT_MB = 60  # what the facade may grow by meanwhile (bounded, not by the flood)
STALL = 3.0  # seconds without a line written: the host's writes are held back


@pytest.fixture(scope="module")
def sup(start_module_supervisor: Callable[..., SupervisorProcess]) -> SupervisorProcess:
    return start_module_supervisor({"t": stdio_test_server(TEST_SERVER_STATE_DIR="{state}")})


def start_facade(sup: SupervisorProcess, stderr: IO[bytes]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        facade_argv(sup.endpoint, "mcp", "--log-level", "info"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        cwd=REPO,
    )
    assert process.stdin is not None and process.stdout is not None
    init = {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
    process.stdin.write(jsonrpc_line({"id": 0, "method": "initialize", "params": init}))
    process.stdin.write(jsonrpc_line({"method": "notifications/initialized"}))
    process.stdin.flush()
    assert json.loads(process.stdout.readline())["id"] == 0  # answered before the SDK is loaded ...
    process.stdin.write(jsonrpc_line({"id": "up", "method": "tools/list"}))
    process.stdin.flush()
    assert json.loads(process.stdout.readline())["id"] == "up"  # ... and this by the SDK: all loaded
    return process


def stop_facade(process: subprocess.Popen[bytes]) -> int:
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            pipe.close()
    try:
        return process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
        pytest.fail(f"the facade did not exit within {STOP_TIMEOUT} s of its host going away")


def test_a_host_that_never_reads_holds_the_facade_to_bounded_memory(
    sup: SupervisorProcess, tmp_path: Path
) -> None:
    """5,000 calls whose answers are never read: the facade stops reading once its answers back up,
    so the host's writes wait (as on any pipe) and the facade's memory stays bounded; once the host
    reads again, every call is answered."""
    with (tmp_path / "facade.stderr").open("wb") as stderr:
        process = start_facade(sup, stderr)
    assert process.stdin is not None and process.stdout is not None
    before = rss_kb(process.pid)
    written = [0]

    def flood() -> None:
        try:
            for i in range(1, FLOOD + 1):
                call = {"name": "mcp_t_echo", "arguments": {"text": ECHO}}
                process.stdin.write(jsonrpc_line({"id": i, "method": "tools/call", "params": call}))  # type: ignore[union-attr]
                written[0] = i
            process.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, ValueError):
            pass

    writer = threading.Thread(target=flood, daemon=True)
    writer.start()
    try:
        last, since = -1, time.monotonic()
        deadline = time.monotonic() + 120
        while writer.is_alive() and time.monotonic() < deadline:  # until the writes stall (or end)
            if written[0] != last:
                last, since = written[0], time.monotonic()
            elif time.monotonic() - since > STALL:
                break
            time.sleep(0.2)  # sampling a counter, not waiting for a state
        grown_mb = (rss_kb(process.pid) - before) / 1024
        assert written[0] < FLOOD, "the facade read every request although nobody read an answer"
        assert grown_mb < GROWTH_LIMIT_MB, f"the facade grew by {grown_mb:.0f} MB"
        answered: set[int] = set()
        deadline = time.monotonic() + 180
        while len(answered) < FLOOD and time.monotonic() < deadline:  # the host reads again
            message = json.loads(process.stdout.readline())
            if "id" in message:
                assert message.get("result", {}).get("isError") is False, message
                answered.add(message["id"])
        assert answered == set(range(1, FLOOD + 1))
        writer.join(10)
        assert process.poll() is None
    finally:
        stop_facade(process)


def test_a_host_that_goes_away_with_calls_in_flight_leaves_a_clean_exit(
    sup: SupervisorProcess, tmp_path: Path
) -> None:
    stderr_path = tmp_path / "facade.stderr"
    with stderr_path.open("wb") as stderr:
        process = start_facade(sup, stderr)
    assert process.stdin is not None
    tags = [f"gone-{i}" for i in range(4)]
    for i, tag in enumerate(tags, 1):
        call = {"name": "mcp_t_slow", "arguments": {"seconds": 30, "tag": tag}}
        process.stdin.write(jsonrpc_line({"id": i, "method": "tools/call", "params": call}))
    process.stdin.flush()
    poll("the calls to start", lambda: all((sup.state_dir / f"{t}.started").exists() for t in tags), 30)
    assert stop_facade(process) == 0  # stdin and stdout closed: the host is gone
    said = stderr_path.read_text(errors="replace")
    assert "Traceback" not in said and "BrokenResourceError" not in said, said
    assert "the host closed the connection" in said
    poll("the servers to be told", lambda: all((sup.state_dir / f"{t}.cancelled").exists() for t in tags), 30)
