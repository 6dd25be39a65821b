"""Where the HTTP listener listens (``HOST:PORT``), and which ``Host`` headers name it.

Above: the config loader, which checks the ``"metrics"`` setting with ``parse_address``; the daemon,
which checks ``run --metrics`` with it; the listener's paths (``supervisor.ops.web.app``), which let a
control POST through only when its ``Host`` header names this listener (``HostCheck``), so that a
web page on another name (DNS rebinding) cannot reach them. Below: the standard library.

Pure code.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_HOST", "HostCheck", "ListenAddress", "parse_address", "split_host"]

DEFAULT_HOST: Final = "127.0.0.1"  # for ":PORT"
_HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")
_LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})
_EXAMPLE = "e.g. 127.0.0.1:9464"


@dataclass(frozen=True)
class ListenAddress:
    """A host (a name, or an IP address without brackets) and a port (0: any free port)."""

    host: str
    port: int

    def url(self, port: int | None = None) -> str:
        """``http://HOST:PORT/`` (IPv6 in brackets), with the port actually bound if given."""
        return f"http://{_bracketed(self.host)}:{self.port if port is None else port}/"


def parse_address(value: str) -> ListenAddress:
    """``HOST:PORT``, ``[IPV6]:PORT`` or ``:PORT`` (127.0.0.1). Raises ``ValueError`` saying what is
    wrong (the caller names the setting or option)."""
    host, sep, port = value.rpartition(":")
    if not sep or not (port.isascii() and port.isdecimal()) or len(port) > 5:
        raise ValueError(f"{value!r} is not HOST:PORT ({_EXAMPLE})")
    number = int(port)
    if number > 65535:
        raise ValueError(f"port {number} is out of range (1 to 65535, or 0 for any free port)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not _is_ip(host, version=6):
            raise ValueError(f"{value!r}: {host!r} in brackets is not an IPv6 address")
    elif ":" in host:
        raise ValueError(f"{value!r}: an IPv6 address goes in brackets ([::1]:{number})")
    host = host or DEFAULT_HOST
    if not (_is_ip(host) or (len(host) <= 253 and _HOSTNAME.fullmatch(host))):
        raise ValueError(f"{value!r}: {host!r} is not a host name or an IP address ({_EXAMPLE})")
    return ListenAddress(host, number)


def split_host(header: str) -> tuple[str, int | None] | None:
    """A ``Host`` header's host (lower case, IPv6 without brackets) and port (None when absent);
    None when it is not ``host[:port]``."""
    header = header.strip().lower()
    if header.startswith("["):
        end = header.find("]")
        if end < 0:
            return None
        host, rest = header[1:end], header[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:] if rest else None
    else:
        host, sep, port_text = header.partition(":")
        port = port_text if sep else None
    if port is None:
        return host, None
    if not (port.isascii() and port.isdecimal()) or len(port) > 5:
        return None
    return host, int(port)


class HostCheck:
    """Which ``Host`` headers name a listener on ``address``, bound to ``port``.

    Its own host as written and the port; when bound to a loopback address or ``localhost``, also
    ``localhost``, ``127.0.0.1`` and ``[::1]``; when bound to every interface (``0.0.0.0``, ``::``),
    any IP address (a DNS name an attacker controls never passes). The port must be the bound one
    (or absent, for port 80), but for the names given."""

    def __init__(self, address: ListenAddress, port: int, names: Iterable[str] = ()) -> None:
        """``names``: more host names to answer to, on any port (a DNS name of the operator's own, a
        reverse proxy's, whose port may be its own)."""
        self._port = port
        host = address.host.lower()
        self._names = {host}
        self._extra = {name.lower().strip("[]") for name in names}
        ip = _ip(host)
        self._any_ip = ip is not None and ip.is_unspecified
        if host == "localhost" or (ip is not None and (ip.is_loopback or ip.is_unspecified)):
            self._names |= _LOOPBACK_NAMES

    def allows(self, header: str) -> bool:
        split = split_host(header)
        if split is None:
            return False
        host, port = split
        if host in self._extra:
            return True
        if port != self._port and not (port is None and self._port == 80):
            return False
        return host in self._names or (self._any_ip and _ip(host) is not None)


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _is_ip(host: str, version: int | None = None) -> bool:
    ip = _ip(host)
    return ip is not None and (version is None or ip.version == version)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host
