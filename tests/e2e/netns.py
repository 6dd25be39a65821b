"""Hosts on one machine: network namespaces joined by veth pairs to a bridge (iproute2).

``Network(["alpha", "beta"])`` makes a namespace per host, each with an ``eth0`` at 10.77.0.N/24 on
one bridge (in a namespace of its own, so the machine's own network is never touched), and runs
commands in a host with ``Network.run`` / ``Network.popen``. ``cut`` and ``mend`` set a host's link
down and up, as a pulled cable. Names carry a random tag, so two test runs at once never meet.
Needs root (or CAP_NET_ADMIN) and iproute2: ``unavailable()`` says why not, for a skip.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

SUBNET = "10.77.0"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "no ip command (iproute2)"
    name = f"mcps-probe-{secrets.token_hex(3)}"
    made = _ip("netns", "add", name, check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    veth = f"mp{secrets.token_hex(3)}"
    made = _ip("link", "add", veth, "type", "veth", "peer", "name", f"{veth}p", check=False)
    if made.returncode != 0:
        return f"ip link add type veth failed: {made.stderr.strip()}"
    _ip("link", "del", veth, check=False)
    return None


class Network:
    """Hosts (network namespaces) on one bridge; a context manager that removes all it made."""

    def __init__(self, hosts: Sequence[str]) -> None:
        self.tag = secrets.token_hex(3)
        self.hosts = list(hosts)
        self._switch = f"mcps-{self.tag}-switch"

    def namespace(self, host: str) -> str:
        return f"mcps-{self.tag}-{host}"

    def address(self, host: str) -> str:
        return f"{SUBNET}.{self.hosts.index(host) + 1}"

    def _port(self, host: str) -> str:
        """The bridge's end of ``host``'s cable (an interface name: at most 15 characters)."""
        return f"mc{self.tag}{self.hosts.index(host)}"

    def __enter__(self) -> Self:
        try:
            _ip("netns", "add", self._switch)
            _ip("-n", self._switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self._switch, "link", "set", "br0", "up")
            for host in self.hosts:
                namespace, port = self.namespace(host), self._port(host)
                _ip("netns", "add", namespace)
                _ip("-n", namespace, "link", "set", "lo", "up")
                _ip(
                    "link",
                    "add",
                    port,
                    "netns",
                    self._switch,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    namespace,
                )
                _ip("-n", self._switch, "link", "set", port, "master", "br0", "up")
                _ip("-n", namespace, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
                _ip("-n", namespace, "link", "set", "eth0", "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        for namespace in [*(self.namespace(host) for host in self.hosts), self._switch]:
            _ip("netns", "del", namespace, check=False)  # its interfaces go with it

    def wrap(self, host: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run in ``host``."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    def run(
        self, host: str, argv: Sequence[str], timeout: float = 60, **options: Any
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.wrap(host, argv), capture_output=True, text=True, timeout=timeout, check=False, **options
        )

    def popen(self, host: str, argv: Sequence[str], **options: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.wrap(host, argv), **options)

    def cli(self, host: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``mcp-supervisor ARGS`` run in ``host``."""
        return self.run(
            host, [sys.executable, "-m", "supervisor", *args], timeout=timeout, env=dict(os.environ)
        )

    def cut(self, host: str) -> None:
        """Pull ``host``'s cable: its link to the bridge goes down."""
        _ip("-n", self._switch, "link", "set", self._port(host), "down")

    def mend(self, host: str) -> None:
        _ip("-n", self._switch, "link", "set", self._port(host), "up")
