"""The conventions between a keeper and its worker (``supervisor.shared.boot``): what one side writes, the
other reads."""

from __future__ import annotations

import logging

from hypothesis import given
from hypothesis import strategies as st

from supervisor.shared.boot import (
    LAST_WORD,
    is_worker_cmdline,
    log_lines,
    read_log_line,
    server_line,
    worker_argv,
    zygote_argv,
)


def cmdline(argv: list[str]) -> bytes:
    """``argv`` as ``/proc/PID/cmdline`` shows it."""
    return b"".join(arg.encode() + b"\0" for arg in argv)


def test_a_worker_and_the_zygote_are_told_by_their_cmdline_and_a_server_is_not() -> None:
    assert is_worker_cmdline(cmdline(worker_argv("time")))
    assert is_worker_cmdline(cmdline(zygote_argv()))
    assert not is_worker_cmdline(cmdline(["python", "-m", "mcp_server_time"]))
    assert not is_worker_cmdline(cmdline(["python", "-m", "workers_of_mine", "x"]))
    assert not is_worker_cmdline(b"")  # a process already exiting


@given(st.integers(min_value=0, max_value=LAST_WORD), st.text())
def test_every_line_of_a_record_reads_back_at_its_level(level: int, text: str) -> None:
    written = log_lines(level, text).splitlines()
    assert [read_log_line(line) for line in written] == [(level, line) for line in text.splitlines() or [""]]


@given(st.text().filter(lambda text: text.splitlines() in ([], [text])))
def test_a_server_line_reads_back_as_the_servers(text: str) -> None:
    assert server_line(text).splitlines() == [server_line(text).removesuffix("\n")]
    assert read_log_line(server_line(text).removesuffix("\n")) == (None, text)


def test_a_line_in_neither_form_is_read_as_none() -> None:
    assert read_log_line("Traceback (most recent call last):") is None
    assert read_log_line("") is None
    assert log_lines(logging.CRITICAL, "start-up failed: no") == "50 start-up failed: no\n"


@given(st.text())
def test_reading_any_line_at_all_gives_a_level_and_text_or_none_and_never_raises(line: str) -> None:
    read = read_log_line(line)
    assert read is None or isinstance(read[1], str)


def test_a_line_that_starts_with_a_digit_that_is_no_number_is_read_as_none() -> None:
    assert read_log_line("² squared") is None
