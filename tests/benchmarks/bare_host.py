"""A stdio MCP host with next to nothing of its own, for the benchmarks: what a path costs without the
host's SDK.

The official SDK's ``mcp.Client`` spends about 0.2 ms of CPU per call on this machine (0.4 ms when its
caches are cold, as behind a chain of other processes): its own share of every stdio path's latency.
``BareHost`` writes pre-encoded JSON-RPC lines to a child's stdin and matches the answers on its
stdout by id, so a path measured through it shows what the path itself adds.

It makes the handshake (``initialize`` at 2025-11-25, then ``notifications/initialized``), checks
every call's answer (a result without ``isError``, its text content as the SDK host would see it) and
ends the child by closing its stdin, as hosts do.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import trio

__all__ = ["BareHost", "bare_host"]

PROTOCOL: Final = "2025-11-25"
CLOSE_TIMEOUT: Final = 10.0  # seconds for the child to exit once its stdin is closed
READ_SIZE: Final = 65536


class BareHostError(Exception):
    """The child answered what a host cannot use (an error, isError, garbage), or went away."""


@dataclass
class _Waiter:
    done: trio.Event = field(default_factory=trio.Event)
    answer: dict[str, Any] | None = None


class BareHost:
    """One child over its pipes; ``call`` from any number of tasks at once."""

    def __init__(self, proc: trio.Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self._stdin = proc.stdin
        self._stdout = proc.stdout
        self._lock = trio.Lock()  # one line at a time on stdin
        self._waiters: dict[int, _Waiter] = {}
        self._next_id = 0
        self.protocol = ""
        self._closed: str | None = None  # why no more answers will come

    async def _read(self) -> None:
        buffer = bytearray()
        try:
            while chunk := await self._stdout.receive_some(READ_SIZE):
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    self._deliver(line)
            self._closed = "the child closed its stdout"
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._closed = f"its stdout broke: {exc!r}"
        finally:
            for waiter in self._waiters.values():
                waiter.done.set()

    def _deliver(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return  # not JSON-RPC: a host skips it (the paths measured never send such lines)
        if isinstance(message, dict) and (waiter := self._waiters.get(message.get("id"))) is not None:  # type: ignore[arg-type]
            waiter.answer = message
            waiter.done.set()

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The result of one request; BareHostError for an error answer or a child gone."""
        self._next_id += 1
        request_id = self._next_id
        line = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
        waiter = self._waiters[request_id] = _Waiter()
        try:
            async with self._lock:
                await self._stdin.send_all(line + b"\n")
            await waiter.done.wait()
        finally:
            del self._waiters[request_id]
        answer = waiter.answer
        if answer is None:
            raise BareHostError(f"{method}: no answer ({self._closed or 'the host was closed'})")
        if not isinstance(result := answer.get("result"), dict):
            raise BareHostError(f"{method}: answered {answer.get('error', answer)!r}")
        return result

    async def notify(self, method: str) -> None:
        async with self._lock:
            await self._stdin.send_all(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")

    async def tool_names(self) -> list[str]:
        names: list[str] = []
        cursor: str | None = None
        while True:
            page = await self.request("tools/list", {"cursor": cursor} if cursor else {})
            names += [tool["name"] for tool in page.get("tools", [])]
            if not (cursor := page.get("nextCursor")):
                return names

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """The text of a tool's result; BareHostError for ``isError``."""
        result = await self.request("tools/call", {"name": tool, "arguments": arguments})
        content = result.get("content", [])
        text = "".join(c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text")
        if result.get("isError"):
            raise BareHostError(f"{tool} answered isError: {text}")
        return text


@asynccontextmanager
async def bare_host(
    argv: list[str], env: dict[str, str], cwd: str, stderr: int | Any = subprocess.DEVNULL
) -> AsyncIterator[BareHost]:
    """``argv`` started as a host starts a stdio server (``env`` its whole environment), handshaken."""
    proc = await trio.lowlevel.open_process(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=cwd
    )
    try:
        host = BareHost(proc)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host._read)
            init = await host.request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "bare", "version": "1"},
                },
            )
            host.protocol = str(init.get("protocolVersion", ""))
            await host.notify("notifications/initialized")
            yield host
            await host._stdin.aclose()
            with trio.move_on_after(CLOSE_TIMEOUT):
                await proc.wait()
            nursery.cancel_scope.cancel()
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
                await proc.wait()


def host_env() -> dict[str, str]:
    """The environment an SDK host gives its stdio servers (its default set), as the SDK builds it."""
    from mcp.client.stdio import get_default_environment

    return {**get_default_environment(), **({"PYTHONPATH": p} if (p := os.environ.get("PYTHONPATH")) else {})}
