"""Each host connection is a client of the supervisor of its own, and answers its servers' requests.

Above: the facade's ``tools/call`` handler, which makes each routed call through ``Hosts.client``.
Below: the facade's one ``AsyncSupervisorClient``, seen through ``as_client`` views (one connection,
many identities).

- **Identity.** Each host session gets an identity of its own, so it has its own worker on ``scope:
  client`` servers: a stdio facade serves one host (``facade-PID``); on streamable HTTP each
  ``Mcp-Session-Id`` is one (``facade-PID-N``; the id itself, which authorizes the session, is never
  shown). Stateless 2026-07-28 HTTP requests have no session: they share the facade's identity.
- **Server requests.** When a host declared sampling or elicitation, a server's
  ``sampling/createMessage`` or ``elicitation/create`` arising in that host's call reaches the
  host, and its answer goes back to the server:

  - on a handshake-era connection, as a request to the host tied to its ``tools/call`` (so
    streamable HTTP sends it on that request's stream);
  - on 2026-07-28, which has no requests to the host, the way that protocol asks: the routed call
    goes on in a task of its own, the host's ``tools/call`` is answered with an
    ``input_required`` result carrying the request and a ``requestState``, and the host's retry
    with its answer resumes the call (as many rounds as the server asks). A host that does not
    retry within ``RESUME_TIMEOUT`` has the server told that it did not answer.

  Otherwise the supervisor's config answers it.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequest,
    ElicitRequestParams,
    ElicitResult,
    InputRequest,
    InputRequiredResult,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter

from supervisor.client.aio import AsyncSupervisorClient
from supervisor.client.answers import ELICITATION, SAMPLING, Handler
from supervisor.facade.access import Grant

__all__ = ["Hosts"]

MAX_SESSIONS_KNOWN: Final = 10_000  # HTTP sessions remembered (ids are never reused; the oldest go)
MAX_CLIENTS_KEPT: Final = 256  # supervisors' clients whose plain view is kept
MAX_SUSPENDED: Final = 1000  # 2026-07-28 calls waiting for their host's retry; past it, the config answers
RESUME_TIMEOUT: Final = 120.0  # seconds a 2026-07-28 host has to retry with its answer
_ELICIT_PARAMS: TypeAdapter[ElicitRequestParams] = TypeAdapter(ElicitRequestParams)


Routed = Callable[[AsyncSupervisorClient], Awaitable[CallToolResult]]


@dataclass(eq=False)
class _Suspended:
    """A 2026-07-28 host's routed call, between the server's request and the host's retry."""

    events: MemoryObjectReceiveStream[tuple[str, Any]]  # ("ask", (method, params)), ("done", result)...
    answers: MemoryObjectSendStream[dict[str, Any]]
    key: str = ""  # the input request waiting for its response
    state: str = ""  # the requestState that resumes it
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)  # the routed call's own


