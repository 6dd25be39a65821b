"""A worker that gives up says why: its last word (one CRITICAL line) and its exit status, as its keeper
reads them (``supervisor.daemon.servers.worker_log``)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from supervisor.config.load import ServerSpec
from supervisor.daemon.servers.worker_log import WorkerLog
from supervisor.shared.boot import WorkerBoot, WorkerExit

# A worker whose run() has a bug: the exception escapes trio.run.
BUGGY_WORKER = """
import sys
import workers.worker

async def run(self):
    raise KeyError("lost")

workers.worker.Worker.run = run
sys.exit(workers.worker.main())
"""


def boot_line(tmp_path: Path) -> bytes:
    spec = ServerSpec(
        name="x",
        transport="stdio",
        command=sys.executable,
        args=(),
        env={},
        cwd=None,
        url=None,
        headers={},
        tool_timeout=5,
        disabled=False,
    )
    boot = WorkerBoot(server="x", endpoint=f"ipc://{tmp_path}/nobody.sock", identity="x/1/0", spec=spec)
    return msgspec.json.encode(boot) + b"\n"


def test_an_exception_nothing_caught_ends_the_worker_as_crashed_naming_it_last(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", BUGGY_WORKER], input=boot_line(tmp_path), capture_output=True, timeout=60
    )
    assert done.returncode == WorkerExit.CRASHED
    lines = done.stderr.decode().splitlines()
    assert lines[-1] == f"{logging.CRITICAL} worker failed: KeyError: 'lost'"
    assert f"{logging.INFO} Traceback (most recent call last):" in lines  # the traceback, at INFO


def test_a_bad_boot_line_is_a_start_up_failure_naming_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "workers", "x"], input=b"\xff{\n", capture_output=True, timeout=60
    )
    assert done.returncode == WorkerExit.START_FAILED
    last = done.stderr.decode().splitlines()[-1]
    assert last.startswith(f"{logging.CRITICAL} start-up failed: bad boot message on stdin: ")


def test_the_last_word_is_kept_apart_from_the_tail_and_forgotten_on_reset(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker_log = WorkerLog("x")
    worker_log.line(f"{logging.ERROR} an error")
    worker_log.line("S the server's own line")
    worker_log.line(f"{logging.CRITICAL} start-up failed: tools/list: no")
    assert worker_log.last_word == "start-up failed: tools/list: no"
    assert worker_log.report() == "an error | the server's own line"
    assert (
        "mcp_supervisor.keeper",
        logging.ERROR,
        "[x] start-up failed: tools/list: no",
    ) in caplog.record_tuples
    worker_log.reset()
    assert (worker_log.last_word, worker_log.report()) == (None, "")
