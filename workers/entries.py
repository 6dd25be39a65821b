"""The entries of a server's resources, resource templates and prompts listings, checked with msgspec
as the SDK's models check them.

Above: ``workers.catalog``, which serves the listings (``entries_of``). Below: msgspec, and the SDK's
own models (``mcp_types``) for an entry msgspec refuses: they have the last word.

Each struct has the fields, types and bounds of the SDK's model of the entry (``Resource``,
``ResourceTemplate``, ``Prompt`` and what they hold), in the same order, unknown fields ignored.
msgspec is strict where pydantic is lax (a ``"5"`` for an integer, say), so what it takes the model
takes too, with the same values; what it refuses goes to the model, which may still take it (then its
values are used) or refuses it (then the entry is left out with the model's own words). The worker
that lists only good entries never loads the SDK's models; the dump of a nested part
(``dump``: annotations, a prompt's arguments) is the model's ``model_dump(by_alias=True,
mode="json", exclude_none=True)``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

import msgspec

from workers.listing import Warnings, named

__all__ = ["Prompt", "Resource", "ResourceTemplate", "dump", "entries_of"]

_S = TypeVar("_S", bound=msgspec.Struct)
_Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]


class _Struct(msgspec.Struct, rename="camel", omit_defaults=True):
    pass


class Icon(_Struct):
    src: str
    mime_type: str | None = None
    sizes: list[str] | None = None
    theme: Literal["light", "dark"] | None = None


class Annotations(_Struct):
    audience: list[Literal["user", "assistant"]] | None = None
    priority: _Unit | None = None
    last_modified: str | None = None


class Resource(_Struct):
    name: str
    uri: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None
    icons: list[Icon] | None = None
    annotations: Annotations | None = None
    meta: dict[str, Any] | None = msgspec.field(name="_meta", default=None)


class ResourceTemplate(_Struct):
    name: str
    uri_template: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    icons: list[Icon] | None = None
    annotations: Annotations | None = None
    meta: dict[str, Any] | None = msgspec.field(name="_meta", default=None)


class PromptArgument(_Struct):
    name: str
    title: str | None = None
    description: str | None = None
    required: bool | None = None


class Prompt(_Struct):
    name: str
    title: str | None = None
    description: str | None = None
    arguments: list[PromptArgument] | None = None
    icons: list[Icon] | None = None
    meta: dict[str, Any] | None = msgspec.field(name="_meta", default=None)


_MODELS = {Resource: "Resource", ResourceTemplate: "ResourceTemplate", Prompt: "Prompt"}


def dump(part: msgspec.Struct | None) -> dict[str, Any] | None:
    """A nested part as the SDK's model dumps it (no None, wire names)."""
    if part is None:
        return None
    dumped: dict[str, Any] = msgspec.to_builtins(part)
    return dumped


def entries_of(method: str, entries: list[Any], kind: type[_S], key: str, warnings: Warnings) -> list[_S]:
    """The entries that are a ``kind`` (see the module); the rest left out, each with a warning."""
    items: list[_S] = []
    for index, entry in enumerate(entries, 1):
        name = named(method, index, entry, warnings, key)
        if name is None:
            continue
        try:
            items.append(msgspec.convert(entry, kind))
            continue
        except msgspec.ValidationError:
            pass
        import mcp_types
        import pydantic

        model: type[pydantic.BaseModel] = getattr(mcp_types, _MODELS[kind])
        try:
            checked = model.model_validate(entry, by_name=False)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = "/".join(str(part) for part in first["loc"]) or "(entry)"
            warnings.warn(f"{method} entry {index} ({name!r}) left out: {where}: {first['msg']}")
            continue
        items.append(msgspec.convert(checked.model_dump(by_alias=True, mode="json"), kind))
    return items
