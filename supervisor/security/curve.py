"""CurveZMQ on the supervisor's sockets: its gate (the ZAP handler), and what a client's handshakes say.

Above: ``core.Supervisor.bind`` starts a ``Gate`` before binding its front ROUTER and events PUB as
CURVE servers (``keys.ServerKeys``); the client stubs (``client``, ``events``) keep a
``HandshakeWatch`` on each socket they connect to a network endpoint. Below: pyzmq's ZAP
authenticator thread, which asks ``AllowedClients`` about each connecting key, and libzmq's
socket monitor events.

``allowed_clients`` is read again whenever it changes: allowing a client needs no restart.
"""

from __future__ import annotations

import logging
import stat
import struct
from contextlib import suppress
from pathlib import Path
from typing import Final, cast

import zmq

from supervisor.security.keys import (
    ALLOWED,
    CLIENT,
    KEYS_ENV,
    SERVER,
    ZAP_DOMAIN,
    ClientKeys,
    KeyFileError,
    ServerKeys,
    check_not_shared,
    key_dir,
    load_public,
)

__all__ = ["AllowedClients", "Gate", "HandshakeWatch"]

log = logging.getLogger("mcp_supervisor.curve")

MAX_REFUSALS_LOGGED: Final = 100  # distinct refused keys logged, so a key-spraying peer cannot fill the log


class AllowedClients:
    """The ZAP authenticator's question "may this key in?", answered from a directory of ``*.key`` files.

    The directory is read again when its modification time changes (a key added or removed); a key
    file other users could write to is ignored. Runs on the authenticator's thread."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._keys: frozenset[bytes] = frozenset()
        self._seen: object = None  # the listing (names, sizes, times) _keys was read from
        self._refused: set[bytes] = set()

    def public_keys(self) -> frozenset[bytes]:
        """The allowed public keys (Z85), read again if a file was added, removed or changed."""
        check_not_shared(self.directory)
        files = sorted(path for path in self.directory.glob("*.key") if path.is_file())
        listing = [(path.name, info.st_size, info.st_mtime_ns) for path in files if (info := path.stat())]
        if listing != self._seen:
            self._keys, self._seen = frozenset(self._read(files)), listing
        return self._keys

    def _read(self, files: list[Path]) -> set[bytes]:
        keys = set()
        for path in files:
            try:
                if path.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                    raise KeyFileError(f"{path} can be written by other users")
                keys.add(load_public(path))
            except (OSError, KeyFileError) as exc:
                log.warning("allowed clients: %s; ignored", exc)
        return keys

    def callback(self, domain: str, key: bytes) -> bool:
        try:
            if key in self.public_keys():
                return True
        except Exception:  # the authenticator thread must answer: a failure refuses the client
            log.exception("allowed clients: cannot read %s; refusing every client", self.directory)
            return False
        if key not in self._refused and len(self._refused) < MAX_REFUSALS_LOGGED:
            self._refused.add(key)
            log.warning(
                "refused a client whose CURVE public key %s is not in %s",
                key.decode("ascii", "replace"),
                self.directory,
            )
        return False


class Gate:
    """The ZAP handler of a context: without one, libzmq lets every CURVE key in. Start it before
    binding a CURVE socket in that context, and stop it (before terminating the context) after."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], keys: ServerKeys) -> None:
        # Imported here: zmq.auth.thread brings asyncio (zmq.asyncio), some 5 MB that only a supervisor
        # gating CURVE clients needs.
        from zmq.auth.thread import ThreadAuthenticator

        self.allowed = AllowedClients(keys.allowed)
        self._auth = ThreadAuthenticator(ctx, log=logging.getLogger("mcp_supervisor.zap"))
        self._auth.configure_curve_callback(ZAP_DOMAIN, self.allowed)
        self._auth.start()

    def stop(self) -> None:
        self._auth.stop()


_HANDSHAKE_EVENTS: Final = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
)


