"""An agent loop over the supervisor's tools: ask a model, run the tools it asks for, repeat.

Above: a person at a terminal, with one question (``python examples/agent.py "question"``) or a
prompt loop (no question). Below: an OpenAI-compatible chat completions endpoint, spoken to over
HTTP with httpx, and the supervisor, through its client stub (``supervisor.SupervisorClient``): the tool
list comes from ``SupervisorClient.tool_cache()``, which the supervisor's events keep current,
and each call the model asks for goes through ``call_tool``.

It is the loop MCP hosts run: send the messages and the tools, run each tool call in the answer,
append each result as a ``tool`` message, and ask again until the model answers without tool
calls or ``--max-steps`` requests have been made. Two things come from the supervisor:

- when tools appear or vanish (a server added, crashed, back), the next request carries the live
  list and a note saying what changed;
- a call that fails (``WORKER_CRASHED``, ``UNAVAILABLE``, ``TIMEOUT``, ...) becomes a tool
  message saying so, and the loop goes on: the model may try again or answer without it.

Environment: ``OPENAI_BASE_URL`` (e.g. ``https://api.openai.com/v1``, or a local server's
``http://127.0.0.1:11434/v1``), ``OPENAI_MODEL``, and ``OPENAI_API_KEY`` when the endpoint
wants one. The supervisor is found as the CLI finds it, or at ``--endpoint``.

Exit codes: 0 answered, 1 an error (said on stderr), 2 bad usage, 3 no answer within the steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Final

import httpx

from supervisor import SupervisorClient, SupervisorError, ToolCache, ToolResult, openai_tool

__all__ = ["Agent", "Chat", "ChatError", "main"]

MAX_STEPS: Final = 10  # model requests per question before giving up on a final answer
CHAT_TIMEOUT: Final = 120.0  # seconds for one chat completion (a large model may think for a while)
SHOWN: Final = 200  # characters of each tool call and result echoed on stderr
NOTE_ROLE: Final = "user"  # many chat templates accept a system message only at the start
SYSTEM_PROMPT: Final = (
    "You are a helpful assistant. Use the tools when they help. A tool result that starts with an "
    "error code (WORKER_CRASHED, UNAVAILABLE, TIMEOUT, ...) means the call failed: try again later "
    "or answer without it."
)


class ChatError(Exception):
    """The chat endpoint could not be reached, or gave no usable answer; the message says which."""


class Chat:
    """One OpenAI-compatible chat completions endpoint."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        try:
            scheme = httpx.URL(self.url).scheme
        except httpx.InvalidURL as exc:
            raise ChatError(f"OPENAI_BASE_URL is not a URL ({exc}): {base_url!r}") from exc
        if scheme not in ("http", "https"):
            raise ChatError(f"OPENAI_BASE_URL is not an http:// or https:// URL: {base_url!r}")
        self.model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(headers=headers, timeout=CHAT_TIMEOUT)

    def close(self) -> None:
        self._http.close()

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The model's next message: ``content``, and ``tool_calls`` when it wants tools run."""
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:  # some servers refuse an empty list
            body["tools"] = tools
        try:
            response = self._http.post(self.url, json=body)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # InvalidURL: a port out of range, say
            raise ChatError(f"cannot reach {self.url}: {exc or type(exc).__name__}") from exc
        if not response.is_success:
            raise ChatError(f"{self.url} answered {response.status_code}: {_error_message(response)}")
        try:
            message = response.json()["choices"][0]["message"]
        except (ValueError, LookupError, TypeError) as exc:
            raise ChatError(f"{self.url} answered without a message: {response.text[:SHOWN]!r}") from exc
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(calls or [], list):
            raise ChatError(f"{self.url} answered with a malformed message: {str(message)[:SHOWN]!r}")
        if not all(isinstance(call, dict) for call in calls or []):
            raise ChatError(f"{self.url} answered with malformed tool calls: {str(calls)[:SHOWN]!r}")
        return message


