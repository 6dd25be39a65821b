"""Hypothesis against real processes: generated frames at a supervisor's front socket, and at a worker's link.

The front: arbitrary bytes, msgpack of any shape, front requests with fields of the wrong shapes,
strings that are not UTF-8, nesting thousands deep, tool calls with arguments of any kind (relayed to
the worker, which decodes them), several frames at once, and frames of megabytes. After every example
the same connection's ``Ping`` is answered (so every frame before it was handled); after the run the
supervisor answers, the server is ready with the same worker and answers a call, the supervisor's
memory grew by less than a bound, and stopping it leaves no process behind.

The worker link: a test plays the supervisor (a ROUTER of its own) for a real worker process and its
server, and throws the same frames at the worker; after each, the worker still answers a heartbeat;
after the run it still serves a call. A boot line that is not a ``WorkerBoot`` ends the worker with
``START_FAILED`` and a line naming the problem.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.config.load import parse_config
from supervisor.protocol import (
    HEARTBEAT,
    Abort,
    CallTool,
    Done,
    Heartbeat,
    Invoke,
    InvokeFailed,
    InvokeResult,
    Ping,
    Ready,
    ToolResult,
    decode_worker_event,
    encode,
)
from supervisor.shared.boot import WorkerBoot, WorkerExit
from tests.e2e.harness import (
    SupervisorProcess,
    alive,
    assert_unharmed,
    poll,
    raw_client,
    rss_kb,
    stdio_test_server,
    worker_pids,
)
from tests.hostile import deep, front_like, mp, mp_map, mp_str, msgpack_tree

pytestmark = pytest.mark.e2e

EXAMPLES = 400  # per fuzz test: about 10 ms each against a real supervisor
RSS_GROWTH_BOUND_KB = 50_000  # what a fuzz run may add to the supervisor's memory
REPLY_TIMEOUT = 10.0  # seconds for the Ping that follows each example


def frames_strategy() -> st.SearchStrategy[list[bytes]]:
    one = st.one_of(
        st.binary(max_size=2000),
        msgpack_tree(),
        front_like(),
        st.integers(500, 5000).map(deep),
        st.builds(
            lambda id, bad: mp_map(
                (mp("type"), mp("CallTool")), (mp("id"), mp(id)), (mp("name"), mp_str(bad))
            ),
            st.integers(0, 2**32),
            st.binary(min_size=1, max_size=40),
        ),
        # Aborts of calls nobody has: a BAD_REQUEST at the front (not a front request), ignored by a worker.
        st.integers(0, 2**64 - 1).map(lambda call: encode(Abort(call=call))),
        # A call with arguments of any kind goes through to the worker, which decodes them.
        st.builds(
            lambda arguments: encode(CallTool(id=1, name="mcp_test_echo", arguments=msgspec.Raw(arguments))),
            st.one_of(
                msgpack_tree(), st.integers(100, 3000).map(lambda levels: mp_map((mp("text"), deep(levels))))
            ),
        ),
    )
    return st.one_of(one.map(lambda frame: [frame]), st.lists(one, min_size=2, max_size=4))


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def fuzzed(start_module_supervisor: Callable[..., SupervisorProcess]) -> Iterator[SupervisorProcess]:
    sup = start_module_supervisor({"test": stdio_test_server()}, log_level="info")
    yield sup
    pids = [pid for row in sup.status().values() for pid in (row.worker_pid, row.server_pid)]
    assert sup.stop() == 0
    poll("every worker and server to be gone", lambda: not [pid for pid in pids if alive(pid)], 10)


def test_generated_frames_at_the_front_socket_harm_nothing(fuzzed: SupervisorProcess) -> None:
    pids = worker_pids(fuzzed)
    before = rss_kb(fuzzed.process.pid)
    pings = iter(range(2**62, 2**63))  # ids no generated frame is likely to use
    with raw_client(fuzzed.endpoint, RCVHWM=0) as raw:

        @FUZZ
        @given(frames=frames_strategy())
        def throw(frames: list[bytes]) -> None:
            raw.sock.send_multipart(frames)
            ping = next(pings)
            raw.send(Ping(id=ping))
            deadline = time.monotonic() + REPLY_TIMEOUT
            while not isinstance(reply := raw.recv(deadline - time.monotonic()), Done) or reply.id != ping:
                pass  # replies to the generated frames (BAD_REQUEST, most of them)

        throw()
    assert_unharmed(fuzzed, pids)
    grown = rss_kb(fuzzed.process.pid) - before
    assert grown < RSS_GROWTH_BOUND_KB, f"supervisor RSS grew by {grown} kB"


@pytest.mark.parametrize("megabytes", [1, 16, 63])
def test_frames_of_megabytes_harm_nothing(fuzzed: SupervisorProcess, megabytes: int) -> None:
    pids = worker_pids(fuzzed)
    garbage = os.urandom(megabytes * 1024 * 1024)
    with raw_client(fuzzed.endpoint) as raw:
        raw.send(garbage)
        raw.send(Ping(id=1))
        while (reply := raw.recv()).id != 1:
            pass
        raw.send(mp_map((mp("type"), mp("CallTool")), (mp("id"), mp(2)), (mp("name"), mp_str(garbage))))
        raw.send(Ping(id=3))
        while (reply := raw.recv()).id != 3:
            pass
    assert isinstance(reply, Done)
    assert_unharmed(fuzzed, pids)


# ------------------------------------------------------------ the worker's link


class PlayedSupervisor:
    """A ROUTER that plays the supervisor for one real worker process (and its real server)."""

    def __init__(self, tmp: Path) -> None:
        self.ctx = zmq.Context()
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        endpoint = f"ipc://{tmp}/link.sock"
        self.router.bind(endpoint)
        config = parse_config(msgspec.json.encode({"mcpServers": {"test": stdio_test_server()}}))
        self.identity = b"test/1/fuzz"
        self.boot = WorkerBoot(
            server="test", endpoint=endpoint, identity=self.identity.decode(), spec=config.servers["test"]
        )
        self.stderr_path = tmp / "worker.stderr"
        with self.stderr_path.open("wb") as stderr:
            self.worker = subprocess.Popen(
                [sys.executable, "-m", "workers", "test"], stdin=subprocess.PIPE, stderr=stderr
            )
        assert self.worker.stdin is not None
        self.worker.stdin.write(msgspec.json.encode(self.boot) + b"\n")
        self.worker.stdin.flush()

    def receive(self, timeout: float = REPLY_TIMEOUT) -> object:
        if not self.router.poll(int(timeout * 1000)):
            pytest.fail(f"the worker said nothing for {timeout} s:\n{self.stderr_path.read_text()}")
        identity, payload = self.router.recv_multipart()
        assert identity == self.identity
        return decode_worker_event(payload)

    def receive_until(self, kind: type | tuple[type, ...], timeout: float = REPLY_TIMEOUT) -> object:
        deadline = time.monotonic() + timeout
        while not isinstance(event := self.receive(max(0.0, deadline - time.monotonic())), kind):
            pass
        return event

    def send(self, *frames: bytes) -> None:
        self.router.send_multipart([self.identity, *frames])

    def close(self) -> None:
        assert self.worker.stdin is not None
        self.worker.stdin.write(b"stop\n")
        self.worker.stdin.close()
        try:
            self.worker.wait(20)
        except subprocess.TimeoutExpired:
            self.worker.kill()
            self.worker.wait(5)
            pytest.fail("the worker did not stop within 20 s of its lifeline closing")
        finally:
            self.router.close()
            self.ctx.term()


@pytest.fixture
def played(tmp_path: Path) -> Iterator[PlayedSupervisor]:
    link = PlayedSupervisor(tmp_path)
    try:
        link.receive_until(Ready, timeout=60)
        yield link
    finally:
        link.close()


def test_generated_frames_at_a_workers_link_harm_nothing(played: PlayedSupervisor) -> None:
    @FUZZ
    @given(frames=frames_strategy())
    def throw(frames: list[bytes]) -> None:
        played.send(*frames)
        played.send(HEARTBEAT)
        played.receive_until(Heartbeat)

    throw()
    invoke = Invoke(call=7, tool="echo", arguments=msgspec.Raw(mp({"text": "still serving"})), budget=10)
    played.send(encode(invoke))
    result = played.receive_until(InvokeResult)
    assert isinstance(result, InvokeResult) and result.call == 7
    assert msgspec.msgpack.decode(result.result, type=ToolResult).text == "still serving"
    assert played.worker.poll() is None


def test_invoke_with_arguments_of_any_kind_is_answered_and_the_worker_serves_on(
    played: PlayedSupervisor,
) -> None:
    calls = iter(range(1, 10**9))

    @FUZZ
    @given(
        arguments=st.one_of(
            msgpack_tree(), st.integers(100, 3000).map(lambda n: mp_map((mp("text"), deep(n))))
        )
    )
    def throw(arguments: bytes) -> None:
        call = next(calls)
        played.send(encode(Invoke(call=call, tool="echo", arguments=msgspec.Raw(arguments), budget=10)))
        answer = played.receive_until((InvokeResult, InvokeFailed))
        assert getattr(answer, "call", None) == call
        if isinstance(answer, InvokeFailed):
            assert answer.code == "INVALID_ARGUMENTS", answer

    throw()
    assert played.worker.poll() is None


def test_a_boot_line_that_is_not_a_worker_boot_ends_the_worker_saying_why(tmp_path: Path) -> None:
    for line in (b"\xff\xfe not JSON\n", b"[" * 5000 + b"\n", b'{"server": 5}\n'):
        worker = subprocess.run(
            [sys.executable, "-m", "workers", "test"],
            input=line,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert worker.returncode == WorkerExit.START_FAILED, worker.stderr
        assert b"bad boot message on stdin" in worker.stderr
