"""Text another process wrote (a server's stderr, its log lines), made safe for a terminal.

Above: the CLI's output (``supervisor.cli.output``) and the supervisor's log of each server's stderr
(``supervisor.daemon.servers.worker_log``, ``keeper``). Below: the standard library. Control characters
but the tab become visible escapes (``\\x1b``), so a hostile server cannot move the cursor, retitle the
window or hide lines.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["printable"]

_UNSAFE: Final = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""C0 controls but the tab, DEL, C1 controls, and the bidirectional overrides and isolates (which
reorder what a terminal shows)."""


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character but the tab (and every bidi override) escaped."""
    return _UNSAFE.sub(_escape, text)
