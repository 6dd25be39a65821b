"""Resources and prompts of one worker's server: listings (every page), reads and prompt gets.

Above: ``workers.worker``, which runs each ``Fetch`` under its budget and maps the SDK's
errors to codes. Below: the worker's ``mcp.Client`` session.

Listings follow ``nextCursor`` (at most ``MAX_LIST_PAGES`` pages) and come back as the wire's
``ResourceInfo`` / ``ResourceTemplateInfo`` / ``PromptInfo``, each naming this server; prompts
get prefixed names as tools do (``mcp_{server}_{prompt}``). A server without the resources or
prompts capability lists nothing, and a read or get on it fails with a ``CatalogError`` that
says so, without asking the server.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import msgspec
from mcp import Client
from mcp_types import GetPromptResult, ReadResourceResult

from supervisor.protocol import (
    Fetch,
    PromptInfo,
    PromptResult,
    ResourceInfo,
    ResourceResult,
    ResourceTemplateInfo,
)
from supervisor.registry import prefixed_names
from workers.results import EMPTY_TEXT, render_text

__all__ = ["MAX_LIST_PAGES", "Catalog", "CatalogError", "render_contents"]

log = logging.getLogger("mcp_supervisor.worker")

MAX_LIST_PAGES: Final = 1000  # a paginator that never ends cannot hold a listing past this many pages

Entry = ResourceInfo | ResourceTemplateInfo | PromptInfo


class CatalogError(Exception):
    """A request this server cannot serve, with the wire error code to answer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Catalog:
    """One server's resources and prompts, fetched when asked (nothing is cached but prompt names)."""

    def __init__(self, server: str) -> None:
        self.server = server
        self._prompt_names: dict[str, str] = {}  # prefixed -> the server's name, from the last listing

    async def fetch(self, client: Client, fetch: Fetch) -> list[Entry] | ResourceResult | PromptResult:
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

    async def resources(self, client: Client) -> list[Entry]:
        if client.server_capabilities.resources is None:
            return []
        items = await _every_page("resources/list", lambda c: client.list_resources(cursor=c), "resources")
        return [
            ResourceInfo(
                server=self.server,
                uri=str(item.uri),
                name=item.name,
                title=item.title,
                description=item.description or "",
                mime_type=item.mime_type,
                size=item.size,
                annotations=_dump(item.annotations),
            )
            for item in items
        ]

    async def resource_templates(self, client: Client) -> list[Entry]:
        if client.server_capabilities.resources is None:
            return []
        items = await _every_page(
            "resources/templates/list",
            lambda c: client.list_resource_templates(cursor=c),
            "resource_templates",
        )
        return [
            ResourceTemplateInfo(
                server=self.server,
                uri_template=str(item.uri_template),
                name=item.name,
                title=item.title,
                description=item.description or "",
                mime_type=item.mime_type,
                annotations=_dump(item.annotations),
            )
            for item in items
        ]

    async def prompts(self, client: Client) -> list[Entry]:
        if client.server_capabilities.prompts is None:
            return []
        items = await _every_page("prompts/list", lambda c: client.list_prompts(cursor=c), "prompts")
        names = prefixed_names(self.server, (item.name for item in items))
        self._prompt_names = names
        return [
            PromptInfo(
                name=name,
                server=self.server,
                original_name=item.name,
                title=item.title,
                description=item.description or "",
                arguments=[_dump(argument) or {} for argument in item.arguments or ()],
            )
            for name, item in zip(names, items, strict=True)
        ]

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


async def _every_page(
    method: str, list_page: Callable[[str | None], Awaitable[Any]], field: str
) -> list[Any]:
    """Every item of a paginated listing, following ``nextCursor`` for at most ``MAX_LIST_PAGES`` pages."""
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await list_page(cursor)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if not cursor:
            return items
    log.warning(
        "%s still had more pages after %d; answering with the items seen so far", method, MAX_LIST_PAGES
    )
    return items


def _prompt_arguments(raw: msgspec.Raw) -> dict[str, str]:
    try:
        arguments: Any = msgspec.msgpack.decode(raw)
    except msgspec.DecodeError as exc:
        raise CatalogError("INVALID_ARGUMENTS", f"arguments do not decode: {exc}") from exc
    if not isinstance(arguments, dict):
        raise CatalogError(
            "INVALID_ARGUMENTS", f"arguments must be an object, not {type(arguments).__name__}"
        )
    wrong = [
        f"{key!r} is {type(value).__name__}" for key, value in arguments.items() if not isinstance(value, str)
    ]
    if wrong:
        raise CatalogError("INVALID_ARGUMENTS", f"prompt arguments must be strings: {', '.join(wrong)}")
    return arguments


def _dump(model: Any) -> dict[str, Any] | None:
    if model is None:
        return None
    dumped: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


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
            data = str(item.get("blob", ""))
            size = len(data) * 3 // 4 - data[-2:].count("=")
            mime = f" {item['mimeType']}" if item.get("mimeType") else ""
            parts.append(f"[blob {item.get('uri', '')}{mime}, {size} bytes]")
    return "\n".join(parts) if parts else EMPTY_TEXT


def to_prompt_result(result: GetPromptResult) -> PromptResult:
    messages = [item.model_dump(by_alias=True, mode="json", exclude_none=True) for item in result.messages]
    text = "\n".join(f"{m['role']}: {render_text([m['content']])}" for m in messages)
    return PromptResult(description=result.description or "", messages=messages, text=text or EMPTY_TEXT)
