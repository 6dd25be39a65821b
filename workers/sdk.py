"""What a worker needs from an ``mcp.ClientSession`` beyond its public API (SDK 2.3), in one place.

Above: ``workers.session``, ``workers.tools`` and ``workers.catalog``. Below: the session's private
parts, used the way the SDK's own ``Client`` and ``subscriptions`` modules use them:

- ``raw_request``: a request whose result comes back as plain JSON values, not checked against the
  SDK's result model, so that one bad entry in a listing does not fail the whole page (the session's
  ``send_request`` validates every result against its wire model first);
- ``envelope``: the ``_meta`` the session stamps on its own requests (2026-07-28: protocol version,
  client info and capabilities; None on older protocol versions), for the worker's own requests on
  a stdio server (``OwnRequests.request``);
- ``absorb_tools``: hand the session a listing the worker read itself, so the per-tool state it
  derives from ``tools/list`` (2026-07-28 ``x-mcp-header`` maps) matches what the worker serves;
  without it the session's ``call_tool`` would list the tools itself, with the strict model, before
  checking a result. The worker checks results against output schemas itself, on every transport,
  so the session is given none.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import CallOptions

from supervisor.protocol import WorkerTool

__all__ = ["absorb_tools", "envelope", "raw_request"]


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


def envelope(session: ClientSession) -> dict[str, Any] | None:
    """The ``_meta`` the session puts on its requests, or None when it puts none."""
    data: dict[str, Any] = {"method": "tools/list", "params": {}}
    session._stamp(data, {})
    meta = data["params"].get("_meta")
    return dict(meta) if isinstance(meta, dict) and meta else None


def absorb_tools(session: ClientSession, tools: list[WorkerTool]) -> None:
    """Make ``tools`` (all of them) the session's idea of the server's tools."""
    listing = types.ListToolsResult(
        tools=[types.Tool(name=tool.name, input_schema=tool.input_schema) for tool in tools]
    )
    session._absorb_tool_listing(listing, complete=True)
