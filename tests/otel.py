"""OpenTelemetry for the tracing tests: an SDK provider for the test process, and an OTLP/HTTP receiver.

``sdk_provider()`` makes an SDK ``TracerProvider`` exporting to an ``InMemorySpanExporter`` the global
one for a while (the application's side: what the client stub finds), then puts the previous one back.
``recording()`` turns this process's own tracing on (the supervisor's and the worker's spans), its
spans kept in memory, without touching the global provider.
``OtlpReceiver`` is a collector in a thread: it accepts ``POST /v1/traces``, decodes each
``ExportTraceServiceRequest`` and keeps its spans with their resource's ``service.name``, so spans
exported by other processes (the supervisor, its workers, an MCP server) can be read here
(``exporting_to``: the environment that sends them there; ``spans_of``: one trace's, once they came);
``traced_stdio`` is the config entry of the server that traces (``tests/servers/traced_server.py``).
"""

from __future__ import annotations

import gzip
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.util._once import Once

from supervisor.shared import tracing
from supervisor.shared.spans import Recorder, Sampling

TRACED_SERVER = Path(__file__).parent / "servers" / "traced_server.py"
WAIT = 30.0  # seconds for spans to reach the collector (batches go every 50 ms with ``exporting_to``)
SUPERVISOR, WORKER = "mcp-supervisor", "mcp-supervisor-worker"  # their service.name

# Span kinds and status codes as OTLP numbers them.
KIND_INTERNAL, KIND_SERVER, KIND_CLIENT = 1, 2, 3
STATUS_UNSET, STATUS_OK, STATUS_ERROR = 0, 1, 2


@contextmanager
def sdk_provider() -> Iterator[InMemorySpanExporter]:
    """An SDK provider as the global one (spans kept in memory), the previous one restored after."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, Once()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = previous
        provider.shutdown()


@contextmanager
def recording(
    sampling: Sampling | None = None, ids: IdGenerator | None = None
) -> Iterator[InMemorySpanExporter]:
    """Tracing on in this process, sampled as ``sampling`` says (every trace by default), its ids from
    ``ids`` (the SDK's random ones by default), spans kept in memory; off again after."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    recorder = Recorder(
        sampling or Sampling(),
        [SimpleSpanProcessor(exporter)],
        provider.resource,
        InstrumentationScope(tracing.TRACER),
        ids or provider.id_generator,
    )
    previous = tracing.on, tracing._recorder
    tracing.on, tracing._recorder = True, recorder
    try:
        yield exporter
    finally:
        tracing.on, tracing._recorder = previous
        provider.shutdown()


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


@dataclass(frozen=True)
class Received:
    """One span as a collector got it, ids in hex as W3C writes them."""

    service: str
    resource: dict[str, Any]
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    trace_state: str
    attributes: dict[str, Any]
    status: int
    status_message: str
    scope: str


class OtlpReceiver:
    """A collector on 127.0.0.1 (``endpoint``: for ``OTEL_EXPORTER_OTLP_ENDPOINT``), in a thread."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                receiver._take(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _take(self, request: ExportTraceServiceRequest) -> None:
        received = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        Received(
                            service=str(resource.get("service.name", "")),
                            resource=resource,
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            trace_state=span.trace_state,
                            attributes={kv.key: _value(kv.value) for kv in span.attributes},
                            status=span.status.code,
                            status_message=span.status.message,
                            scope=scope_spans.scope.name,
                        )
                    )
        with self._lock:
            self.requests += 1
            self.spans.extend(received)

    def received(self) -> list[Received]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, what: str, found: Callable[[list[Received]], bool], timeout: float) -> list[Received]:
        """Every span received, once ``found`` says they are enough; AssertionError after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.received()
            if found(spans):
                return spans
            if time.monotonic() > deadline:
                shown = "\n".join(f"  {span.service}: {span.name} {span.attributes}" for span in spans)
                raise AssertionError(f"timed out after {timeout} s waiting for {what}; received:\n{shown}")
            time.sleep(0.05)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    try:
        yield receiver
    finally:
        receiver.close()


def exporting_to(receiver: OtlpReceiver, **more: str) -> dict[str, str]:
    """The environment that points OTLP/HTTP exporters at ``receiver``."""
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_SERVICE_NAME": "",
        "OTEL_RESOURCE_ATTRIBUTES": "",
    } | more


def traced_stdio(receiver: OtlpReceiver) -> dict[str, object]:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
    return {"command": sys.executable, "args": [str(TRACED_SERVER)], "env": env}


def spans_of(
    receiver: OtlpReceiver, trace_id: str, *wanted: tuple[str, str]
) -> dict[tuple[str, str], Received]:
    """The spans of one trace by (service, name), once every one ``wanted`` has arrived."""

    def complete(spans: list[Received]) -> bool:
        return set(wanted) <= {(span.service, span.name) for span in spans if span.trace_id == trace_id}

    spans = receiver.wait_for(f"{wanted} in trace {trace_id}", complete, WAIT)
    return {(span.service, span.name): span for span in spans if span.trace_id == trace_id}
