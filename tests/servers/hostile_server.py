"""A misbehaving MCP server over stdio (protocol 2025-11-25), hand-written JSON-RPC with no SDK.

It serves whatever listings a JSON file holds, read again for every listing request, so a test can
hand the worker pages no SDK server would ever send (tools without a schema, schemas that are not
JSON Schema, entries that are not objects, duplicate names, cursors that are not strings). Its
path is in ``HOSTILE_PAGES``; every key is optional::

    {
      "tools": [...], "prompts": [...], "resources": [...], "resourceTemplates": [...],
      "pageSize": 2,                 # entries per page (default: one page); nextCursor is the offset
      "cursor": 5,                   # the nextCursor of the first page, instead of the real one
      "results": {"tools/list": 5},  # the whole result of a method, instead of pages
      "rawResults": {"tools/list": "[[[]]]"},  # the same, as JSON text sent as it is
      "protocolVersion": "1999-01-01",  # answered to initialize (default 2025-11-25)
      "latin1": true                 # stdout in Latin-1, as some servers write it: "é" is invalid UTF-8
    }

With ``--http PORT`` it serves the same on 127.0.0.1:PORT as streamable HTTP at its plainest (each
POST answered with a JSON body; no event streams, so no notifications reach the client).

Two tools are always listed after the file's own:
    hostile_changed {}         -> sends ``notifications/tools/list_changed``; returns "changed"
    hostile_garbage {kind}     -> first writes a bad line on stdout: ``text`` (not JSON); invalid
                                  UTF-8 in a method name (``utf8``), an id (``utf8_id``) or params
                                  (``utf8_params``); JSON nested 1000 levels: an array (``deep``),
                                  in an object (``deep_object``), in a notification's params
                                  (``deep_rpc``), in an answer to id 1099511627777 (``deep_answer``);
                                  then returns "garbage <kind>"; or answers with a text item that
                                  is not UTF-8 (``utf8_result``), or with content nested 1000
                                  levels (``deep_result``)
Any other tool returns its arguments as JSON text (and as structured content, when the page gives
it an ``outputSchema``). ``prompts/get`` returns one user message holding
its arguments as JSON text; ``resources/read`` returns the text ``read <uri>``.
"""

from __future__ import annotations

import http.server
import json
import os
import sys
from typing import Any

PROTOCOL = "2025-11-25"
METHOD_NOT_FOUND = -32601
DEPTH = 1000  # deeper than msgspec and json decode without a RecursionError
CONTROL_TOOLS: list[dict[str, Any]] = [
    {"name": "hostile_changed", "inputSchema": {"type": "object"}},
    {
        "name": "hostile_garbage",
        "inputSchema": {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"]},
    },
]
LISTS = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
}
BAD_RESULTS = {  # answers to hostile_garbage instead of its own, by kind
    "utf8_result": '{"content": [{"type": "text", "text": "\udcff"}]}',  # the byte 0xff
    "deep_result": '{"content": [' + "[" * DEPTH + "]" * DEPTH + "]}",
}
GARBAGE = {
    "text": b"this is not JSON-RPC",
    "utf8": b'{"jsonrpc": "2.0", "method": "notifications/\xff\xfe"}',
    "utf8_id": b'{"jsonrpc": "2.0", "id": "\xff\xfe", "result": {}}',
    "utf8_params": b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "\xff\xfe"}}',
    "deep": b"[" * DEPTH + b"]" * DEPTH,
    "deep_object": b'{"x": ' + b"[" * DEPTH + b"]" * DEPTH + b"}",
    "deep_rpc": b'{"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": '
    + b"[" * DEPTH
    + b"]" * DEPTH
    + b"}}",
    "deep_answer": b'{"jsonrpc": "2.0", "id": 1099511627777, "result": {"x": '
    + b"[" * DEPTH
    + b"]" * DEPTH
    + b"}}",
}


def write(data: bytes) -> None:
    sys.stdout.buffer.write(data + b"\n")
    sys.stdout.buffer.flush()


def send(message: dict[str, Any]) -> None:
    write(json.dumps({"jsonrpc": "2.0", **message}).encode())


