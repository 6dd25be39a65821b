"""The conventions between a keeper and the worker process it starts: the boot line, the stop line
and the exit codes."""

from __future__ import annotations

import enum
from typing import Final

import msgspec

from supervisor.config import ServerSpec
from supervisor.protocol import total_decoder


class WorkerExit(enum.IntEnum):
    """A worker process's exit status, as its keeper reads it.

    Where the status alone does not say why (``START_FAILED``, ``CRASHED``), the worker's last word
    is one CRITICAL log line with the cause (see ``supervisor.worker_log``).
    """

    LIFELINE = 0  # the supervisor closed the lifeline: an orderly stop
    SERVER_DIED = 3  # the server exited abnormally, its connection closed, or it stopped answering pings
    START_FAILED = 4  # the server could not be started, initialized or listed
    SERVER_DONE = 5  # the server exited on its own with status 0
    CRASHED = 70  # an exception nothing else caught ended the worker (EX_SOFTWARE)


STOP_LINE: Final = b"stop\n"  # written to a worker's lifeline before closing it: an orderly stop


class WorkerBoot(msgspec.Struct, frozen=True, kw_only=True):
    """The one JSON line a keeper writes to a new worker's stdin (so secrets stay out of argv)."""

    server: str
    endpoint: str  # the supervisor's worker ROUTER
    identity: str  # this incarnation's routing id
    spec: ServerSpec
    log_level: int = 20
    stderr_lines_per_second: float = 100.0  # the server's stderr beyond this rate is counted, not logged


decode_worker_boot = total_decoder(msgspec.json.Decoder(WorkerBoot).decode)
