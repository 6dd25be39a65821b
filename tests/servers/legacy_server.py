"""A handshake-era MCP server over stdio (protocol 2025-11-25), hand-written JSON-RPC with no SDK.

It answers ``server/discover`` with "method not found", so clients fall back to ``initialize``,
and it announces tool changes the pre-2026 way, with ``notifications/tools/list_changed``.

Tools:
    echo {text}      -> ``text``
    add_tool {name}  -> adds an echo tool called ``name``, then sends
                        ``notifications/tools/list_changed``; returns "added <name>"
"""

from __future__ import annotations

import json
import sys
from typing import Any

PROTOCOL = "2025-11-25"
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def main() -> None:
    tools = [
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
    ]
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except json.JSONDecodeError:
            continue
        method, id_ = request.get("method"), request.get("id")
        if id_ is None:
            continue  # a notification (initialized, cancelled): nothing to answer
        params = request.get("params") or {}
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
            name, arguments = params.get("name"), params.get("arguments") or {}
            if name == "add_tool":
                tools.append({"name": arguments["name"], "description": "Added.", "inputSchema": ECHO_SCHEMA})
                send(
                    {
                        "id": id_,
                        "result": {"content": [{"type": "text", "text": f"added {arguments['name']}"}]},
                    }
                )
                send({"method": "notifications/tools/list_changed"})
            elif any(tool["name"] == name for tool in tools):
                send(
                    {"id": id_, "result": {"content": [{"type": "text", "text": str(arguments.get("text"))}]}}
                )
            else:
                send({"id": id_, "error": {"code": INVALID_PARAMS, "message": f"Unknown tool: {name}"}})
        else:
            send({"id": id_, "error": {"code": METHOD_NOT_FOUND, "message": f"Method not found: {method}"}})


if __name__ == "__main__":
    main()
