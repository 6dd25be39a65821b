"""Clients nobody here wrote, against a real supervisor: malformed frames, floods, clients that never read.

Each malformed message gets ``BAD_REQUEST`` (with its id, when one can be read) and harms nothing: the
supervisor keeps answering, every worker keeps its pid. Past ``maxCallsPerClient`` or
``maxCallsInFlight`` a request is answered ``OVERLOADED`` at once; a client that never reads its replies
has them dropped past ``maxQueuedReplies`` (its calls in flight with them), and the supervisor's memory
stays flat; a storm of one kind of failure writes a few log lines a second, each with a count.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from supervisor.protocol import (
    CallResult,
    ErrorReply,
    ListTools,
    Ping,
    ToolList,
    encode,
)
from tests.e2e.harness import (
    SupervisorProcess,
    assert_unharmed,
    poll,
    raw_call,
    raw_client,
    rss_kb,
    stdio_test_server,
    worker_pids,
)
from tests.hostile import deep, mp, mp_map, mp_str

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
LEGACY_SERVER = Path(__file__).parent.parent / "servers" / "legacy_server.py"
REPLY_TIMEOUT = 10.0  # seconds for one reply on a raw socket


BAD_UTF8 = b"\xff\xfe bad"

# Messages that killed the supervisor before every decode was total (UnicodeDecodeError, RecursionError
# escaped ``except msgspec.DecodeError``), with the id their BAD_REQUEST reply must carry.
MALFORMED: dict[str, tuple[bytes, int]] = {
    "invalid UTF-8 in a resource URI": (
        mp_map(
            (mp("type"), mp("ReadResource")),
            (mp("id"), mp(5)),
            (mp("server"), mp("test")),
            (mp("uri"), mp_str(BAD_UTF8)),
        ),
        5,
    ),
    "invalid UTF-8 in the tool name": (
        mp_map((mp("type"), mp("CallTool")), (mp("id"), mp(6)), (mp("name"), mp_str(BAD_UTF8))),
        6,
    ),
    "invalid UTF-8 in the tag": (mp_map((mp("id"), mp(7)), (mp("type"), mp_str(BAD_UTF8))), 7),
    "1000-deep arguments": (
        mp_map(
            (mp("type"), mp("CallTool")),
            (mp("id"), mp(8)),
            (mp("name"), mp("mcp_test_echo")),
            (mp("arguments"), mp_map((mp("text"), deep(1000)))),
        ),
        8,
    ),
    "1000-deep unknown field": (
        mp_map((mp("type"), mp("Ping")), (mp("id"), mp(9)), (mp("x"), deep(1000))),
        9,
    ),
    "the id after 3000-deep nesting": (
        mp_map((mp("type"), mp("Ping")), (mp("x"), deep(3000)), (mp("id"), mp(13))),
        13,
    ),
    "1000-deep under an unknown tag": (mp_map((mp("x"), deep(1000)), (mp("type"), mp("Nope"))), 0),
    "1000-deep top level": (deep(1000), 0),
    "7 KB of nested maps": (b"\x81\xa1k" * 2400 + b"\xc0", 0),
    "truncated": (mp({"type": "Ping", "id": 10})[:-1], 0),
    "not msgpack": (b"\xc1 this is not msgpack", 0),
    "a string for a number": (mp({"type": "Ping", "id": "eleven"}), 0),
    "a float for the id": (mp({"type": "Ping", "id": 1.5}), 0),
    # Not a request, so its id is looked for: the old salvage decoded everything and met the bad string.
    "a wrong field, then invalid UTF-8": (
        mp_map((mp("type"), mp("Ping")), (mp("id"), mp("x")), (mp("note"), mp_str(BAD_UTF8))),
        0,
    ),
    "a map key that is not a string": (
        mp_map((mp("type"), mp("Ping")), (mp("id"), mp(12)), (mp(3), mp(1))),
        12,
    ),
}


# ---------------------------------------------------------------- raw client


@pytest.fixture(scope="module")
def target(start_module_supervisor: Callable[..., SupervisorProcess]) -> SupervisorProcess:
    return start_module_supervisor({"test": stdio_test_server()})


def logged(sup: SupervisorProcess, what: str) -> int:
    """How many lines of a kind the log stands for: those written, plus the counts of those held back."""
    total = 0
    for line in sup.log.splitlines():
        if what in line:
            held_back = re.search(r" (\d+) more ", line)
            total += int(held_back.group(1)) if held_back else 1
    return total


# ----------------------------------------------------------------- malformed


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_message_gets_bad_request_with_its_id_and_harms_nothing(
    target: SupervisorProcess, case: str
) -> None:
    payload, id = MALFORMED[case]
    pids = worker_pids(target)
    with raw_client(target.endpoint) as raw:
        raw.send(payload)
        reply = raw.recv()
        assert isinstance(reply, ErrorReply), reply
        assert (reply.code, reply.id) == ("BAD_REQUEST", id)
        raw.send(Ping(id=99))  # the same connection still works
        assert raw.recv().id == 99
    assert_unharmed(target, pids)


def test_a_message_past_the_size_limit_drops_only_that_connection(target: SupervisorProcess) -> None:
    pids = worker_pids(target)
    with raw_client(target.endpoint) as raw:
        raw.send(b"\xc1" * (64 * 1024 * 1024 + 1))  # MAX_MESSAGE_SIZE + 1: zmq drops the connection
    with raw_client(target.endpoint) as raw:
        raw.send(Ping(id=3))
        assert raw.recv().id == 3
    assert_unharmed(target, pids)


def test_messages_of_many_frames_are_dropped_and_the_connection_serves_on(target: SupervisorProcess) -> None:
    pids = worker_pids(target)
    with raw_client(target.endpoint) as raw:
        raw.sock.send_multipart([b"", b"two frames"])
        raw.sock.send_multipart([encode(Ping(id=1))] * 3)
        raw.send(Ping(id=4))
        assert raw.recv().id == 4
    assert_unharmed(target, pids)


def test_a_flood_of_5000_malformed_frames_is_answered_and_logged_in_a_few_lines(
    start_supervisor: Start,
) -> None:
    # Every reply is read, but only once all are sent: room for them all, whatever the machine's speed.
    sup = start_supervisor(
        {"test": stdio_test_server()}, settings={"maxQueuedReplies": 10_000}, log_level="info"
    )
    pids = worker_pids(sup)
    with raw_client(sup.endpoint, RCVHWM=0) as raw:
        for _ in range(5000):
            raw.send(b"\xc1")
        replies = [raw.recv() for _ in range(5000)]
    assert {(type(reply).__name__, getattr(reply, "code", "")) for reply in replies} == {
        ("ErrorReply", "BAD_REQUEST")
    }
    assert_unharmed(sup, pids)
    assert poll(
        "every malformed frame counted in the log", lambda: logged(sup, "malformed request") == 5000, 5
    )
    lines = [line for line in sup.log.splitlines() if "malformed request" in line]
    assert 1 <= len(lines) <= 30, lines[:40]
    front = sup.client.front_stats()
    assert front.malformed >= 5000


# ---------------------------------------------------------------- overload


def test_a_request_past_the_clients_bound_is_answered_overloaded_at_once(start_supervisor: Start) -> None:
    sup = start_supervisor(
        {"test": stdio_test_server()},
        settings={"maxCallsPerClient": 3, "maxCallsInFlight": 5, "shutdownGrace": 0.5},
    )
    with raw_client(sup.endpoint) as greedy, raw_client(sup.endpoint) as other:
        for id in (1, 2, 3):
            greedy.send(raw_call(id, "mcp_test_slow", {"seconds": 30, "tag": f"t{id}"}, timeout=2))
        greedy.send(raw_call(4, "mcp_test_echo", {"text": "one too many"}))
        reply = greedy.recv(timeout=1.5)  # before any of the three could have ended
        assert isinstance(reply, ErrorReply) and (reply.id, reply.code) == (4, "OVERLOADED")
        assert "maxCallsPerClient" in reply.message
        # Another client has its own bound, up to everyone's (5 in flight).
        other.send(raw_call(1, "mcp_test_slow", {"seconds": 30, "tag": "o1"}, timeout=2))
        other.send(raw_call(2, "mcp_test_slow", {"seconds": 30, "tag": "o2"}, timeout=2))
        other.send(raw_call(3, "mcp_test_echo", {"text": "past everyone's bound"}))
        reply = other.recv(timeout=1.5)
        assert isinstance(reply, ErrorReply) and (reply.id, reply.code) == (3, "OVERLOADED")
        assert "maxCallsInFlight" in reply.message
        # Timed-out calls give their places back.
        codes = sorted(getattr(greedy.recv(), "code", "") for _ in range(3))
        assert codes == ["TIMEOUT"] * 3
        greedy.send(raw_call(5, "mcp_test_echo", {"text": "room again"}))
        assert isinstance(greedy.recv(), CallResult)
    front = sup.client.front_stats()
    assert front.overloaded == 2
    status = subprocess.run(
        [sys.executable, "-m", "supervisor", "status", "--endpoint", sup.endpoint],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "2 refused (OVERLOADED)" in status.stdout


def test_a_flood_of_reload_requests_costs_one_reload_per_wait(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server()}, log_level="info")
    pids = worker_pids(sup)
    with raw_client(sup.endpoint) as raw:
        for id in range(1, 201):
            raw.send(msgspec.msgpack.encode({"type": "Reload", "id": id}))
        replies = [raw.recv(timeout=30) for _ in range(200)]
    assert sorted(reply.id for reply in replies) == list(range(1, 201))
    assert {type(reply).__name__ for reply in replies} == {"Reloaded"}
    assert sup.log.count("reload of ") <= 3  # the first, and the one the other 199 joined
    assert_unharmed(sup, pids)


# ------------------------------------------------------ clients that never read


def test_a_client_that_never_reads_its_replies_has_them_dropped_and_memory_stays_flat(
    start_supervisor: Start,
) -> None:
    sup = start_supervisor(
        {"test": stdio_test_server(TEST_SERVER_EXTRA_TOOLS=40)},
        settings={"maxQueuedReplies": 50, "shutdownGrace": 0.5},
        log_level="info",
    )
    pids = worker_pids(sup)
    tool_list = encode(ListTools(id=1))
    assert len(encode(ToolList(id=1, tools=sup.client.list_tools()))) > 5000  # ~50 MB for 10,000
    before = rss_kb(sup.process.pid)
    with raw_client(sup.endpoint, RCVHWM=1, SNDHWM=0) as sink:
        for id in (1, 2, 3):  # in flight when the flood starts: dropped with the replies
            sink.send(raw_call(id, "mcp_test_slow", {"seconds": 10, "tag": f"s{id}"}, timeout=30))
        poll("three calls in flight", lambda: sup.client.front_stats().in_flight == 3, 10)
        for _ in range(10_000):
            sink.sock.send(tool_list)

        def flooded() -> bool:
            return sup.client.front_stats().dropped_replies >= 9000

        poll("the flood's replies to be dropped", flooded, 60)
        after = rss_kb(sup.process.pid)
        front = sup.client.front_stats()
        assert front.dropped_calls == 3 and front.in_flight == 0
    assert after - before < 20_000, f"supervisor RSS grew from {before} kB to {after} kB"
    assert_unharmed(sup, pids)
    lines = [line for line in sup.log.splitlines() if "does not read its replies" in line]
    assert 1 <= len(lines) <= 30, lines[:40]


# ------------------------------------------------------------ failure storms


def test_a_storm_of_5000_timeouts_writes_a_few_log_lines_not_5000(start_supervisor: Start) -> None:
    sup = start_supervisor(
        {"old": {"command": sys.executable, "args": [str(LEGACY_SERVER)]}},
        settings={"maxCallsPerClient": 10_000, "maxQueuedReplies": 10_000, "shutdownGrace": 0.5},
        log_level="info",
    )
    with raw_client(sup.endpoint, RCVHWM=0) as raw:
        # The server reads nothing while it sleeps: the echoes queue up behind it and time out.
        raw.send(raw_call(1, "mcp_old_sleep", {"seconds": 30}, timeout=3))
        for id in range(2, 5002):
            raw.send(raw_call(id, "mcp_old_echo", {"text": "queued"}, timeout=0.5))
        replies = sorted((raw.recv(timeout=60) for _ in range(5001)), key=lambda reply: reply.id)
    codes = [reply.code if isinstance(reply, ErrorReply) else type(reply).__name__ for reply in replies]
    # A few echoes may reach the server before the sleep (the worker's tasks start in any order).
    timeouts = codes.count("TIMEOUT")
    assert timeouts >= 4000 and set(codes) <= {"TIMEOUT", "CallResult"}, {c: codes.count(c) for c in codes}
    # Most are the worker's TIMEOUT answers; on a loaded machine the supervisor's deadline timer may
    # answer some first (a margin past the budget), logged as "no answer by the deadline".
    kinds = ("TIMEOUT", "by the deadline")
    counted = lambda: sum(logged(sup, kind) for kind in kinds)  # noqa: E731
    assert poll("every timeout counted in the log", lambda: counted() == timeouts, 5), counted()
    lines = [line for line in sup.log.splitlines() if any(kind in line for kind in kinds)]
    assert 1 <= len(lines) <= 30, lines[:40]
