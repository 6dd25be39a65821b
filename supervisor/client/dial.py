"""Dialling the supervisor from an agent's side: a connected socket, and a watch on its handshakes.

Above: the client stubs (``supervisor.client.blocking``, ``supervisor.client.aio``) and the event
subscriptions
(``supervisor.client.watch``). Below: the socket factories of ``supervisor.shared.sockets`` and, on a ``tcp://``
endpoint, CurveZMQ (``supervisor.security.keys``, ``supervisor.security.curve``). An ipc endpoint whose
socket file does not exist, or an endpoint ZeroMQ cannot parse, is a ``SupervisorUnreachableError`` at once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import zmq

from supervisor.client.errors import SupervisorAuthenticationError, SupervisorUnreachableError
from supervisor.security.curve import HandshakeWatch
from supervisor.security.keys import ClientKeys, needs_curve
from supervisor.shared.paths import ipc_path

__all__ = ["dial", "no_answer", "unreachable"]


def dial(
    new_socket: Callable[[], zmq.Socket[bytes]],
    endpoint: str,
    keys: ClientKeys | None,
    missing: Callable[[Path], str],
) -> tuple[zmq.Socket[bytes], HandshakeWatch | None]:
    """A socket from ``new_socket`` connected to ``endpoint`` (CURVE with ``keys``), and a watch on its
    handshakes where they can fail (all but ipc). ``missing(path)`` says what an absent ipc socket
    file means."""
    path = ipc_path(endpoint)
    if path is not None and not path.exists():
        raise SupervisorUnreachableError(missing(path))
    sock = new_socket()
    if keys is not None:
        keys.connect(sock)
    watch = HandshakeWatch(sock, endpoint, keys) if needs_curve(endpoint) else None
    try:
        sock.connect(endpoint)
    except zmq.ZMQError as exc:
        if watch is not None:
            watch.close()
        sock.close(linger=0)
        raise SupervisorUnreachableError(f"cannot connect to {endpoint!r}: {exc}") from exc
    return sock, watch


def unreachable(endpoint: str) -> Callable[[Path], str]:
    """What a client stub says when the supervisor's ipc socket file is not there."""
    return lambda path: (
        f"no supervisor at {endpoint}: {path} does not exist (is 'mcp-supervisor run' running?)"
    )


def no_answer(endpoint: str, wait: float, watch: HandshakeWatch | None) -> SupervisorUnreachableError:
    """Why a request got no answer in ``wait`` seconds: a refused handshake, or no supervisor."""
    if watch is not None and watch.failure is not None:
        return SupervisorAuthenticationError(watch.failure)
    return SupervisorUnreachableError(f"no answer from the supervisor at {endpoint} within {wait:g} s")
