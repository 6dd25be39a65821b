"""Resources and prompts of one worker's server: listings (every page), reads, prompt gets and
argument completions.

Above: ``workers.calls``, which runs each ``Fetch`` under its budget and maps the SDK's
errors to codes. Below: the worker's session (``workers.lean``, or the SDK's ``mcp.Client``), whose
reads, prompts and completions come back as the SDK's models. Those models (and pydantic) are
imported when the first such request is served, not before: a worker that serves none never loads
them.

Listings are read by ``workers.listing`` (every page, entry by entry: one bad entry is left out
with a warning, the rest served) and come back as the wire's ``ResourceInfo`` /
``ResourceTemplateInfo`` / ``PromptInfo``, each naming this server; prompts get prefixed names as
tools do (``mcp_{server}_{prompt}``). A server without the resources or
prompts capability lists nothing, and a read or get on it fails with a ``CatalogError`` that
says so, without asking the server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, assert_never

import msgspec

from supervisor.protocol import (
    Completion,
    ErrorCode,
    Fetch,
    PromptInfo,
    PromptResult,
    ResourceInfo,
    ResourceResult,
    ResourceTemplateInfo,
)
from supervisor.shared.content import EMPTY_TEXT, base64_size, render_text
from supervisor.shared.names import prefixed_names
from workers.entries import Prompt, Resource, ResourceTemplate, dump, entries_of
from workers.listing import ListingFailed, Pager, Warnings, every_entry
from workers.values import InvalidArguments, decode_arguments

if TYPE_CHECKING:
    from mcp_types import GetPromptResult, ReadResourceResult

Client = Any  # ``workers.lean.LeanClient``, or the SDK's ``mcp.Client`` (``workers.session``)

__all__ = ["Catalog", "CatalogError", "render_contents"]

Entry = ResourceInfo | ResourceTemplateInfo | PromptInfo
_M = TypeVar("_M", Resource, ResourceTemplate, Prompt)


class CatalogError(Exception):
    """A request this server cannot serve, with the wire error code to answer."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Catalog:
    """One server's resources and prompts, fetched when asked (nothing is cached but prompt names).

    ``pager`` gives, for a session, the list requests whose results come back unchecked
    (``workers.listing.Pager``).
    """

    def __init__(self, server: str, pager: Callable[[Client], Pager]) -> None:
        self.server = server
        self._pager = pager
        self._warnings: dict[str, Warnings] = {}  # by list method
        self._prompt_names: dict[str, str] = {}  # prefixed -> the server's name, from the last listing

    async def fetch(
        self, client: Client, fetch: Fetch
    ) -> list[Entry] | ResourceResult | PromptResult | Completion:
        """Serve one ``Fetch``; raises ``CatalogError``, or what the SDK raises."""
        match fetch.method:
            case "resources/list":
                return await self.resources(client)
            case "resources/templates/list":
                return await self.resource_templates(client)
            case "prompts/list":
                return await self.prompts(client)
            case "resources/read":
                return await self.read(client, fetch.target)
            case "prompts/get":
                return await self.get_prompt(client, fetch.target, fetch.prefixed, fetch.arguments)
            case "completion/complete":
                return await self.complete(client, fetch.prefixed, fetch.arguments)
            case _:
                assert_never(fetch.method)

    async def resources(self, client: Client) -> list[Entry]:
        if client.server_capabilities.resources is None:
            return []
        items = await self._entries(client, "resources/list", "resources", Resource, "uri")
        return [
            ResourceInfo(
                server=self.server,
                uri=str(item.uri),
                name=item.name,
                title=item.title,
                description=item.description or "",
                mime_type=item.mime_type,
                size=item.size,
                annotations=dump(item.annotations),
            )
            for item in items
        ]

    async def resource_templates(self, client: Client) -> list[Entry]:
        if client.server_capabilities.resources is None:
            return []
        items = await self._entries(
            client, "resources/templates/list", "resourceTemplates", ResourceTemplate, "uriTemplate"
        )
        return [
            ResourceTemplateInfo(
                server=self.server,
                uri_template=str(item.uri_template),
                name=item.name,
                title=item.title,
                description=item.description or "",
                mime_type=item.mime_type,
                annotations=dump(item.annotations),
            )
            for item in items
        ]

    async def prompts(self, client: Client) -> list[Entry]:
        if client.server_capabilities.prompts is None:
            return []
        items = await self._entries(client, "prompts/list", "prompts", Prompt, "name")
        names = prefixed_names(self.server, (item.name for item in items))
        self._prompt_names = names
        return [
            PromptInfo(
                name=name,
                server=self.server,
                original_name=item.name,
                title=item.title,
                description=item.description or "",
                arguments=[dump(argument) or {} for argument in item.arguments or ()],
            )
            for name, item in zip(names, items, strict=True)
        ]

    async def _entries(self, client: Client, method: str, field: str, kind: type[_M], key: str) -> list[_M]:
        """The entries of a listing that are a ``kind`` (``workers.entries``: as the SDK's model checks
        them); the others left out with a warning."""
        warnings = self._warnings.setdefault(method, Warnings(self.server))
        warnings.begin()
        try:
            entries = await every_entry(method, field, self._pager(client), warnings)
        except ListingFailed as exc:
            raise CatalogError("SERVER_ERROR", str(exc)) from None
        items = entries_of(method, entries, kind, key, warnings)
        warnings.done()
        return items

    async def read(self, client: Client, uri: str) -> ResourceResult:
        if client.server_capabilities.resources is None:
            raise CatalogError("BAD_REQUEST", "the server offers no resources (no resources capability)")
        return to_resource_result(await client.read_resource(uri))

    async def get_prompt(
        self, client: Client, name: str, prefixed: bool, arguments: msgspec.Raw
    ) -> PromptResult:
        if client.server_capabilities.prompts is None:
            raise CatalogError("UNKNOWN_TOOL", f"no prompt named {name!r}: the server offers no prompts")
        values = _prompt_arguments(arguments)
        original = await self._resolve(client, name, prefixed)
        return to_prompt_result(await client.get_prompt(original, values))

    async def complete(self, client: Client, prefixed: bool, params: msgspec.Raw) -> Completion:
        """``completion/complete`` with the caller's params (a prefixed prompt name given back its
        server's own); a server without the completions capability is not asked."""
        if client.server_capabilities.completions is None:
            raise CatalogError("BAD_REQUEST", "the server offers no completions (no completions capability)")
        try:
            wanted = msgspec.msgpack.decode(params, type=_CompleteParams)
        except msgspec.DecodeError as exc:
            raise CatalogError("INVALID_ARGUMENTS", f"completion/complete: {exc}") from None
        from mcp_types import PromptReference, ResourceTemplateReference

        ref: PromptReference | ResourceTemplateReference
        if wanted.ref.type == "ref/prompt":
            if not wanted.ref.name:
                raise CatalogError("INVALID_ARGUMENTS", "completion/complete: a ref/prompt needs a name")
            ref = PromptReference(
                type="ref/prompt", name=await self._resolve(client, wanted.ref.name, prefixed)
            )
        else:
            if not wanted.ref.uri:
                raise CatalogError("INVALID_ARGUMENTS", "completion/complete: a ref/resource needs a uri")
            ref = ResourceTemplateReference(type="ref/resource", uri=wanted.ref.uri)
        context = wanted.context.arguments if wanted.context is not None else None
        argument = {"name": wanted.argument.name, "value": wanted.argument.value}
        result = (await client.complete(ref, argument, context)).completion
        return Completion(values=result.values, total=result.total, has_more=result.has_more)

    async def _resolve(self, client: Client, name: str, prefixed: bool) -> str:
        """The server's own name of a prompt; listed again when the last listing does not have it."""
        for attempt in range(2):
            if prefixed and name in self._prompt_names:
                return self._prompt_names[name]
            if not prefixed and name in self._prompt_names.values():
                return name
            if attempt == 0:
                await self.prompts(client)
        raise CatalogError("UNKNOWN_TOOL", f"no prompt named {name!r}")