class Hosts:
    """Host sessions as supervisor clients."""

    def __init__(self) -> None:
        self._prefix = f"facade-{os.getpid()}"
        self._numbers = itertools.count(1)
        self._identities: dict[str, str] = {}  # Mcp-Session-Id -> identity (oldest first)
        self._suspended: dict[str, _Suspended] = {}  # requestState -> the call it resumes
        self.tasks: anyio.abc.TaskGroup | None = None  # where 2026-07-28 hosts' calls run
        # (client, its view as the facade), by client (one per supervisor the facade federates)
        self._plain: dict[int, tuple[AsyncSupervisorClient, AsyncSupervisorClient]] = {}
        self._twins: dict[
            tuple[str, str, str, int], tuple[AsyncSupervisorClient, AsyncSupervisorClient]
        ] = {}  # (identity, principal, session, client) -> (client, its view as them)

    async def call(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: CallToolRequestParams,
        client: AsyncSupervisorClient,
        routed: Routed,
        grant: Grant | None = None,
    ) -> CallToolResult | InputRequiredResult:
        """``routed`` as the host of ``ctx`` (with ``grant``'s identity, when it has one); for a
        2026-07-28 host that offers sampling or elicitation, in rounds (see the module docstring)."""
        if params.request_state is not None:
            return await self._resume(params)
        capabilities = ctx.session.client_capabilities
        if (
            ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
            or capabilities is None
            or (capabilities.sampling is None and capabilities.elicitation is None)
            or self.tasks is None
            or len(self._suspended) >= MAX_SUSPENDED
        ):
            return await routed(self.client(ctx, client, grant))
        events_in, events = anyio.create_memory_object_stream[tuple[str, Any]](math.inf)
        answers, answers_out = anyio.create_memory_object_stream[dict[str, Any]](1)
        suspended = _Suspended(events, answers)

        def asking(method: str) -> Handler:
            async def ask(request: dict[str, Any]) -> dict[str, Any]:
                await events_in.send(("ask", (method, request)))
                try:
                    with anyio.fail_after(RESUME_TIMEOUT):
                        return await answers_out.receive()
                except TimeoutError:
                    raise RuntimeError(f"the host did not retry within {RESUME_TIMEOUT:g} s") from None
                except anyio.EndOfStream:
                    raise RuntimeError("the host's retry carried no answer") from None

            return ask

        view = client.as_client(
            self.identity(ctx, grant),
            principal="" if grant is None else grant.principal,
            session=self.session_of(ctx),
            on_sampling=asking(SAMPLING) if capabilities.sampling is not None else None,
            on_elicitation=asking(ELICITATION) if capabilities.elicitation is not None else None,
        )

        async def run() -> None:
            with events_in, answers_out:
                outcome: tuple[str, Any] = ("error", MCPError(INTERNAL_ERROR, "the host cancelled the call"))
                try:
                    with suspended.scope:  # cancelled with the host's request (see _next)
                        try:
                            outcome = ("done", await routed(view))
                        except Exception as exc:  # the handler's own errors, raised in the host's request
                            outcome = ("error", exc)
                finally:  # a host that never retried: its requestState goes with the call
                    self._suspended.pop(suspended.state, None)
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await events_in.send(outcome)

        self.tasks.start_soon(run)
        return await self._next(suspended)

    async def _next(self, suspended: _Suspended) -> CallToolResult | InputRequiredResult:
        """What the host's request gets: the call's result, or the next request of its server. A host
        that cancels its request cancels the routed call (the server is told, as on any route)."""
        try:
            kind, value = await suspended.events.receive()
        except anyio.EndOfStream:
            raise MCPError(INTERNAL_ERROR, "the routed call ended without a result") from None
        except anyio.get_cancelled_exc_class():
            suspended.scope.cancel()
            raise
        if kind == "error":
            raise value
        if kind == "done":
            assert isinstance(value, CallToolResult)
            return value
        method, request = value
        suspended.key = f"{method}#{secrets.token_hex(4)}"
        suspended.state = state = secrets.token_urlsafe(24)
        self._suspended[state] = suspended
        built: InputRequest
        if method == SAMPLING:
            checked = CreateMessageRequestParams.model_validate(request, by_name=False)
            built = CreateMessageRequest(params=checked)
        else:
            built = ElicitRequest(params=_ELICIT_PARAMS.validate_python(request, by_name=False))
        return InputRequiredResult(input_requests={suspended.key: built}, request_state=state)

    async def _resume(self, params: CallToolRequestParams) -> CallToolResult | InputRequiredResult:
        assert params.request_state is not None
        suspended = self._suspended.pop(params.request_state, None)
        if suspended is None:
            raise MCPError(INVALID_PARAMS, "requestState is unknown or expired: call the tool again")
        response = (params.input_responses or {}).get(suspended.key)
        if response is None:
            suspended.answers.close()  # the server is told that the host did not answer
        else:
            answer = response.model_dump(mode="json", by_alias=True, exclude_none=True)
            with contextlib.suppress(anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                suspended.answers.send_nowait(answer)
        return await self._next(suspended)

    def session_of(self, ctx: ServerRequestContext[Any, Any]) -> str:
        """The name of the host session of ``ctx``: ``facade-PID-N`` for an HTTP host session, else
        the facade's own (stdio, stateless HTTP)."""
        headers = getattr(ctx.request, "headers", None)
        session_id = headers.get("mcp-session-id") if headers is not None else None
        return self.identity_of(session_id) if session_id else self._prefix

    def identity(self, ctx: ServerRequestContext[Any, Any], grant: Grant | None = None) -> str:
        """The identity the host session of ``ctx`` calls as: its grant's, when it has one (a gateway
        client's), else the session's own."""
        if grant is not None and grant.identity is not None:
            return grant.identity
        return self.session_of(ctx)

    def identity_of(self, session_id: str) -> str:
        """The identity of the HTTP host session ``session_id``."""
        identity = self._identities.get(session_id)
        if identity is None:
            identity = self._identities[session_id] = f"{self._prefix}-{next(self._numbers)}"
            while len(self._identities) > MAX_SESSIONS_KNOWN:
                del self._identities[next(iter(self._identities))]
        return identity

    def plain(
        self, client: AsyncSupervisorClient, session_id: str | None = None, grant: Grant | None = None
    ) -> AsyncSupervisorClient:
        """``client`` as a host that answers no server requests: one without a session of its own
        (stdio, stateless HTTP), or the HTTP host session ``session_id``; with ``grant``'s identity
        when it has one, and its principal (for the audit trail); kept while ``client`` is the link's."""
        principal = "" if grant is None else grant.principal
        if session_id is None and (grant is None or (grant.identity is None and not principal)):
            kept = self._plain.get(id(client))
            if kept is None or kept[0] is not client:
                if len(self._plain) >= MAX_CLIENTS_KEPT:  # links made again and again: the old ones go
                    self._plain.clear()
                kept = self._plain[id(client)] = (client, client.as_client(self._prefix))
            return kept[1]
        session = self._prefix if session_id is None else self.identity_of(session_id)
        identity = session if grant is None or grant.identity is None else grant.identity
        key = (identity, principal, session, id(client))
        twin = self._twins.get(key)
        if twin is None or twin[0] is not client:
            if len(self._twins) >= MAX_SESSIONS_KNOWN:
                self._twins.clear()
            made = client.as_client(identity, principal=principal, session=session)
            twin = self._twins[key] = (client, made)
        return twin[1]

    def client(
        self, ctx: ServerRequestContext[Any, Any], client: AsyncSupervisorClient, grant: Grant | None = None
    ) -> AsyncSupervisorClient:
        """``client`` as the host session of ``ctx``: its identity (``grant``'s, when it has one), its
        principal, and handlers relaying to it."""
        session, name = ctx.session, self.session_of(ctx)
        identity = self.identity(ctx, grant)
        principal = "" if grant is None else grant.principal
        capabilities = session.client_capabilities
        if capabilities is None or not session.can_send_request:
            return client.as_client(identity, principal=principal, session=name)
        related = ServerMessageMetadata(related_request_id=ctx.request_id)
        on_sampling = _sampling(session, related) if capabilities.sampling is not None else None
        on_elicitation = _elicitation(session, related) if capabilities.elicitation is not None else None
        return client.as_client(
            identity,
            principal=principal,
            session=name,
            on_sampling=on_sampling,
            on_elicitation=on_elicitation,
        )


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
