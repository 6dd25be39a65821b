"""The client stub's exceptions: one tree, one class per wire error code.

    SupervisorError                    .code, .message
     +-- SupervisorUnreachableError    no supervisor answered at the endpoint
     |    +-- SupervisorAuthenticationError   UNAUTHENTICATED: it refused the handshake (CURVE keys)
     +-- UnknownToolError              UNKNOWN_TOOL
     +-- ServerUnavailableError        UNAVAILABLE: starting, restarting, failed or stopped
     +-- ToolTimeoutError              TIMEOUT: the budget ran out; the server was told to cancel
     +-- ToolExecutionError            the server answered with isError; .result holds it
     +-- ServerError                   SERVER_ERROR: a JSON-RPC error from the MCP server
     +-- WorkerCrashedError            WORKER_CRASHED: worker or server died mid-call
     +-- InvalidArgumentsError         INVALID_ARGUMENTS
     +-- OverloadedError               OVERLOADED
     +-- BadRequestError               BAD_REQUEST
     +-- InternalError                 INTERNAL
     +-- CallCancelledError            CANCELLED: its caller cancelled it (a ``Cancel`` on the wire)

Wire replies are translated at one place, ``error_for``.
"""

from __future__ import annotations

from typing import ClassVar

from supervisor.protocol import ToolResult

__all__ = [
    "BadRequestError",
    "CallCancelledError",
    "InternalError",
    "InvalidArgumentsError",
    "OverloadedError",
    "ServerError",
    "ServerUnavailableError",
    "SupervisorAuthenticationError",
    "SupervisorError",
    "SupervisorUnreachableError",
    "ToolExecutionError",
    "ToolTimeoutError",
    "UnknownToolError",
    "WorkerCrashedError",
    "error_for",
]


class SupervisorError(Exception):
    """Base of every error the client stub raises."""

    code: ClassVar[str] = "INTERNAL"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class SupervisorUnreachableError(SupervisorError):
    code = "UNREACHABLE"


class SupervisorAuthenticationError(SupervisorUnreachableError):
    """The supervisor (or something at its endpoint) refused the handshake: a CURVE key it does not
    allow, the wrong server key, or CURVE on one side only; the message says which."""

    code = "UNAUTHENTICATED"


class UnknownToolError(SupervisorError):
    code = "UNKNOWN_TOOL"


class ServerUnavailableError(SupervisorError):
    code = "UNAVAILABLE"


class ToolTimeoutError(SupervisorError):
    code = "TIMEOUT"


class ToolExecutionError(SupervisorError):
    """The tool ran and reported failure (``isError``); ``result`` is what it returned."""

    code = "TOOL_ERROR"

    def __init__(self, message: str, result: ToolResult) -> None:
        super().__init__(message)
        self.result = result


class ServerError(SupervisorError):
    code = "SERVER_ERROR"


class WorkerCrashedError(SupervisorError):
    code = "WORKER_CRASHED"


class InvalidArgumentsError(SupervisorError):
    code = "INVALID_ARGUMENTS"


class OverloadedError(SupervisorError):
    code = "OVERLOADED"


class BadRequestError(SupervisorError):
    code = "BAD_REQUEST"


class InternalError(SupervisorError):
    code = "INTERNAL"


class CallCancelledError(SupervisorError):
    """The request was cancelled by its own caller (a ``Cancel`` on the front link). The client stubs
    send one when they stop waiting for a request (the waiting task was cancelled, say), so they do
    not wait for this reply; a client that speaks the wire itself gets the code."""

    code = "CANCELLED"


_BY_CODE: dict[str, type[SupervisorError]] = {
    cls.code: cls
    for cls in (
        UnknownToolError,
        ServerUnavailableError,
        ToolTimeoutError,
        ServerError,
        WorkerCrashedError,
        InvalidArgumentsError,
        OverloadedError,
        BadRequestError,
        InternalError,
        CallCancelledError,
    )
}


def error_for(code: str, message: str) -> SupervisorError:
    """The exception for a wire ``ErrorReply`` (an unknown code from a newer supervisor maps to the base)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        error = SupervisorError(message)
        error.code = code  # type: ignore[misc]
        return error
    return cls(message)
