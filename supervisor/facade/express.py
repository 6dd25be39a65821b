"""The facade's fast path for the bulk of a host's traffic: ``tools/call`` and ``tools/list``, from the
bytes of the host's request to the bytes of the answer, without the SDK's server stack.

Above: the transports' lanes (``supervisor.facade.stdio_lane``, ``supervisor.facade.http_lane``), which
offer each request's bytes with what they know of its connection. Below: the facade's tools
(``supervisor.facade.served_tools``: the view, the name mapping, the routed call, the listing) and the
SDK's own tables (``mcp_types.methods``), which shape what does not take the fast way.

A request is taken (``take``) only when its answer is certain to be the one the SDK would give: one
JSON-RPC request object (``"jsonrpc": "2.0"``, an integer or string id, no other members), nested
less deep than the SDK's decoder goes, whose params are exactly what the method names (``name``,
``arguments`` an object, ``_meta`` with a progress token and, on 2026-07-28, the request's envelope,
judged once by the SDK's own models for each distinct envelope), from a host that declared neither
sampling nor elicitation (a call that may have to ask the host goes the SDK's way), while the facade
has a supervisor and its listing. Anything else is left to the SDK, which answers it as before.

The answer (``answer``) is the SDK's, as a JSON value: a listing as the SDK shapes it for the host's
protocol version (made once per version and registry change, then kept as bytes); a call's result
relayed as it came when its content is plain text, images and audio, else shaped by the SDK's own
models; 2026-07-28 results stamped as the SDK stamps them; errors with the SDK's codes and messages.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal

import mcp_types as types
import msgspec
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types import methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from supervisor.facade.access import Grant
from supervisor.facade.callers import Hosts
from supervisor.facade.served_tools import MAX_LISTINGS, ServedTools, error_result
from supervisor.facade.upstream import SupervisorGone
from supervisor.facade.upstreams import Upstreams
from supervisor.facade.views import View
from supervisor.protocol import ToolInfo, ToolResult

__all__ = ["MAX_BRACKETS", "Express", "Taken"]

log = logging.getLogger("mcp_supervisor.facade")

# Brackets in one request the fast path decodes: fewer than the SDK's decoder nests (about 200), so
# what it takes the SDK would have read too (a request with more goes the SDK's way).
MAX_BRACKETS: Final = 192
MAX_ENVELOPES: Final = 256  # distinct 2026-07-28 envelopes judged and kept
PLAIN_KEYS: Final = {
    "text": frozenset({"type", "text", "_meta"}),
    "image": frozenset({"type", "data", "mimeType", "_meta"}),
    "audio": frozenset({"type", "data", "mimeType", "_meta"}),
}
_VERSION_KEY: Final = types.PROTOCOL_VERSION_META_KEY
_INFO_KEY: Final = types.CLIENT_INFO_META_KEY
_CAPABILITIES_KEY: Final = types.CLIENT_CAPABILITIES_META_KEY
_MODERN_META: Final = frozenset({_VERSION_KEY, _INFO_KEY, _CAPABILITIES_KEY, "progressToken"})
_HANDSHAKE_META: Final = frozenset({"progressToken"})
_NO_PARAMS: Final = msgspec.Raw(b"")
_ID_RANGE: Final = (-(2**63), 2**63 - 1)  # integer ids msgspec writes back as read

Notify = Callable[[bytes], Awaitable[None]]  # sends one JSON-RPC notification (its bytes) to the host


class _Request(msgspec.Struct, forbid_unknown_fields=True):
    jsonrpc: Literal["2.0"]
    id: int | str
    method: str
    params: msgspec.Raw = _NO_PARAMS


class _CallParams(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    meta: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict, name="_meta")


class _ListParams(msgspec.Struct, forbid_unknown_fields=True):
    cursor: str = ""  # the facade lists in one page: a cursor changes nothing
    meta: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict, name="_meta")


_REQUEST = msgspec.json.Decoder(_Request)
_CALL = msgspec.json.Decoder(_CallParams)
_LIST = msgspec.json.Decoder(_ListParams)
_TOKEN = msgspec.json.Decoder(int | str)
_encode = msgspec.json.Encoder().encode


class Taken(msgspec.Struct, frozen=True):
    """A request the fast path answers: its id, method, the host's protocol version and its params."""

    id: int | str
    method: str  # "tools/call" or "tools/list"
    version: str
    name: str = ""
    arguments: dict[str, Any] | None = None
    progress: int | str | None = None  # the host's progress token
    listing: msgspec.Raw | None = None  # tools/list: the result, as bytes


