"""Benchmark: the floor under a forked worker, what a child of the zygote dirties before doing any work.

    .venv/bin/python -m tests.benchmarks.fork_floor [--settle S] [--siblings N]

This process builds the zygote's image as the zygote does (``workers.zygote``: its preload, its
warm-up, the collector frozen, its allocator pools filled), then, for each row, forks ``--siblings``
children doing only what the row says, as the zygote forks workers:

- idle: nothing (the copy-on-write cost of being forked from this image);
- trio: ``trio.run`` of a task that sleeps (the event loop a worker runs);
- zmq: a ZeroMQ context and one DEALER socket (its two background threads);
- trio+zmq: both;
- link zmq / link zmtp: ``trio.run`` of a task reading the worker link, connected to a ROUTER (in a
  process of its own) over ipc: libzmq's DEALER (``TrioSocket``), or the worker's own ZMTP DEALER
  (``supervisor.shared.zmtp_dealer``), which is what a worker on the ipc link runs: the least a worker
  runs before it starts its server.

One more child, forked last, waits ``--settle`` seconds and reads every child's /proc/PID/smaps_rollup,
while this process only waits for its answer: whatever the reader does is its own, so the pages the
children share with this parent and with each other stay shared, as a worker's stay shared with the
zygote and its siblings. Per row, the median child's USS (private pages: what each worker adds
whatever the number of workers) and PSS (with its share of the pages it still shares with the parent
and its siblings: the floor of the per-worker PSS of ``tests.benchmarks.memory`` at that many
servers). Not a test: pytest only collects ``test_*.py``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.benchmarks.common import machine_info, print_table
from workers import pools, zygote

MB = 1024 / 1e6  # kB -> MB (10^6 bytes)
READ_TIMEOUT = 120.0  # seconds the reader may take, beyond --settle


def _idle() -> None:
    time.sleep(3600)


def _trio() -> None:
    import trio

    trio.run(trio.sleep, 3600)


def _zmq() -> None:
    import zmq

    context = zmq.Context()
    context.socket(zmq.DEALER)
    time.sleep(3600)


def _trio_zmq() -> None:
    import trio
    import zmq

    context = zmq.Context()
    context.socket(zmq.DEALER)
    trio.run(trio.sleep, 3600)


ROUTER = """
import sys, zmq
router = zmq.Context().socket(zmq.ROUTER)
router.bind(sys.argv[1])
print("ready", flush=True)
sys.stdin.read()
"""


def _link_zmq(endpoint: str) -> None:
    import trio
    import zmq

    from supervisor.shared.sockets import TrioSocket, new_dealer

    dealer = new_dealer(zmq.Context.instance(), routing_id=f"floor-{os.getpid()}".encode())
    dealer.connect(endpoint)
    trio.run(TrioSocket(dealer).receive_batch)


def _link_zmtp(endpoint: str) -> None:
    import trio

    from supervisor.shared.zmtp_dealer import ZmtpDealer

    path = endpoint.removeprefix("ipc://")
    trio.run(ZmtpDealer.connect(path, routing_id=f"floor-{os.getpid()}".encode()).receive_batch)


CHILDREN: dict[str, Callable[[], None]] = {"idle": _idle, "trio": _trio, "zmq": _zmq, "trio+zmq": _trio_zmq}
LINKS: dict[str, Callable[[str], None]] = {"link zmq": _link_zmq, "link zmtp": _link_zmtp}


def rollup(pid: int) -> dict[str, int]:
    kb: dict[str, int] = {}
    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    for line in text.splitlines()[1:]:
        key, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            kb[key] = int(parts[0])
    return kb


def _fork(body: Callable[[], None]) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(0)
    return pid


def measure(body: Callable[[], None], siblings: int, settle: float) -> list[dict[str, int]]:
    """Each child's smaps_rollup, read by a reader child while this process only waits."""
    pids = [_fork(body) for _ in range(siblings)]
    r, w = os.pipe()
    reader = os.fork()
    if reader == 0:
        os.close(r)
        time.sleep(settle)  # pacing: the children run their row's body for this long, no state to wait on
        os.write(w, json.dumps([rollup(pid) for pid in pids]).encode())
        os._exit(0)
    os.close(w)
    try:
        chunks = []
        while chunk := os.read(r, 1 << 16):
            chunks.append(chunk)
        readings: list[dict[str, int]] = json.loads(b"".join(chunks))
        return readings
    finally:
        os.close(r)
        for pid in pids:
            os.kill(pid, 9)
        for pid in (*pids, reader):
            os.waitpid(pid, 0)


def _row(name: str, readings: list[dict[str, int]]) -> list[str]:
    uss = statistics.median(kb.get("Private_Clean", 0) + kb.get("Private_Dirty", 0) for kb in readings)
    pss = statistics.median(kb["Pss"] for kb in readings)
    rss = statistics.median(kb["Rss"] for kb in readings)
    return [name, f"{rss * MB:.1f}", f"{uss * MB:.1f}", f"{pss * MB:.1f}"]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--settle", type=float, default=2.0, help="seconds each child runs before it is read")
    parser.add_argument("--siblings", type=int, default=10, help="children forked per row")
    args = parser.parse_args()
    zygote.preload()
    zygote.warm()
    gc.collect()
    gc.freeze()
    pools.fill()
    parent = rollup(os.getpid())
    rows = [["parent (zygote image)", f"{parent['Rss'] * MB:.1f}", "-", "-"]]
    with tempfile.TemporaryDirectory() as private:
        endpoint = f"ipc://{private}/workers"
        router = subprocess.Popen(
            [sys.executable, "-c", ROUTER, endpoint], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert router.stdout is not None and router.stdout.readline() == "ready\n"
            links = {name: functools.partial(link, endpoint) for name, link in LINKS.items()}
            bodies: dict[str, Callable[[], None]] = {**CHILDREN, **links}
            for name, body in bodies.items():
                rows.append(_row(name, measure(body, args.siblings, args.settle)))
        finally:
            router.kill()
            router.wait()
    for key, value in machine_info(settle=args.settle, siblings=args.siblings).items():
        print(f"{key}: {value}")
    print_table(["child (median)", "RSS MB", "USS MB", "PSS MB"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
