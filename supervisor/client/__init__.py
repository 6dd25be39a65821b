"""The client library agents import: the blocking and async client stubs, their errors, the types their
methods take and return, event watches and the live tool cache. It needs pyzmq and msgspec (and anyio
for the async stub), and imports neither the daemon, the workers nor the config.

Everything here is also ``supervisor``'s: ``from supervisor import SupervisorClient``. Names are loaded
when first asked for, so ``SupervisorClient`` loads the blocking stub alone (no anyio), and
``AsyncSupervisorClient`` the async one.

Several supervisors as one registry: ``FederatedClient`` and ``AsyncFederatedClient``, given the
members from ``supervisor.shared.federation.members`` (also exported here: ``members``, ``Member``);
their results are ``Listing``, ``Status``, ``Row``, ``Outcome``, ``Failure`` and ``Clash``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from supervisor.adapters.formats import anthropic_tool, openai_tool
    from supervisor.client.aio import AsyncSupervisorClient
    from supervisor.client.aio_events import AsyncEventWatch, AsyncToolCache
    from supervisor.client.aio_federated import AsyncFederatedClient
    from supervisor.client.answers import Handler
    from supervisor.client.blocking import SupervisorClient
    from supervisor.client.errors import (
        BadRequestError,
        CallCancelledError,
        InternalError,
        InvalidArgumentsError,
        OverloadedError,
        ServerError,
        ServerUnavailableError,
        SupervisorAuthenticationError,
        SupervisorError,
        SupervisorUnreachableError,
        ToolExecutionError,
        ToolTimeoutError,
        UnknownToolError,
        WorkerCrashedError,
    )
    from supervisor.client.federated import FederatedClient
    from supervisor.client.federated_common import Clash, Failure, Listing, Outcome, Row, Status
    from supervisor.client.tool_cache import ToolCache
    from supervisor.client.watch import EventWatch, PublicEvent, message_data
    from supervisor.protocol import (
        LOG_LEVELS,
        AuditRecords,
        AuditStats,
        Completion,
        Event,
        FrontStats,
        LogLine,
        ProgressCallback,
        PromptInfo,
        PromptResult,
        RegistryChanged,
        RegistryVersion,
        ReloadSummary,
        ResourceInfo,
        ResourceResult,
        ResourceTemplateInfo,
        ResourceUpdated,
        ServerFailure,
        ServerLog,
        ServerMessage,
        ServerStatus,
        StateChanged,
        ToolInfo,
        ToolList,
        ToolResult,
        WorkerStatus,
    )
    from supervisor.security.keys import ClientKeys, Keys
    from supervisor.shared.federation import Member, members

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

_WHERE: dict[str, str] = {  # each name, and the module it is loaded from
    "SupervisorClient": "supervisor.client.blocking",
    "AsyncSupervisorClient": "supervisor.client.aio",
    "BadRequestError": "supervisor.client.errors",
    "CallCancelledError": "supervisor.client.errors",
    "InternalError": "supervisor.client.errors",
    "InvalidArgumentsError": "supervisor.client.errors",
    "OverloadedError": "supervisor.client.errors",
    "ServerError": "supervisor.client.errors",
    "ServerUnavailableError": "supervisor.client.errors",
    "SupervisorAuthenticationError": "supervisor.client.errors",
    "SupervisorError": "supervisor.client.errors",
    "SupervisorUnreachableError": "supervisor.client.errors",
    "ToolExecutionError": "supervisor.client.errors",
    "ToolTimeoutError": "supervisor.client.errors",
    "UnknownToolError": "supervisor.client.errors",
    "WorkerCrashedError": "supervisor.client.errors",
    "Handler": "supervisor.client.answers",
    "EventWatch": "supervisor.client.watch",
    "PublicEvent": "supervisor.client.watch",
    "message_data": "supervisor.client.watch",
    "ToolCache": "supervisor.client.tool_cache",
    "FederatedClient": "supervisor.client.federated",
    "AsyncFederatedClient": "supervisor.client.aio_federated",
    "Clash": "supervisor.client.federated_common",
    "Failure": "supervisor.client.federated_common",
    "Listing": "supervisor.client.federated_common",
    "Outcome": "supervisor.client.federated_common",
    "Row": "supervisor.client.federated_common",
    "Status": "supervisor.client.federated_common",
    "Member": "supervisor.shared.federation",
    "members": "supervisor.shared.federation",
    "AsyncEventWatch": "supervisor.client.aio_events",
    "AsyncToolCache": "supervisor.client.aio_events",
    "AuditRecords": "supervisor.protocol",
    "AuditStats": "supervisor.protocol",
    "Completion": "supervisor.protocol",
    "Event": "supervisor.protocol",
    "FrontStats": "supervisor.protocol",
    "LOG_LEVELS": "supervisor.protocol",
    "LogLine": "supervisor.protocol",
    "ProgressCallback": "supervisor.protocol",
    "PromptInfo": "supervisor.protocol",
    "PromptResult": "supervisor.protocol",
    "RegistryChanged": "supervisor.protocol",
    "RegistryVersion": "supervisor.protocol",
    "ReloadSummary": "supervisor.protocol",
    "ResourceInfo": "supervisor.protocol",
    "ResourceResult": "supervisor.protocol",
    "ResourceTemplateInfo": "supervisor.protocol",
    "ResourceUpdated": "supervisor.protocol",
    "ServerFailure": "supervisor.protocol",
    "ServerLog": "supervisor.protocol",
    "ServerMessage": "supervisor.protocol",
    "ServerStatus": "supervisor.protocol",
    "StateChanged": "supervisor.protocol",
    "ToolInfo": "supervisor.protocol",
    "ToolList": "supervisor.protocol",
    "ToolResult": "supervisor.protocol",
    "WorkerStatus": "supervisor.protocol",
    "ClientKeys": "supervisor.security.keys",
    "Keys": "supervisor.security.keys",
    "anthropic_tool": "supervisor.adapters.formats",
    "openai_tool": "supervisor.adapters.formats",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted({*__all__})