def _monitor_event(frames: list[bytes]) -> tuple[int, int]:
    """A socket monitor's event: (event, value), from its first frame (libzmq's 4.x layout), read here
    rather than with ``zmq.utils.monitor``, which imports asyncio (some 5 MB) for its awaitable form."""
    if len(frames) != 2 or len(frames[0]) != 6:
        raise RuntimeError(f"invalid socket monitor message: {frames!r}")
    event, value = struct.unpack("=hi", frames[0])
    return event, value


class HandshakeWatch:
    """Why a client socket's handshakes with a supervisor fail, read from its monitor events.

    ``update()`` reads the events so far and returns the reason of a handshake that failed since
    the last call; ``failure`` is the last reason (None once a handshake succeeds). A refused key
    and a mechanism mismatch say so at once; handshakes that fail without detail (the peer hung
    up: a plain client of a CURVE supervisor often sees only that, so does a wrong server key)
    count as a failure after ``UNEXPLAINED_FAILURES`` in a row (libzmq retries every ~0.1 s)."""

    UNEXPLAINED_FAILURES: Final = 3

    def __init__(self, sock: zmq.Socket[bytes], endpoint: str, keys: ClientKeys | None) -> None:
        self.endpoint = endpoint
        self.keys = keys
        self.failure: str | None = None
        self._unexplained = 0  # handshakes in a row that failed without detail
        self.monitor: zmq.Socket[bytes] = sock.get_monitor_socket(_HANDSHAKE_EVENTS)
        self.fd = cast(int, self.monitor.getsockopt(zmq.FD))

    def update(self) -> str | None:
        fresh = None
        while cast(int, self.monitor.getsockopt(zmq.EVENTS)) & zmq.POLLIN:
            event, value = _monitor_event(self.monitor.recv_multipart(zmq.NOBLOCK))
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.failure, self._unexplained = None, 0
            elif event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                self.failure = fresh = self._refused(value)
            elif (
                event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                and value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
            ):
                self.failure = fresh = self._mismatch()
            else:
                self._unexplained += 1
                if self._unexplained >= self.UNEXPLAINED_FAILURES:
                    self.failure = fresh = self._unexplained_failure()
        return fresh

    def redial(self, sock: zmq.Socket[bytes]) -> None:
        """Before a request: after a failed handshake, connect ``sock`` afresh, so the request gets a
        handshake of its own (libzmq does not retry after a refusal; a key may have been allowed since)."""
        self.update()
        if self.failure is None:
            return
        with suppress(zmq.ZMQError):
            sock.disconnect(self.endpoint)
        sock.connect(self.endpoint)
        self.failure, self._unexplained = None, 0

    def _refused(self, status: int) -> str:
        mine = f" ({self.keys.directory / f'{CLIENT}.key'})" if self.keys and self.keys.directory else ""
        return (
            f"the supervisor at {self.endpoint} refused this client's CURVE key{mine} (status {status}): "
            f"its operator must add this client's public key to the supervisor's {ALLOWED} directory"
        )

    def _no_keys(self) -> str:
        return (
            f"this client has no CURVE keys (no {key_dir() / f'{CLIENT}.key_secret'}): make them with "
            f"'mcp-supervisor keygen --client-only' (or pass keys / --keys DIR, or set ${KEYS_ENV})"
        )

    def _mismatch(self) -> str:
        if self.keys is None:
            return f"the supervisor at {self.endpoint} requires CURVE and {self._no_keys()}"
        return (
            f"the supervisor at {self.endpoint} does not use CURVE (it runs with --insecure) and this "
            "client does: pass keys=False (--keys none) to connect without"
        )

    def _unexplained_failure(self) -> str:
        if self.keys is None:
            return f"handshakes with {self.endpoint} fail: it probably requires CURVE and {self._no_keys()}"
        server = self.keys.directory / f"{SERVER}.key" if self.keys.directory else "the server key"
        return (
            f"CURVE handshakes with {self.endpoint} fail: is {server} the public key of the supervisor "
            "listening there (and does it use CURVE)?"
        )

    def close(self) -> None:
        self.monitor.close(linger=0)
