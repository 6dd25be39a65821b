"""CurveZMQ key files: where they live, how ``mcp-supervisor keygen`` makes them, how they are loaded.

Above: ``cli`` (``keygen``; ``run`` loads ``ServerKeys``), ``core`` (hands ``ServerKeys`` to its
sockets and its ``curve.Gate``) and the client stubs (``ClientKeys``, resolved by ``client_keys``).
Below: pyzmq's certificate files (``zmq.auth.load_certificate`` reads ours) and libzmq's CURVE options.

A key directory (``--keys DIR``, else ``$MCP_SUPERVISOR_KEYS``, else
``~/.config/mcp-supervisor/keys``), as ``mcp-supervisor keygen`` makes it::

    server.key          the supervisor's public key: every client needs a copy
    server.key_secret   the supervisor's secret key (mode 0600; only the supervisor reads it)
    client.key          this client's public key
    client.key_secret   this client's secret key (mode 0600)
    allowed_clients/    the public keys (*.key) of the clients the supervisor lets in

A secret file other users could read, or an ``allowed_clients`` directory they could write to, is
refused. Every endpoint but ``ipc://`` (and ``inproc://``) needs keys: file permissions guard those.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Final, Literal

import zmq
import zmq.auth
from zmq.utils import z85

from supervisor.shared.paths import DEFAULT_KEY_DIR, KEYS_ENV

__all__ = [
    "ALLOWED",
    "CLIENT",
    "DEFAULT_KEY_DIR",
    "KEYS_ENV",
    "NO_KEYS",
    "SERVER",
    "ZAP_DOMAIN",
    "ClientKeys",
    "KeyFileError",
    "Keys",
    "ServerKeys",
    "check_not_shared",
    "client_keys",
    "key_dir",
    "keygen",
    "load_public",
    "needs_curve",
]

SERVER, CLIENT, ALLOWED = "server", "client", "allowed_clients"
MAX_KEY_FILE: Final = 64 * 1024  # bytes; a larger file is not a key file
NO_KEYS: Final = "none"  # as a client's key directory: connect without CURVE
ZAP_DOMAIN: Final = "mcp-supervisor"  # the supervisor's CURVE sockets ask its gate under this domain


class KeyFileError(ValueError):
    """A key file or directory is missing or unsafe; the message names it and says what to do."""


def key_dir(explicit: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The key directory: ``explicit``, else ``$MCP_SUPERVISOR_KEYS``, else ``DEFAULT_KEY_DIR``."""
    env = os.environ if environ is None else environ
    if explicit is not None and os.fspath(explicit):
        return Path(explicit).expanduser().absolute()
    if env.get(KEYS_ENV):
        return Path(env[KEYS_ENV]).expanduser().absolute()
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / DEFAULT_KEY_DIR.removeprefix("~/")


def needs_curve(endpoint: str) -> bool:
    """Whether ``endpoint`` reaches past this machine's file permissions (anything but ipc/inproc)."""
    return not endpoint.startswith(("ipc://", "inproc://"))


# ------------------------------------------------------------------ key files


def keygen(directory: Path, *, server: bool = True) -> list[tuple[str, Path]]:
    """Make the key pairs a directory lacks (``server`` and ``client``, or only ``client``) and the
    ``allowed_clients`` directory with this client's public key in it; existing keys are kept.
    Returns ``(what happened, path)`` for every file, to show the user."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    done = []
    for name in (SERVER, CLIENT) if server else (CLIENT,):
        secret, public = directory / f"{name}.key_secret", directory / f"{name}.key"
        if secret.exists():
            public_key, _ = _load_secret(secret)
            done.append(("kept", secret))
        else:
            public_key, secret_key = zmq.curve_keypair()
            _write(secret, _certificate(public_key, secret_key), 0o600)
            done.append(("created", secret))
        if public.exists() and load_public(public) == public_key:
            done.append(("kept", public))
        else:
            public.unlink(missing_ok=True)
            _write(public, _certificate(public_key), 0o644)
            done.append(("created", public))
    if server:
        allowed = directory / ALLOWED
        allowed.mkdir(mode=0o700, exist_ok=True)
        mine = allowed / f"{CLIENT}.key"
        if not mine.exists():
            _write(mine, (directory / f"{CLIENT}.key").read_text(), 0o644)
            done.append(("created", mine))
    return done


def _certificate(public: bytes, secret: bytes | None = None) -> str:
    kind = "**Secret** Certificate: do not give it to anyone" if secret else "Public Certificate"
    lines = [f"#   ****  Generated on {datetime.now():%Y-%m-%d %H:%M} by mcp-supervisor keygen  ****"]
    lines += [f"#   ZeroMQ CURVE {kind}", "", "metadata", "curve", f'    public-key = "{public.decode()}"']
    lines += [f'    secret-key = "{secret.decode()}"'] if secret else []
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str, mode: int) -> None:
    """Create ``path`` with ``mode`` from the start (never briefly readable by others)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as file:
        file.write(text)


