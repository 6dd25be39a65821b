"""Which tools one facade shows (``--servers``, ``--tools``), and the registry search of ``--search``.

Pure code, no I/O. Above: the MCP facade (``supervisor.facade.server``). The per-server
``enabledTools`` / ``disabledTools`` of the config are applied earlier, in the supervisor's registry,
for every client; a view narrows what one facade shows on top of that.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from supervisor.config.tool_filters import matches_any
from supervisor.protocol import ToolInfo
from supervisor.shared.names import server_of

__all__ = ["Hit", "SearchIndex", "View"]


@dataclass(frozen=True, slots=True)
class View:
    """``servers``: only these servers (None: all); ``tools``: only tools whose prefixed name matches
    one of these globs (none: all); ``within``: and only what that view shows (a gateway client's view
    within the facade's)."""

    servers: frozenset[str] | None = None
    tools: tuple[str, ...] = ()
    within: View | None = None

    def narrowed(self, servers: frozenset[str] | None, tools: tuple[str, ...]) -> View:
        """What this view shows of ``servers`` and ``tools`` (as a view's own)."""
        if servers is None and not tools:
            return self
        return View(servers, tools, self)

    def shows_server(self, server: str) -> bool:
        if self.within is not None and not self.within.shows_server(server):
            return False
        return self.servers is None or server in self.servers

    def shows(self, tool: ToolInfo) -> bool:
        if self.within is not None and not self.within.shows(tool):
            return False
        if not (self.servers is None or tool.server in self.servers):
            return False
        return not self.tools or matches_any(tool.name, self.tools)

    def may_call(self, name: str, tool: ToolInfo | None) -> bool:
        """Whether a call to ``name`` may go through; ``tool`` is its entry, None when the registry has
        none now (its server restarting, say: the supervisor then answers why)."""
        if tool is not None:
            return self.shows(tool)
        if self.within is not None and not self.within.may_call(name, None):
            return False
        if self.tools and not matches_any(name, self.tools):
            return False
        return self.servers is None or server_of(name, self.servers) is not None

    def select(self, tools: Iterable[ToolInfo]) -> list[ToolInfo]:
        return [tool for tool in tools if self.shows(tool)]


@dataclass(frozen=True, slots=True)
class Hit:
    tool: ToolInfo
    score: float


_WORD = re.compile(r"[a-z0-9]+")
_FIELD_WEIGHTS = {"name": 3.0, "description": 1.0, "schema": 1.5}


def _words(text: str) -> list[str]:
    """Lower-case words; names are split at ``_``, ``-``, ``.`` and camelCase humps."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return _WORD.findall(text.lower())


def _schema_words(schema: Any, out: list[str], depth: int = 0) -> None:
    """Property names and their descriptions, a few levels deep (enough for any tool's arguments)."""
    if depth > 4 or not isinstance(schema, dict):
        return
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, sub in properties.items():
            out.extend(_words(str(name)))
            if isinstance(sub, dict):
                description = sub.get("description")
                if isinstance(description, str):
                    out.extend(_words(description))
                _schema_words(sub, out, depth + 1)
    items = schema.get("items")
    if isinstance(items, dict):
        _schema_words(items, out, depth + 1)


@dataclass(slots=True)
class _Doc:
    tool: ToolInfo
    fields: dict[str, Counter[str]]


@dataclass(slots=True)
class SearchIndex:
    """BM25F over each tool's name (server included), description and argument names and descriptions:
    each field's term frequency is normalised by that field's length (a long argument description does
    not dilute a match in the name), then weighted; built once per registry version."""

    docs: list[_Doc] = field(default_factory=list)
    document_frequency: Counter[str] = field(default_factory=Counter)
    average_lengths: dict[str, float] = field(default_factory=dict)

    @classmethod
    def build(cls, tools: Sequence[ToolInfo]) -> SearchIndex:
        index = cls()
        for tool in tools:
            schema: list[str] = []
            _schema_words(tool.input_schema, schema)
            fields = {
                "name": Counter(_words(f"{tool.name} {tool.title or ''}")),
                "description": Counter(_words(tool.description)),
                "schema": Counter(schema),
            }
            index.docs.append(_Doc(tool, fields))
            index.document_frequency.update({word for counts in fields.values() for word in counts})
        for name in _FIELD_WEIGHTS:
            lengths = [sum(doc.fields[name].values()) for doc in index.docs]
            index.average_lengths[name] = max(1.0, sum(lengths) / len(lengths)) if lengths else 1.0
        return index

    def search(self, query: str, limit: int) -> list[Hit]:
        """The ``limit`` best tools for ``query`` (words; a word that is a prefix of a tool's word counts
        half), best first; no tool for a query with no word in any tool."""
        terms = list(dict.fromkeys(_words(query)))
        if not terms or limit <= 0:
            return []
        total = len(self.docs)
        k1, b = 1.2, 0.75
        hits: list[Hit] = []
        for doc in self.docs:
            score = 0.0
            for term in terms:
                weighted = 0.0  # BM25F: the term's frequency, each field normalised and weighted
                df = self.document_frequency.get(term, 0)
                for name, counts in doc.fields.items():
                    frequency = float(counts.get(term, 0))
                    if not frequency and len(term) >= 3:
                        partial = [word for word in counts if word.startswith(term)]
                        if partial:
                            frequency = 0.5 * sum(counts[word] for word in partial)
                            df = max(df, *(self.document_frequency[word] for word in partial))
                    if frequency:
                        length = sum(counts.values()) / self.average_lengths[name]
                        weighted += _FIELD_WEIGHTS[name] * frequency / (1 - b + b * length)
                if weighted:
                    idf = math.log(1 + (total - df + 0.5) / (df + 0.5))
                    score += idf * weighted * (k1 + 1) / (weighted + k1)
            if score > 0:
                hits.append(Hit(doc.tool, score))
        hits.sort(key=lambda hit: (-hit.score, hit.tool.name))
        return hits[:limit]
