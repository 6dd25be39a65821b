"""The worker's own MCP client for a stdio server: JSON-RPC over the server's pipes, with msgspec.

Above: ``workers.session``, which opens one ``LeanClient`` per stdio server (``open_client``), and the
parts of the worker that talk to the server through it (``workers.tools``, ``workers.interests``,
``workers.catalog``, ``workers.calls``), as they talk to the SDK's ``mcp.Client`` on a remote server:
it has the attributes and methods of ``mcp.Client`` they use. Below: the server's pipes
(``workers.stdio``): requests go out through ``OwnRequests`` (``workers.own_requests``, which also
takes their answers and progress), and every other line the server writes comes to ``receive``.

It says to the server what the SDK's client says, byte for byte (``mode="auto"``, the SDK's default):

- the handshake: ``server/discover`` at 2026-07-28 (not cancelled, within ``DISCOVER_TIMEOUT``); a
  server that shares a modern version is adopted (every request then carries the ``_meta``
  envelope: protocol version, client info and capabilities), any other answer falls back to
  ``initialize`` at 2025-11-25 and ``notifications/initialized``; ``-32022`` naming a mutual modern
  version probes once more (``_negotiate``, the SDK's ``negotiate_auto``);
- the capabilities: ``sampling`` with a sampling program or ``"sampling": "caller"``, ``elicitation``
  (form and URL) always, ``roots`` (``listChanged``) with configured roots (``workers.requests``);
- ``ping``, ``logging/setLevel``, ``resources/subscribe`` / ``unsubscribe``, and on 2026-07-28 the
  ``subscriptions/listen`` streams (``listen``), as the SDK's ``ClientSession`` sends them.

What the server sends that is not an answer of ours: its requests (``ping`` answered here; sampling,
elicitation and roots by ``workers.lean_sdk``, which loads the SDK's models the first time one comes,
to validate and answer exactly as the SDK does), and its notifications: a tool list change, a log
message, a resource update (to ``on_event``), a cancel of one of its requests, a listen stream's
acknowledgment and events. A line that is no JSON-RPC message is the transport's to warn about.

The results the worker turns into the wire's own values itself (a tool call, a listing: raw JSON) are
never checked by the SDK's models; a resource read, a prompt, a completion and a 2026-07-28
``input_required`` round are (``workers.lean_sdk``), so that a lean worker answers them as one that
used the SDK, and pays for those models only when it serves one.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import trio

from workers.listen import Route, Subscription, listen
from workers.messages import (
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    DISCOVER_TIMEOUT,
    HANDSHAKE_PROTOCOL_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    LATEST_MODERN_VERSION,
    MODERN_PROTOCOL_VERSIONS,
    PROTOCOL_VERSION_KEY,
    SERVER_INFO_KEY,
    SUBSCRIPTION_ID_KEY,
    DiscoverResult,
    Implementation,
    InitializeResult,
    LogMessage,
    ServerCapabilities,
    Updated,
    clamped,
    decode_as,
    decode_message,
    encode,
)
from workers.messages import (
    supported as supported_versions,
)
from workers.server_errors import REQUEST_TIMEOUT, UNSUPPORTED_PROTOCOL_VERSION, MCPError
from workers.stdio import StdioServer

if TYPE_CHECKING:
    from workers.requests import ServerRequests

__all__ = ["MODERN_PROTOCOL_VERSIONS", "Event", "LeanClient", "OnEvent", "open_client"]

log = logging.getLogger("mcp_supervisor.worker")

Event = Literal["tools", "logged", "updated"]
OnEvent = Callable[[Event, Any], None]  # what the server said: tools changed, a log message (params), a URI


# ---------------------------------------------------------------- the client


class LeanClient:
    """One MCP session with a stdio server, spoken by the worker itself (see the module)."""

    def __init__(
        self,
        server: StdioServer,
        requests: ServerRequests,
        client_info: dict[str, Any],
        on_event: OnEvent,
        tasks: trio.Nursery,
    ) -> None:
        self.server = server
        self.own = server.own
        self.requests = requests
        self.client_info = client_info
        self._on_event = on_event
        self._tasks = tasks  # where the server's requests are answered
        self.protocol_version: str | None = None
        self.server_capabilities = ServerCapabilities()
        self.server_info: Implementation | None = None
        self.instructions: str | None = None
        self._serving: dict[int | str, trio.CancelScope] = {}  # the server's requests being answered
        self._routes: dict[str, Route] = {}  # listen streams by their request id

    @property
    def session(self) -> LeanClient:
        """Itself: what the SDK's ``Client.session`` offers, it offers too."""
        return self

    def capabilities(self) -> dict[str, Any]:
        """The capability ad (``ClientSession._build_capabilities``: the same keys in the same order)."""
        offered = self.requests.client_options()
        ad: dict[str, Any] = {}
        if "sampling_callback" in offered:
            ad["sampling"] = {}
        if "elicitation_callback" in offered:
            ad["elicitation"] = {"form": {}, "url": {}}
        if "list_roots_callback" in offered:
            ad["roots"] = {"listChanged": True}
        return ad

    # ------------------------------------------------------------ the handshake

    async def connect(self) -> None:
        """Negotiate the protocol (the SDK's ``mode="auto"``): discover, else initialize."""
        version = LATEST_MODERN_VERSION
        for attempt in range(2):
            try:
                raw = await self._discover(version)
            except MCPError as exc:
                if exc.code == UNSUPPORTED_PROTOCOL_VERSION:
                    supported = supported_versions(exc.data)
                    mutual = [v for v in MODERN_PROTOCOL_VERSIONS if v in (supported or ())]
                    if mutual and attempt == 0:
                        version = mutual[-1]
                        continue
                    if supported is not None and not any(v in HANDSHAKE_PROTOCOL_VERSIONS for v in supported):
                        raise
                try:
                    await self.initialize()
                except MCPError as handshake:
                    if handshake.code != UNSUPPORTED_PROTOCOL_VERSION or attempt != 0:
                        raise
                    mutual = [
                        v for v in MODERN_PROTOCOL_VERSIONS if v in (supported_versions(handshake.data) or ())
                    ]
                    if not mutual:
                        raise
                    version = mutual[-1]
                    continue
                return
            try:
                result = decode_as(clamped(raw), DiscoverResult)
            except (msgspec.ValidationError, msgspec.DecodeError):
                from workers import lean_sdk

                if not lean_sdk.valid_discover(raw):  # the SDK's model is the judge of what ours refuses
                    await self.initialize()
                    return
                result = msgspec.convert(lean_sdk.discover_values(raw), DiscoverResult)
            if not any(v in result.supported_versions for v in MODERN_PROTOCOL_VERSIONS):
                await self.initialize()
                return
            self._adopt_modern(result)
            return

    async def _discover(self, version: str) -> msgspec.Raw:
        meta = {
            PROTOCOL_VERSION_KEY: version,
            CLIENT_INFO_KEY: self.client_info,
            CLIENT_CAPABILITIES_KEY: self.capabilities(),
        }
        with trio.move_on_after(DISCOVER_TIMEOUT) as scope:
            return await self.own.request("server/discover", {"_meta": meta}, cancel_on_abandon=False)
        assert scope.cancelled_caught
        raise MCPError(REQUEST_TIMEOUT, "Request 'server/discover' timed out")

    async def initialize(self) -> None:
        params = {
            "protocolVersion": LATEST_HANDSHAKE_VERSION,
            "capabilities": self.capabilities(),
            "clientInfo": self.client_info,
        }
        raw = await self.own.request("initialize", params, cancel_on_abandon=False)
        try:
            result = msgspec.json.decode(raw, type=InitializeResult)
        except (msgspec.ValidationError, msgspec.DecodeError):
            from workers import lean_sdk

            # The SDK's model decides (and raises its ValidationError, as the SDK's session would).
            result = msgspec.convert(lean_sdk.initialize_values(raw), InitializeResult)
        if result.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
            raise RuntimeError(f"Unsupported protocol version from the server: {result.protocol_version}")
        self.protocol_version = result.protocol_version
        self.server_capabilities = result.capabilities
        self.server_info = result.server_info
        self.instructions = result.instructions
        self.server.send(encode({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def _adopt_modern(self, result: DiscoverResult) -> None:
        version = [v for v in MODERN_PROTOCOL_VERSIONS if v in result.supported_versions][-1]
        self.protocol_version = version
        self.server_capabilities = result.capabilities
        self.instructions = result.instructions
        stamp = (result.meta or {}).get(SERVER_INFO_KEY)
        try:
            self.server_info = None if stamp is None else msgspec.convert(stamp, Implementation)
        except msgspec.ValidationError:
            self.server_info = None  # display-only: a malformed stamp reads as absent
        self.own.envelope = {
            PROTOCOL_VERSION_KEY: version,
            CLIENT_INFO_KEY: self.client_info,
            CLIENT_CAPABILITIES_KEY: self.capabilities(),
        }

    @property
    def modern(self) -> bool:
        return self.protocol_version in MODERN_PROTOCOL_VERSIONS

    # ------------------------------------------------------------ requests of the worker's

    async def send_ping(self) -> None:
        await self.own.request("ping", {})

    async def set_logging_level(self, level: str) -> None:
        await self.own.request("logging/setLevel", {"level": level})

    async def subscribe_resource(self, uri: str) -> None:
        await self.own.request("resources/subscribe", {"uri": uri})

    async def unsubscribe_resource(self, uri: str) -> None:
        await self.own.request("resources/unsubscribe", {"uri": uri})

    async def read_resource(self, uri: str) -> Any:
        from workers import lean_sdk

        return await lean_sdk.read_resource(self, uri)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None = None) -> Any:
        from workers import lean_sdk

        return await lean_sdk.get_prompt(self, name, arguments)

    async def complete(self, ref: Any, argument: dict[str, str], context: dict[str, str] | None) -> Any:
        from workers import lean_sdk

        return await lean_sdk.complete(self, ref, argument, context)

    def listen(
        self, *, tools_list_changed: bool = False, resource_subscriptions: Sequence[str] = ()
    ) -> AbstractAsyncContextManager[Subscription]:
        """One ``subscriptions/listen`` stream (2026-07-28), as the SDK's ``listen`` opens it."""
        return listen(self, self._routes, self._tasks, tools_list_changed, resource_subscriptions)

    # ------------------------------------------------------------ what the server sends

    def receive(self, line: bytes) -> bool:
        """A line from the server that is no answer of ours; False when it is not JSON-RPC."""
        try:
            message = decode_message(line)
        except msgspec.DecodeError:
            return False
        match message.kind():
            case "request":
                self._tasks.start_soon(self._answer, message.id, message.method, message.params)
            case "notification":
                self._notified(message.method, message.params)
            case "response" | "error":
                log.debug("dropping response for unknown/late request id %r", message.id)
            case None:
                return False
        return True

    def _notified(self, method: str, params: dict[str, Any] | None) -> None:
        if method == "notifications/cancelled":
            request_id = (params or {}).get("requestId")
            if isinstance(request_id, int | str) and not isinstance(request_id, bool):
                if (scope := self._serving.get(request_id)) is not None:
                    scope.cancel()
                if isinstance(request_id, str) and (route := self._routes.get(request_id)) is not None:
                    route.settle("lost")
            return
        if self._routes and self._listened(method, params):
            return
        try:
            if method == "notifications/tools/list_changed":
                self._on_event("tools", None)
            elif method == "notifications/message":
                self._on_event("logged", msgspec.convert(params, LogMessage))
            elif method == "notifications/resources/updated":
                self._on_event("updated", msgspec.convert(params, Updated).uri)
            elif method != "notifications/progress":
                log.debug("dropped %r", method)
        except msgspec.ValidationError as exc:
            log.warning("Failed to validate notification: %s: %s", method, exc)

    def _listened(self, method: str, params: dict[str, Any] | None) -> bool:
        """Feed a listen stream what is stamped with its id; True for an acknowledgment (consumed)."""
        meta = (params or {}).get("_meta")
        stream = meta.get(SUBSCRIPTION_ID_KEY) if isinstance(meta, dict) else None
        route = self._routes.get(stream) if isinstance(stream, str) else None
        if route is None or params is None:
            return False
        if method == "notifications/subscriptions/acknowledged":
            honored = params.get("notifications")
            if not isinstance(honored, dict):
                return False
            route.set_acked(honored)
            return True
        if method.endswith("/list_changed"):
            route.deliver((method.split("/")[1], ""))
        elif method == "notifications/resources/updated" and isinstance(params.get("uri"), str):
            route.deliver(("updated", params["uri"]))
        return False  # events go on to the worker as well

    async def _answer(self, request_id: int | str, method: str, params: dict[str, Any] | None) -> None:
        """Answer one request of the server's; one it cancels is not answered."""
        with trio.CancelScope() as scope:
            self._serving[request_id] = scope
            try:
                if method == "ping" and not self.modern:  # (2026-07-28 has no ping: the SDK refuses it)
                    answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "result": {}}
                else:
                    from workers import lean_sdk  # the SDK's models judge these requests and answers

                    answer = await lean_sdk.answer(self, request_id, method, params)
            finally:
                if self._serving.get(request_id) is scope:
                    del self._serving[request_id]
        if not scope.cancelled_caught:
            self.server.send(encode(answer))


@asynccontextmanager
async def open_client(
    server: StdioServer,
    requests: ServerRequests,
    client_info: dict[str, Any],
    on_event: OnEvent,
) -> AsyncIterator[LeanClient]:
    """Start the server and negotiate the session; the client, until the block ends (then the server
    is stopped: stdin, SIGTERM, SIGKILL)."""
    async with trio.open_nursery() as tasks:
        client = LeanClient(server, requests, client_info, on_event, tasks)
        try:
            async with server.connect(client.receive):
                await client.connect()
                yield client
        finally:
            tasks.cancel_scope.cancel()
