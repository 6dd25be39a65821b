"""The OAuth tokens kept for remote servers: one file per server under the user's state directory.

``$XDG_STATE_HOME/mcp-supervisor/tokens/<server>.json`` (``~/.local/state/...`` without
``XDG_STATE_HOME``): the directory mode 0700, each file mode 0600, replaced atomically (written to a
temporary file beside it, then renamed), so a reader never sees half a file and a crash never leaves
one. A file belongs to one server URL: when the config points the server elsewhere, its tokens are not
used.

Above: ``workers.oauth`` (the worker's token storage, and ``mcp-supervisor login``), the ``logout``
command, and the keeper, which reads a token's expiry for ``status``. Below: the file system. It knows
nothing of OAuth beyond the record's layout: ``tokens`` (the token response, as the SDK's
``OAuthToken`` dumps it), ``expires_at`` (seconds since the epoch, or absent), ``client_info`` (a
dynamically registered client, or a Client ID Metadata Document's). Nothing here logs a value.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

__all__ = ["TokenFile", "state_dir", "token_dir"]

FORMAT: Final = 1  # the record's "format"; a file of another format is not read


def state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_STATE_HOME/mcp-supervisor``, or ``~/.local/state/mcp-supervisor``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path(env.get("HOME") or Path.home()) / ".local" / "state"
    return root / "mcp-supervisor"


def token_dir(environ: Mapping[str, str] | None = None) -> Path:
    return state_dir(environ) / "tokens"


class TokenFile:
    """One server's token file. Every method reads or writes the file anew: the worker, ``login`` and
    ``logout`` may each have changed it since."""

    def __init__(self, server: str, url: str, directory: Path | None = None) -> None:
        self.server = server
        self.url = url
        self.directory = token_dir() if directory is None else directory
        # Any server name is a safe file name once quoted ('/' included; '.' and '..' get a suffix).
        self.path = self.directory / f"{quote(server, safe='')}.json"

    def read(self) -> dict[str, Any]:
        """The record, or ``{}`` when there is none, it is not ours, or it cannot be read."""
        try:
            record = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return {}
        if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("url") != self.url:
            return {}
        return record

    def update(self, **parts: Any) -> None:
        """Change (or with ``None``, remove) parts of the record, and write it."""
        record = self.read() or {"format": FORMAT, "server": self.server, "url": self.url}
        for key, value in parts.items():
            if value is None:
                record.pop(key, None)
            else:
                record[key] = value
        self._write(json.dumps(record, indent=1, sort_keys=True).encode())

    def set_tokens(self, tokens: dict[str, Any], expires_in: float | None) -> None:
        expires_at = None if expires_in is None else time.time() + expires_in
        self.update(tokens=tokens, expires_at=expires_at, obtained_at=time.time())

    def expires_at(self) -> float | None:
        """When the access token expires (seconds since the epoch), if there is one and it says."""
        value = self.read().get("expires_at")
        return float(value) if isinstance(value, int | float) else None

    def remove(self) -> bool:
        """Forget the server's tokens and client; False when there was nothing to forget."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def _write(self, data: bytes) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=self.directory, prefix=".tokens-", suffix=".tmp")
        try:
            os.fchmod(fd, 0o600)  # mkstemp makes it 0600 already; say so for whoever reads this
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with suppress(OSError):
                os.unlink(temporary)
            raise
