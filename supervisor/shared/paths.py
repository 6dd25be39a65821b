"""Where the supervisor listens by default: a per-user runtime directory, mode 0700.

``$MCP_SUPERVISOR_ENDPOINT`` overrides the front endpoint for every command and
for the client stub. Without it the front socket is
``ipc://$XDG_RUNTIME_DIR/mcp-supervisor/supervisor.sock``; when ``XDG_RUNTIME_DIR``
is not passed down (MCP hosts start their servers with a few variables only:
HOME, PATH, SHELL, TERM, USER, LOGNAME), ``/run/user/$UID`` stands for it when it
exists and is ours, so a facade a host starts finds the supervisor the user's
login shell or user unit started; else ``ipc:///tmp/mcp-supervisor-$UID/supervisor.sock``.
The directory of any ``ipc://`` endpoint the supervisor
binds must be private: created with mode 0700, or refused when other users can
write to it (they could replace the socket with their own).

``$MCP_SUPERVISOR_KEYS`` names the CURVE key directory (``supervisor.security.keys`` reads its files); its
name and default live here, with the endpoint's, so that the CLI's help can say them without loading ZeroMQ.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

__all__ = [
    "DEFAULT_KEY_DIR",
    "ENDPOINT_ENV",
    "KEYS_ENV",
    "claim_ipc_dir",
    "default_endpoint",
    "default_events_endpoint",
    "ensure_runtime_dir",
    "ipc_path",
    "log_beside",
    "resolve_endpoint",
    "runtime_dir",
]

ENDPOINT_ENV = "MCP_SUPERVISOR_ENDPOINT"
KEYS_ENV: Final = (
    "MCP_SUPERVISOR_KEYS"  # the CURVE key directory (supervisor.security.keys), for every command
)
DEFAULT_KEY_DIR: Final = "~/.config/mcp-supervisor/keys"  # without it


RUN_USER: Final = Path("/run/user")  # where the login manager keeps each user's runtime directory


def runtime_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_RUNTIME_DIR/mcp-supervisor``; else ``/run/user/$UID/mcp-supervisor`` when that
    runtime directory exists and is ours; else ``/tmp/mcp-supervisor-$UID``."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return Path(xdg) / "mcp-supervisor"
    uid = os.getuid()
    login = RUN_USER / str(uid)
    try:
        info = login.stat()
    except OSError:
        pass
    else:
        if stat.S_ISDIR(info.st_mode) and info.st_uid == uid:
            return login / "mcp-supervisor"
    return Path(tempfile.gettempdir()) / f"mcp-supervisor-{uid}"


def ensure_runtime_dir(path: Path) -> Path:
    """Create ``path`` with mode 0700, or check that an existing one is ours and private."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise PermissionError(f"runtime directory {path} belongs to uid {info.st_uid}, not to us")
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


def claim_ipc_dir(directory: Path) -> Path:
    """A directory to bind ``ipc://`` sockets in: created (with its parents) mode 0700 when missing;
    raises ``PermissionError`` naming it when another user owns it or can write to it."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.stat()
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid not in (os.getuid(), 0):
        raise PermissionError(f"directory {directory} belongs to another user (uid {info.st_uid})")
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(
            f"directory {directory} is writable by other users (mode {mode:04o}), who could replace "
            "the socket with their own"
        )
    return directory


def default_endpoint(environ: Mapping[str, str] | None = None) -> str:
    return f"ipc://{runtime_dir(environ) / 'supervisor.sock'}"


def log_beside(endpoint: str) -> Path:
    """Where a supervisor started in the background for ``endpoint`` writes its output: beside an
    ``ipc://`` socket (``supervisor.sock`` -> ``supervisor.log``), else in the runtime directory under
    a name made from the endpoint, so that no two supervisors share a log."""
    path = ipc_path(endpoint)
    if path is not None:
        return path.with_name(f"{path.name.removesuffix('.sock')}.log")
    name = "".join(c if c.isalnum() or c in "-." else "-" for c in endpoint.split("://", 1)[-1])
    return runtime_dir() / f"supervisor-{name}.log"


def default_events_endpoint(front: str) -> str:
    """Where events are published, next to the front endpoint ``front``.

    ``ipc://DIR/NAME.sock`` -> ``ipc://DIR/NAME-events.sock``; ``tcp://HOST:PORT`` -> ``tcp://HOST:*``
    (a free port, shown by ``status``); anything else gets ``-events`` appended.
    """
    if front.startswith("tcp://"):
        return f"{front.rsplit(':', 1)[0]}:*"
    base = front.removesuffix(".sock")
    return f"{base}-events.sock" if base != front else f"{front}-events"


def resolve_endpoint(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The endpoint to use: an explicit one, else ``$MCP_SUPERVISOR_ENDPOINT``, else the default."""
    env = os.environ if environ is None else environ
    return explicit or env.get(ENDPOINT_ENV) or default_endpoint(env)


def ipc_path(endpoint: str) -> Path | None:
    """The filesystem path of an ``ipc://`` endpoint, else None."""
    return Path(endpoint[len("ipc://") :]) if endpoint.startswith("ipc://") else None
