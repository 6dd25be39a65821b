"""A host whose event stream breaks during a call gets the answer all the same, over HTTP.

The host (the SDK's client, handshake era) reaches ``serve --http`` through a TCP relay in this
process that cuts the connection carrying a ``tools/call`` shortly after its answer's event stream
began; the call (the test server's ``slow``) is still running then. The client resumes the stream
with ``Last-Event-ID`` (the facade primed it), and the facade replays what followed, then the
answer. The call is answered on the facade's fast path, so this is also its test. Without the facade
keeping its stream events, the call fails ("SSE stream ended without a response").
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trio

from tests.e2e.facade import HOST_WARNINGS, HttpFacade, http_host, text_of
from tests.e2e.harness import SupervisorProcess, stdio_test_server

pytestmark = [pytest.mark.e2e, *HOST_WARNINGS]

TOKEN = "resume-token"
CUT_AFTER = 0.3  # seconds after the call's answer stream began that its connection is cut
CALL_TIMEOUT = 30.0


@pytest.fixture
def facade(start_supervisor: Callable[..., SupervisorProcess], tmp_path: Path) -> Iterator[HttpFacade]:
    sup = start_supervisor({"t": stdio_test_server()})
    started = HttpFacade(tmp_path, sup.endpoint, TOKEN, "--log-level", "debug")
    yield started
    started.stop()


class Cutter:
    """A TCP relay to ``target`` that cuts each connection on which a ``tools/call`` goes out,
    ``CUT_AFTER`` seconds after the facade begins to answer it. Requests name the facade's own
    address in ``Host`` (the facade answers no other)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.cut = 0
        self.port = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._relay, listeners)

    async def _relay(self, client: trio.SocketStream) -> None:
        try:
            await self._pump(client)  # until either side goes away, or the cut
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # either side went away: so does the other

    async def _pump(self, client: trio.SocketStream) -> None:
        upstream = await trio.open_tcp_stream(*self.target)
        calling = trio.Event()
        async with client, upstream, trio.open_nursery() as pumps:
            ours, theirs = f"127.0.0.1:{self.port}".encode(), f"127.0.0.1:{self.target[1]}".encode()

            async def out() -> None:
                async for data in client:
                    data = data.replace(b"Host: " + ours, b"Host: " + theirs).replace(
                        b"host: " + ours, b"host: " + theirs
                    )
                    if b'"tools/call"' in data:
                        calling.set()
                    await upstream.send_all(data)

            async def back() -> None:
                async for data in upstream:
                    await client.send_all(data)
                    if calling.is_set() and not cutting.is_set():
                        cutting.set()

            cutting = trio.Event()

            async def cut() -> None:
                await cutting.wait()
                await trio.sleep(CUT_AFTER)  # the call runs on; its stream is what breaks
                self.cut += 1
                pumps.cancel_scope.cancel()

            pumps.start_soon(out)
            pumps.start_soon(back)
            pumps.start_soon(cut)


@asynccontextmanager
async def cutter(url: str) -> AsyncIterator[str]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    relay = Cutter((parts.hostname, parts.port))
    async with trio.open_nursery() as nursery:
        await nursery.start(relay.serve)
        yield f"http://127.0.0.1:{relay.port}{parts.path}"
        assert relay.cut >= 1, "the relay never cut a call's stream"
        nursery.cancel_scope.cancel()


async def test_a_call_whose_stream_breaks_is_answered_on_the_resumed_stream(facade: HttpFacade) -> None:
    async with cutter(facade.url) as url, http_host(url, TOKEN) as host:
        with trio.fail_after(CALL_TIMEOUT):
            result = await host.call_tool("mcp_t_slow", {"seconds": 1.5, "tag": "resumed"})
        assert not result.is_error, text_of(result)
        assert text_of(result) == "done resumed"
    # the call took the fast path, which primes a session's stream as the SDK's does, and delivers
    # the answer on the stream the host resumed before the answer came
    assert "tools/call of protocol 2025-11-25 answered on the fast path" in facade.stderr
