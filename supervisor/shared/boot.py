"""The conventions between a keeper and the worker process it starts, each in one place: the worker's
argv, the boot line, the stop line, the log-line format and the exit codes.

Above: the keeper side (``supervisor.daemon.servers.spawn`` starts workers with ``worker_argv``,
``supervisor.daemon.servers.keeper``
tells its workers from escaped orphans with ``is_worker_cmdline`` and writes the boot and stop lines,
``supervisor.daemon.servers.worker_log`` reads log lines with ``read_log_line``). Below: the worker side
(``workers.__main__`` and ``workers.zygote``, ``workers.worker`` reading the boot line and
``workers.logs`` writing log lines). Both sides import this module; it imports the config's data
model and the protocol's codec, nothing heavier.
"""

from __future__ import annotations

import enum
import logging
import signal
import sys
from dataclasses import dataclass
from typing import Final, Literal

import msgspec

from supervisor.config.model import ServerSpec
from supervisor.protocol import total_decoder

__all__ = [
    "LAST_WORD",
    "SERVER_MARK",
    "STOP_LINE",
    "WORKER_PACKAGE",
    "ZYGOTE_FLAG",
    "Ended",
    "Outcome",
    "WorkerBoot",
    "WorkerExit",
    "decode_worker_boot",
    "is_worker_cmdline",
    "log_lines",
    "read_log_line",
    "server_line",
    "worker_argv",
    "zygote_argv",
]

# ---------------------------------------------------------------- argv

WORKER_PACKAGE: Final = "workers"  # run with ``python -m``
ZYGOTE_FLAG: Final = "--zygote"  # in place of a server name: start the zygote (``workers.zygote``)
_CMDLINE_MARK: Final = f"\0-m\0{WORKER_PACKAGE}\0".encode()


def worker_argv(name: str) -> list[str]:
    """A worker started with exec: ``python -m workers NAME`` (the name is for ``ps``)."""
    return [sys.executable, "-m", WORKER_PACKAGE, name]


def zygote_argv(kind: str = "stdio") -> list[str]:
    """A zygote: ``python -m workers --zygote`` forks stdio workers, ``python -m workers --zygote remote``
    remote ones (``workers.zygote``); the workers forked from it keep its cmdline."""
    return [sys.executable, "-m", WORKER_PACKAGE, ZYGOTE_FLAG, *([kind] if kind != "stdio" else [])]


def is_worker_cmdline(cmdline: bytes) -> bool:
    """Whether a ``/proc/PID/cmdline`` is a worker's or the zygote's (``worker_argv``, ``zygote_argv``)."""
    return _CMDLINE_MARK in cmdline


# ---------------------------------------------------------------- exit codes


class WorkerExit(enum.IntEnum):
    """A worker process's exit status, as its keeper reads it.

    Where the status alone does not say why (``START_FAILED``, ``CRASHED``), the worker's last word
    is one ``LAST_WORD`` log line with the cause (see ``read_log_line``).
    """

    LIFELINE = 0  # the supervisor closed the lifeline: an orderly stop
    SERVER_DIED = 3  # the server exited abnormally, its connection closed, or it stopped answering pings
    START_FAILED = 4  # the server could not be started, initialized or listed
    SERVER_DONE = 5  # the server exited on its own with status 0
    NEEDS_LOGIN = 6  # the server needs an OAuth authorization only a person can give (``login``)
    CRASHED = 70  # an exception nothing else caught ended the worker (EX_SOFTWARE)


Outcome = Literal["operator", "normal", "abnormal", "shutdown", "needs-login"]
"""How a worker incarnation ended, for its keeper's policy: stopped by an operator (or a reload), on
its own cleanly (``normal``) or not (``abnormal``), at shutdown, or wanting a person's login."""


@dataclass(frozen=True, slots=True)
class Ended:
    """A worker that ended on its own: its exit status, and what else says why."""

    code: int | None  # the process's return code (negative: killed by that signal)
    killed: str | None = None  # why its keeper killed it, if it did
    last_word: str | None = None  # the worker's own last word (a ``LAST_WORD`` line)
    remote: bool = False  # its server is remote (a lost session is the server's failure)

    @property
    def outcome(self) -> Outcome:
        if self.killed is None and self.code == WorkerExit.NEEDS_LOGIN:
            return "needs-login"
        return "normal" if self.code == WorkerExit.SERVER_DONE and self.killed is None else "abnormal"

    @property
    def connection_lost(self) -> bool:
        """A remote server's session broke (not the worker's failure)."""
        return self.remote and self.code == WorkerExit.SERVER_DIED and self.killed is None

    @property
    def reason(self) -> str:
        """Why, in a few words (the worker's last word when it said one)."""
        if self.killed is not None:
            return self.killed
        if self.code is not None and self.code < 0:
            return f"worker was killed by {signal.Signals(-self.code).name}"
        if self.last_word is not None:
            if self.code == WorkerExit.SERVER_DIED:  # the server's death first, then the worker's
                return f"{self.last_word}; its worker exited with code {self.code}"
            return self.last_word
        if self.code == WorkerExit.SERVER_DONE:
            return "server exited with status 0"
        if self.connection_lost:
            return "the connection to the server was lost"
        return f"worker exited with code {self.code}"


# ---------------------------------------------------------------- stdin: the boot line, the lifeline

STOP_LINE: Final = b"stop\n"  # written to a worker's lifeline before closing it: an orderly stop


class WorkerBoot(msgspec.Struct, frozen=True, kw_only=True):
    """The one JSON line a keeper writes to a new worker's stdin (so secrets stay out of argv)."""

    server: str
    endpoint: str  # the supervisor's worker ROUTER
    identity: str  # this incarnation's routing id
    spec: ServerSpec
    log_level: int = 20
    stderr_lines_per_second: float = 100.0  # the server's stderr beyond this rate is counted, not logged
    tracing: bool = (
        False  # trace calls (``supervisor.shared.tracing``), exported as the OTEL_* environment says
    )
    memory_merge: bool = True  # offer the worker's memory to KSM (``supervisor.shared.processes``)


decode_worker_boot = total_decoder(msgspec.json.Decoder(WorkerBoot).decode)


# ---------------------------------------------------------------- stderr: log lines
#
# A worker writes one line per record of its own log, ``<levelno> <text>`` (a record of several lines
# is several lines at its level), and ``S <text>`` for each line its MCP server wrote to stderr.

SERVER_MARK: Final = "S"  # the first word of a line of the server's own stderr
LAST_WORD: Final = logging.CRITICAL  # the level of a worker's last word: why it is ending (``WorkerExit``)


def log_lines(level: int, text: str) -> str:
    """A record of the worker's log at ``level``: one ``<levelno> <line>`` line per line of ``text``."""
    return "".join(f"{level} {line}\n" for line in text.splitlines() or [""])


def server_line(text: str) -> str:
    """A line the server wrote to its stderr, relayed."""
    return f"{SERVER_MARK} {text}\n"


def read_log_line(line: str) -> tuple[int | None, str] | None:
    """One line of a worker's stderr: (its level, its text) for a record of the worker's log,
    (None, its text) for a line of the server's stderr, None for a line in neither form."""
    mark, _, text = line.partition(" ")
    if mark == SERVER_MARK:
        return None, text
    if mark.isdecimal():
        return int(mark), text
    return None