class Express:
    """The fast path over one facade's tools; ``take`` says which requests it answers, ``answer``
    answers them."""

    def __init__(
        self, tools: ServedTools, hosts: Hosts, server: Server[Any], client: Callable[[], Upstreams]
    ):
        self._tools = tools
        self._hosts = hosts
        self._server = server
        self._client = client
        self._stamp = server.server_info_stamp  # the serverInfo of 2026-07-28 results (fixed, never changed)
        self._envelopes: dict[tuple[bytes, ...], str | None] = {}  # envelope -> its version (None: SDK's)
        self._listings: dict[tuple[str, View], tuple[int, msgspec.Raw]] = {}  # -> (generation, result)
        self.taken: dict[tuple[str, str], int] = {}  # (method, version) -> requests answered here

    # ------------------------------------------------------------ which requests

    def take(
        self, body: bytes, version: str | None, plain_host: bool = True, grant: Grant | None = None
    ) -> Taken | None:
        """The request in ``body`` if the fast path answers it, else None (the SDK does). ``version``:
        the handshake-era connection's protocol version, or None on 2026-07-28 (each request's envelope
        says); ``plain_host``: the host declared neither sampling nor elicitation; ``grant``: what the
        request's principal may see (None: the facade's view)."""
        if not plain_host or body.count(b"{") + body.count(b"[") >= MAX_BRACKETS:
            return None
        try:
            request = _REQUEST.decode(body)
            if request.method == "tools/call" and request.params:
                params: _CallParams | _ListParams = _CALL.decode(request.params)
            elif request.method == "tools/list":
                params = _LIST.decode(request.params) if request.params else _ListParams()
            else:
                return None
            meta = params.meta
            if version is None:
                version = self._envelope(request.method, meta)
                if version is None:
                    return None
            elif not meta.keys() <= _HANDSHAKE_META:
                return None
            progress = _TOKEN.decode(meta["progressToken"]) if "progressToken" in meta else None
        except (msgspec.DecodeError, ValueError):  # not a request taken here (invalid UTF-8 included)
            return None
        if (request.method, version) not in methods.CLIENT_REQUESTS or not _writable(request.id, progress):
            return None
        if isinstance(params, _ListParams):
            view = self._tools.options.view if grant is None else grant.view
            listing = self._listing(version, view)
            return None if listing is None else Taken(request.id, request.method, version, listing=listing)
        if self._tools.options.search or not self._client().settled:
            return None
        return Taken(request.id, request.method, version, params.name, params.arguments, progress)

    def _envelope(self, method: str, meta: Mapping[str, msgspec.Raw]) -> str | None:
        """A 2026-07-28 request's protocol version, when its envelope is one the SDK accepts from a
        host that asks nothing of its own (judged once per distinct envelope); else None."""
        if not meta.keys() <= _MODERN_META or _VERSION_KEY not in meta or _CAPABILITIES_KEY not in meta:
            return None
        info = meta.get(_INFO_KEY)
        key = (
            method.encode(),
            bytes(meta[_VERSION_KEY]),
            bytes(meta[_CAPABILITIES_KEY]),
            b"" if info is None else b"\0" + bytes(info),
        )
        if key not in self._envelopes:
            if len(self._envelopes) >= MAX_ENVELOPES:
                self._envelopes.clear()
            self._envelopes[key] = _judged(method, {k: msgspec.json.decode(v) for k, v in meta.items()})
        return self._envelopes[key]

    def _listing(self, version: str, view: View) -> msgspec.Raw | None:
        if not self._tools.can_list_now():
            return None
        generation, kept = self._tools.generation, self._listings.get((version, view))
        if kept is None or kept[0] != generation:
            entries = self._tools.listing_now(version, view)
            if entries is None:
                return None
            result: dict[str, Any] = {"tools": entries}
            if version in MODERN_PROTOCOL_VERSIONS:
                result["resultType"] = "complete"
            shaped = msgspec.Raw(_encode(self._shaped("tools/list", version, result)))
            if len(self._listings) >= MAX_LISTINGS:
                self._listings.clear()
            kept = self._listings[(version, view)] = (generation, shaped)
        return kept[1]

    # ------------------------------------------------------------ answers

    async def answer(
        self,
        taken: Taken,
        notify: Notify | None = None,
        session: str | None = None,
        grant: Grant | None = None,
    ) -> tuple[bytes, int | None]:
        """The answer to ``taken`` (a JSON-RPC response or error, as bytes) and its error's code (None
        for a result); the server's progress goes to ``notify`` as the host's ``notifications/progress``.
        ``session``: the HTTP host session it came in (its calls are made as that host); ``grant``: its
        principal's view and identity (None: the facade's)."""
        counted = (taken.method, taken.version)
        if counted not in self.taken:
            log.debug("%s of protocol %s answered on the fast path", *counted)
        self.taken[counted] = self.taken.get(counted, 0) + 1
        try:
            result: msgspec.Raw | dict[str, Any]
            if taken.listing is not None:
                result = taken.listing
            else:
                result = await self._call(taken, notify, session, grant)
        except MCPError as exc:
            error = exc.error.model_dump(by_alias=True, mode="json", exclude_unset=True)
            return _encode({"jsonrpc": "2.0", "id": taken.id, "error": error}), exc.error.code
        except Exception as exc:  # boundary: one request's failure is its answer, as on the SDK's path
            log.exception("the fast path failed to answer %s", taken.method)
            if taken.version in MODERN_PROTOCOL_VERSIONS:
                error = {"code": types.INTERNAL_ERROR, "message": "Internal server error"}
            else:
                error = {"code": 0, "message": str(exc)}
            return _encode({"jsonrpc": "2.0", "id": taken.id, "error": error}), error["code"]
        return _encode({"jsonrpc": "2.0", "id": taken.id, "result": result}), None

    async def _call(
        self, taken: Taken, notify: Notify | None, session: str | None, grant: Grant | None
    ) -> dict[str, Any]:
        upstream = self._client()
        view = self._tools.options.view if grant is None else grant.view
        name, tool = self._tools.target(upstream, taken.name, view)
        progress = None
        if taken.progress is not None and notify is not None:
            progress = _progress(notify, taken.progress)
        try:
            async with upstream.calling(upstream.server_of(name, tool)) as client:
                host = self._hosts.plain(client, session, grant)
                result = await self._tools.route(host, name, taken.arguments or {}, progress)
        except SupervisorGone as exc:
            result = error_result(f"UNAVAILABLE: {exc}")
        return self.result(taken.version, tool, result)

    def result(self, version: str, tool: ToolInfo | None, result: ToolResult) -> dict[str, Any]:
        """A call's result as the SDK sends it to a host of protocol ``version``."""
        structured = result.structured_content
        if _plain(result.content) and (structured is None or type(structured) is dict):
            wire: dict[str, Any] = {"content": result.content, "isError": result.is_error}
            if structured is not None:
                wire["structuredContent"] = structured
            return self._stamped(version, wire)
        relayed = ServedTools.relayed(version, tool, result)  # the SDK's models, as on its own path
        dumped = types.CallToolResult.model_validate(relayed, by_name=False)
        return self._shaped(
            "tools/call", version, dumped.model_dump(by_alias=True, mode="json", exclude_none=True)
        )

    def _shaped(self, method: str, version: str, result: dict[str, Any]) -> dict[str, Any]:
        """``result`` as the SDK's runner shapes a handler's: cache hints, the version's schema, stamps."""
        hint = self._server.cache_hints.get(method)
        if hint is not None:
            result = {"ttlMs": hint.ttl_ms, "cacheScope": hint.scope, **result}
        return self._stamped(version, methods.serialize_server_result(method, version, result))

    def _stamped(self, version: str, result: dict[str, Any]) -> dict[str, Any]:
        if version in MODERN_PROTOCOL_VERSIONS:
            result.setdefault("resultType", "complete")
            meta = result.get("_meta")
            if meta is None:
                result["_meta"] = {types.SERVER_INFO_META_KEY: self._stamp}
            elif isinstance(meta, dict) and meta.get(types.SERVER_INFO_META_KEY) is None:
                result["_meta"] = {**meta, types.SERVER_INFO_META_KEY: self._stamp}
        return result