class _Reference(msgspec.Struct):
    type: Literal["ref/prompt", "ref/resource"]
    name: str = ""
    uri: str = ""


class _Argument(msgspec.Struct):
    name: str
    value: str


class _Context(msgspec.Struct):
    arguments: dict[str, str] | None = None


class _CompleteParams(msgspec.Struct):
    """The params of ``completion/complete`` as the supervisor relays them (msgpack, JSON's shape)."""

    ref: _Reference
    argument: _Argument
    context: _Context | None = None


def _prompt_arguments(raw: msgspec.Raw) -> dict[str, str]:
    try:
        arguments = decode_arguments(raw)
    except InvalidArguments as exc:
        raise CatalogError("INVALID_ARGUMENTS", str(exc)) from None
    wrong = [
        f"{key!r} is {type(value).__name__}" for key, value in arguments.items() if not isinstance(value, str)
    ]
    if wrong:
        raise CatalogError("INVALID_ARGUMENTS", f"prompt arguments must be strings: {', '.join(wrong)}")
    return arguments


def to_resource_result(result: ReadResourceResult) -> ResourceResult:
    contents = [item.model_dump(by_alias=True, mode="json", exclude_none=True) for item in result.contents]
    return ResourceResult(contents=contents, text=render_contents(contents))


def render_contents(contents: list[dict[str, Any]]) -> str:
    """Text items as they are, a ``[blob URI MIME, N bytes]`` line for each binary one."""
    parts: list[str] = []
    for item in contents:
        if "text" in item:
            parts.append(str(item["text"]))
        else:
            size = base64_size(str(item.get("blob", "")))
            mime = f" {item['mimeType']}" if item.get("mimeType") else ""
            parts.append(f"[blob {item.get('uri', '')}{mime}, {size} bytes]")
    return "\n".join(parts) if parts else EMPTY_TEXT


def to_prompt_result(result: GetPromptResult) -> PromptResult:
    messages = [item.model_dump(by_alias=True, mode="json", exclude_none=True) for item in result.messages]
    text = "\n".join(f"{m['role']}: {render_text([m['content']])}" for m in messages)
    return PromptResult(description=result.description or "", messages=messages, text=text or EMPTY_TEXT)
