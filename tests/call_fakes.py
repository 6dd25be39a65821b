"""A tool call's path in one process, over fakes: the supervisor's router and call table (a real
registry and call table; a server with one worker, whose sends are collected), and a worker's
``Calls`` serving an ``Invoke`` on the stdio hot path (the server's lines collected, answered here).
For the tests of what travels along that path (``tests/unit/test_tracing_paths.py``,
``tests/unit/test_sampling.py``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec
import trio
import trio.testing
from mcp import Client

from supervisor.config.load import SupervisorSettings
from supervisor.daemon.call_table import CallTable
from supervisor.daemon.registry import Registry
from supervisor.daemon.router import Router
from supervisor.daemon.servers.pool import Server
from supervisor.protocol import (
    Abort,
    CallTool,
    FrontReply,
    FrontStats,
    Invoke,
    InvokeFailed,
    WorkerEvent,
    WorkerTool,
    decode_worker_command,
)
from supervisor.shared.repeats import Repeats
from workers.calls import Calls
from workers.catalog import Catalog
from workers.own_requests import OwnRequests
from workers.stdio import StdioServer
from workers.uplink import Link

CALLER = b"agent"
WORKER = b"test/1/aa"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
WAIT = 5.0  # seconds any one wait may take


# ---------------------------------------------------------------- the supervisor


@dataclass
class FakeWorker:
    target: bytes = WORKER
    serving: bool = True


@dataclass
class FakeServer:
    """A server as the router sees it: ready or not, and the one worker it routes to."""

    name: str = "test"
    state: str = "ready"
    spec: Any = field(default_factory=lambda: type("Spec", (), {"tool_timeout": 30.0})())

    def route(self, client: str, avoid: Sequence[object] = ()) -> FakeWorker:
        return FakeWorker()

    def why_unavailable(self) -> str:
        return f"server {self.name!r} is {self.state}"


class Supervisor:
    """A router over a real registry and call table; what it sent to workers and callers."""

    def __init__(self, *, state: str = "ready", max_calls_per_client: int = 1000) -> None:
        self.to_workers: list[tuple[bytes, bytes]] = []
        self.replies: list[tuple[bytes, FrontReply]] = []
        settings = SupervisorSettings(max_calls_per_client=max_calls_per_client)
        repeats = Repeats(logging.getLogger("test_tracing_paths"), clock=lambda: 0.0)
        self.calls = CallTable(self._reply, lambda: settings, FrontStats(), repeats, lambda: ["test"])
        registry = Registry()
        registry.replace("test", [WorkerTool(name="echo", input_schema={"type": "object"})])
        self.router = Router(
            registry=registry,
            servers=cast(dict[str, Server], {"test": FakeServer(state=state)}),
            calls=self.calls,
            send=lambda identity, payload: self.to_workers.append((identity, payload)),
            reply=self._reply,
            draining=lambda: False,
            clock=lambda: 0.0,
            deadline_added=lambda deadline: None,
        )

    def _reply(self, caller: bytes, reply: FrontReply) -> None:
        self.replies.append((caller, reply))

    def call(
        self, id: int = 1, name: str = "mcp_test_echo", traceparent: str = TRACEPARENT, **more: str
    ) -> None:
        self.router.call(CALLER, CallTool(id=id, name=name, traceparent=traceparent, **more))

    def invokes(self) -> list[Invoke]:
        sent = [decode_worker_command(payload) for _, payload in self.to_workers]
        return [command for command in sent if isinstance(command, Invoke)]


# ---------------------------------------------------------------- the worker


class FakeLink:
    def __init__(self) -> None:
        self.sent: list[WorkerEvent] = []

    def send(self, event: WorkerEvent) -> None:
        self.sent.append(event)

    def fail(self, call: int, code: str, message: str) -> None:
        self.sent.append(InvokeFailed(call=call, code=code, message=message))


class FakeStdio:
    """A stdio server as ``Calls`` sees it: the worker's own requests, whose lines are collected."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.written = trio.Event()
        self.own = OwnRequests(self._write)
        self.hung_up = False  # the server went first (closed its stdout or exited)
        self.read_upto: int | None = None  # once it "exited": the lines it read (``StdioServer.read_upto``)

    def never_read(self, sent_at: int | None) -> bool:
        return sent_at is None or (self.read_upto is not None and sent_at >= self.read_upto)

    def _write(self, line: bytes, *, at_once: bool = False) -> int:
        self.lines.append(json.loads(line))
        self.written.set()
        return len(self.lines) - 1  # where it begins, in lines (all a fake needs)

    def answer(self, result: dict[str, Any]) -> None:
        request = self.lines[-1]
        line = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).encode()
        assert self.own.take(line)


async def _lost(during: str) -> None:
    raise AssertionError(f"the session was lost during {during}")


def invoke(call: int, arguments: object, traceparent: str = "") -> Invoke:
    raw = msgspec.Raw(msgspec.msgpack.encode(arguments))
    return Invoke(call=call, tool="echo", arguments=raw, budget=60.0, traceparent=traceparent)


async def serve(server: FakeStdio, command: Invoke, *, abort: bool = False) -> FakeLink:
    """One ``Invoke`` served on the hot path; the server answers it (or it is aborted)."""
    link = FakeLink()
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            calls = Calls(cast(Link, link), nursery, cast(StdioServer, server), cast(Catalog, None), _lost)
            calls.ready(cast(Client, object()), [WorkerTool(name="echo", input_schema={"type": "object"})])
            calls.invoke(command)
            await trio.testing.wait_all_tasks_blocked()
            if server.lines and abort:
                calls.abort(Abort(call=command.call))
            elif server.lines:
                server.answer({"content": [{"type": "text", "text": "hi"}]})
    return link
