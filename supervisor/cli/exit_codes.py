"""The ``mcp-supervisor`` command's exit codes, in one table, and the error that carries one.

Above: ``supervisor.cli.main``, whose ``main`` turns every failure into one of these codes (and whose
``--help`` shows ``EXIT_CODES``), and the ``cmd_*`` functions, which raise ``CliError``. Below: the
client stub's exceptions (``supervisor.client.errors``), whose wire codes map here (``exit_code_for``).

The set is small and stable, so a script can branch on it: each protocol error code lands in the
one that says what a script can do about it (fix its input, wait for the supervisor, try later).
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["EXIT_CODES", "CliError", "ExitCode", "exit_code_for", "exit_codes_help"]


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1  # the request failed: the tool's isError, a server error or crash, a server not ready
    USAGE = 2  # bad usage or input: arguments, ARGS_JSON, the tool's arguments, a config file rejected
    UNREACHABLE = 3  # no supervisor answered at the endpoint (or it refused this client's CURVE key)
    TIMEOUT = 4  # time ran out: a call's or a read's TIMEOUT, `wait`, `shutdown` waiting for the end
    NOT_FOUND = 5  # no such server, tool or prompt
    INTERRUPTED = 130  # Ctrl-C (SIGINT): nothing more is printed


EXIT_CODES: Final[dict[ExitCode, str]] = {
    ExitCode.OK: "success",
    ExitCode.FAILED: "the request failed (the tool's isError, a server error or crash, a server not ready)",
    ExitCode.USAGE: "bad usage or input (arguments, ARGS_JSON, the tool's arguments, a config rejected)",
    ExitCode.UNREACHABLE: "no supervisor answered at the endpoint (or it refused the CURVE key)",
    ExitCode.TIMEOUT: "timed out (a call's TIMEOUT, wait, shutdown waiting for the supervisor to go)",
    ExitCode.NOT_FOUND: "no such server, tool or prompt (UNKNOWN_TOOL)",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}
"""What each exit code means, as ``--help`` and the README say it."""

_BY_ERROR_CODE: Final[dict[str, ExitCode]] = {
    "UNKNOWN_TOOL": ExitCode.NOT_FOUND,
    "TIMEOUT": ExitCode.TIMEOUT,
    "INVALID_ARGUMENTS": ExitCode.USAGE,
    "BAD_REQUEST": ExitCode.USAGE,
    "UNREACHABLE": ExitCode.UNREACHABLE,
    "UNAUTHENTICATED": ExitCode.UNREACHABLE,
}


def exit_code_for(code: str) -> ExitCode:
    """The exit code for an error code of the wire (``SupervisorError.code``): UNKNOWN_TOOL is
    NOT_FOUND, TIMEOUT is TIMEOUT, INVALID_ARGUMENTS and BAD_REQUEST are USAGE, UNREACHABLE and
    UNAUTHENTICATED are UNREACHABLE; every other code (UNAVAILABLE, SERVER_ERROR, WORKER_CRASHED,
    OVERLOADED, TOOL_ERROR, INTERNAL, CANCELLED, one from a newer supervisor) is FAILED."""
    return _BY_ERROR_CODE.get(code, ExitCode.FAILED)


def exit_codes_help() -> str:
    """The table for ``--help``."""
    return "exit codes:\n" + "\n".join(f"  {int(code):<4} {text}" for code, text in EXIT_CODES.items())


class CliError(Exception):
    """A command's failure: its message, its exit ``code``, and the ``error`` code that ``--json``
    shows (by default the exit code's name: ``USAGE``, ``TIMEOUT``, ...)."""

    def __init__(self, message: str, code: int = ExitCode.FAILED, *, error: str | None = None) -> None:
        super().__init__(message)
        self.code = ExitCode(code)
        self.error = error or self.code.name
