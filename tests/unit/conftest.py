"""Fixtures the unit tests of the ZMTP sockets share: a ZeroMQ context (libzmq's peers) and a place for
an ipc socket."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq


@pytest.fixture
def context() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


@pytest.fixture
def path(tmp_path: Path) -> str:
    """Where an ipc socket of the test is bound."""
    return str(tmp_path / "socket")
