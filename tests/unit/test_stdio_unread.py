"""Which requests a stdio server that died can have read: ``StdioServer.never_read``.

Real server processes (small Python programs), killed with SIGKILL: a request still in the pipe
when the server died, or written after, never reached it (the supervisor may send its call to the
next server); one it began to read, or one a process it left behind may still read, may have run.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Awaitable, Callable

import trio
import trio.testing

from workers.server_errors import ConnectionClosed
from workers.stdio import StdioServer

WAIT = 10.0  # seconds any one test may take

READS_ONE_BYTE = """
import os, sys, time
os.read(0, 1)
sys.stderr.write("read\\n"); sys.stderr.flush()
time.sleep(60)
"""
NEVER_READS = """
import sys, time
sys.stderr.write("up\\n"); sys.stderr.flush()
time.sleep(60)
"""
CLOSES_STDIN = """
import os, sys, time
os.close(0)
sys.stderr.write("up\\n"); sys.stderr.flush()
time.sleep(60)
"""
LEAVES_A_READER = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.DEVNULL)
sys.stderr.write("up\\n"); sys.stderr.flush()
time.sleep(60)
"""


class Requests:
    """Requests of the worker's own sent to ``server``, each ending in ``ConnectionClosed``."""

    def __init__(self, server: StdioServer, nursery: trio.Nursery) -> None:
        self._server = server
        self._nursery = nursery
        self.closed: dict[str, ConnectionClosed] = {}
        self.all_closed = trio.Event()
        self._count = 0

    def send(self, name: str) -> None:
        self._count += 1

        async def request() -> None:
            try:
                await self._server.own.request("tools/call", {"name": name, "arguments": {}})
            except ConnectionClosed as exc:
                self.closed[name] = exc
                if len(self.closed) == self._count:
                    self.all_closed.set()
            else:
                raise AssertionError(f"{name} was answered")

        self._nursery.start_soon(request)

    def never_read(self, name: str) -> bool:
        return self._server.never_read(self.closed[name].sent_at)


def _server(program: str, said: trio.Event) -> StdioServer:
    def on_stderr(line: str) -> None:
        if line in ("read", "up"):
            said.set()

    return StdioServer(sys.executable, ["-c", program], env={}, cwd=None, on_stderr=on_stderr)


Body = Callable[[StdioServer, Requests, trio.Event], Awaitable[None]]


async def _with_server(program: str, body: Body) -> None:
    said = trio.Event()
    server = _server(program, said)
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery, server.connect(lambda line: True):
            requests = Requests(server, nursery)
            await body(server, requests, said)


async def test_a_request_the_server_began_to_read_may_have_run_and_one_behind_it_never_did() -> None:
    async def body(server: StdioServer, requests: Requests, said: trio.Event) -> None:
        requests.send("first")
        await said.wait()  # it read the first byte of the first request
        requests.send("second")
        await trio.testing.wait_all_tasks_blocked()  # the second is written
        os.kill(server.pid or 0, signal.SIGKILL)
        requests.send("after the kill")  # written to a pipe whose reader is dying or dead
        await requests.all_closed.wait()
        assert await server.exits()
        assert not requests.never_read("first")
        assert requests.never_read("second")
        assert requests.never_read("after the kill")
        requests.send("once closed")  # never written at all
        await trio.testing.wait_all_tasks_blocked()
        assert requests.closed["once closed"].sent_at is None and requests.never_read("once closed")

    await _with_server(READS_ONE_BYTE, body)


async def test_requests_a_server_never_read_never_reached_it() -> None:
    async def body(server: StdioServer, requests: Requests, said: trio.Event) -> None:
        await said.wait()
        for name in ("a", "b", "c"):
            requests.send(name)
        await trio.testing.wait_all_tasks_blocked()
        os.kill(server.pid or 0, signal.SIGKILL)
        await requests.all_closed.wait()
        assert await server.exits()
        assert server.read_upto == 0
        assert all(requests.never_read(name) for name in "abc")

    await _with_server(NEVER_READS, body)


async def test_a_process_left_holding_the_servers_stdin_may_read_on_so_nothing_is_known() -> None:
    async def body(server: StdioServer, requests: Requests, said: trio.Event) -> None:
        await said.wait()
        requests.send("queued")
        await trio.testing.wait_all_tasks_blocked()
        os.kill(server.pid or 0, signal.SIGKILL)  # the server alone: its child keeps the pipe
        await requests.all_closed.wait()
        assert await server.exits()
        assert server.read_upto is None
        assert not requests.never_read("queued")

    await _with_server(LEAVES_A_READER, body)


async def test_lines_the_pipe_refused_once_the_server_closed_its_stdin_never_reached_it() -> None:
    """The server closed its stdin and lives on: the pipe takes nothing more (EPIPE), on the write
    tried at once and on the writer's; only what the pipe took counts as what it could read."""

    async def body(server: StdioServer, requests: Requests, said: trio.Event) -> None:
        await said.wait()
        line = b'{"jsonrpc": "2.0", "method": "notifications/ping"}'
        at_once = server._write(line, at_once=True)  # the pipe is idle: tried at once
        queued = server._write(line)  # for the writer
        await trio.testing.wait_all_tasks_blocked()  # the writer met the broken pipe
        os.kill(server.pid or 0, signal.SIGKILL)
        assert await server.exits()
        assert server.read_upto == 0
        assert server.never_read(at_once) and server.never_read(queued)

    await _with_server(CLOSES_STDIN, body)
