"""The systemd notify protocol (``sd_notify(3)``), spoken without libsystemd.

Above: ``supervisor.ops.service``, which decides what to say and when. Below: one ``AF_UNIX``
datagram socket, sending to ``$NOTIFY_SOCKET``: a filesystem path, or an abstract socket name
when it starts with ``@``. A message is one datagram of ``KEY=VALUE`` lines (``READY=1``,
``STATUS=...``).

Sends never block and never raise: a socket that is missing or broken is logged once (a
warning) and then ignored, so the supervisor runs as it would without systemd. Without
``$NOTIFY_SOCKET`` there is no notifier at all.

``$WATCHDOG_USEC`` asks for ``WATCHDOG=1`` at least that often (we ping twice as often);
``$WATCHDOG_PID``, when set, names the one process that is to ping.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from typing import Final

__all__ = ["NOTIFY_SOCKET_ENV", "SERVICE_ENV", "WATCHDOG_PID_ENV", "WATCHDOG_USEC_ENV", "Notifier"]
__all__ += ["watchdog_interval"]

NOTIFY_SOCKET_ENV: Final = "NOTIFY_SOCKET"
WATCHDOG_USEC_ENV: Final = "WATCHDOG_USEC"
WATCHDOG_PID_ENV: Final = "WATCHDOG_PID"
SERVICE_ENV: Final = (NOTIFY_SOCKET_ENV, WATCHDOG_USEC_ENV, WATCHDOG_PID_ENV)
"""What systemd tells its main process: not for the processes it starts in turn."""

log = logging.getLogger("mcp_supervisor")


class Notifier:
    """Datagrams to one notify socket; ``send`` never blocks and never raises."""

    def __init__(self, address: str) -> None:
        """``address``: as in ``$NOTIFY_SOCKET`` (an absolute path, or ``@name``: abstract)."""
        if not address.startswith(("/", "@")) or len(address) < 2:
            raise ValueError(f"{NOTIFY_SOCKET_ENV}={address!r} is neither a path nor an abstract socket name")
        self.address = address
        self._target = b"\0" + os.fsencode(address[1:]) if address.startswith("@") else os.fsencode(address)
        self._socket: socket.socket | None = socket.socket(
            socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
        )
        self._failed = False  # said once in the log

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Notifier | None:
        """The notifier ``$NOTIFY_SOCKET`` asks for, or None (unset, or not an address: said once)."""
        env = os.environ if environ is None else environ
        address = env.get(NOTIFY_SOCKET_ENV)
        if not address:
            return None
        try:
            return cls(address)
        except (ValueError, OSError) as exc:
            log.warning("systemd notifications off: %s", exc)
            return None

    def send(self, *lines: str) -> bool:
        """Send one message of ``KEY=VALUE`` lines (each made a single line); whether it went."""
        if self._socket is None:
            return False
        message = "\n".join(" ".join(line.splitlines()) for line in lines)
        try:
            self._socket.sendto(message.encode(errors="replace"), self._target)
        except OSError as exc:  # no such socket, nobody reading it, its queue full
            if not self._failed:
                self._failed = True
                log.warning(
                    "cannot notify systemd at %s=%s: %s (carrying on; said once)",
                    NOTIFY_SOCKET_ENV,
                    self.address,
                    exc.strerror or exc,
                )
            return False
        return True

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def watchdog_interval(environ: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings (half of ``$WATCHDOG_USEC``), or None: no watchdog, or
    ``$WATCHDOG_PID`` names another process than ``pid`` (ours by default). A value that is not a
    positive integer is a warning and no watchdog."""
    env = os.environ if environ is None else environ
    usec, wanted = env.get(WATCHDOG_USEC_ENV), env.get(WATCHDOG_PID_ENV)
    if not usec:
        return None
    if wanted and _number(WATCHDOG_PID_ENV, wanted) != (os.getpid() if pid is None else pid):
        return None  # another process pings (or a WATCHDOG_PID we cannot read)
    value = _number(WATCHDOG_USEC_ENV, usec)
    return value / 2 / 1_000_000 if value else None


def _number(name: str, text: str) -> int | None:
    """The positive integer ``text`` is, else None and a warning naming ``name``."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value > 0:
        return value
    log.warning("%s=%r is not a positive integer: no watchdog pings", name, text)
    return None