def pages() -> dict[str, Any]:
    path = os.environ.get("HOSTILE_PAGES")
    if not path:
        return {}
    loaded: dict[str, Any] = json.loads(open(path, encoding="utf-8").read())  # noqa: SIM115
    return loaded


def listing(method: str, params: dict[str, Any]) -> Any:
    spec = pages()
    if method in spec.get("results", {}):
        return spec["results"][method]
    field = LISTS[method]
    entries = list(spec.get(field, []))
    if field == "tools":
        entries += CONTROL_TOOLS
    size = int(spec.get("pageSize") or max(len(entries), 1))
    cursor = params.get("cursor")
    start = int(cursor) if isinstance(cursor, str) and cursor.isdigit() else 0
    result: dict[str, Any] = {field: entries[start : start + size]}
    if start + size < len(entries):
        result["nextCursor"] = str(start + size)
    if start == 0 and "cursor" in spec:
        result["nextCursor"] = spec["cursor"]
    return result


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}]}


def answer(method: str, params: dict[str, Any]) -> Any:
    if method == "initialize":
        capabilities = {"tools": {"listChanged": True}, "prompts": {}, "resources": {}}
        return {
            "protocolVersion": pages().get("protocolVersion", PROTOCOL),
            "capabilities": capabilities,
            "serverInfo": {"name": "hostile-server", "version": "0.1.0"},
        }
    if method == "ping":
        return {}
    if method in LISTS:
        return listing(method, params)
    if method == "tools/call":
        name, arguments = params.get("name"), params.get("arguments") or {}
        if name == "hostile_changed":
            send({"method": "notifications/tools/list_changed"})
            return text("changed")
        if name == "hostile_garbage":
            write(GARBAGE[arguments["kind"]])
            return text(f"garbage {arguments['kind']}")
        result = text(json.dumps(arguments, sort_keys=True))
        listed = [
            tool for tool in pages().get("tools", []) if isinstance(tool, dict) and tool.get("name") == name
        ]
        if listed and "outputSchema" in listed[0]:
            result["structuredContent"] = arguments
        return result
    if method == "prompts/get":
        message = {"role": "user", "content": text(json.dumps(params.get("arguments") or {}))["content"][0]}
        return {"messages": [message]}
    if method == "resources/read":
        return {"contents": [{"uri": params.get("uri"), "text": f"read {params.get('uri')}"}]}
    return None


def respond(request: Any) -> dict[str, Any] | bytes | None:
    """The JSON-RPC answer to one message (or its bytes), or None for a notification (or what is not
    a request)."""
    if not isinstance(request, dict) or request.get("id") is None:
        return None
    method, id_ = request.get("method"), request["id"]
    params = request.get("params") or {}
    raw = pages().get("rawResults", {}).get(method)
    if params.get("name") == "hostile_garbage":
        raw = BAD_RESULTS.get((params.get("arguments") or {}).get("kind"))
    if raw is not None:
        return b'{"jsonrpc": "2.0", "id": %d, "result": %s}' % (id_, raw.encode("utf-8", "surrogateescape"))
    result = answer(method, request.get("params") or {})
    if result is None:
        return {
            "jsonrpc": "2.0",
            "id": id_,
            "error": {"code": METHOD_NOT_FOUND, "message": f"Method not found: {method}"},
        }
    return {"jsonrpc": "2.0", "id": id_, "result": result}


class HttpHandler(http.server.BaseHTTPRequestHandler):
    """Streamable HTTP at its plainest: each POST answered with one JSON body; no streams, no session."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        reply = respond(json.loads(body))
        if reply is None or isinstance(reply, bytes):
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.send_response(405)  # no stream for server messages
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_DELETE = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    if sys.argv[1:2] == ["--http"]:
        http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), HttpHandler).serve_forever()
        return
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        reply = respond(request)
        if isinstance(reply, bytes):
            write(reply)
        elif reply is not None and pages().get("latin1"):
            write(json.dumps(reply, ensure_ascii=False).encode("latin-1", errors="replace"))
        elif reply is not None:
            write(json.dumps(reply).encode())


if __name__ == "__main__":
    main()
