"""A remote server's session, through the SDK's ``mcp.Client``: imported by remote workers only.

Above: ``workers.session``, which opens the session (``open_remote``) and hands the SDK's messages to
``on_message``; ``workers.tools`` and ``workers.catalog``, through the pager and ``absorb_tools``.
Below: the SDK's ``Client`` over ``workers.remote``'s transports, and the session's private parts,
used the way the SDK's own ``Client`` and ``subscriptions`` modules use them:

- ``raw_request``: a request whose result comes back as plain JSON values, not checked against the
  SDK's result model, so that one bad entry in a listing does not fail the whole page (the session's
  ``send_request`` validates every result against its wire model first);
- ``absorb_tools``: hand the session a listing the worker read itself, so the per-tool state it
  derives from ``tools/list`` (2026-07-28 ``x-mcp-header`` maps) matches what the worker serves;
  without it the session's ``call_tool`` would list the tools itself, with the strict model, before
  checking a result. The worker checks results against output schemas itself, on every transport,
  so the session is given none.
"""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx2
import mcp_types as types
import trio
from mcp import Client
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import CallOptions
from mcp_types import (
    Implementation,
    LoggingMessageNotification,
    ResourceUpdatedNotification,
    ToolListChangedNotification,
)

from supervisor import __version__
from supervisor.config.model import ServerSpec
from supervisor.protocol import WorkerTool
from workers.lean import OnEvent
from workers.remote import connect_remote
from workers.requests import ServerRequests
from workers.trouble import HttpTrouble

__all__ = ["absorb_tools", "open_remote", "raw_request"]

log = logging.getLogger("mcp_supervisor.worker")


def open_remote(
    spec: ServerSpec, http: HttpTrouble, auth: httpx2.Auth | None, requests: ServerRequests, on_event: OnEvent
) -> AbstractAsyncContextManager[Client]:
    """The SDK's client of a remote server (entered: the session negotiated)."""

    async def on_message(message: object) -> None:
        """The session's messages outside requests: a tool list change (handshake-era servers notify
        this way), a log message, a resource update; transport failures, kept to explain what follows."""
        if isinstance(message, ToolListChangedNotification):
            on_event("tools", None)
        elif isinstance(message, LoggingMessageNotification):
            on_event("logged", message.params)
        elif isinstance(message, ResourceUpdatedNotification):
            on_event("updated", str(message.params.uri))
        elif isinstance(message, Exception):
            http.note(message)
            log.debug("transport: %s: %s", type(message).__name__, message)
        await trio.lowlevel.checkpoint()

    options: dict[str, Any] = requests.client_options()
    return Client(
        connect_remote(spec, http, auth),
        cache=None,
        client_info=Implementation(name="mcp-supervisor", version=__version__),
        message_handler=on_message,
        **options,
    )


async def raw_request(session: ClientSession, method: str, params: dict[str, Any]) -> Any:
    """Send ``method`` as the session would (stamped, under its read timeout); its result, unchecked.

    Raises ``MCPError`` for a JSON-RPC error or a closed connection, as the session's requests do.
    """
    data: dict[str, Any] = {"method": method, "params": params}
    opts: CallOptions = {}
    session._stamp(data, opts)
    timeout = session._session_read_timeout_seconds
    if timeout is not None:
        opts["timeout"] = timeout
    return await session._dispatcher.send_raw_request(method, data["params"], opts)


def absorb_tools(client: Any, tools: list[WorkerTool]) -> None:
    """Make ``tools`` (all of them) the session's idea of the server's tools."""
    listing = types.ListToolsResult(
        tools=[types.Tool(name=tool.name, input_schema=tool.input_schema) for tool in tools]
    )
    client.session._absorb_tool_listing(listing, complete=True)
