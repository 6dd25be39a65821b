"""The unified tool registry: prefixed name -> (server, original tool).

Names follow ``mcp_{server}_{tool}``, made safe and unique by ``supervisor.shared.names``. Calls
are routed by looking the name up here, never by splitting it. No tool vanishes silently: when two
tools map to one name, the later one gets a stable suffix derived from (server, tool) and a warning
is logged. A tool whose ``inputSchema`` is not a valid JSON Schema
object is left out with a warning naming the server and the tool (a worker
already leaves such tools out when it lists them, ``workers.listing``, with the
same ``schema_problem`` of ``supervisor.shared.schemas``: this is the registry's own guard). A tool its
server's view hides (``enabledTools``/``disabledTools``, matched by ``supervisor.config.tool_filters``) is
never registered: it takes no name, is never routed, and is logged at debug level when first hidden.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass

from supervisor.config.tool_filters import tool_allowed
from supervisor.protocol import ToolInfo, WorkerTool
from supervisor.shared.names import free_name, prefixed_name
from supervisor.shared.schemas import schema_problem

__all__ = ["Diff", "Registry", "Route", "repeatable"]

log = logging.getLogger("mcp_supervisor.registry")


@dataclass(frozen=True, slots=True)
class Route:
    """Where a prefixed name goes."""

    server: str
    tool: str
    repeatable: bool = False  # annotated readOnlyHint or idempotentHint: a retry may run it twice


def repeatable(annotations: dict[str, object] | None) -> bool:
    """Whether a tool's annotations say running it twice does no harm (hints from its server)."""
    return bool(annotations) and (
        annotations.get("readOnlyHint") is True or annotations.get("idempotentHint") is True  # type: ignore[union-attr]
    )


@dataclass(frozen=True, slots=True)
class Diff:
    """What one change did to one server's entries."""

    added: list[ToolInfo]
    removed: list[str]  # prefixed names
    changed: list[ToolInfo]


def _diff(before: list[ToolInfo], after: list[ToolInfo]) -> Diff | None:
    old = {info.name: info for info in before}
    new = {info.name: info for info in after}
    added = [info for name, info in new.items() if name not in old]
    removed = [name for name in old if name not in new]
    changed = [info for name, info in new.items() if name in old and old[name] != info]
    return Diff(added, removed, changed) if added or removed or changed else None


class Registry:
    """Every ready server's tools under their prefixed names.

    ``version`` grows by one with every change (a server's tools added, changed or removed).
    """

    def __init__(self) -> None:
        self._routes: dict[str, Route] = {}
        self._infos: dict[str, list[ToolInfo]] = {}  # server -> its entries, in listing order
        self._hidden: dict[str, set[str]] = {}  # server -> its tools its view hides (logged once)
        self._listing: list[ToolInfo] | None = []
        self.version = 0

    def lookup(self, name: str) -> Route | None:
        return self._routes.get(name)

    def tools(self) -> list[ToolInfo]:
        if self._listing is None:
            self._listing = [info for infos in self._infos.values() for info in infos]
        return self._listing

    def count(self, server: str) -> int:
        return len(self._infos.get(server, ()))

    def remove(self, server: str) -> Diff | None:
        """Drop ``server``'s entries; what that changed, if anything."""
        infos = self._drop(server)
        diff = _diff(infos, [])
        if diff is not None:
            self.version += 1
        return diff

    def _drop(self, server: str) -> list[ToolInfo]:
        infos = self._infos.pop(server, [])
        self._hidden.pop(server, None)
        for info in infos:
            del self._routes[info.name]
        self._listing = None
        return infos

    def replace(
        self,
        server: str,
        tools: list[WorkerTool],
        *,
        enabled: Collection[str] | None = None,
        disabled: Collection[str] = (),
    ) -> tuple[list[ToolInfo], Diff | None]:
        """Set ``server``'s tools (replacing what it had), less those its view (``enabled``,
        ``disabled``: see ``supervisor.config.tool_filters.tool_allowed``) hides; the entries registered,
        and what changed."""
        hidden_before = self._hidden.get(server, set())
        before = self._drop(server)
        infos: list[ToolInfo] = []
        seen: set[str] = set()
        hidden: set[str] = set()
        for tool in tools:
            if not tool_allowed(tool.name, enabled, disabled):
                if tool.name not in hidden_before and tool.name not in hidden:
                    log.debug(
                        "server %r tool %r left out by its enabledTools/disabledTools", server, tool.name
                    )
                hidden.add(tool.name)
                continue
            if tool.name in seen:
                log.warning("server %r listed tool %r twice; keeping the first", server, tool.name)
                continue
            seen.add(tool.name)
            problem = schema_problem(tool.input_schema)
            if problem is not None:
                log.warning("server %r tool %r left out: %s", server, tool.name, problem)
                continue
            name = self._free_name(server, tool.name)
            self._routes[name] = Route(server, tool.name, repeatable(tool.annotations))
            infos.append(
                ToolInfo(
                    name=name,
                    server=server,
                    original_name=tool.name,
                    description=tool.description,
                    input_schema=tool.input_schema,
                    title=tool.title,
                    output_schema=tool.output_schema,
                    annotations=tool.annotations,
                )
            )
        self._infos[server] = infos
        if hidden:
            self._hidden[server] = hidden
        self._listing = None
        diff = _diff(before, infos)
        if diff is not None:
            self.version += 1
        return infos, diff

    def _free_name(self, server: str, tool: str) -> str:
        name = free_name(server, tool, self._routes)
        base = prefixed_name(server, tool) or "mcp"
        if name != base:
            holder = self._routes[base]
            log.warning(
                "tool %r of server %r maps to %r, already used by tool %r of server %r; registered as %r",
                tool,
                server,
                base,
                holder.tool,
                holder.server,
                name,
            )
        return name
