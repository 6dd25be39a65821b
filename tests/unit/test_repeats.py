"""Repeated log lines: the first of a kind at once, the rest of its second counted, then their count."""

from __future__ import annotations

import logging

import pytest

from supervisor.shared.repeats import Repeats


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(record.levelno, record.getMessage()) for record in caplog.records]


def test_the_first_line_of_a_kind_is_written_at_once_and_the_rest_of_its_second_counted(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    repeats = Repeats(logging.getLogger("t"), clock)
    for n in range(5000):
        repeats.log("timeouts", logging.ERROR, "call %d timed out", n)
        clock.now += 0.0001  # 5000 in half a second
    assert messages(caplog) == [(logging.ERROR, "call 0 timed out")]
    clock.now = 101.0
    repeats.flush()
    assert messages(caplog)[1:] == [
        (logging.ERROR, "4999 more timeouts in the last 1 s (the last: call 4999 timed out)")
    ]


def test_a_line_after_the_window_closes_it_and_is_written_at_once(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    repeats = Repeats(logging.getLogger("t"), clock)
    repeats.log("drops", logging.WARNING, "dropped %s", "a")
    repeats.log("drops", logging.WARNING, "dropped %s", "b")
    clock.now += 1.5
    repeats.log("drops", logging.WARNING, "dropped %s", "c")
    assert messages(caplog) == [
        (logging.WARNING, "dropped a"),
        (logging.WARNING, "1 more drops in the last 1 s (the last: dropped b)"),
        (logging.WARNING, "dropped c"),
    ]


def test_kinds_are_counted_apart_and_a_lone_line_gets_no_count(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    repeats = Repeats(logging.getLogger("t"), clock)
    repeats.log("a", logging.WARNING, "first a")
    repeats.log("b", logging.ERROR, "first b")
    repeats.log("b", logging.ERROR, "second b")
    clock.now += 1
    repeats.flush()
    repeats.flush()  # nothing more to say
    assert messages(caplog) == [
        (logging.WARNING, "first a"),
        (logging.ERROR, "first b"),
        (logging.ERROR, "1 more b in the last 1 s (the last: second b)"),
    ]


def test_a_window_not_over_is_not_flushed(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    repeats = Repeats(logging.getLogger("t"), clock)
    repeats.log("k", logging.INFO, "one")
    repeats.log("k", logging.INFO, "two")
    clock.now += 0.5
    repeats.flush()
    assert messages(caplog) == [(logging.INFO, "one")]


def test_lines_below_the_loggers_level_are_not_even_formatted(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)

    class Loud:
        def __str__(self) -> str:
            raise AssertionError("formatted a line nobody will see")

    repeats = Repeats(logging.getLogger("t"), clock)
    repeats.log("k", logging.INFO, "%s", Loud())
    repeats.log("k", logging.INFO, "%s", Loud())
    clock.now += 2
    repeats.flush()
    assert messages(caplog) == []
