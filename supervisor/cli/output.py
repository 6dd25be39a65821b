"""How the ``mcp-supervisor`` commands print: JSON documents and lines, tables, failures, and text
made safe for a terminal.

Above: ``supervisor.cli.main`` (its ``main`` reports every failure through ``print_failure``) and the
``cmd_*`` functions. Below: stdout and stderr.

With ``--json``, stdout carries exactly one JSON document (``print_json``), or one JSON object per
line for the commands that stream (``print_json_line``: ``events``, ``logs -f``). A failure is that
document (or the last line): ``{"error": {"code": ..., "message": ...}}``; stderr carries only
warnings and progress. Without ``--json``, a failure is one line on stderr.

Text another process wrote (a server's stderr) goes through ``printable``
(``supervisor.shared.terminal``, which the supervisor's log of a server's stderr uses too) before it
reaches a terminal: control characters but the tab become visible escapes (``\\x1b``), so a hostile server
cannot move the cursor, retitle the window or hide lines. JSON escapes the C0 controls itself;
``print_json`` also escapes DEL and the C1 controls (raw, U+009B is a CSI on some terminals), which
the JSON grammar allows anywhere but leaves raw.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, Final

from supervisor.shared.terminal import printable

__all__ = [
    "print_failure",
    "print_json",
    "print_json_line",
    "print_table",
    "printable_lines",
]

_C1_IN_JSON: Final = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}


def printable_lines(text: str) -> str:
    """As ``printable``, keeping the line breaks (a tool's text of several lines stays several)."""
    return "\n".join(printable(line) for line in text.split("\n"))


def _dumps(data: Any, indent: int | None) -> str:
    # json.dumps escapes C0 itself; DEL and C1 can only stand inside strings, where \\u escapes are equal
    return json.dumps(data, indent=indent, ensure_ascii=False).translate(_C1_IN_JSON)


def print_json(data: Any) -> None:
    """One JSON document on stdout (indented)."""
    print(_dumps(data, 2), flush=True)


def print_json_line(data: Any) -> None:
    """One JSON object on one line of stdout, flushed (for commands that stream)."""
    print(_dumps(data, None), flush=True)


def print_failure(as_json: bool, code: str, message: str, human: str, **more: Any) -> None:
    """A failure: ``{"error": {"code", "message", **more}}`` on one line of stdout with ``--json`` (one
    document, and a line of its own after a command's stream), else the line ``human`` on stderr."""
    if as_json:
        print_json_line({"error": {"code": code, "message": message, **more}})
    else:
        print(printable_lines(human), file=sys.stderr, flush=True)  # it may quote a server's words


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns; every cell made printable (a server's last error may carry escape sequences)."""
    header, rows = (
        [printable(str(cell)) for cell in header],
        [[printable(str(c)) for c in row] for row in rows],
    )
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    for row in (header, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
