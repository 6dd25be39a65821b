"""A server's log in the supervisor: the ring buffer, the book of every server's ring, the worker log
lines that go in it, and the ``GetLogs`` / ``Shutdown`` requests on the wire."""

from __future__ import annotations

import logging
import math

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.daemon.servers.worker_log import RING_CHARS, RING_LINES, LogBook, LogRing, WorkerLog
from supervisor.protocol import (
    LOG_LIMIT,
    ErrorReply,
    GetLogs,
    LogLines,
    Shutdown,
    decode_front_reply,
    decode_front_request,
    encode,
)


def test_lines_are_numbered_from_1_and_the_tail_is_the_newest_after_a_sequence_number() -> None:
    ring = LogRing()
    for i in range(1, 8):
        ring.add("files", "server", f"line {i}")
    assert ring.last == 7
    assert [line.text for line in ring.tail()] == [f"line {i}" for i in range(1, 8)]
    assert [line.seq for line in ring.tail(limit=3)] == [5, 6, 7]  # the newest three, oldest first
    assert [line.seq for line in ring.tail(after=5)] == [6, 7]
    assert [line.seq for line in ring.tail(after=2, limit=2)] == [6, 7]
    assert ring.tail(after=7) == [] and ring.tail(limit=0) == []


def test_the_ring_keeps_the_newest_lines_within_its_bounds_of_lines_and_characters() -> None:
    ring = LogRing(lines=5, chars=100)
    for i in range(1, 21):
        ring.add("files", "server", f"{i:02}")
    assert [line.seq for line in ring.tail()] == [16, 17, 18, 19, 20] and len(ring) == 5
    ring.add("files", "server", "x" * 60)
    ring.add("files", "server", "y" * 60)  # 120 characters: the older one goes
    assert [line.text[0] for line in ring.tail()] == ["y"] and ring.last == 22
    ring.add("files", "server", "z" * 500)  # longer than the bound alone: kept, as the only line
    assert [line.seq for line in ring.tail()] == [23]


@given(st.lists(st.text(max_size=50), max_size=60), st.integers(0, 70), st.integers(0, 70))
def test_the_ring_never_exceeds_its_bounds_and_its_tail_is_in_order(
    texts: list[str], after: int, limit: int
) -> None:
    ring = LogRing(lines=10, chars=120)
    for text in texts:
        ring.add("w", "server", text)
    kept = ring.tail()
    assert len(kept) <= 10
    assert len(kept) <= 1 or sum(len(line.text) for line in kept) <= 120
    assert [line.seq for line in kept] == list(range(len(texts) - len(kept) + 1, len(texts) + 1))
    newer = [line for line in kept if line.seq > after]
    assert ring.tail(after, limit) == (newer[max(0, len(newer) - limit) :] if limit else [])


def test_the_default_bounds_are_a_thousand_lines_and_256_kib() -> None:
    assert (RING_LINES, RING_CHARS) == (LOG_LIMIT, 256 * 1024) == (1000, 262144)


def test_worker_lines_go_to_the_ring_labelled_server_lines_and_warnings_and_errors_only() -> None:
    ring = LogRing()
    replica = WorkerLog("files#2", ring)
    replica.line("S the server's own line \x1b[31m")
    replica.line(f"{logging.INFO} an info line of the worker")
    replica.line(f"{logging.DEBUG} a debug line")
    replica.line(f"{logging.WARNING} a warning")
    replica.line(f"{logging.ERROR} an error")
    replica.line(f"{logging.CRITICAL} worker failed: KeyError: 'x'")  # its last word
    replica.line("Traceback (most recent call last):")  # before logging was set up
    WorkerLog("files@agent-7", ring).line("S a session's line")
    shown = [(line.worker, line.stream, line.level, line.text) for line in ring.tail()]
    assert shown == [
        ("files#2", "server", "", "the server's own line \x1b[31m"),
        ("files#2", "worker", "WARNING", "a warning"),
        ("files#2", "worker", "ERROR", "an error"),
        ("files#2", "worker", "ERROR", "worker failed: KeyError: 'x'"),
        ("files#2", "worker", "", "Traceback (most recent call last):"),
        ("files@agent-7", "server", "", "a session's line"),
    ]


def test_the_ring_outlives_a_worker_incarnation() -> None:
    book = LogBook()
    worker = WorkerLog("files", book.ring("files"))
    worker.line("S crashing with 3")
    worker.reset()  # the next incarnation: its crash report starts afresh, the ring does not
    worker.line("S hello again")
    assert worker.report() == "hello again"
    assert [line.text for line in book.ring("files").tail()] == ["crashing with 3", "hello again"]


def test_get_logs_answers_the_tail_and_an_unknown_server_by_name() -> None:
    book = LogBook()
    for i in range(1, 1201):
        book.ring("files").add("files", "server", f"line {i}")
    reply = book.answer(GetLogs(id=1, server="files", after=0, limit=5000), ["files", "time"])
    assert isinstance(reply, LogLines)
    assert len(reply.log.lines) == LOG_LIMIT and reply.log.lines[-1].seq == reply.log.last == 1200
    none_yet = book.answer(GetLogs(id=2, server="time", limit=0), ["files", "time"])
    assert isinstance(none_yet, LogLines) and (none_yet.log.lines, none_yet.log.last) == ([], 0)
    unknown = book.answer(GetLogs(id=3, server="nobody"), ["files", "time"])
    assert unknown == ErrorReply(
        id=3, code="UNKNOWN_TOOL", message="no server named 'nobody' (servers: files, time)"
    )


def test_get_logs_and_its_reply_cross_the_wire() -> None:
    book = LogBook()
    book.ring("files").add("files#1", "worker", "a warning", "WARNING")
    request = decode_front_request(encode(GetLogs(id=4, server="files", after=0, limit=10)))
    assert isinstance(request, GetLogs)
    reply = book.answer(request, ["files"])
    assert decode_front_reply(encode(reply)) == reply


@pytest.mark.parametrize(
    "fields",
    [
        {"server": "files", "after": -1},
        {"server": "files", "limit": -5},
        {"server": 3},
        {"server": "files", "limit": "all"},
    ],
)
def test_a_get_logs_with_bad_fields_does_not_decode(fields: dict[str, object]) -> None:
    with pytest.raises(msgspec.DecodeError):
        decode_front_request(msgspec.msgpack.encode({"type": "GetLogs", "id": 1, **fields}))


def test_shutdown_takes_no_grace_or_one_from_0_to_a_day() -> None:
    assert decode_front_request(encode(Shutdown(id=1))) == Shutdown(id=1, grace=None)
    assert decode_front_request(encode(Shutdown(id=1, grace=2.5))) == Shutdown(id=1, grace=2.5)
    for grace in (-1.0, math.nan, math.inf, 86401.0, "soon"):
        with pytest.raises(msgspec.DecodeError):
            decode_front_request(msgspec.msgpack.encode({"type": "Shutdown", "id": 1, "grace": grace}))