def _key(value: bytes | None, path: Path, what: str) -> bytes:
    if value is None or len(value) != 40:
        raise KeyFileError(
            f"{path} holds no {what} (40 characters of Z85); make keys with 'mcp-supervisor keygen'"
        )
    try:
        z85.decode(value)
    except (ValueError, KeyError, IndexError):
        raise KeyFileError(f"{path}: the {what} is not valid Z85") from None
    return value


def _read(path: Path) -> tuple[bytes | None, bytes | None]:
    if not path.is_file():
        raise KeyFileError(f"{path} does not exist; make keys with 'mcp-supervisor keygen {path.parent}'")
    if path.stat().st_size > MAX_KEY_FILE:
        raise KeyFileError(f"{path} is too large to be a key file")
    try:
        return zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"{path}: cannot read a key: {exc}") from None


def load_public(path: Path) -> bytes:
    public, _ = _read(path)
    return _key(public, path, "public key")


def _load_secret(path: Path) -> tuple[bytes, bytes]:
    _check_private(path)
    public, secret = _read(path)
    public, secret = _key(public, path, "public key"), _key(secret, path, "secret key")
    if zmq.curve_public(secret) != public:
        raise KeyFileError(f"{path}: its public key is not the one of its secret key")
    return public, secret


def _check_private(path: Path) -> None:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise KeyFileError(
            f"{path} does not exist; make keys with 'mcp-supervisor keygen {path.parent}'"
        ) from None
    if info.st_uid != os.getuid():
        raise KeyFileError(f"{path} belongs to another user (uid {info.st_uid}); a secret key must be yours")
    if stat.S_IMODE(info.st_mode) & 0o077:
        mode = stat.S_IMODE(info.st_mode)
        raise KeyFileError(f"{path} can be read by other users (mode {mode:04o}): run 'chmod 600 {path}'")


def check_not_shared(directory: Path) -> None:
    """Refuse a directory other users could add keys to."""
    try:
        info = directory.stat()
    except FileNotFoundError:
        raise KeyFileError(
            f"{directory} does not exist: make it with 'mcp-supervisor keygen' and put the public keys "
            "of the clients to allow in it"
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        raise KeyFileError(f"{directory} is not a directory")
    if info.st_uid not in (os.getuid(), 0):
        raise KeyFileError(f"{directory} belongs to another user (uid {info.st_uid})")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = stat.S_IMODE(info.st_mode)
        raise KeyFileError(
            f"{directory} can be written by other users (mode {mode:04o}): run 'chmod 700 {directory}'"
        )


@dataclass(frozen=True)
class ServerKeys:
    """The supervisor's key pair and the directory of allowed client keys."""

    public: bytes
    secret: bytes = field(repr=False)
    allowed: Path
    public_file: Path

    @classmethod
    def load(cls, directory: Path) -> ServerKeys:
        """From a key directory; raises ``KeyFileError`` naming what is missing or unsafe."""
        public, secret = _load_secret(directory / f"{SERVER}.key_secret")
        allowed = directory / ALLOWED
        check_not_shared(allowed)
        return cls(public=public, secret=secret, allowed=allowed, public_file=directory / f"{SERVER}.key")

    def serve(self, sock: zmq.Socket[bytes]) -> None:
        """Make ``sock`` a CURVE server (before it binds); a ``Gate`` must be running in its context."""
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)
        sock.setsockopt_string(zmq.ZAP_DOMAIN, ZAP_DOMAIN)


@dataclass(frozen=True)
class ClientKeys:
    """A client's key pair and the supervisor's public key."""

    public: bytes
    secret: bytes = field(repr=False)
    server: bytes
    directory: Path | None = None  # where they were read from, for messages

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> ClientKeys:
        """From a key directory (``client.key_secret`` and ``server.key``); raises ``KeyFileError``."""
        where = Path(directory).expanduser().absolute()
        public, secret = _load_secret(where / f"{CLIENT}.key_secret")
        server_file = where / f"{SERVER}.key"
        if not server_file.is_file():
            raise KeyFileError(
                f"{server_file} does not exist: copy the supervisor's server.key there (its public key)"
            )
        return cls(public=public, secret=secret, server=load_public(server_file), directory=where)

    def connect(self, sock: zmq.Socket[bytes]) -> None:
        """Make ``sock`` a CURVE client of the supervisor (before it connects)."""
        sock.setsockopt(zmq.CURVE_SERVERKEY, self.server)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret)


Keys = ClientKeys | str | os.PathLike[str] | Literal[False] | None
"""What a client is given as ``keys``: keys, a key directory, ``False`` (or ``"none"``, as in
``--keys none``) for plain TCP, or ``None`` (look in ``$MCP_SUPERVISOR_KEYS`` or the default
directory; plain TCP when it holds no ``client.key_secret``)."""


def client_keys(keys: Keys, endpoint: str) -> ClientKeys | None:
    """The keys a client uses for ``endpoint`` (see ``Keys``); None: plain (always for ipc://)."""
    if keys is False or keys == NO_KEYS or not needs_curve(endpoint):
        return None
    if isinstance(keys, ClientKeys):
        return keys
    if keys is not None:
        return ClientKeys.load(keys)
    directory = key_dir()
    if not (directory / f"{CLIENT}.key_secret").exists():
        return None
    return ClientKeys.load(directory)
