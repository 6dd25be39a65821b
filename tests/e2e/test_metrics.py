"""Prometheus metrics and the HTTP listener with a real supervisor, workers and servers: exact call
counts by outcome, latency, calls in flight, memory, restarts, reloads; start errors; and hostile
HTTP clients, after each of which the metrics still answer and a tool call still works."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from supervisor.client.errors import ServerError, SupervisorError, ToolExecutionError, ToolTimeoutError
from tests.e2e.harness import SupervisorProcess, poll, stdio_test_server
from tests.e2e.web import (
    CONTROL,
    listening,
    raw_exchange,
    request,
    request_json,
    scrape,
    servers_in,
    value,
)

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
METRICS = {"metrics": "127.0.0.1:0"}  # any free port; the log names it
CALLS = "mcp_supervisor_calls_total"
COUNT = "mcp_supervisor_call_duration_seconds_count"
RUN_TIMEOUT = 60  # seconds for `run` to fail at start


@pytest.fixture(scope="module")
def observed(start_module_supervisor: Start) -> tuple[SupervisorProcess, int]:
    """A supervisor with the listener on (controls off) and two test servers."""
    state = {"TEST_SERVER_STATE_DIR": "{state}"}
    servers = {"test": stdio_test_server(**state), "other": stdio_test_server(**state)}
    sup = start_module_supervisor(servers, settings=METRICS)
    return sup, listening(sup)


@pytest.fixture(scope="module")
def controlled(start_module_supervisor: Start) -> tuple[SupervisorProcess, int]:
    """A supervisor with the controls on, its listener asked for by ``run --metrics``."""
    servers = {"test": stdio_test_server(), "spare": stdio_test_server()}
    sup = start_module_supervisor(
        servers, settings={"statusControls": True}, args=["--metrics", "127.0.0.1:0"]
    )
    return sup, listening(sup)


def assert_unharmed(sup: SupervisorProcess, port: int) -> None:
    """The supervisor runs, its metrics answer, and a tool call through the ZeroMQ client works."""
    assert sup.process.poll() is None, sup.log
    assert value(scrape(port), "mcp_supervisor_server_state", server="test", state="ready") == 1
    assert sup.client.call_tool("mcp_test_echo", {"text": "unharmed"}, timeout=10).text == "unharmed"


class SlowCall(threading.Thread):
    def __init__(self, sup: SupervisorProcess, tag: str, seconds: float) -> None:
        super().__init__(daemon=True)
        self.sup, self.tag, self.seconds = sup, tag, seconds
        self.text: str | None = None
        self.start()
        poll(f"the call {tag!r} to reach its server", (sup.state_dir / f"{tag}.started").exists, 20)

    def run(self) -> None:
        arguments = {"seconds": self.seconds, "tag": self.tag}
        self.text = self.sup.client.call_tool("mcp_test_slow", arguments, timeout=30).text

    def result(self) -> str | None:
        self.join(40)
        assert not self.is_alive()
        return self.text


# --- what the metrics say --------------------------------------------------------------------


def test_calls_are_counted_exactly_by_outcome_and_timed(observed: tuple[SupervisorProcess, int]) -> None:
    sup, port = observed
    before = scrape(port)
    for i in range(7):
        assert sup.client.call_tool("mcp_test_echo", {"text": str(i)}).text == str(i)
    for _ in range(2):
        with pytest.raises(ToolExecutionError):
            sup.client.call_tool("mcp_test_fail", {"message": "no"})
    with pytest.raises(ServerError):
        sup.client.call_tool("mcp_test_raise_error", {"message": "broken"})
    with pytest.raises(ToolTimeoutError):
        sup.client.call_tool("mcp_test_slow", {"seconds": 10, "tag": "late"}, timeout=0.3)
    with pytest.raises(SupervisorError):
        sup.client.call_tool("mcp_nope_echo", {"text": "x"})  # not routed: no server to count it
    after = scrape(port)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta(CALLS, server="test", code="ok") == 7
    assert delta(CALLS, server="test", code="TOOL_ERROR") == 2
    assert delta(CALLS, server="test", code="SERVER_ERROR") == 1
    assert delta(CALLS, server="test", code="TIMEOUT") == 1
    assert delta(COUNT, server="test") == 11
    assert delta("mcp_supervisor_call_duration_seconds_sum", server="test") >= 0.3
    bucket = "mcp_supervisor_call_duration_seconds_bucket"
    assert delta(bucket, server="test", le="+Inf") == 11
    assert delta(bucket, server="test", le="0.2") <= 10  # the timed-out call took longer
    assert delta(COUNT, server="other") == 0
    assert delta("mcp_supervisor_front_messages_received_total") >= 12
    assert servers_in(after) == {"test", "other"}
    labels = {key for _, pairs in after for key, _ in pairs}
    assert labels == {"server", "state", "code", "le"}  # never tools, arguments or clients


def test_calls_in_flight_are_seen_during_a_slow_call(observed: tuple[SupervisorProcess, int]) -> None:
    sup, port = observed
    call = SlowCall(sup, "in-flight", 2)
    assert value(scrape(port), "mcp_supervisor_calls_in_flight", server="test") == 1
    assert value(scrape(port), "mcp_supervisor_calls_in_flight", server="other") == 0
    assert call.result() == "done in-flight"
    assert value(scrape(port), "mcp_supervisor_calls_in_flight", server="test") == 0


def test_memory_of_workers_and_servers_is_read(observed: tuple[SupervisorProcess, int]) -> None:
    _, port = observed
    series = scrape(port)
    for server in ("test", "other"):
        assert value(series, "mcp_supervisor_worker_rss_bytes", server=server) > 1_000_000
        assert value(series, "mcp_supervisor_server_rss_bytes", server=server) > 1_000_000


def test_registry_and_state_figures_match_the_client(observed: tuple[SupervisorProcess, int]) -> None:
    sup, port = observed
    series = scrape(port)
    listing = sup.client.tool_list()
    assert value(series, "mcp_supervisor_registry_tools") == len(listing.tools)
    assert value(series, "mcp_supervisor_registry_version") == listing.version
    for row in sup.status().values():
        assert value(series, "mcp_supervisor_server_tools", server=row.server) == row.tools
        assert value(series, "mcp_supervisor_server_state", server=row.server, state="ready") == 1
        assert value(series, "mcp_supervisor_server_state", server=row.server, state="failed") == 0
    assert value(series, "mcp_supervisor_overloaded_total") == 0


def test_the_status_json_has_every_row_and_the_last_minute(observed: tuple[SupervisorProcess, int]) -> None:
    sup, port = observed
    sup.client.call_tool("mcp_other_echo", {"text": "x"})
    status, body = request_json(port, "GET", "/api/status")
    assert status == 200
    assert [row["server"] for row in body["servers"]] == ["test", "other"]
    assert body["controls"] is False
    other = body["calls"]["other"]
    assert other["per_second"] > 0 and 0 < other["p50"] <= other["p99"]


def test_a_killed_server_restarts_and_the_metrics_show_it(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server()}, settings=METRICS)
    port = listening(sup)
    pid = sup.status()["test"].server_pid
    assert pid is not None and value(scrape(port), "mcp_supervisor_server_restarts", server="test") == 0
    os.kill(pid, signal.SIGKILL)
    seen: set[str] = set()

    def restarted() -> bool:
        series = scrape(port)
        state = next(
            s
            for s in ("ready", "starting", "restarting", "failed")
            if value(series, "mcp_supervisor_server_state", server="test", state=s)
        )
        seen.add(state)
        return state == "ready" and value(series, "mcp_supervisor_server_restarts", server="test") == 1

    poll("the restart to show in the metrics", restarted, 30, interval=0.02)
    assert seen & {"starting", "restarting"}, seen


def test_a_server_a_reload_removes_leaves_the_metrics(start_supervisor: Start) -> None:
    servers = {"kept": stdio_test_server(), "gone": stdio_test_server()}
    sup = start_supervisor(servers, settings=METRICS)
    port = listening(sup)
    sup.client.call_tool("mcp_gone_echo", {"text": "x"})
    assert servers_in(scrape(port)) == {"kept", "gone"}
    config = {"supervisor": METRICS, "mcpServers": {"kept": servers["kept"]}}
    sup.config.write_text(json.dumps(config))
    assert sup.client.reload().removed == ["gone"]
    assert servers_in(scrape(port)) == {"kept"}


def test_the_listener_answers_before_the_servers_are_ready(start_supervisor: Start) -> None:
    sup = start_supervisor(
        {"late": stdio_test_server(TEST_SERVER_INIT_DELAY=5)}, settings=METRICS, wait=False
    )
    port = listening(sup)
    assert value(scrape(port), "mcp_supervisor_server_state", server="late", state="starting") == 1
    sup.wait_states()


# --- start errors ------------------------------------------------------------------------------


def _run(
    tmp_path: Path, *args: str, settings: dict[str, object] | None = None
) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {}, **({"supervisor": settings} if settings else {})}))
    command = [
        sys.executable,
        "-m",
        "supervisor",
        "run",
        str(config),
        "--endpoint",
        f"ipc://{tmp_path}/s.sock",
    ]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        env={**os.environ, "XDG_RUNTIME_DIR": str(tmp_path)},
    )


def test_a_port_in_use_is_a_start_error_not_a_traceback(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _run(tmp_path, "--metrics", f"127.0.0.1:{port}")
    assert done.returncode == 1, done.stderr
    assert f"cannot listen for metrics on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "settings", "says"),
    [
        (["--metrics", "abc"], None, "--metrics: 'abc' is not HOST:PORT"),
        (["--metrics", "127.0.0.1:99999"], None, "--metrics: port 99999 is out of range"),
        ([], {"metrics": "abc"}, "\"supervisor\": field 'metrics': 'abc' is not HOST:PORT"),
    ],
)
def test_a_bad_address_is_a_usage_error_naming_where(
    tmp_path: Path, args: list[str], settings: dict[str, object] | None, says: str
) -> None:
    done = _run(tmp_path, *args, settings=settings)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr


# --- hostile HTTP clients ---------------------------------------------------------------------


def test_random_bytes_are_400(observed: tuple[SupervisorProcess, int]) -> None:
    sup, port = observed
    noise = random.Random(7).randbytes(4096)
    answer = raw_exchange(port, noise)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 400 "), answer[:80]
    assert_unharmed(sup, port)


def test_a_megabyte_header_harms_nothing(observed: tuple[SupervisorProcess, int]) -> None:
    sup, port = observed
    answer = raw_exchange(
        port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 1_000_000 + b"\r\n\r\n"
    )
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 "), answer[:80]  # or reset while sending
    assert_unharmed(sup, port)


def test_a_slowloris_is_cut_off_and_never_blocks_others(observed: tuple[SupervisorProcess, int]) -> None:
    sup, port = observed
    with socket.create_connection(("127.0.0.1", port), timeout=20) as slow:
        slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: ")  # never finished
        assert_unharmed(sup, port)  # meanwhile
        started = time.monotonic()
        answer = b""
        while chunk := slow.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert time.monotonic() - started < 15
    assert_unharmed(sup, port)


def test_two_hundred_connections_at_once_harm_nothing(observed: tuple[SupervisorProcess, int]) -> None:
    sup, port = observed
    sockets = [socket.create_connection(("127.0.0.1", port), timeout=20) for _ in range(200)]
    statuses: list[str] = []
    try:
        for sock in sockets:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused already
                head = f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
                sock.sendall(head.encode())
        for sock in sockets:
            answer = b""
            try:
                while chunk := sock.recv(65536):
                    answer += chunk
            except ConnectionResetError:
                pass
            statuses.append(answer[9:12].decode() or "reset")
    finally:
        for sock in sockets:
            sock.close()
    assert set(statuses) <= {"200", "503", "reset"}, set(statuses)
    assert statuses.count("200") >= 1
    assert_unharmed(sup, port)


def test_a_path_that_is_not_utf8_is_400(observed: tuple[SupervisorProcess, int]) -> None:
    sup, port = observed
    assert raw_exchange(port, b"GET /\xff\xfe\xfd HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert request(port, "GET", "/%ff%fe")[0] == 404
    assert_unharmed(sup, port)


def test_a_control_when_the_controls_are_off_is_403_naming_the_setting(
    observed: tuple[SupervisorProcess, int],
) -> None:
    sup, port = observed
    status, body = request_json(port, "POST", "/api/servers/test/stop", CONTROL)
    assert status == 403 and "statusControls" in body["error"]
    assert sup.status()["test"].state == "ready"
    assert_unharmed(sup, port)


def test_every_path_refuses_a_host_that_does_not_name_the_listener(
    observed: tuple[SupervisorProcess, int],
) -> None:
    """DNS rebinding: a page on another origin whose name now resolves to 127.0.0.1 reads nothing
    (server names, pids and stderr are in the status)."""
    sup, port = observed
    for path in ("/", "/metrics", "/api/status", "/events"):
        status, _, body = request(port, "GET", path, {"Host": f"evil.example:{port}"})
        assert status == 421 and b"does not name this listener" in body, path
        if path != "/events":  # a stream: its 200 never ends
            assert request(port, "GET", path, {"Host": f"localhost:{port}"})[0] == 200, path
    assert_unharmed(sup, port)


# --- the controls ------------------------------------------------------------------------------


def test_a_control_from_another_origin_or_host_is_refused(controlled: tuple[SupervisorProcess, int]) -> None:
    sup, port = controlled
    foreign = request_json(
        port, "POST", "/api/servers/test/stop", {**CONTROL, "Origin": "http://evil.example"}
    )
    assert foreign[0] == 403 and "cross-origin" in foreign[1]["error"]
    rebound = request_json(
        port, "POST", "/api/servers/test/stop", {**CONTROL, "Host": f"evil.example:{port}"}
    )
    assert rebound[0] == 421 and "does not name this listener" in rebound[1]["error"]
    bare = request_json(port, "POST", "/api/servers/test/stop")
    assert bare[0] == 403 and "X-Requested-By" in bare[1]["error"]
    assert sup.status()["test"].state == "ready"
    assert_unharmed(sup, port)


def test_a_control_of_an_unknown_server_is_404_naming_it(controlled: tuple[SupervisorProcess, int]) -> None:
    sup, port = controlled
    status, body = request_json(port, "POST", "/api/servers/nobody/restart", CONTROL)
    assert status == 404 and "no server named 'nobody'" in body["error"]
    status, body = request_json(port, "POST", "/api/servers/%ff/restart", CONTROL)
    assert status == 400 and "UTF-8" in body["error"]
    assert_unharmed(sup, port)


def test_the_controls_stop_and_start_a_server_as_the_cli_does(
    controlled: tuple[SupervisorProcess, int],
) -> None:
    sup, port = controlled
    origin = {**CONTROL, "Origin": f"http://127.0.0.1:{port}"}
    assert request_json(port, "POST", "/api/servers/spare/stop", origin) == (
        200,
        {"ok": True, "server": "spare", "action": "stop"},
    )
    sup.wait_states(spare="stopped")
    assert "operator stop of server 'spare'" in sup.log
    assert request_json(port, "POST", "/api/servers/spare/start", CONTROL)[0] == 200
    sup.wait_states(spare="ready")
    assert_unharmed(sup, port)
