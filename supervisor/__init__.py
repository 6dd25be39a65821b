"""mcp-supervisor: every MCP server in its own supervised worker process, one tool registry over ZeroMQ.

The client library is here: ``from supervisor import SupervisorClient`` (or ``AsyncSupervisorClient``;
for several supervisors as one, ``FederatedClient`` or ``AsyncFederatedClient``), with every exception
the stubs raise and every type their methods take and return; they are ``supervisor.client``'s, loaded
when first asked for, so ``import supervisor`` alone loads nothing else. Tools for agent frameworks:
``supervisor.adapters``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from supervisor.client import (
        LOG_LEVELS,
        AsyncEventWatch,
        AsyncFederatedClient,
        AsyncSupervisorClient,
        AsyncToolCache,
        AuditRecords,
        AuditStats,
        BadRequestError,
        CallCancelledError,
        Clash,
        ClientKeys,
        Completion,
        Event,
        EventWatch,
        Failure,
        FederatedClient,
        FrontStats,
        Handler,
        InternalError,
        InvalidArgumentsError,
        Keys,
        Listing,
        LogLine,
        Member,
        Outcome,
        OverloadedError,
        ProgressCallback,
        PromptInfo,
        PromptResult,
        PublicEvent,
        RegistryChanged,
        RegistryVersion,
        ReloadSummary,
        ResourceInfo,
        ResourceResult,
        ResourceTemplateInfo,
        ResourceUpdated,
        Row,
        ServerError,
        ServerFailure,
        ServerLog,
        ServerMessage,
        ServerStatus,
        ServerUnavailableError,
        StateChanged,
        Status,
        SupervisorAuthenticationError,
        SupervisorClient,
        SupervisorError,
        SupervisorUnreachableError,
        ToolCache,
        ToolExecutionError,
        ToolInfo,
        ToolList,
        ToolResult,
        ToolTimeoutError,
        UnknownToolError,
        WorkerCrashedError,
        WorkerStatus,
        anthropic_tool,
        members,
        message_data,
        openai_tool,
    )

__version__ = "0.1.0"

__all__ = [
    "LOG_LEVELS",
    "AsyncEventWatch",
    "AsyncFederatedClient",
    "AsyncSupervisorClient",
    "AsyncToolCache",
    "AuditRecords",
    "AuditStats",
    "BadRequestError",
    "CallCancelledError",
    "Clash",
    "ClientKeys",
    "Completion",
    "Event",
    "EventWatch",
    "Failure",
    "FederatedClient",
    "FrontStats",
    "Handler",
    "InternalError",
    "InvalidArgumentsError",
    "Keys",
    "Listing",
    "LogLine",
    "Member",
    "Outcome",
    "OverloadedError",
    "ProgressCallback",
    "PromptInfo",
    "PromptResult",
    "PublicEvent",
    "RegistryChanged",
    "RegistryVersion",
    "ReloadSummary",
    "ResourceInfo",
    "ResourceResult",
    "ResourceTemplateInfo",
    "ResourceUpdated",
    "Row",
    "ServerError",
    "ServerFailure",
    "ServerLog",
    "ServerMessage",
    "ServerStatus",
    "ServerUnavailableError",
    "StateChanged",
    "Status",
    "SupervisorAuthenticationError",
    "SupervisorClient",
    "SupervisorError",
    "SupervisorUnreachableError",
    "ToolCache",
    "ToolExecutionError",
    "ToolInfo",
    "ToolList",
    "ToolResult",
    "ToolTimeoutError",
    "UnknownToolError",
    "WorkerCrashedError",
    "WorkerStatus",
    "anthropic_tool",
    "members",
    "message_data",
    "openai_tool",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import supervisor.client

    value = getattr(supervisor.client, name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted({"__version__", *__all__})
