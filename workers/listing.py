"""Tolerant listings: a server's ``tools/list`` (``prompts/list``, ``resources/list``,
``resources/templates/list``) read page by page and entry by entry, so one bad entry costs only itself.

Above: ``workers.tools`` (tools, at start-up and whenever they may have changed) and
``workers.catalog`` (prompts, resources and templates, when a client asks). Below: a ``Pager``, which
sends one list request and returns its result: on a stdio server the worker's own request
(``OwnRequests.request``), as raw JSON, whose entries are then decoded one by one (an entry with
invalid UTF-8 is left out, not the page); on a remote one the session's, as JSON values the SDK's
models have not checked (``workers.sdk``).
The SDK's own ``list_tools`` checks a whole page against its model: one tool with an odd schema
would fail the page, and so the server.

The rules:

- a page must be an object holding an array of entries, else the listing fails (``ListingFailed``,
  naming the method; so does raw JSON that does not decode around its entries, a lone surrogate
  escape say; an answer nested deeper than msgspec recurses, about 1000 levels, already fails its
  request: ``workers.own_requests``); ``nextCursor`` is followed
  for at most ``MAX_LIST_PAGES`` pages, and one that is not a string ends the listing with a
  warning (the entries so far are served);
- an entry that is not an object, has no string name, repeats an earlier name (the first is kept),
  or nests deeper than ``MAX_ENTRY_DEPTH`` is left out with a warning;
- a tool's ``inputSchema``: missing or ``{}`` means no declared arguments, served as
  ``NO_ARGUMENTS``; an object without ``type`` gets ``"type": "object"`` (arguments always are one);
  anything else must be a valid JSON Schema of an object (``supervisor.shared.schemas.schema_problem``),
  and on 2026-07-28 sessions carry valid ``x-mcp-header`` annotations, or the tool is left out with
  a warning; an unusable ``outputSchema``, ``description``, ``title`` or ``annotations`` is dropped
  with a warning and the tool served (its results then unchecked);
- prompts, resources and templates: each entry must fit the SDK's model of it.

Each warning names the server, the entry and the reason, and is said once: listing the same bad
entry again says nothing new (``Warnings``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec

from supervisor.protocol import WorkerTool, total_decoder
from supervisor.shared.schemas import json_schema_problem, schema_problem
from workers.values import json_problem

if TYPE_CHECKING:
    import pydantic

__all__ = [
    "MAX_ENTRY_DEPTH",
    "MAX_LIST_PAGES",
    "NO_ARGUMENTS",
    "ListingFailed",
    "Pager",
    "Warnings",
    "every_entry",
    "list_tools",
    "models_of",
    "named",
]

log = logging.getLogger("mcp_supervisor.worker")

MAX_LIST_PAGES: Final = 1000  # a paginator that never ends cannot hold a listing past this many pages
MAX_ENTRY_DEPTH: Final = 64  # levels of objects and arrays in one entry; jsonschema recurses per level
NO_ARGUMENTS: Final = {"type": "object", "properties": {}}  # a tool that declares no arguments

Pager = Callable[[str, dict[str, Any]], Awaitable[Any]]  # (method, params) -> JSON values, or msgspec.Raw
_M = TypeVar("_M", bound="pydantic.BaseModel")
_T = TypeVar("_T")


class ListingFailed(Exception):
    """A listing that could not be read at all (an answer that is not a page); names the method."""


class Undecodable:
    """An entry of a raw page that does not decode on its own; ``reason`` says why."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


_decode_top = total_decoder(msgspec.json.Decoder(dict[str, msgspec.Raw]).decode)
_decode_items = total_decoder(msgspec.json.Decoder(list[msgspec.Raw]).decode)
_decode_any = total_decoder(msgspec.json.Decoder().decode)


def _page_of(raw: msgspec.Raw, field: str) -> Any:
    """A page of raw JSON as JSON values, its entries decoded one by one (an entry that does not
    decode is an ``Undecodable``); raises ``msgspec.DecodeError`` when the page itself does not."""
    try:
        top = _decode_top(raw)
    except msgspec.DecodeError:
        return _decode_any(raw)  # no object of JSON values: the caller says what it is instead
    page: dict[str, Any] = {}
    if field in top:
        try:
            items = _decode_items(top[field])
        except msgspec.DecodeError:
            page[field] = _decode_any(top[field])  # not an array: the caller says what it is
        else:
            page[field] = [_entry(item) for item in items]
    if "nextCursor" in top:
        page["nextCursor"] = _decode_any(top["nextCursor"])
    return page


def _entry(raw: msgspec.Raw) -> Any:
    try:
        return _decode_any(raw)
    except msgspec.DecodeError as exc:
        return Undecodable(str(exc))


class Warnings:
    """One server's warnings about one kind of listing, each said once while it keeps recurring.

    ``begin`` starts a listing; a warning said in the last complete listing is not said again, one
    that went away and comes back is.
    """

    def __init__(self, server: str) -> None:
        self.server = server
        self._said: set[str] = set()
        self._now: set[str] = set()

    def begin(self) -> None:
        self._now = set()

    def warn(self, message: str) -> None:
        if message not in self._said and message not in self._now:
            log.warning("server %r %s", self.server, message)
        self._now.add(message)

    def done(self) -> None:
        self._said, self._now = self._now, set()


