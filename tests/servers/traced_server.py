"""A small MCP server that traces, for the tracing tests: its spans go where its environment says.

Run it as ``python tests/servers/traced_server.py`` (stdio) or ``... --http PORT`` (streamable HTTP on
127.0.0.1:PORT, at ``/mcp``). It configures an OpenTelemetry SDK ``TracerProvider`` exporting over
OTLP/HTTP as the standard ``OTEL_EXPORTER_OTLP_*`` variables say, with a ``SimpleSpanProcessor`` (each
span is exported as it ends, so nothing waits for a flush when the server is stopped). The SDK's
server side opens a SERVER span per request, child of the trace context in the request's ``_meta``;
``echo`` opens one span of its own inside it.

Tools:
    echo {text}         -> one text item equal to ``text`` (and a span ``echo work``)
    fail {message}      -> a result with ``isError: true`` and ``message`` as its text
    raise_error {message} -> a JSON-RPC error (-32603, ``message``)
    context {}          -> one text item: the request's ``_meta`` trace context as JSON,
                           ``{"traceparent": ..., "tracestate": ...}`` ("" for one not there)

Environment: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``), ``OTEL_SERVICE_NAME``
(default ``traced-server``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
MESSAGE = {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]}


def configure_tracing() -> None:
    service = os.environ.get("OTEL_SERVICE_NAME") or "traced-server"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


def build_server() -> Server[Any]:
    tools = [
        types.Tool(name="echo", description="Echo text.", input_schema=TEXT),
        types.Tool(name="fail", description="An isError result.", input_schema=MESSAGE),
        types.Tool(name="raise_error", description="A JSON-RPC error.", input_schema=MESSAGE),
        types.Tool(name="context", description="The trace context it got.", input_schema={"type": "object"}),
    ]
    tracer = trace.get_tracer("traced-server")

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments = params.arguments or {}
        if params.name == "echo":
            with tracer.start_as_current_span("echo work"):
                return types.CallToolResult(content=[types.TextContent(type="text", text=arguments["text"])])
        if params.name == "fail":
            text = types.TextContent(type="text", text=arguments["message"])
            return types.CallToolResult(content=[text], is_error=True)
        if params.name == "context":
            meta = params.meta or {}
            got = {key: str(meta.get(key, "")) for key in ("traceparent", "tracestate")}
            return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(got))])
        if params.name == "raise_error":
            raise MCPError(code=types.INTERNAL_ERROR, message=arguments["message"])
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")

    return Server("traced-server", version="0.1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    server = build_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_http(port: int) -> None:
    import uvicorn  # the SDK's HTTP server side depends on it

    app = build_server().streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    configure_tracing()
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        serve_http(int(sys.argv[2]))
    else:
        anyio.run(main)