def _error_message(response: httpx.Response) -> str:
    """The ``error.message`` of an OpenAI-style error body, else the start of the body."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return response.text[:SHOWN] or response.reason_phrase


class Agent:
    """A conversation: ``ask(question)`` runs the loop and returns the final answer."""

    def __init__(
        self, chat: Chat, sup: SupervisorClient, cache: ToolCache, max_steps: int, tool_timeout: float | None
    ) -> None:
        self.chat, self.sup, self.cache = chat, sup, cache
        self.max_steps = max_steps
        self.tool_timeout = tool_timeout
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
        self.offered = {tool.name for tool in cache.tools()}  # what the model was last told of

    def ask(self, question: str) -> str | None:
        """The model's final answer, or None when ``max_steps`` requests brought none."""
        start, offered = len(self.messages), self.offered
        self.messages.append({"role": "user", "content": question})
        try:
            for _ in range(self.max_steps):
                message = self.chat.complete(self.messages, self.live_tools())
                calls = message.get("tool_calls") or []
                self.messages.append(
                    {"role": "assistant", "content": message.get("content")}
                    | ({"tool_calls": calls} if calls else {})
                )
                if not calls:
                    return str(message.get("content") or "")
                for call in calls:
                    content = self.run(call)
                    self.messages.append(
                        {"role": "tool", "tool_call_id": call.get("id", ""), "content": content}
                    )
        except ChatError:
            del self.messages[start:]  # the next question starts from the last complete turn
            self.offered = offered  # and its notes are told again
            raise
        return None

    def live_tools(self) -> list[dict[str, Any]]:
        """The registry's tools now; what changed since the last request is told in a note first."""
        tools = sorted(self.cache.tools(), key=lambda tool: tool.name)
        names = {tool.name for tool in tools}
        added, removed = sorted(names - self.offered), sorted(self.offered - names)
        if added or removed:
            parts = [f"Tools now available: {', '.join(added)}."] if added else []
            parts += [f"Tools removed: {', '.join(removed)}."] if removed else []
            note = " ".join(parts)
            self.messages.append({"role": NOTE_ROLE, "content": f"(Note from the tool host) {note}"})
            print(f"  ** {note}", file=sys.stderr)
        self.offered = names
        return [openai_tool(tool) for tool in tools]

    def run(self, call: dict[str, Any]) -> str:
        """Run one tool call; its result, or the error that stood in its way, as text for the model."""
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        name, raw = str(function.get("name", "")), function.get("arguments") or "{}"
        print(f"  -> {name} {str(raw)[:SHOWN]}", file=sys.stderr)
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else raw
        except json.JSONDecodeError as exc:
            text = f"INVALID_ARGUMENTS: the arguments are not JSON ({exc})"
        else:
            if not isinstance(arguments, dict):
                text = "INVALID_ARGUMENTS: the arguments must be a JSON object"
            else:
                text = self._call(name, arguments)
        print(f"  <- {text[:SHOWN]}".replace("\n", " "), file=sys.stderr)
        return text

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        try:
            result = self.sup.call_tool(name, arguments, self.tool_timeout, raise_on_error=False)
        except SupervisorError as exc:  # str(exc) is "CODE: message", e.g. "WORKER_CRASHED: ..."
            return str(exc)
        return _result_text(result)


def _result_text(result: ToolResult) -> str:
    text = result.text
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content)
    text = text or "(no output)"
    return f"TOOL_ERROR: {text}" if result.is_error else text


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="agent.py",
        description="Answer a question with a model and the supervisor's tools; without one, ask in a loop.",
        epilog="Environment: OPENAI_BASE_URL, OPENAI_MODEL, OPENAI_API_KEY (when the endpoint wants one).",
    )
    parser.add_argument("question", nargs="?", help="ask this once and exit")
    parser.add_argument("--endpoint", help="the supervisor's endpoint (default: as the CLI finds it)")
    parser.add_argument("--max-steps", type=int, default=MAX_STEPS, help="model requests per question")
    parser.add_argument("--tool-timeout", type=float, help="seconds per tool call (default: the server's)")
    args = parser.parse_args(argv)
    if args.max_steps < 1:
        parser.error("--max-steps must be at least 1")
    if args.tool_timeout is not None and not args.tool_timeout > 0:
        parser.error("--tool-timeout must be a positive number of seconds")
    return args


def _converse(agent: Agent, question: str | None) -> int:
    if question is not None:
        answer = agent.ask(question)
        if answer is None:
            print(f"agent: no final answer within {agent.max_steps} steps", file=sys.stderr)
            return 3
        print(answer)
        return 0
    while True:  # interactive: a ChatError ends one question, not the conversation
        try:
            line = input("> ").strip()
        except EOFError:
            return 0
        if line in ("exit", "quit"):
            return 0
        if not line:
            continue
        try:
            answer = agent.ask(line)
        except ChatError as exc:
            print(f"agent: {exc}", file=sys.stderr)
            continue
        print(answer if answer is not None else f"(no final answer within {agent.max_steps} steps)")


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    base_url, model = os.environ.get("OPENAI_BASE_URL"), os.environ.get("OPENAI_MODEL")
    if not base_url or not model:
        print(
            "agent: set OPENAI_BASE_URL and OPENAI_MODEL (the chat endpoint and its model)", file=sys.stderr
        )
        return 1
    try:
        chat = Chat(base_url, model, os.environ.get("OPENAI_API_KEY"))
    except ChatError as exc:
        print(f"agent: {exc}", file=sys.stderr)
        return 1
    try:
        with SupervisorClient(args.endpoint) as sup, sup.tool_cache() as cache:
            return _converse(Agent(chat, sup, cache, args.max_steps, args.tool_timeout), args.question)
    except (ChatError, SupervisorError) as exc:
        print(f"agent: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        chat.close()


if __name__ == "__main__":
    sys.exit(main())
