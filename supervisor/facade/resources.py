"""Resources, resource templates and prompts of the facade: every ready server's, as the stub lists them.

Above: the MCP facade (``supervisor.facade.server``), which registers these as its handlers. Below:
the link to the supervisor (``supervisor.facade.upstream``).

A host reads a resource by its URI alone, where the supervisor addresses it by server and URI: the
facade remembers which server listed each URI (the first, when two list the same one) and which
server's templates a URI fits, listing again when it meets a URI it does not know. Prompts keep the
prefixed names the supervisor gives them (``mcp_{server}_{prompt}``), but on a facade of one server
(``single``), which keeps the server's own. ``completion/complete`` goes to the server of the prompt
or resource template it names. While no supervisor answers, a
listing is empty (the host hears of the change when one answers); a read or a prompt is an error
saying why.

The SDK checks every result against the schema of the host's protocol version on its way out (and the
host's SDK parses it with its models): one entry it rejects would fail a whole listing. ``listable``
leaves such entries out, with a warning naming each; ``refusal`` says why a result cannot go out.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.methods import serialize_server_result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from supervisor.client.errors import SupervisorError
from supervisor.facade.access import Access, scope_of
from supervisor.facade.callers import Hosts
from supervisor.facade.upstream import SupervisorGone
from supervisor.facade.upstreams import Upstreams
from supervisor.facade.views import View
from supervisor.protocol import PromptInfo, ResourceInfo, ResourceTemplateInfo

__all__ = ["Catalog", "complete", "listable", "refusal", "template_pattern"]

log = logging.getLogger("mcp_supervisor.facade")

FIRST_WAIT: Final = 30.0  # seconds a request waits for the facade's first supervisor and its first listing
_NOT_FOUND: Final = frozenset({"UNKNOWN_TOOL", "INVALID_ARGUMENTS", "BAD_REQUEST"})
_EXPRESSION = re.compile(r"\{([+#./;?&]?)([^}]*)\}")
# What the SDK adds to a result before its check (cache hints, the 2026-07-28 resultType); older
# versions' schemas ignore them.
_STAMPED: Final = {"ttlMs": 0, "cacheScope": "private", "resultType": "complete"}
_LISTINGS: Final[dict[str, tuple[str, type[BaseModel]]]] = {  # method -> (its key, the host's model)
    "tools/list": ("tools", types.ListToolsResult),
    "resources/list": ("resources", types.ListResourcesResult),
    "resources/templates/list": ("resourceTemplates", types.ListResourceTemplatesResult),
    "prompts/list": ("prompts", types.ListPromptsResult),
}
MAX_WARNED: Final = 10_000  # entries left out that were warned about (each once)


def template_pattern(template: str) -> re.Pattern[str]:
    """A regular expression for the URIs an RFC 6570 template can expand to (``{x}``: no ``/``;
    ``{+x}`` and ``{#x}``: anything; the query operators: the rest of the URI)."""
    parts, last = [], 0
    for match in _EXPRESSION.finditer(template):
        parts.append(re.escape(template[last : match.start()]))
        operator = match.group(1)
        parts.append("[^/?#]*" if operator in ("", ".", ";") else ".*" if operator in "+#" else "[^#]*")
        last = match.end()
    parts.append(re.escape(template[last:]))
    return re.compile("".join(parts), re.DOTALL)


def complete(ctx: ServerRequestContext[Any, Any], result: dict[str, Any]) -> dict[str, Any]:
    """A result relayed as JSON, marked complete for a 2026-07-28 host (as the SDK marks its models)."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        result["resultType"] = "complete"
    return result


def refusal(
    version: str, method: str, result: Mapping[str, Any], model: type[BaseModel], skip: int = 0
) -> str | None:
    """Why the SDK would not let ``result`` of ``method`` out to a host of protocol ``version``, or the
    host's SDK would not parse it with ``model`` (where, without the first ``skip`` parts, and what);
    None when it can go out."""
    try:
        serialize_server_result(method, version, {**_STAMPED, **result})
        model.model_validate(result, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][skip:])
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        return f"{where or 'the result'}: {first['msg']}{more}"
    except (KeyError, ValueError):  # a method or version the SDK's tables lack: the SDK decides
        return None
    return None


def listable(
    version: str, method: str, entries: Iterable[dict[str, Any]], warned: set[str]
) -> list[dict[str, Any]]:
    """The entries of a ``method`` listing that can go out to a host of protocol ``version``; each left
    out is warned about (once: ``warned`` holds those already told), naming it and what is wrong with it."""
    key, model = _LISTINGS[method]
    kept = []
    for entry in entries:
        why = refusal(version, method, {key: [entry]}, model, skip=2)
        if why is None:
            kept.append(entry)
            continue
        what = f"{key[:-1]} {entry.get('name') or entry.get('uri') or entry.get('uriTemplate')!r}"
        if what + why not in warned:
            if len(warned) >= MAX_WARNED:
                warned.clear()
            warned.add(what + why)
            log.warning("%s left out of the MCP listing (protocol %s): %s", what, version, why)
    return kept


def _omit_none(entry: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in entry.items() if value is not None and value != ""}


class Catalog:
    """The facade's resources and prompts handlers, and the URI and prompt-name -> server maps they need."""

    def __init__(
        self, access: Access, upstream: Callable[[], Upstreams], hosts: Hosts, *, single: str | None = None
    ) -> None:
        """``access``: the facade's view, and each request's within it (a gateway client's); ``hosts``:
        reads and prompts go as the host session's own client (listings are shared); ``single``: the
        one server whose prompts keep their own names."""
        self._access = access
        self._view = access.open.view
        self._single = single
        self._upstream = upstream
        self._hosts = hosts
        self._uris: dict[str, list[str]] | None = None  # URI -> the servers that list it, as last listed
        self._templates: list[tuple[re.Pattern[str], str]] | None = None  # pattern -> server
        self._template_servers: dict[str, str] = {}  # URI template -> server (the first to list it)
        self._prompts: dict[str, str] | None = None  # the name hosts see -> server
        self._warned: set[str] = set()  # entries left out of a listing that were warned about

    def forget(self) -> None:
        """Servers came or went: the maps are listed again when next needed."""
        self._uris = self._templates = self._prompts = None

    # ------------------------------------------------------------ listings

    async def _resources(self) -> list[ResourceInfo]:
        entries = [r for r in await self._list("resources") if self._view.shows_server(r.server)]
        uris: dict[str, list[str]] = {}
        for entry in entries:
            servers = uris.setdefault(entry.uri, [])
            if entry.server not in servers:
                servers.append(entry.server)
        self._uris = uris
        return entries

    async def _resource_templates(self) -> list[ResourceTemplateInfo]:
        entries = [t for t in await self._list("templates") if self._view.shows_server(t.server)]
        self._templates = [(template_pattern(t.uri_template), t.server) for t in entries]
        servers: dict[str, str] = {}
        for entry in entries:
            servers.setdefault(entry.uri_template, entry.server)
        self._template_servers = servers
        return entries

    async def _prompt_infos(self) -> list[PromptInfo]:
        entries = [p for p in await self._list("prompts") if self._view.shows_server(p.server)]
        self._prompts = {self._name(p): p.server for p in entries}
        return entries

    def _name(self, prompt: PromptInfo) -> str:
        """The name a host sees: the prefixed one, or the server's own on a facade of one server."""
        return prompt.original_name if self._single else prompt.name

    async def _list(self, what: str) -> list[Any]:
        upstream = self._upstream()
        await upstream.wait_first(FIRST_WAIT)
        try:
            if what == "resources":
                return await upstream.listing(lambda client: client.list_resources())
            if what == "templates":
                return await upstream.listing(lambda client: client.list_resource_templates())
            return await upstream.listing(lambda client: client.list_prompts())
        except SupervisorGone:
            return []
        except SupervisorError as exc:
            raise MCPError(types.INTERNAL_ERROR, f"{exc.code or 'ERROR'}: {exc.message or exc}") from exc

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        resources = [
            _omit_none(
                {
                    "uri": r.uri,
                    "name": r.name or r.uri,
                    "title": r.title,
                    "description": r.description,
                    "mimeType": r.mime_type,
                    "size": r.size,
                    "annotations": r.annotations,
                }
            )
            for r in await self._resources()
            if self._shown(ctx, r.server)
        ]
        return complete(
            ctx, {"resources": listable(ctx.protocol_version, "resources/list", resources, self._warned)}
        )

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        templates = [
            _omit_none(
                {
                    "uriTemplate": t.uri_template,
                    "name": t.name or t.uri_template,
                    "title": t.title,
                    "description": t.description,
                    "mimeType": t.mime_type,
                    "annotations": t.annotations,
                }
            )
            for t in await self._resource_templates()
            if self._shown(ctx, t.server)
        ]
        templates = listable(ctx.protocol_version, "resources/templates/list", templates, self._warned)
        return complete(ctx, {"resourceTemplates": templates})

    async def list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        prompts = [
            _omit_none(
                {
                    "name": self._name(p),
                    "title": p.title,
                    "description": p.description,
                    "arguments": p.arguments or None,
                }
            )
            for p in await self._prompt_infos()
            if self._shown(ctx, p.server)
        ]
        return complete(
            ctx, {"prompts": listable(ctx.protocol_version, "prompts/list", prompts, self._warned)}
        )

    # ------------------------------------------------------------ reads

    async def server_of_uri(self, uri: str, view: View | None = None) -> str | None:
        """The first server ``view`` (None: the facade's) shows that lists ``uri``, or has a template it
        fits (None: none does)."""
        shown = (view or self._view).shows_server
        for attempt in range(2):  # what was listed before, else list again
            if self._uris is None or attempt:
                await self._resources()
            if self._templates is None or attempt:
                await self._resource_templates()
            assert self._uris is not None and self._templates is not None
            server = next((s for s in self._uris.get(uri, ()) if shown(s)), None)
            if server is None:
                fits = (s for pattern, s in self._templates if shown(s) and pattern.fullmatch(uri))
                server = next(fits, None)
            if server is not None:
                return server
        return None

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> dict[str, Any]:
        uri = str(params.uri)
        server = await self.server_of_uri(uri, self._access.of(scope_of(ctx)).view)
        if server is None:
            raise MCPError(
                types.INVALID_PARAMS, f"Resource not found: no server lists {uri!r} or a template it fits"
            )
        result = await self._fetch(ctx, server, lambda client: client.read_resource(server, uri))
        return _checked(ctx, "resources/read", {"contents": result.contents}, server)

    async def get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> dict[str, Any]:
        name = params.name
        server = await self._server_of_prompt(name, ctx)
        arguments = {key: str(value) for key, value in (params.arguments or {}).items()}
        own = server if self._single else None  # the server's own name, then
        result = await self._fetch(ctx, server, lambda client: client.get_prompt(name, arguments, server=own))
        wire = _omit_none({"description": result.description, "messages": result.messages})
        return _checked(ctx, "prompts/get", wire, server)

    def _shown(self, ctx: ServerRequestContext[Any, Any], server: str) -> bool:
        """Whether the request of ``ctx`` may see ``server`` (its grant's view)."""
        return self._access.of(scope_of(ctx)).view.shows_server(server)

    async def _server_of_prompt(self, name: str, ctx: ServerRequestContext[Any, Any]) -> str:
        if self._prompts is None or name not in self._prompts:
            await self._prompt_infos()
        assert self._prompts is not None
        if name not in self._prompts or not self._shown(ctx, self._prompts[name]):
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {name}")
        return self._prompts[name]

    # ------------------------------------------------------------ completions

    async def completion(
        self, ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams
    ) -> dict[str, Any]:
        """``completion/complete``, to the server of the prompt or resource template it names."""
        ref = params.ref
        server: str | None
        if isinstance(ref, types.PromptReference):
            server = await self._server_of_prompt(ref.name, ctx)
            wire = {"type": "ref/prompt", "name": ref.name}
            named = server if self._single else None  # else the prefixed name says which
        else:
            template = str(ref.uri)
            server = self._template_servers.get(template)
            if server is None:
                await self._resource_templates()
                server = self._template_servers.get(template)
            if server is None or not self._shown(ctx, server):
                raise MCPError(types.INVALID_PARAMS, f"Unknown resource template: {template}")
            wire = {"type": "ref/resource", "uri": template}
            named = server
        argument = (params.argument.name, params.argument.value)
        context = params.context.arguments if params.context is not None else None
        result = await self._fetch(
            ctx, server, lambda client: client.complete(wire, argument, context, server=named)
        )
        completion: dict[str, Any] = {"values": result.values[:100]}
        if result.total is not None:
            completion["total"] = result.total
        if result.has_more is not None:
            completion["hasMore"] = result.has_more
        return complete(ctx, {"completion": completion})

    async def _fetch(
        self, ctx: ServerRequestContext[Any, Any], server: str, request: Callable[[Any], Any]
    ) -> Any:
        upstream = self._upstream()
        await upstream.wait_first(FIRST_WAIT)
        try:
            async with upstream.calling(server) as client:
                return await request(self._hosts.client(ctx, client, self._access.of(scope_of(ctx))))
        except SupervisorGone as exc:
            raise MCPError(types.INTERNAL_ERROR, f"UNAVAILABLE: {exc}") from exc
        except SupervisorError as exc:
            code = types.INVALID_PARAMS if exc.code in _NOT_FOUND else types.INTERNAL_ERROR
            raise MCPError(code, f"{exc.code or 'ERROR'}: {exc.message or exc}") from exc


_RESULTS: Final[dict[str, type[BaseModel]]] = {
    "resources/read": types.ReadResourceResult,
    "prompts/get": types.GetPromptResult,
}


def _checked(
    ctx: ServerRequestContext[Any, Any], method: str, result: dict[str, Any], server: str
) -> dict[str, Any]:
    """``result``, marked complete; an error naming the server and what is wrong when the host could not
    take it (rather than the SDK's "Handler returned an invalid result")."""
    why = refusal(ctx.protocol_version, method, result, _RESULTS[method])
    if why is not None:
        why = f"server {server!r} returned a result MCP hosts cannot take ({why})"
        raise MCPError(types.INTERNAL_ERROR, f"SERVER_ERROR: {why}")
    return complete(ctx, result)
