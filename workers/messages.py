"""What a stdio server says, as the worker's own client (``workers.lean``) decodes it with msgspec.

Above: ``workers.lean`` (and ``workers.listen``, ``workers.tools``, ``workers.interest``, which read
the protocol versions). Below: msgspec. The shapes are the SDK's (``mcp_types``): a line is a JSON-RPC
message exactly when the SDK's ``JSONRPCMessage`` takes it for one (``_Message`` and
``LeanClient.receive``, checked against the SDK's parser in ``tests/unit/test_lean.py``), and the
handshake's results have the fields, and the types, of the SDK's models. A result these refuse is
judged by the SDK's own model (``workers.lean_sdk``), so a lean worker refuses only what the SDK
refuses.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from supervisor.protocol import total_decoder

__all__ = [
    "CLIENT_CAPABILITIES_KEY",
    "CLIENT_INFO_KEY",
    "DISCOVER_TIMEOUT",
    "HANDSHAKE_PROTOCOL_VERSIONS",
    "LATEST_HANDSHAKE_VERSION",
    "LATEST_MODERN_VERSION",
    "MODERN_PROTOCOL_VERSIONS",
    "PROTOCOL_VERSION_KEY",
    "SERVER_INFO_KEY",
    "SUBSCRIPTION_ID_KEY",
    "DiscoverResult",
    "Implementation",
    "InitializeResult",
    "LogMessage",
    "Message",
    "ServerCapabilities",
    "Updated",
    "clamped",
    "decode_as",
    "decode_message",
    "encode",
    "supported",
]

# The protocol versions the SDK speaks (``mcp_types.version``), oldest to newest.
HANDSHAKE_PROTOCOL_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_PROTOCOL_VERSIONS: Final = ("2026-07-28",)
LATEST_HANDSHAKE_VERSION: Final = HANDSHAKE_PROTOCOL_VERSIONS[-1]
LATEST_MODERN_VERSION: Final = MODERN_PROTOCOL_VERSIONS[-1]
DISCOVER_TIMEOUT: Final = 10.0  # seconds for ``server/discover`` (the SDK's DISCOVER_TIMEOUT_SECONDS)
# The ``_meta`` keys of the 2026-07-28 envelope.
PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_KEY: Final = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY: Final = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_ID_KEY: Final = "io.modelcontextprotocol/subscriptionId"


class Message(msgspec.Struct):
    """A line from the server, decoded as far as routing needs; ``kind`` says what the SDK's
    ``JSONRPCMessage`` (a union of request, notification, response and error, extra fields ignored)
    takes it for: the first of the four it fits, or None."""

    jsonrpc: str
    id: Any = msgspec.UNSET
    method: Any = msgspec.UNSET
    params: Any = None
    result: Any = msgspec.UNSET
    error: Any = msgspec.UNSET

    def kind(self) -> Literal["request", "notification", "response", "error"] | None:
        if self.jsonrpc != "2.0":
            return None
        if isinstance(self.method, str) and (self.params is None or type(self.params) is dict):
            return "request" if _request_id(self.id) else "notification"
        if _request_id(self.id) and type(self.result) is dict:
            return "response"
        if (self.id is None or _request_id(self.id)) and _error_object(self.error):
            return "error"
        return None


def _request_id(value: Any) -> bool:
    """A JSON-RPC id as the SDK's ``RequestId`` takes one (strictly: an integer or a string)."""
    return type(value) is int or type(value) is str


def _error_object(value: Any) -> bool:
    """An error object as the SDK's ``ErrorData`` takes one (its ``code`` as pydantic's lax ``int``)."""
    return type(value) is dict and type(value.get("message")) is str and _lax_int(value.get("code"))


def _lax_int(value: Any) -> bool:
    if isinstance(value, int):  # a bool too
        return True
    if isinstance(value, float):
        return value.is_integer() and abs(value) < 2**63
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text).is_integer() if "." in text else isinstance(int(text, 10), int)
        except ValueError:
            return False
    return False


class _Flag(msgspec.Struct, rename="camel"):
    list_changed: bool | None = None


class _ResourcesCapability(msgspec.Struct, rename="camel"):
    subscribe: bool | None = None
    list_changed: bool | None = None


class ServerCapabilities(msgspec.Struct):
    """The server's capabilities, with the attributes of the SDK's model that the worker reads."""

    experimental: dict[str, dict[str, Any]] | None = None
    logging: dict[str, Any] | None = None
    prompts: _Flag | None = None
    resources: _ResourcesCapability | None = None
    tools: _Flag | None = None
    completions: dict[str, Any] | None = None
    extensions: dict[str, dict[str, Any]] | None = None
    tasks: dict[str, Any] | None = None


class Implementation(msgspec.Struct):
    name: str
    version: str


class InitializeResult(msgspec.Struct, rename="camel"):
    protocol_version: str
    capabilities: ServerCapabilities
    server_info: Implementation
    instructions: str | None = None


class DiscoverResult(msgspec.Struct, rename="camel"):
    supported_versions: list[str]
    capabilities: ServerCapabilities
    instructions: str | None = None
    ttl_ms: int = 0
    cache_scope: Literal["public", "private"] = "private"
    result_type: str = "complete"
    meta: dict[str, Any] | None = msgspec.field(name="_meta", default=None)


class LogMessage(msgspec.Struct):
    """A ``notifications/message``'s params (the SDK's ``LoggingMessageNotificationParams``)."""

    level: Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
    data: Any
    logger: str | None = None


class Updated(msgspec.Struct):
    uri: str


decode_message = total_decoder(msgspec.json.Decoder(Message).decode)
encode = msgspec.json.Encoder().encode


def decode_as(raw: msgspec.Raw | dict[str, Any] | None, kind: type[Any]) -> Any:
    """``raw`` (JSON text, or decoded values) as ``kind``; raises msgspec's errors when it is not one."""
    if isinstance(raw, msgspec.Raw):
        return msgspec.json.decode(raw, type=kind)
    return msgspec.convert(raw, kind)


def supported(data: Any) -> list[str] | None:
    """``data.supported`` of a -32022 error, or None when it has none."""
    versions = data.get("supported") if isinstance(data, dict) else None
    if isinstance(versions, list) and all(isinstance(v, str) for v in versions):
        return versions
    return None


def clamped(raw: msgspec.Raw) -> dict[str, Any] | msgspec.Raw:
    """A result whose negative ``ttlMs`` is floored to 0, as the SDK floors it before validating."""
    try:
        values = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw
    if isinstance(values, dict):
        ttl = values.get("ttlMs")
        if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl < 0:
            values["ttlMs"] = 0
        return values
    return raw
