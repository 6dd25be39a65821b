"""An MCP server over stdio (protocol 2025-11-25, hand-written JSON-RPC, no SDK) that attacks its host.

Each tool tries one thing a server must not be able to do to the machine it runs on; run sandboxed,
each is stopped (a limit ends the server, an access is refused). Tools block while they attack, as
a runaway server would.

    echo {text}           -> ``text``
    allocate {}           -> touches memory 16 MiB at a time, without end; "refused: MemoryError"
                             if an allocation fails
    fork {}               -> forks children that sleep, until a fork fails; keeps them 60 s, then
                             "refused after N: ERROR"
    open_files {}         -> opens /dev/null until an open fails; keeps them 60 s, then
                             "refused after N: ERROR"
    burn {seconds}        -> spins the CPU that long: "burned"
    connect {host, port}  -> a TCP connection: "connected", or "refused: ERROR"
    read {path}           -> the file's text, or "refused: ERROR"
    write {path}          -> writes "attack" to the file: "written", or "refused: ERROR"
    env {name}            -> the variable's value, or "unset"
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any

PROTOCOL = "2025-11-25"
CHUNK = 16 << 20
HOLD = 60  # seconds a refused attack keeps what it got before it answers


def _tool(tool: str, **properties: str) -> dict[str, Any]:
    props = {key: {"type": kind} for key, kind in properties.items()}
    return {"name": tool, "inputSchema": {"type": "object", "properties": props}}


TOOLS = [
    _tool("echo", text="string"),
    _tool("allocate"),
    _tool("fork"),
    _tool("open_files"),
    _tool("burn", seconds="number"),
    _tool("connect", host="string", port="integer"),
    _tool("read", path="string"),
    _tool("write", path="string"),
    _tool("env", name="string"),
]
HELD: list[Any] = []  # what the attacks keep (memory, files)


def _allocate() -> str:
    try:
        while True:
            HELD.append(b"\x01" * CHUNK)
    except MemoryError:
        HELD.clear()
        return "refused: MemoryError"


def _hold(said: str) -> str:
    """A runaway keeps what it got (and asks again) for a while before it gives up."""
    time.sleep(HOLD)
    return said


def _fork() -> str:
    count = 0
    while True:
        try:
            pid = os.fork()
        except OSError as exc:
            return _hold(f"refused after {count}: {exc}")
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        count += 1


def _open_files() -> str:
    count = 0
    while True:
        try:
            HELD.append(open(os.devnull, "rb"))  # noqa: SIM115 - kept open on purpose
        except OSError as exc:
            return _hold(f"refused after {count}: {exc}")
        count += 1


def _burn(seconds: float) -> str:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return "burned"


def _connect(host: str, port: int) -> str:
    try:
        with socket.create_connection((host, port), timeout=5):
            return "connected"
    except OSError as exc:
        return f"refused: {exc}"


def _read(path: str) -> str:
    try:
        with open(path) as file:
            return file.read()
    except OSError as exc:
        return f"refused: {exc}"


def _write(path: str) -> str:
    try:
        with open(path, "w") as file:
            file.write("attack")
    except OSError as exc:
        return f"refused: {exc}"
    return "written"


def call(name: str, args: dict[str, Any]) -> str:
    if name == "echo":
        return str(args.get("text", ""))
    if name == "allocate":
        return _allocate()
    if name == "fork":
        return _fork()
    if name == "open_files":
        return _open_files()
    if name == "burn":
        return _burn(float(args.get("seconds", 1)))
    if name == "connect":
        return _connect(str(args["host"]), int(args["port"]))
    if name == "read":
        return _read(str(args["path"]))
    if name == "write":
        return _write(str(args["path"]))
    if name == "env":
        return os.environ.get(str(args["name"]), "unset")
    raise KeyError(name)


def answer(message: dict[str, Any]) -> dict[str, Any] | None:
    method, params = message.get("method"), message.get("params") or {}
    if "id" not in message:
        return None
    result: dict[str, Any]
    if method == "initialize":
        info = {"name": "attack-server", "version": "1"}
        result = {"protocolVersion": PROTOCOL, "capabilities": {"tools": {}}, "serverInfo": info}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        try:
            text = call(params["name"], params.get("arguments") or {})
        except KeyError as exc:
            return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32602, "message": f"{exc}"}}
        result = {"content": [{"type": "text", "text": text}]}
    elif method == "ping":
        result = {}
    else:
        error = {"code": -32601, "message": f"method not found: {method}"}
        return {"jsonrpc": "2.0", "id": message["id"], "error": error}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
