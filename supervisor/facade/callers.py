"""Each host connection is a client of the supervisor of its own, and answers its servers' requests.

Above: the facade's ``tools/call`` handler, which makes each routed call through ``Hosts.client``.
Below: the facade's one ``AsyncSupervisorClient``, seen through ``as_client`` views (one connection,
many identities).

- **Identity.** Each host session gets an identity of its own, so it has its own worker on ``scope:
  client`` servers: a stdio facade serves one host (``facade-PID``); on streamable HTTP each
  ``Mcp-Session-Id`` is one (``facade-PID-N``; the id itself, which authorizes the session, is never
  shown). Stateless 2026-07-28 HTTP requests have no session: they share the facade's identity.
- **Server requests.** When a host declared sampling or elicitation and its connection can carry
  requests to it (handshake-era sessions), a server's ``sampling/createMessage`` or
  ``elicitation/create`` arising in that host's call is relayed to the host, tied to the host's
  ``tools/call`` (so streamable HTTP sends it on that request's stream), and the host's answer
  goes back to the server. Otherwise the supervisor's config answers it.
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Final

from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.message import ServerMessageMetadata
from mcp_types import (
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestParams,
    ElicitResult,
)
from pydantic import TypeAdapter

from supervisor.client import AsyncSupervisorClient
from supervisor.exchanges import Handler

__all__ = ["Hosts"]

MAX_SESSIONS_KNOWN: Final = 10_000  # HTTP sessions remembered (ids are never reused; the oldest go)
_ELICIT_PARAMS: TypeAdapter[ElicitRequestParams] = TypeAdapter(ElicitRequestParams)


class Hosts:
    """Host sessions as supervisor clients."""

    def __init__(self) -> None:
        self._prefix = f"facade-{os.getpid()}"
        self._numbers = itertools.count(1)
        self._identities: dict[str, str] = {}  # Mcp-Session-Id -> identity (oldest first)

    def identity(self, ctx: ServerRequestContext[Any, Any]) -> str:
        headers = getattr(ctx.request, "headers", None)
        session_id = headers.get("mcp-session-id") if headers is not None else None
        if not session_id:
            return self._prefix
        identity = self._identities.get(session_id)
        if identity is None:
            identity = self._identities[session_id] = f"{self._prefix}-{next(self._numbers)}"
            while len(self._identities) > MAX_SESSIONS_KNOWN:
                del self._identities[next(iter(self._identities))]
        return identity

    def client(
        self, ctx: ServerRequestContext[Any, Any], client: AsyncSupervisorClient
    ) -> AsyncSupervisorClient:
        """``client`` as the host session of ``ctx``: its identity, and handlers relaying to it."""
        session, identity = ctx.session, self.identity(ctx)
        capabilities = session.client_capabilities
        if capabilities is None or not session.can_send_request:
            return client.as_client(identity)
        related = ServerMessageMetadata(related_request_id=ctx.request_id)
        on_sampling = _sampling(session, related) if capabilities.sampling is not None else None
        on_elicitation = _elicitation(session, related) if capabilities.elicitation is not None else None
        return client.as_client(identity, on_sampling=on_sampling, on_elicitation=on_elicitation)


def _sampling(session: ServerSession, related: ServerMessageMetadata) -> Handler:
    async def sample(params: dict[str, Any]) -> dict[str, Any]:
        checked = CreateMessageRequestParams.model_validate(params, by_name=False)
        request = CreateMessageRequest(params=checked)
        result = await session.send_request(request, CreateMessageResult, metadata=related)
        return _json(result)

    return sample


def _elicitation(session: ServerSession, related: ServerMessageMetadata) -> Handler:
    async def elicit(params: dict[str, Any]) -> dict[str, Any]:
        request = ElicitRequest(params=_ELICIT_PARAMS.validate_python(params, by_name=False))
        result = await session.send_request(request, ElicitResult, metadata=related)
        return _json(result)

    return elicit


def _json(result: CreateMessageResult | ElicitResult) -> dict[str, Any]:
    dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped
