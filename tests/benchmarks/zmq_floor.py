"""The pure pyzmq floor under a routed call: a blocking 2-hop relay, used by ``latency.py``.

    client (DEALER, the calling process) -> relay process (ROUTER front, ROUTER back)
        -> echo worker process (DEALER) -> relay -> client

All blocking pyzmq over ``ipc://`` endpoints, with the relay a hand loop in Python (a ``zmq.Poller`` on
both ROUTERs), as the supervisor is a Python loop over the same two socket kinds. Nothing is decoded:
the client sends a request of the routed request's bytes and the worker answers with the routed reply's
bytes, so the floor is what moving those messages through two processes costs, and nothing else.

``Floor`` starts both processes and measures round trips; the processes themselves run this module:
``python -m tests.benchmarks.zmq_floor relay FRONT BACK`` and ``... worker BACK REPLY_HEX``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import zmq

from tests.benchmarks.common import REPO, stop_process

WORKER_ID = b"worker"
HELLO = b"hello"
POLL_MS = 1000  # the relay and worker check this often whether their parent is gone
START_TIMEOUT = 20.0  # seconds for both processes to start and answer a first round trip
CALL_TIMEOUT = 5.0  # seconds for one round trip once started


def _orphaned(parent: int) -> bool:
    return os.getppid() != parent


def relay(front_endpoint: str, back_endpoint: str) -> None:
    """Forward each request to the worker with its caller's id, and each reply back to that caller."""
    parent = os.getppid()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    front = ctx.socket(zmq.ROUTER)
    back = ctx.socket(zmq.ROUTER)
    for sock in (front, back):
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    front.bind(front_endpoint)
    back.bind(back_endpoint)
    # Requests wait in the front queue until the worker has said hello (so the back route exists).
    while not back.poll(POLL_MS):
        if _orphaned(parent):
            return
    back.recv_multipart()
    poller = zmq.Poller()
    poller.register(front, zmq.POLLIN)
    poller.register(back, zmq.POLLIN)
    while True:
        ready = dict(poller.poll(POLL_MS))
        if not ready:
            if _orphaned(parent):
                return
            continue
        if front in ready:
            while True:
                try:
                    caller, payload = front.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                back.send_multipart([WORKER_ID, caller, payload])
        if back in ready:
            while True:
                try:
                    _, caller, reply = back.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                front.send_multipart([caller, reply])


def worker(back_endpoint: str, reply: bytes) -> None:
    """Answer every request with ``reply``."""
    parent = os.getppid()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.IDENTITY, WORKER_ID)
    sock.connect(back_endpoint)
    sock.send(HELLO)
    while True:
        if not sock.poll(POLL_MS):
            if _orphaned(parent):
                return
            continue
        caller, _ = sock.recv_multipart()
        sock.send_multipart([caller, reply])


class Floor:
    """The relay and worker processes, and a blocking DEALER in this process to time round trips."""

    def __init__(self, tmp: Path, request: bytes, reply: bytes) -> None:
        self.request, self.reply = request, reply
        front, back = f"ipc://{tmp / 'floor-front.sock'}", f"ipc://{tmp / 'floor-back.sock'}"
        module = [sys.executable, "-m", "tests.benchmarks.zmq_floor"]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        try:
            self.procs.append(subprocess.Popen([*module, "relay", front, back], cwd=REPO))
            self.procs.append(subprocess.Popen([*module, "worker", back, reply.hex()], cwd=REPO))
            deadline = time.monotonic() + START_TIMEOUT
            while not os.path.exists(tmp / "floor-front.sock"):
                if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                    raise RuntimeError("the floor's relay did not start")
                time.sleep(0.01)  # a poll interval, bounded by START_TIMEOUT
            self.sock.connect(front)
            self.round_trip(START_TIMEOUT)
        except BaseException:
            self.close()
            raise

    def round_trip(self, timeout: float = CALL_TIMEOUT) -> None:
        self.sock.send(self.request)
        if not self.sock.poll(int(timeout * 1000)):
            raise RuntimeError(f"no answer through the floor relay within {timeout:g} s")
        if len(self.sock.recv()) != len(self.reply):
            raise RuntimeError("the floor relay answered with a reply of the wrong size")

    def close(self) -> None:
        for proc in self.procs:
            stop_process(proc)
        self.sock.close(linger=0)
        self.ctx.term()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def main() -> int:
    match sys.argv[1:]:
        case ["relay", front, back]:
            relay(front, back)
        case ["worker", back, reply_hex]:
            worker(back, bytes.fromhex(reply_hex))
        case _:
            print(__doc__, file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
