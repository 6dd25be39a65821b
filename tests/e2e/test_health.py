"""``/healthz`` and ``/readyz`` of a real supervisor's HTTP listener: live from the start, ready only
once every server's first start is over (a server that failed does not hold it back), and not ready
while draining at a stop."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.harness import SupervisorProcess, poll, stdio_test_server
from tests.e2e.web import listening, request

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
METRICS = {"metrics": "127.0.0.1:0"}
SLOW_START = 15  # seconds the slow server sleeps before serving: the window in which only it starts
# (wide: on a machine busy with other work, the quick server may take seconds to start)


def probe(port: int, path: str) -> tuple[int, bytes]:
    status, _, body = request(port, "GET", path)
    return status, body


def unready(port: int) -> dict[str, Any] | None:
    status, body = probe(port, "/readyz")
    if status == 200:
        assert body == b"ok\n"
        return None
    assert status == 503 and body.endswith(b"\n") and body.count(b"\n") == 1, (status, body)
    answer: dict[str, Any] = json.loads(body)
    return answer


def test_ready_once_every_first_start_is_over(start_supervisor: Start) -> None:
    servers = {
        "quick": stdio_test_server(),
        "slow": stdio_test_server(TEST_SERVER_INIT_DELAY=SLOW_START),
        "broken": {"command": "/nonexistent/mcp-server"},  # fails: no reason to hold readiness back
    }
    sup = start_supervisor(servers, settings=METRICS, wait=False)
    port = listening(sup)
    assert probe(port, "/healthz") == (200, b"ok\n")

    def slow_alone() -> dict[str, Any] | None:
        answer = unready(port)
        return answer if answer is not None and answer.get("starting") == ["slow"] else None

    answer = poll("/readyz to name only the slow server", slow_alone, SLOW_START)
    assert answer == {"ready": False, "reason": "servers starting", "starting": ["slow"]}
    assert sup.status()["slow"].state == "starting"
    assert probe(port, "/healthz") == (200, b"ok\n")

    poll("/readyz to answer 200", lambda: unready(port) is None, SLOW_START + 30)
    states = {name: row.state for name, row in sup.status().items()}
    assert states["quick"] == states["slow"] == "ready" and states["broken"] in ("failed", "restarting")
    assert probe(port, "/healthz") == (200, b"ok\n")


def test_not_ready_while_draining_and_live_until_it_stops(start_supervisor: Start) -> None:
    servers = {"test": stdio_test_server(TEST_SERVER_STATE_DIR="{state}")}
    sup = start_supervisor(servers, settings=METRICS | {"shutdownGrace": 10})
    port = listening(sup)
    poll("/readyz to answer 200", lambda: unready(port) is None, 10)  # ready, then its tools settle
    arguments = {"seconds": 3, "tag": "drained"}
    call = threading.Thread(
        target=lambda: sup.client.call_tool("mcp_test_slow", arguments, timeout=30), daemon=True
    )
    call.start()
    poll("the slow call to reach its server", (sup.state_dir / "drained.started").exists, 20)
    sup.process.send_signal(signal.SIGTERM)
    poll(
        "/readyz to say draining",
        lambda: unready(port) == {"ready": False, "reason": "draining: stopping"},
        10,
    )
    assert probe(port, "/healthz") == (200, b"ok\n")
    call.join(30)
    assert sup.process.wait(30) == 0
