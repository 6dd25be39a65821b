"""A scripted OpenAI-compatible chat completions server on loopback, for the agent example's tests.

``ScriptedChat(steps)`` serves ``POST /v1/chat/completions`` from a thread (``http.server``): the
n-th request gets the n-th step, and every request's headers and JSON body are kept, in order, for
the test to read. A step is a chat completion body (``tool_calls(...)``, ``answer(...)``), a
``Reply`` (any status and bytes), or a function of the request's body returning one of those: it
runs in the server's thread before the answer goes out, so a test can change the world between
two requests (reload the supervisor, kill a worker) and wait for it there. Whatever goes wrong on
the server's side (a step that raised, a request past the script, a body that is not JSON) is
answered 500 and listed in ``problems``, for the test to assert empty.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

__all__ = ["Reply", "ScriptedChat", "Step", "answer", "free_port", "tool_calls"]

PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"


Step = dict[str, Any] | Reply | Callable[[dict[str, Any]], "dict[str, Any] | Reply"]


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    reason = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "model": "scripted-model",
        "choices": [{"index": 0, "message": message, "finish_reason": reason}],
    }


def answer(text: str) -> dict[str, Any]:
    """A final answer: a message without tool calls."""
    return _completion({"role": "assistant", "content": text})


def tool_calls(*calls: tuple[str, str, Any]) -> dict[str, Any]:
    """A message asking for tools: each ``(id, name, arguments)``; arguments that are not a string
    are sent as their JSON, as OpenAI does."""
    return _completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": id,
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                    },
                }
                for id, name, arguments in calls
            ],
        }
    )


def free_port() -> int:
    """A loopback port nothing listens on (just released by the kernel)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ScriptedChat:
    """Serve the steps in order; use as ``with ScriptedChat([...]) as chat``."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = list(steps)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.problems: list[str] = []
        self._server = HTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedChat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def tool_messages(self, request: int) -> dict[str, str]:
        """The ``tool`` messages of the ``request``-th request (from 0): content by ``tool_call_id``."""
        messages = self.requests[request]["messages"]
        return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}

    def tool_names(self, request: int) -> set[str]:
        return {tool["function"]["name"] for tool in self.requests[request].get("tools", [])}

    def notes(self, request: int) -> list[str]:
        """The notes about tools the agent added to the conversation, up to that request."""
        messages = self.requests[request]["messages"]
        return [m["content"] for m in messages if "(Note from the tool host)" in str(m.get("content"))]

    def _respond(self, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        if path != PATH:
            self.problems.append(f"request to {path}")
            return Reply(404, b'{"error": {"message": "not found"}}')
        try:
            body = json.loads(raw)
        except ValueError as exc:
            self.problems.append(f"a body that is not JSON: {exc}")
            return Reply(400, b'{"error": {"message": "not JSON"}}')
        index = len(self.requests)
        self.requests.append(body)
        self.headers.append(headers)
        if index >= len(self.steps):
            self.problems.append(f"request {index} is past the script's {len(self.steps)} steps")
            return Reply(500, b'{"error": {"message": "the script is over"}}')
        step = self.steps[index]
        try:
            made = step(body) if callable(step) else step
        except BaseException as exc:  # pytest.fail too: the test reads it from ``problems``
            self.problems.append(f"step {index} raised {type(exc).__name__}: {exc}")
            return Reply(500, json.dumps({"error": {"message": f"step {index} failed"}}).encode())
        return made if isinstance(made, Reply) else Reply(200, json.dumps(made).encode())

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        chat = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                reply = chat._respond(self.path, {k.lower(): v for k, v in self.headers.items()}, raw)
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the test reads ``requests``; stderr stays quiet

        return Handler