async def every_entry(method: str, field: str, pager: Pager, warnings: Warnings) -> list[Any]:
    """Every entry of a paginated listing (JSON values); raises ``ListingFailed`` or what ``pager`` raises."""
    entries: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        try:
            page = await pager(method, {} if cursor is None else {"cursor": cursor})
            if isinstance(page, msgspec.Raw):
                page = _page_of(page, field)
        except msgspec.DecodeError as exc:
            raise ListingFailed(f"{method}: the answer does not decode: {exc}") from None
        if not isinstance(page, dict):
            raise ListingFailed(f"{method}: the answer is {type(page).__name__}, not an object")
        items = page.get(field)
        if not isinstance(items, list):
            raise ListingFailed(f"{method}: the answer's {field} is {type(items).__name__}, not an array")
        entries += items
        cursor = page.get("nextCursor")
        if cursor is None or cursor == "":
            return entries
        if not isinstance(cursor, str):
            warnings.warn(f"{method}: nextCursor is {type(cursor).__name__}, not a string; listing ends here")
            return entries
    warnings.warn(f"{method}: still more pages after {MAX_LIST_PAGES}; listing ends here")
    return entries


def named(method: str, index: int, entry: Any, warnings: Warnings, key: str = "name") -> str | None:
    """The entry's name (``key``), or None when the entry is left out (warned)."""
    if isinstance(entry, Undecodable):
        warnings.warn(f"{method} entry {index} left out: it does not decode: {entry.reason}")
        return None
    if not isinstance(entry, dict):
        warnings.warn(f"{method} entry {index} left out: it is {type(entry).__name__}, not an object")
        return None
    name = entry.get(key)
    if not isinstance(name, str) or not name:
        why = (
            f"it has no {key}"
            if name is None or name == ""
            else f"its {key} is {type(name).__name__}, not a string"
        )
        warnings.warn(f"{method} entry {index} left out: {why}")
        return None
    if problem := json_problem(entry, MAX_ENTRY_DEPTH, "its fields"):
        warnings.warn(f"{method} entry {index} ({name!r}) left out: {problem}")
        return None
    return name


async def list_tools(pager: Pager, warnings: Warnings, *, modern: bool = False) -> list[WorkerTool]:
    """The server's usable tools (see the module's rules); ``modern``: a 2026-07-28 session."""
    warnings.begin()
    entries = await every_entry("tools/list", "tools", pager, warnings)
    tools: list[WorkerTool] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries, 1):
        name = named("tools/list", index, entry, warnings)
        if name is None:
            continue
        if name in seen:
            warnings.warn(f"tool {name!r} listed twice; keeping the first")
            continue
        seen.add(name)
        tool = _tool(name, entry, warnings, modern)
        if tool is not None:
            tools.append(tool)
    warnings.done()
    return tools


def _tool(name: str, entry: dict[str, Any], warnings: Warnings, modern: bool) -> WorkerTool | None:
    schema = entry.get("inputSchema")
    if schema is None or schema == {}:
        schema = dict(NO_ARGUMENTS, properties={})
    elif isinstance(schema, dict) and "type" not in schema:
        schema = {"type": "object", **schema}
    problem = schema_problem(schema)
    if problem is None and modern and b'"x-mcp-header"' in msgspec.json.encode(schema):
        # A 2026-07-28 session's rule, on the schemas that have the annotation at all: the SDK's check
        # (which loads the SDK) runs only for them.
        from mcp.shared.inbound import find_invalid_x_mcp_header

        if (reason := find_invalid_x_mcp_header(schema)) is not None:
            problem = f"inputSchema has an invalid x-mcp-header ({reason})"
    if problem is not None:
        warnings.warn(f"tool {name!r} left out: {problem}")
        return None
    output = entry.get("outputSchema")
    if output is not None:
        why = (
            f"is {type(output).__name__}, not an object"
            if not isinstance(output, dict)
            else json_schema_problem(output)
        )
        if why is not None:
            warnings.warn(f"tool {name!r}: its outputSchema {why}; served without it (results unchecked)")
            output = None
    return WorkerTool(
        name=name,
        description=_optional(name, entry, "description", str, warnings) or "",
        input_schema=schema,
        title=_optional(name, entry, "title", str, warnings),
        output_schema=output,
        annotations=_optional(name, entry, "annotations", dict, warnings),
    )


def _optional(name: str, entry: dict[str, Any], field: str, kind: type[_T], warnings: Warnings) -> _T | None:
    value = entry.get(field)
    if value is None or isinstance(value, kind):
        return value
    warnings.warn(f"tool {name!r}: its {field} is {type(value).__name__}, not {kind.__name__}; ignored")
    return None


def models_of(method: str, entries: list[Any], model: type[_M], key: str, warnings: Warnings) -> list[_M]:
    """The entries that fit ``model`` (the SDK's model of one, e.g. ``Prompt``); the rest left out, warned."""
    import pydantic

    items: list[_M] = []
    for index, entry in enumerate(entries, 1):
        name = named(method, index, entry, warnings, key)
        if name is None:
            continue
        try:
            items.append(model.model_validate(entry, by_name=False))
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = "/".join(str(part) for part in first["loc"]) or "(entry)"
            warnings.warn(f"{method} entry {index} ({name!r}) left out: {where}: {first['msg']}")
    return items
