"""Behaviour of supervisor.client.errors: one exception class per wire code, translated in error_for."""

from __future__ import annotations

import pytest

from supervisor.client.errors import (
    BadRequestError,
    CallCancelledError,
    InternalError,
    InvalidArgumentsError,
    OverloadedError,
    ServerError,
    ServerUnavailableError,
    SupervisorError,
    SupervisorUnreachableError,
    ToolExecutionError,
    ToolTimeoutError,
    UnknownToolError,
    WorkerCrashedError,
    error_for,
)
from supervisor.protocol import ERROR_CODES, ToolResult

WIRE_CLASSES: dict[str, type[SupervisorError]] = {
    "UNKNOWN_TOOL": UnknownToolError,
    "UNAVAILABLE": ServerUnavailableError,
    "TIMEOUT": ToolTimeoutError,
    "SERVER_ERROR": ServerError,
    "WORKER_CRASHED": WorkerCrashedError,
    "INVALID_ARGUMENTS": InvalidArgumentsError,
    "OVERLOADED": OverloadedError,
    "BAD_REQUEST": BadRequestError,
    "INTERNAL": InternalError,
    "CANCELLED": CallCancelledError,
}


@pytest.mark.parametrize(("code", "cls"), WIRE_CLASSES.items(), ids=list(WIRE_CLASSES))
def test_error_for_maps_each_wire_code_to_its_class(code: str, cls: type[SupervisorError]) -> None:
    error = error_for(code, "what happened")
    assert type(error) is cls
    assert isinstance(error, SupervisorError)
    assert error.code == code
    assert error.message == "what happened"


@pytest.mark.parametrize("code", sorted(WIRE_CLASSES))
def test_str_of_an_error_shows_its_code_and_message(code: str) -> None:
    assert str(error_for(code, "details here")) == f"{code}: details here"


def test_every_error_reply_code_has_a_class() -> None:
    # TOOL_ERROR is never an ErrorReply: it is a result with isError, raised by the client itself
    assert set(WIRE_CLASSES) == ERROR_CODES - {"TOOL_ERROR"}


def test_every_class_is_a_supervisor_error_with_a_distinct_code() -> None:
    classes = [*WIRE_CLASSES.values(), SupervisorUnreachableError, ToolExecutionError]
    assert all(issubclass(cls, SupervisorError) for cls in classes)
    assert all(issubclass(cls, Exception) for cls in classes)
    codes = [cls.code for cls in classes]
    assert len(set(codes)) == len(codes)


def test_unknown_code_gives_a_base_supervisor_error_with_that_code() -> None:
    error = error_for("FROM_THE_FUTURE", "newer supervisor")
    assert type(error) is SupervisorError
    assert error.code == "FROM_THE_FUTURE"
    assert error.message == "newer supervisor"
    assert str(error) == "FROM_THE_FUTURE: newer supervisor"


def test_unknown_code_does_not_change_the_code_of_other_errors() -> None:
    error_for("FROM_THE_FUTURE", "m")
    assert SupervisorError.code == "INTERNAL"
    assert SupervisorError("plain").code == "INTERNAL"
    assert error_for("INTERNAL", "m").code == "INTERNAL"


def test_tool_error_code_on_the_wire_is_kept_on_a_base_error() -> None:
    error = error_for("TOOL_ERROR", "odd")
    assert isinstance(error, SupervisorError)
    assert error.code == "TOOL_ERROR"
    assert str(error) == "TOOL_ERROR: odd"


def test_base_error_defaults_to_internal_code() -> None:
    error = SupervisorError("oops")
    assert error.code == "INTERNAL"
    assert error.message == "oops"
    assert error.args == ("oops",)
    assert str(error) == "INTERNAL: oops"


def test_unreachable_error_has_its_own_code() -> None:
    error = SupervisorUnreachableError("no supervisor at ipc:///x")
    assert error.code == "UNREACHABLE"
    assert str(error) == "UNREACHABLE: no supervisor at ipc:///x"


def test_tool_execution_error_carries_the_result() -> None:
    result = ToolResult(content=[{"type": "text", "text": "denied"}], is_error=True, text="denied")
    error = ToolExecutionError("tool 'x' reported an error: denied", result)
    assert error.result is result
    assert error.code == "TOOL_ERROR"
    assert error.message == "tool 'x' reported an error: denied"
    assert str(error) == "TOOL_ERROR: tool 'x' reported an error: denied"
    assert isinstance(error, SupervisorError)


def test_errors_can_be_caught_as_supervisor_error() -> None:
    with pytest.raises(SupervisorError) as info:
        raise error_for("TIMEOUT", "budget ran out")
    assert isinstance(info.value, ToolTimeoutError)
