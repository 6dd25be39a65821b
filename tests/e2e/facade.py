"""MCP hosts for the facade's end-to-end tests: the official SDK's ``Client`` against ``mcp-supervisor
mcp`` (stdio) and against ``mcp-supervisor serve --http`` (streamable HTTP with a bearer token)."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx2
import mcp_types as types
import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.e2e.harness import START_TIMEOUT, STOP_TIMEOUT, poll

HOST_WARNINGS: Final = [
    # The SDK's streamable HTTP client (the host's side, in this process) leaves httpx2's response
    # iterators to the garbage collector when a connection closes: the host's, not the facade's.
    pytest.mark.filterwarnings("ignore:Async generator 'httpx?2[._]:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2[._]:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <async_generator object:pytest.PytestUnraisableExceptionWarning"
    ),
]

REPO = Path(__file__).resolve().parents[2]
HOST_TIMEOUT = 30.0  # seconds any one wait of these tests may take
HOST_LIFETIME = 180.0  # seconds a host may live in one test, its whole conversation included


def jsonrpc_line(message: dict[str, Any]) -> bytes:
    """One JSON-RPC message as a host writes it on the facade's stdin."""
    return json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n"


def facade_argv(endpoint: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "supervisor", *args[:1], "--endpoint", endpoint, *args[1:]]


def answers(message: Any, id: object) -> bool:
    """Whether ``message`` is the answer (result or error) to the request ``id`` (same value and type)."""
    return (
        isinstance(message, dict)
        and "id" in message
        and message["id"] == id
        and type(message["id"]) is type(id)
        and ("result" in message or "error" in message)
    )


class PipeHost:
    """A facade on stdio (``facade_argv``), spoken to by hand: lines on its stdin, and a thread that
    reads its stdout into a queue; every wait for a line is bounded. What arrives while an answer is
    awaited is kept in ``stray``."""

    def __init__(self, argv: list[str], stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        with stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=REPO
            )
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.stray: list[Any] = []  # messages read while waiting for another

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def send_line(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def next_message(self, timeout: float = HOST_TIMEOUT) -> Any:
        """The next line the facade writes, decoded."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"the facade wrote nothing within {timeout} s\n{self.stderr[-3000:]}")
        if line is None:
            pytest.fail(f"the facade closed its stdout (exit {self.process.poll()})\n{self.stderr[-3000:]}")
        return json.loads(line)

    def answer(self, id: object, timeout: float = HOST_TIMEOUT) -> dict[str, Any]:
        """The answer to ``id``; what comes before it is kept in ``stray``."""
        for index, message in enumerate(self.stray):
            if answers(message, id):
                return self.stray.pop(index)  # type: ignore[no-any-return]
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no answer to id {id!r} within {timeout} s\n{self.stderr[-3000:]}")
            message = self.next_message(left)
            if answers(message, id):
                return message  # type: ignore[no-any-return]
            self.stray.append(message)

    def close(self) -> None:
        """Close its stdin and wait (bounded) for it to exit, as a host that goes away."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
            pytest.fail(f"the facade did not exit within {STOP_TIMEOUT} s of its stdin closing")
        finally:
            self._reader.join(5)
            self.process.stdout.close()


class Notes:
    """What a host heard: list-changed notifications (handshake era), counted, with a wake-up."""

    def __init__(self) -> None:
        self.tools_changed = 0
        self.resources_changed = 0
        self._wake = trio.Event()

    async def handler(self, message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, types.ToolListChangedNotification):
            self.tools_changed += 1
        elif isinstance(root, types.ResourceListChangedNotification):
            self.resources_changed += 1
        else:
            return
        self._wake.set()
        self._wake = trio.Event()

    async def wait_tools_changed(self, more_than: int, timeout: float = HOST_TIMEOUT) -> None:
        with trio.fail_after(timeout):
            while self.tools_changed <= more_than:
                await self._wake.wait()


@asynccontextmanager
async def stdio_host(
    endpoint: str,
    *args: str,
    mode: str = "legacy",
    notes: Notes | None = None,
    env: dict[str, str] | None = None,
    **options: Any,
) -> AsyncIterator[Client]:
    """A host that starts ``mcp-supervisor mcp --endpoint ENDPOINT ARGS...`` and talks to it over stdio;
    ``options`` go to the SDK's ``Client`` (its sampling and elicitation callbacks, say)."""
    argv = facade_argv(endpoint, "mcp", *args)
    params = StdioServerParameters(
        command=argv[0], args=argv[1:], env={**os.environ, **(env or {})}, cwd=str(REPO)
    )
    handler = notes.handler if notes is not None else options.pop("message_handler", None)
    with trio.fail_after(HOST_LIFETIME):
        async with Client(params, mode=mode, message_handler=handler, **options) as client:
            yield client


class HttpFacade:
    """``mcp-supervisor serve --http 127.0.0.1:0``, its port read from its LISTENING line."""

    def __init__(self, tmp: Path, endpoint: str, token: str | None, *args: str, no_auth: bool = True) -> None:
        """``token`` in ``$MCP_SUPERVISOR_TOKEN``; without one, ``--no-auth`` unless ``no_auth`` is False
        (the arguments then say how requests authenticate)."""
        self.stderr_path = tmp / f"facade-http-{len(list(tmp.glob('facade-http-*')))}.log"
        env = {**os.environ}
        env.pop("MCP_SUPERVISOR_TOKEN", None)
        if token is not None:
            env["MCP_SUPERVISOR_TOKEN"] = token
        auth = ["--no-auth"] if token is None and no_auth else []
        with self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(
                facade_argv(endpoint, "serve", "--http", "127.0.0.1:0", "--log-level", "info", *auth, *args),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
                cwd=REPO,
            )
        self.url: str = poll("the HTTP facade to listen", self._listening, START_TIMEOUT)

    def _listening(self) -> str | None:
        if self.process.poll() is not None:
            pytest.fail(f"serve --http exited with {self.process.returncode}:\n{self.stderr}")
        match = re.search(r"^LISTENING (\S+)", self.stderr, re.MULTILINE)
        return match.group(1) if match else None

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
                pytest.fail(f"serve --http did not exit within {STOP_TIMEOUT} s of SIGINT:\n{self.stderr}")
        return self.process.returncode


@asynccontextmanager
async def http_host(
    url: str, token: str | None, *, mode: str = "legacy", notes: Notes | None = None, **options: Any
) -> AsyncIterator[Client]:
    """A host on streamable HTTP, sending ``Authorization: Bearer TOKEN``; ``options`` go to ``Client``."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    http: httpx2.AsyncClient = create_mcp_http_client(headers=headers)
    handler = notes.handler if notes is not None else None
    async with http:
        transport = streamable_http_client(url, http_client=http)
        with trio.fail_after(HOST_LIFETIME):
            async with Client(transport, mode=mode, message_handler=handler, **options) as client:
                yield client


def text_of(result: types.CallToolResult) -> str:
    return "".join(item.text for item in result.content if isinstance(item, types.TextContent))
