"""One trace per tool call, across every process it crosses: the agent's client span, the supervisor's
``route`` span, the worker's ``tools/call`` span (and the MCP SDK's span of its request to a remote
server), and the span of an MCP server that traces itself (``tests/servers/traced_server.py``), which
gets the context in ``_meta``.

The supervisor, its workers and the server export over OTLP/HTTP to a collector in this process
(``tests.otel.OtlpReceiver``); the test process is the agent, with an SDK provider that keeps its spans
in memory. With tracing off, the supervisor and workers export nothing and pass nothing on; a
traceparent that is not valid is ignored; spans still queued are exported when a worker or the
supervisor stops, and a collector that never answers does not hold the shutdown up.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest

from supervisor.client.errors import ServerError, UnknownToolError
from supervisor.protocol import CallResult, CallTool
from tests.e2e.harness import SupervisorProcess, accepting, free_port, poll, raw_client, stdio_test_server
from tests.otel import (
    KIND_CLIENT,
    KIND_SERVER,
    STATUS_ERROR,
    SUPERVISOR,
    TRACED_SERVER,
    WAIT,
    WORKER,
    OtlpReceiver,
    Received,
    exporting_to,
    otlp_receiver,
    sdk_provider,
    spans_of,
    traced_stdio,
)

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as collector:
        yield collector


@pytest.fixture(scope="module")
def traced_http(receiver: OtlpReceiver) -> Iterator[str]:
    """The traced server over streamable HTTP (the worker's requests go through the SDK); its URL."""
    port = free_port()
    env = {**os.environ, **exporting_to(receiver), "OTEL_SERVICE_NAME": "traced-http-server"}
    server = subprocess.Popen(
        [sys.executable, str(TRACED_SERVER), "--http", str(port)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        poll("the traced HTTP server to listen", lambda: server.poll() is not None or accepting(port), WAIT)
        assert server.poll() is None, f"the traced HTTP server exited with {server.returncode}"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.kill()
        server.wait(10)


@pytest.fixture(scope="module")
def traced(
    receiver: OtlpReceiver, traced_http: str, start_module_supervisor: Callable[..., SupervisorProcess]
) -> SupervisorProcess:
    """A supervisor with ``"tracing": true``; the traced server over stdio (``traced``) and over HTTP
    (``remote``). Started after the receiver and the HTTP server, so stopped before them."""
    return start_module_supervisor(
        {"traced": traced_stdio(receiver), "remote": {"url": traced_http}},
        env=exporting_to(receiver),
        settings={"tracing": True},
    )


def test_a_call_on_the_stdio_hot_path_is_one_trace_of_one_span_per_process(
    traced: SupervisorProcess, receiver: OtlpReceiver
) -> None:
    with sdk_provider() as client_spans:
        assert traced.client.call_tool("mcp_traced_echo", {"text": "hi"}, timeout=10).text == "hi"
    [call] = client_spans.get_finished_spans()
    trace_id = f"{call.context.trace_id:032x}"
    found = spans_of(
        receiver,
        trace_id,
        (SUPERVISOR, "route mcp_traced_echo"),
        (WORKER, "tools/call echo"),
        ("traced-server", "tools/call echo"),
        ("traced-server", "echo work"),
    )
    route = found[SUPERVISOR, "route mcp_traced_echo"]
    serving = found[WORKER, "tools/call echo"]
    handling = found["traced-server", "tools/call echo"]
    assert route.parent_id == f"{call.context.span_id:016x}"
    assert serving.parent_id == route.span_id
    assert handling.parent_id == serving.span_id  # the worker's one span is what the server joins
    assert found["traced-server", "echo work"].parent_id == handling.span_id
    assert (route.kind, serving.kind, handling.kind) == (KIND_SERVER, KIND_SERVER, KIND_SERVER)
    assert route.scope == serving.scope == "mcp_supervisor"
    assert [span.service for span in receiver.received() if span.trace_id == trace_id].count(WORKER) == 1
    assert route.attributes["mcp.server"] == "traced" and route.attributes["mcp.tool"] == "echo"
    assert route.attributes["gen_ai.tool.name"] == "mcp_traced_echo"
    assert route.attributes["mcp_supervisor.outcome"] == serving.attributes["mcp_supervisor.outcome"] == "ok"
    assert serving.resource["mcp_supervisor.server"] == "traced"
    assert route.resource["process.pid"] == traced.process.pid


def test_a_call_to_a_remote_server_nests_the_sdks_own_span_in_the_workers(
    traced: SupervisorProcess, receiver: OtlpReceiver
) -> None:
    with sdk_provider() as client_spans:
        assert traced.client.call_tool("mcp_remote_echo", {"text": "hi"}, timeout=10).text == "hi"
    [call] = client_spans.get_finished_spans()
    found = spans_of(
        receiver,
        f"{call.context.trace_id:032x}",
        (SUPERVISOR, "route mcp_remote_echo"),
        (WORKER, "tools/call echo"),
        (WORKER, "MCP send tools/call echo"),
        ("traced-http-server", "tools/call echo"),
    )
    route = found[SUPERVISOR, "route mcp_remote_echo"]
    serving = found[WORKER, "tools/call echo"]
    sending = found[WORKER, "MCP send tools/call echo"]
    handling = found["traced-http-server", "tools/call echo"]
    assert route.parent_id == f"{call.context.span_id:016x}"
    assert serving.parent_id == route.span_id
    assert sending.parent_id == serving.span_id and sending.kind == KIND_CLIENT
    assert sending.scope == "mcp-python-sdk"
    assert handling.parent_id == sending.span_id


def test_a_failed_call_is_an_error_with_its_code_in_every_span(
    traced: SupervisorProcess, receiver: OtlpReceiver
) -> None:
    with sdk_provider() as client_spans, pytest.raises(ServerError, match="kaput"):
        traced.client.call_tool("mcp_traced_raise_error", {"message": "kaput"}, timeout=10)
    [call] = client_spans.get_finished_spans()
    assert call.attributes is not None and call.attributes["error.type"] == "SERVER_ERROR"
    found = spans_of(
        receiver,
        f"{call.context.trace_id:032x}",
        (SUPERVISOR, "route mcp_traced_raise_error"),
        (WORKER, "tools/call raise_error"),
        ("traced-server", "tools/call raise_error"),
    )
    for span in (found[SUPERVISOR, "route mcp_traced_raise_error"], found[WORKER, "tools/call raise_error"]):
        assert span.status == STATUS_ERROR and "kaput" in span.status_message
        assert span.attributes["mcp_supervisor.outcome"] == span.attributes["error.type"] == "SERVER_ERROR"
    assert found["traced-server", "tools/call raise_error"].status == STATUS_ERROR


def test_a_call_refused_by_the_supervisor_is_one_error_span_there(
    traced: SupervisorProcess, receiver: OtlpReceiver
) -> None:
    with sdk_provider() as client_spans, pytest.raises(UnknownToolError):
        traced.client.call_tool("mcp_traced_nope", {}, timeout=10)
    [call] = client_spans.get_finished_spans()
    trace_id = f"{call.context.trace_id:032x}"
    found = spans_of(receiver, trace_id, (SUPERVISOR, "route mcp_traced_nope"))
    route = found[SUPERVISOR, "route mcp_traced_nope"]
    assert route.status == STATUS_ERROR and route.attributes["mcp_supervisor.outcome"] == "UNKNOWN_TOOL"
    assert list(found) == [(SUPERVISOR, "route mcp_traced_nope")]  # it went no further


GARBAGE = [
    "garbage",
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" + "0" * 100_000,
]


def test_a_garbage_trace_context_on_the_wire_is_ignored_and_the_call_succeeds(
    traced: SupervisorProcess, receiver: OtlpReceiver
) -> None:
    before = {span.span_id for span in receiver.received()}
    with raw_client(traced.endpoint) as raw:
        for id, traceparent in enumerate(GARBAGE, 1):
            arguments = msgspec.Raw(msgspec.msgpack.encode({"text": "still fine"}))
            raw.send(CallTool(id=id, name="mcp_traced_echo", arguments=arguments, traceparent=traceparent))
            reply = raw.recv()
            assert isinstance(reply, CallResult) and reply.id == id

    def new_roots(spans: list[Received]) -> list[Received]:
        return [s for s in spans if s.span_id not in before and s.name == "route mcp_traced_echo"]

    receiver.wait_for("a route span per call", lambda spans: len(new_roots(spans)) == len(GARBAGE), WAIT)
    roots = new_roots(receiver.received())
    assert all(route.parent_id == "" for route in roots)  # each call began a trace of its own
    assert len({route.trace_id for route in roots}) == len(GARBAGE)
    assert "4bf92f3577b34da6a3ce929d0e0e4736" not in {route.trace_id for route in roots}
    for route in roots:  # and that trace still reaches the server
        spans_of(receiver, route.trace_id, ("traced-server", "tools/call echo"))
    traced.client.ping()


def test_a_valid_traceparent_and_tracestate_sent_raw_reach_the_server(
    traced: SupervisorProcess, receiver: OtlpReceiver
) -> None:
    trace_id = "5bf92f3577b34da6a3ce929d0e0e4736"
    with raw_client(traced.endpoint) as raw:
        arguments = msgspec.Raw(msgspec.msgpack.encode({"text": "hi"}))
        raw.send(
            CallTool(
                id=1,
                name="mcp_traced_echo",
                arguments=arguments,
                traceparent=f"00-{trace_id}-00f067aa0ba902b7-01",
                tracestate="rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
            )
        )
        assert isinstance(raw.recv(), CallResult)
    found = spans_of(
        receiver, trace_id, (SUPERVISOR, "route mcp_traced_echo"), ("traced-server", "tools/call echo")
    )
    assert found[SUPERVISOR, "route mcp_traced_echo"].parent_id == "00f067aa0ba902b7"
    assert found["traced-server", "tools/call echo"].trace_state == "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"


def test_with_tracing_off_nothing_is_exported_and_the_server_gets_no_trace_context(
    start_supervisor: Start,
) -> None:
    with otlp_receiver() as receiver:
        sup = start_supervisor({"traced": traced_stdio(receiver)}, env=exporting_to(receiver))
        with sdk_provider() as client_spans:
            assert sup.client.call_tool("mcp_traced_echo", {"text": "hi"}, timeout=10).text == "hi"
        [call] = client_spans.get_finished_spans()

        def server_span(spans: list[Received]) -> bool:
            return any(span.name == "tools/call echo" for span in spans)

        [handling] = [
            s
            for s in receiver.wait_for("the server's span", server_span, WAIT)
            if s.name == "tools/call echo"
        ]
        assert handling.parent_id == ""  # nothing in _meta: the server began a trace of its own
        assert handling.trace_id != f"{call.context.trace_id:032x}"
        sup.stop()  # a tracing supervisor and its workers would export what they have now
        assert {span.service for span in receiver.received()} == {"traced-server"}
        assert "tracing calls" not in sup.log


def test_spans_still_queued_are_exported_when_a_worker_and_the_supervisor_stop(
    start_supervisor: Start,
) -> None:
    with otlp_receiver() as receiver:
        env = exporting_to(receiver, OTEL_BSP_SCHEDULE_DELAY="600000")  # no batch goes before a stop
        sup = start_supervisor({"traced": traced_stdio(receiver)}, env=env, args=["--tracing"])
        with sdk_provider() as client_spans:
            assert sup.client.call_tool("mcp_traced_echo", {"text": "hi"}, timeout=10).text == "hi"
        [call] = client_spans.get_finished_spans()
        trace_id = f"{call.context.trace_id:032x}"
        spans_of(receiver, trace_id, ("traced-server", "tools/call echo"))  # the server exports at once
        assert not {SUPERVISOR, WORKER} & {span.service for span in receiver.received()}
        sup.client.restart("traced")  # the worker that served the call exits: its spans go
        spans_of(receiver, trace_id, (WORKER, "tools/call echo"))
        assert sup.stop() == 0
        spans_of(receiver, trace_id, (SUPERVISOR, "route mcp_traced_echo"))


def test_a_collector_that_never_answers_does_not_hold_up_the_calls_or_the_shutdown(
    start_supervisor: Start,
) -> None:
    with socket.socket() as silent:  # accepts connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        env = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_TIMEOUT": "60",  # each export would wait a minute for its answer
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }
        sup = start_supervisor({"test": stdio_test_server()}, env=env, args=["--tracing"])
        for text in ("one", "two", "three"):
            assert sup.client.call_tool("mcp_test_echo", {"text": text}, timeout=10).text == text
        started = time.monotonic()
        assert sup.stop() == 0
        assert time.monotonic() - started < 15.0  # the flush bounds: worker 1 s, supervisor 2 s
        assert "spans still unexported after 2 s were dropped" in sup.log


def test_an_exporter_that_is_not_installed_stops_run_with_its_name(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text('{"mcpServers": {}}')
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "supervisor",
            "run",
            str(config),
            "--tracing",
            "--endpoint",
            f"ipc://{tmp_path}/s",
        ],
        env={**os.environ, "OTEL_TRACES_EXPORTER": "zipkin_json", "XDG_RUNTIME_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "cannot trace: OTEL_TRACES_EXPORTER names 'zipkin_json'" in done.stderr
    assert "Traceback" not in done.stderr
