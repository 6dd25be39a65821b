"""A handshake-era MCP server over stdio (protocol 2025-11-25), hand-written JSON-RPC with no SDK.

It answers ``server/discover`` with "method not found", so clients fall back to ``initialize``,
and it announces tool changes the pre-2026 way, with ``notifications/tools/list_changed``. Having
no SDK, it can also answer in ways an SDK server never would (for the worker's result checks).

Tools:
    echo {text}      -> ``text``
    add_tool {name}  -> adds an echo tool called ``name``, then sends
                        ``notifications/tools/list_changed``; returns "added <name>"
    sleep {seconds}  -> blocks for ``seconds`` (reading nothing meanwhile), then returns "slept"
    cancelled {}     -> a JSON list of the ``requestId`` of every ``notifications/cancelled`` so far
    ids {}           -> a JSON list of the ids of every ``tools/call`` so far, this one included
    bad {shape}      -> a malformed answer: ``not_object`` (the result is 5), ``no_content`` ({}),
                        ``unknown_type`` (a "video" item), ``text_without_text`` (a text item with no
                        text), ``bad_resource`` (an embedded resource with no uri), ``bad_error``
                        (an error object with no message)
    counted {n}      -> structured content {"n": n} and n as text; advertises an outputSchema that
                        requires an integer ``n`` (so a string ``n`` breaks it)
    extras {}        -> a text item carrying an ``annotations`` object and ``_meta``
    progress {count} -> with a progressToken, ``count`` progress notifications (1..count of count,
                        message "step <i>"), then the token as JSON ({"token": ...}, null without)
    refs {x}         -> "refs" and structured content {"y": 1}; its input and output schemas each have
                        a ``$ref`` that does not resolve (valid JSON Schema that cannot check anything)
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

PROTOCOL = "2025-11-25"
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
ANY_OBJECT = {"type": "object"}
BAD_RESULTS: dict[str, Any] = {
    "not_object": 5,
    "no_content": {},
    "unknown_type": {"content": [{"type": "video", "url": "x"}]},
    "text_without_text": {"content": [{"type": "text"}]},
    "bad_resource": {"content": [{"type": "resource", "resource": {"text": "no uri"}}]},
}


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def text(value: str, **more: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], **more}


def main() -> None:
    tools: list[dict[str, Any]] = [
        {"name": "echo", "description": "Echo the text back.", "inputSchema": ECHO_SCHEMA},
        {
            "name": "add_tool",
            "description": "Add an echo tool, then announce the change.",
            "inputSchema": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            },
        },
        {"name": "sleep", "description": "Block, then answer.", "inputSchema": ANY_OBJECT},
        {"name": "cancelled", "description": "The cancelled request ids.", "inputSchema": ANY_OBJECT},
        {"name": "ids", "description": "The ids of the calls so far.", "inputSchema": ANY_OBJECT},
        {"name": "bad", "description": "A malformed answer.", "inputSchema": ANY_OBJECT},
        {
            "name": "counted",
            "description": "Structured content checked by an output schema.",
            "inputSchema": ANY_OBJECT,
            "outputSchema": {
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
            },
        },
        {"name": "extras", "description": "A text item with more fields.", "inputSchema": ANY_OBJECT},
        {"name": "progress", "description": "Progress, then its token.", "inputSchema": ANY_OBJECT},
        {
            "name": "refs",
            "description": "Schemas with a $ref that does not resolve.",
            "inputSchema": {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}},
            "outputSchema": {"type": "object", "properties": {"y": {"$ref": "#/$defs/gone"}}},
        },
    ]
    cancelled: list[Any] = []
    calls: list[Any] = []
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except json.JSONDecodeError:
            continue
        method, id_ = request.get("method"), request.get("id")
        params = request.get("params") or {}
        if id_ is None:
            if method == "notifications/cancelled":
                cancelled.append(params.get("requestId"))
            continue  # a notification (initialized, cancelled): nothing to answer
        if method == "initialize":
            capabilities = {"tools": {"listChanged": True}}
            info = {"name": "legacy-server", "version": "0.1.0"}
            send(
                {
                    "id": id_,
                    "result": {"protocolVersion": PROTOCOL, "capabilities": capabilities, "serverInfo": info},
                }
            )
        elif method == "ping":
            send({"id": id_, "result": {}})
        elif method == "tools/list":
            send({"id": id_, "result": {"tools": tools}})
        elif method == "tools/call":
            calls.append(id_)
            token = (params.get("_meta") or {}).get("progressToken")
            call(id_, params.get("name"), params.get("arguments") or {}, tools, cancelled, calls, token)
        else:
            send({"id": id_, "error": {"code": METHOD_NOT_FOUND, "message": f"Method not found: {method}"}})


def call(
    id_: Any,
    name: Any,
    arguments: dict[str, Any],
    tools: list[dict[str, Any]],
    cancelled: list[Any],
    calls: list[Any],
    token: Any,
) -> None:
    if name == "add_tool":
        tools.append({"name": arguments["name"], "description": "Added.", "inputSchema": ECHO_SCHEMA})
        send({"id": id_, "result": text(f"added {arguments['name']}")})
        send({"method": "notifications/tools/list_changed"})
    elif name == "sleep":
        time.sleep(float(arguments.get("seconds", 1)))
        send({"id": id_, "result": text("slept")})
    elif name == "cancelled":
        send({"id": id_, "result": text(json.dumps(cancelled))})
    elif name == "ids":
        send({"id": id_, "result": text(json.dumps(calls))})
    elif name == "bad":
        shape = arguments.get("shape")
        if shape == "bad_error":
            send({"id": id_, "error": {"code": -32000}})
        else:
            send({"id": id_, "result": BAD_RESULTS[shape]})
    elif name == "counted":
        send(
            {"id": id_, "result": text(str(arguments.get("n")), structuredContent={"n": arguments.get("n")})}
        )
    elif name == "extras":
        item = {"type": "text", "text": "extra", "annotations": {"priority": 0.5}, "_meta": {"k": "v"}}
        send({"id": id_, "result": {"content": [item]}})
    elif name == "progress":
        count = int(arguments.get("count", 3))
        for i in range(1, count + 1 if token is not None else 1):
            note = {"progressToken": token, "progress": i, "total": count, "message": f"step {i}"}
            send({"method": "notifications/progress", "params": note})
        send({"id": id_, "result": text(json.dumps({"token": token}))})
    elif name == "refs":
        send({"id": id_, "result": text("refs", structuredContent={"y": 1})})
    elif any(tool["name"] == name for tool in tools):
        send({"id": id_, "result": text(str(arguments.get("text")))})
    else:
        send({"id": id_, "error": {"code": INVALID_PARAMS, "message": f"Unknown tool: {name}"}})


if __name__ == "__main__":
    main()
