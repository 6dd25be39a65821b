"""The errors a worker meets talking to its server, without importing the MCP SDK to name them.

Above: every part of the worker that talks to the server (``workers.calls``, ``workers.tools``,
``workers.interests``, ``workers.session``). Below: nothing but the standard library.

A stdio server is spoken to by the worker itself (``workers.lean``); its JSON-RPC errors, and the
connection closing under a request, are this module's ``MCPError``, named as the SDK's so that what a
worker says of a failure (``start-up failed: tools/list: MCPError: ...``) reads the same on every
transport. A remote server is spoken to through the SDK, whose own ``MCPError``, pydantic's
``ValidationError`` and httpx2's ``HTTPError`` can only be raised once the SDK is loaded: the
``rpc_error``, ``invalid_result`` and ``http_error`` tests look them up in ``sys.modules`` and so never
import them (a lean stdio worker has not loaded them, and cannot meet them).
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any, Final

__all__ = [
    "CONNECTION_CLOSED",
    "HEADER_MISMATCH",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "REQUEST_TIMEOUT",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "ConnectionClosed",
    "ListenNotSupportedError",
    "MCPError",
    "SubscriptionLost",
    "http_error",
    "invalid_result",
    "listen_unsupported",
    "quiet_deprecations",
    "rpc_error",
    "subscription_lost",
]

# JSON-RPC and MCP error codes (``mcp_types.jsonrpc``'s).
CONNECTION_CLOSED: Final = -32000
REQUEST_TIMEOUT: Final = -32001
HEADER_MISMATCH: Final = -32020
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603


class MCPError(Exception):
    """A JSON-RPC error from a stdio server, or its connection closed under a request; ``str`` is
    the message, as the SDK's ``MCPError``."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(code, message, data)
        self.code = code
        self.message = message
        self.data = data

    def __str__(self) -> str:
        return self.message


class ConnectionClosed(MCPError):
    """The server's stdout ended before a request of the worker's own was answered. ``sent_at``: where
    the request began in the bytes queued for the server's stdin, or None when it was never queued (so
    ``StdioServer.never_read`` can tell whether the server may have read it)."""

    def __init__(self, sent_at: int | None) -> None:
        super().__init__(CONNECTION_CLOSED, "Connection closed")
        self.sent_at = sent_at


def rpc_error(exc: BaseException) -> MCPError | None:
    """``exc`` as the worker's ``MCPError`` (the SDK's, converted, on a remote worker), or None."""
    if isinstance(exc, MCPError):
        return exc
    sdk = sys.modules.get("mcp.shared.exceptions")
    if sdk is not None and isinstance(exc, sdk.MCPError):
        converted = MCPError(exc.code, exc.message, exc.data)
        converted.__cause__ = exc
        return converted
    return None


def invalid_result(exc: BaseException) -> bool:
    """Is ``exc`` pydantic's ``ValidationError`` (a result that does not fit the SDK's model)?"""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(exc, pydantic.ValidationError)


def http_error(exc: BaseException) -> bool:
    """Is ``exc`` an ``httpx2.HTTPError`` (a remote server's transport failing)?"""
    httpx2 = sys.modules.get("httpx2")
    return httpx2 is not None and isinstance(exc, httpx2.HTTPError)


class ListenNotSupportedError(RuntimeError):
    """``subscriptions/listen`` requires a 2026-07-28 connection (``workers.lean``)."""


class SubscriptionLost(RuntimeError):
    """A listen stream ended without the server's graceful close: re-listen and refetch."""


def listen_unsupported(exc: BaseException) -> bool:
    """Is ``exc`` a refusal to listen on a handshake-era session (ours, or the SDK's)?"""
    if isinstance(exc, ListenNotSupportedError):
        return True
    sdk = sys.modules.get("mcp.client.subscriptions")
    return sdk is not None and isinstance(exc, sdk.ListenNotSupportedError)


def subscription_lost(exc: BaseException) -> bool:
    """Is ``exc`` a listen stream lost (ours, or the SDK's)?"""
    if isinstance(exc, SubscriptionLost):
        return True
    sdk = sys.modules.get("mcp.client.subscriptions")
    return sdk is not None and isinstance(exc, sdk.SubscriptionLost)


@contextlib.contextmanager
def quiet_deprecations() -> Iterator[None]:
    """The SDK's deprecation warnings ignored (logging and resource subscriptions are the handshake
    era's, and deprecated only for 2026-07-28, which does not use them)."""
    with warnings.catch_warnings():
        sdk = sys.modules.get("mcp.shared.exceptions")
        if sdk is not None:
            warnings.simplefilter("ignore", sdk.MCPDeprecationWarning)
        yield