# ------------------------------------------------------------------ helpers


def _judged(method: str, meta: dict[str, Any]) -> str | None:
    """The version of a 2026-07-28 envelope the SDK accepts from a host that offers neither sampling nor
    elicitation; None for any other (the SDK answers those requests)."""
    from mcp.shared.inbound import InboundLadderRejection, classify_inbound_request

    params: dict[str, Any] = {"_meta": meta}
    if method == "tools/call":
        params["name"] = "-"
    route = classify_inbound_request({"method": method, "params": params})
    if isinstance(route, InboundLadderRejection):
        return None
    try:
        methods.validate_client_request(method, route.protocol_version, params)
        capabilities = types.ClientCapabilities.model_validate(route.client_capabilities, by_name=False)
    except (ValidationError, KeyError, ValueError):
        return None
    if capabilities.sampling is not None or capabilities.elicitation is not None:
        return None
    return route.protocol_version


def _writable(*ids: int | str | None) -> bool:
    """Whether each integer among ``ids`` is one msgspec writes back as it was read (64 bits)."""
    return all(type(id) is not int or _ID_RANGE[0] <= id <= _ID_RANGE[1] for id in ids)


def _plain(content: list[dict[str, Any]]) -> bool:
    """Whether every item is plain text, an image or audio, with nothing the SDK's models would change."""
    for item in content:
        kind = item.get("type")
        keys = PLAIN_KEYS.get(kind) if type(kind) is str else None
        if keys is None or not item.keys() <= keys:
            return False
        if item["type"] == "text":
            if type(item.get("text")) is not str:
                return False
        elif type(item.get("data")) is not str or type(item.get("mimeType")) is not str:
            return False
        if "_meta" in item and type(item["_meta"]) is not dict:
            return False
    return True


def _progress(
    notify: Notify, token: int | str
) -> Callable[[float, float | None, str | None], Awaitable[None]]:
    async def relay(progress: float, total: float | None, message: str | None) -> None:
        params: dict[str, Any] = {"progressToken": token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await notify(_encode({"jsonrpc": "2.0", "method": "notifications/progress", "params": params}))

    return relay
