"""Benchmark: the floor under a forked worker, what a child of the zygote dirties before doing any work.

    .venv/bin/python -m tests.benchmarks.fork_floor [--settle S]

This process imports what the zygote imports (``workers.zygote.PRELOAD``), collects and freezes the
collector as the zygote does, then forks one child per row, each doing only what the row says, and
reads its /proc/PID/smaps_rollup after ``--settle`` seconds:

- idle: nothing (the copy-on-write cost of being forked from this image);
- trio: ``trio.run`` of a task that sleeps (the event loop a worker runs);
- zmq: a ZeroMQ context and one DEALER socket (its two background threads);
- link zmq / link zmtp: ``trio.run`` of a task reading the worker link, connected to a ROUTER (in a
  process of its own) over ipc: libzmq's DEALER (``TrioSocket``), or the worker's own ZMTP DEALER
  (``supervisor.shared.zmtp_dealer``), which is what a worker on the ipc link runs.

USS (private pages) is what each worker adds whatever the number of workers; PSS adds a share of the
pages it still shares with this parent (divided by 2 here: a real worker shares them with the zygote
and every sibling). Compare with ``tests.benchmarks.memory``'s per-worker USS: the difference is what
a worker does after the fork. Not a test: pytest only collects ``test_*.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.benchmarks.common import machine_info, print_table
from workers.zygote import PRELOAD

MB = 1024 / 1e6  # kB -> MB (10^6 bytes)


def _trio() -> None:
    import trio

    trio.run(trio.sleep, 3600)


def _zmq() -> None:
    import zmq

    context = zmq.Context()
    context.socket(zmq.DEALER)
    time.sleep(3600)


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

    dealer = new_dealer(zmq.Context.instance(), routing_id=b"floor")
    dealer.connect(endpoint)
    trio.run(TrioSocket(dealer).receive_batch)


def _link_zmtp(endpoint: str) -> None:
    import trio

    from supervisor.shared.zmtp_dealer import ZmtpDealer

    trio.run(ZmtpDealer.connect(endpoint.removeprefix("ipc://"), routing_id=b"floor").receive_batch)


CHILDREN: dict[str, Callable[[], None]] = {"idle": lambda: time.sleep(3600), "trio": _trio, "zmq": _zmq}
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


def measure(body: Callable[[], None], settle: float) -> dict[str, int]:
    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(0)
    try:
        time.sleep(settle)  # pacing: the child runs its row's body for this long, no state to wait on
        return rollup(pid)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--settle", type=float, default=1.5, help="seconds each child runs before it is read")
    args = parser.parse_args()
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    gc.collect()
    gc.freeze()
    parent = rollup(os.getpid())
    rows = [["parent (zygote image)", f"{parent['Rss'] * MB:.1f}", "-", "-", "-"]]
    with tempfile.TemporaryDirectory() as private:
        endpoint = f"ipc://{private}/workers"
        router = subprocess.Popen(
            [sys.executable, "-c", ROUTER, endpoint], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert router.stdout is not None and router.stdout.readline() == "ready\n"
            bodies = {
                **CHILDREN,
                **{name: functools.partial(link, endpoint) for name, link in LINKS.items()},
            }
            rows += [_row(name, measure(body, args.settle)) for name, body in bodies.items()]
        finally:
            router.kill()
            router.wait()
    for key, value in machine_info(settle=args.settle).items():
        print(f"{key}: {value}")
    print_table(["child", "RSS MB", "USS MB", "PSS MB", "shared MB"], rows)
    return 0


def _row(name: str, kb: dict[str, int]) -> list[str]:
    uss = kb.get("Private_Clean", 0) + kb.get("Private_Dirty", 0)
    shared = kb.get("Shared_Clean", 0) + kb.get("Shared_Dirty", 0)
    return [name, f"{kb['Rss'] * MB:.1f}", f"{uss * MB:.1f}", f"{kb['Pss'] * MB:.1f}", f"{shared * MB:.1f}"]


if __name__ == "__main__":
    raise SystemExit(main())
