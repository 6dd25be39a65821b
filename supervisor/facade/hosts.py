"""The config entry each MCP host needs to use the facade (``mcp-supervisor host-config HOST``).

Pure code: ``entry`` builds what to paste, and ``where`` says where it goes. Above: the CLI.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["HOSTS", "Launch", "entry"]

HOSTS: Final = ("claude-desktop", "claude-code", "cursor", "vscode", "windsurf", "generic")

_WHERE: Final = {
    "claude-desktop": "Goes in the mcpServers object of claude_desktop_config.json (Settings > Developer > "
    "Edit Config; macOS: ~/Library/Application Support/Claude/, Windows: %APPDATA%\\Claude\\)",
    "claude-code": "Run the command, or put the JSON in .mcp.json at the project's root.",
    "cursor": "Goes in the mcpServers object of ~/.cursor/mcp.json (every project) or .cursor/mcp.json",
    "vscode": "Goes in the servers object of .vscode/mcp.json (or of the user's mcp.json: 'MCP: Open User "
    "Configuration')",
    "windsurf": "Goes in the mcpServers object of ~/.codeium/windsurf/mcp_config.json",
    "generic": "Goes in the mcpServers object of the host's MCP config",
}


@dataclass(frozen=True, slots=True)
class Launch:
    """How a host reaches the facade: a command it starts (stdio), or a URL (streamable HTTP)."""

    command: Sequence[str] = ()  # argv of `mcp-supervisor mcp ...`
    url: str | None = None
    token_env: str | None = None  # the environment variable holding the bearer token, for a URL


def where(host: str) -> str:
    return _WHERE[host]


def entry(host: str, name: str, launch: Launch) -> str:
    """What to paste into ``host``'s config (or run, for claude-code) to add the facade as ``name``."""
    server = _server(host, launch)
    if host == "claude-code":
        if launch.url is not None:
            header = f"Authorization: Bearer ${{{launch.token_env}}}" if launch.token_env else None
            words = ["claude", "mcp", "add", "--transport", "http", name, launch.url]
            if header:
                words += ["--header", header]
        else:
            words = ["claude", "mcp", "add", name, "--", *launch.command]
        command = " ".join(shlex.quote(word) for word in words)
        return f"{command}\n\n{json.dumps({'mcpServers': {name: server}}, indent=2)}"
    key = "servers" if host == "vscode" else "mcpServers"
    return json.dumps({key: {name: server}}, indent=2)


def _server(host: str, launch: Launch) -> dict[str, Any]:
    if launch.url is None:
        command, *args = launch.command
        server: dict[str, Any] = {"command": command, "args": args}
        if host == "vscode":
            server = {"type": "stdio", **server}
        return server
    headers = {}
    if launch.token_env:
        variable = (
            f"${{env:{launch.token_env}}}" if host in ("vscode", "cursor") else f"${{{launch.token_env}}}"
        )
        headers["Authorization"] = f"Bearer {variable}"
    if host == "windsurf":
        server = {"serverUrl": launch.url}
    elif host == "vscode" or host == "claude-code":
        server = {"type": "http", "url": launch.url}
    else:
        server = {"url": launch.url}
    if headers:
        server["headers"] = headers
    return server
