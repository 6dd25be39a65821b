"""The remote transports a worker hands to ``mcp.Client``: streamable HTTP and legacy SSE.

Below: an MCP server at ``url``, reached with the config's ``headers`` (for
``Authorization: Bearer ${TOKEN}``); the SDK's own transports do the protocol
work. Connection failures and HTTP errors surface from ``Client`` start-up as
``httpx2.HTTPError`` or ``MCPError`` and end the worker, so the keeper's restart
policy decides when to reconnect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from supervisor.config import ServerSpec

__all__ = ["HttpTrouble", "connect_remote"]


class HttpTrouble:
    """The last HTTP error status a server answered with: the SDK's errors do not carry it."""

    def __init__(self) -> None:
        self.last: str | None = None

    async def on_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self.last = (
                f"HTTP {response.status_code} {response.reason_phrase} from {response.request.url.host}"
            )

    def explain(self, error: BaseException) -> str:
        text = f"{type(error).__name__}: {error}"
        return f"{text} ({self.last})" if self.last else text


@asynccontextmanager
async def connect_remote(spec: ServerSpec, trouble: HttpTrouble) -> AsyncIterator[TransportStreams]:
    assert spec.url is not None, "remote servers have a url (checked by the config loader)"
    headers = dict(spec.headers) or None
    if spec.transport == "sse":

        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            client = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
            client.event_hooks["response"].append(trouble.on_response)
            return client

        async with sse_client(spec.url, headers=headers, httpx_client_factory=factory) as streams:
            yield streams
    else:
        http = create_mcp_http_client(headers=headers)
        http.event_hooks["response"].append(trouble.on_response)
        async with http, streamable_http_client(spec.url, http_client=http) as streams:
            yield streams
