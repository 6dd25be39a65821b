"""The remote transports a worker hands to ``mcp.Client``: streamable HTTP and legacy SSE.

Below: an MCP server at ``url``, reached with the config's ``headers`` (for
``Authorization: Bearer ${TOKEN}``) or OAuth (``workers.oauth``); the SDK's own transports do the protocol
work. Connection failures and HTTP errors surface from ``Client`` start-up as
``httpx2.HTTPError`` or ``MCPError`` and end the worker, so the keeper's restart
policy decides when to reconnect.

Streamable HTTP keeps its TCP connections alive between calls: see
``keepalive_http_client``.
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT, create_mcp_http_client

from supervisor.config.model import ServerSpec
from workers.trouble import HttpTrouble, LoginNeeded, login_hint

__all__ = ["HttpTrouble", "LoginNeeded", "connect_remote", "keepalive_http_client", "login_hint"]

# A response body left unread when it is closed is read to its end, up to this much and this long, so
# that its connection can go back to the pool; past either bound the connection is closed instead.
DRAIN_BYTES: Final = 64 * 1024
DRAIN_SECONDS: Final = 0.1
# Idle connections are closed after 2 s, well within the 5 s idle timeout of Node's and uvicorn's
# HTTP servers, so the worker never sends a call on a connection the server is closing. Every
# connection in the pool may stay alive, so a burst of concurrent calls does not churn connections.
KEEPALIVE_LIMITS: Final = httpx2.Limits(
    max_connections=100, max_keepalive_connections=100, keepalive_expiry=2.0
)


class _DrainOnClose(httpx2.AsyncByteStream):
    """A response body that, when closed before its end, first reads what is left (within bounds)."""

    def __init__(self, stream: httpx2.AsyncByteStream) -> None:
        self._stream = stream
        self._parts: AsyncIterator[bytes] | None = None
        self._done = False

    @property
    def elapsed(self) -> datetime.timedelta | None:
        """``Response.elapsed`` looks for it on its stream."""
        elapsed: datetime.timedelta | None = getattr(self._stream, "elapsed", None)
        return elapsed

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self._parts = self._stream.__aiter__()
        async for part in self._parts:
            yield part
        self._done = True

    async def aclose(self) -> None:
        try:
            if not self._done:
                await self._drain()
        finally:
            await self._stream.aclose()

    async def _drain(self) -> None:
        parts = self._parts if self._parts is not None else self._stream.__aiter__()
        left = DRAIN_BYTES
        with anyio.move_on_after(DRAIN_SECONDS):
            try:
                async for part in parts:
                    left -= len(part)
                    if left < 0:
                        return
            except (httpx2.HTTPError, httpx2.StreamError, RuntimeError):
                return  # the connection is broken or busy: closing it is all there is left to do
            self._done = True


class _KeepAliveClient(httpx2.AsyncClient):
    async def send(self, request: httpx2.Request, *, stream: bool = False, **kwargs: Any) -> httpx2.Response:
        response = await super().send(request, stream=stream, **kwargs)
        if stream and isinstance(response.stream, httpx2.AsyncByteStream):
            response.stream = _DrainOnClose(response.stream)
        return response


def keepalive_http_client(headers: dict[str, str] | None = None) -> httpx2.AsyncClient:
    """The SDK's HTTP client for streamable HTTP (its timeouts), reusing connections between calls.

    The SDK's streamable HTTP transport closes a POST's event-stream response as soon as the
    JSON-RPC response has arrived on it, before it has read the end of the body (the last chunk
    of a chunked response, which the server sends right after), and a 202 to a notification
    without reading its empty body. httpcore can then not know the connection is clean, and
    closes it: every call would open a new TCP connection (server-everything, and any server
    that answers with event streams). This client reads the end of such a body before it closes
    it, so the connection goes back to the pool.
    """
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    return _KeepAliveClient(headers=headers, timeout=timeout, limits=KEEPALIVE_LIMITS)


@asynccontextmanager
async def connect_remote(
    spec: ServerSpec, trouble: HttpTrouble, auth: httpx2.Auth | None = None
) -> AsyncIterator[TransportStreams]:
    """The server's transport streams; with ``auth`` (``workers.oauth``) on every HTTP request."""
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

        async with sse_client(spec.url, headers=headers, httpx_client_factory=factory, auth=auth) as streams:
            yield streams
    else:
        http = keepalive_http_client(headers)
        if auth is not None:
            http.auth = auth
        http.event_hooks["response"].append(trouble.on_response)
        async with http, streamable_http_client(spec.url, http_client=http) as streams:
            yield streams
