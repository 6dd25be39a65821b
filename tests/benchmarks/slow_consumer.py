"""Benchmark: the supervisor's memory under a client that sends requests and never reads the replies.

    .venv/bin/python -m tests.benchmarks.slow_consumer [--requests N] [--tools N] [--queued N] [--json PATH]

One `mcp-supervisor run` with the test server (``--tools`` extra tools, so each ``ListTools`` reply is
several kB). A raw DEALER (receive high-water mark 1: it reads nothing) sends ``--requests``
``ListTools`` requests; the supervisor's replies to it back up. Once the supervisor has been idle for a
second (its CPU time stops growing), the table gives its resident memory before and after, its peak,
the replies it dropped and the time it took; then another client's ping shows the supervisor still
answers. With ``maxQueuedReplies`` (``--queued``; the supervisor's default, 1000) the queue for that
client is bounded and the memory stays flat; a supervisor without that bound queues every reply.
Not a test: pytest only collects test_*.py.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

import zmq

from supervisor.client.blocking import SupervisorClient
from supervisor.protocol import ListTools, encode
from tests.benchmarks.common import (
    cpu_seconds,
    launch_supervisor,
    machine_info,
    print_table,
    stop_supervisor,
    wait_ready,
    write_json,
)
from tests.e2e.harness import stdio_test_server

IDLE_FOR = 1.0  # seconds of no CPU time that mean the flood is handled
FLOOD_TIMEOUT = 300.0  # seconds to wait for that


def memory_kb(pid: int, field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE)
    return int(match.group(1)) if match else 0


def wait_idle(pid: int) -> float:
    """Seconds until ``pid`` has used no CPU for ``IDLE_FOR`` seconds."""
    start = time.monotonic()
    used, still_since = cpu_seconds([pid]), time.monotonic()
    while time.monotonic() - start < FLOOD_TIMEOUT:
        time.sleep(0.1)
        now = cpu_seconds([pid])
        if now > used + 0.01:
            used, still_since = now, time.monotonic()
        elif time.monotonic() - still_since >= IDLE_FOR:
            return still_since - start
    raise RuntimeError(f"the supervisor was still busy after {FLOOD_TIMEOUT} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--tools", type=int, default=40, help="extra tools of the test server")
    parser.add_argument("--queued", type=int, help="maxQueuedReplies (default: the supervisor's, 1000)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        servers = {"test": stdio_test_server(TEST_SERVER_EXTRA_TOOLS=args.tools)}
        extra = {"supervisor": {"maxQueuedReplies": args.queued}} if args.queued else {}
        proc, endpoint = launch_supervisor(servers, Path(tmp), extra=extra)
        problems: list[str] = []
        try:
            with SupervisorClient(endpoint) as sup:
                wait_ready(sup, proc, 1)
                reply_bytes = len(encode(sup.tool_list()))
                before = memory_kb(proc.pid, "VmRSS")
                ctx = zmq.Context()
                sink = ctx.socket(zmq.DEALER)
                sink.setsockopt(zmq.LINGER, 0)
                sink.setsockopt(zmq.RCVHWM, 1)
                sink.connect(endpoint)
                request = encode(ListTools(id=1))
                for _ in range(args.requests):
                    sink.send(request)
                seconds = wait_idle(proc.pid)
                after, peak = memory_kb(proc.pid, "VmRSS"), memory_kb(proc.pid, "VmHWM")
                start = time.perf_counter()
                sup.ping()
                ping_ms = (time.perf_counter() - start) * 1000
                front = getattr(sup, "front_stats", lambda: None)()
                sink.close()
                ctx.term()
        finally:
            stop_supervisor(proc, problems)
    dropped = "-" if front is None else str(front.dropped_replies)
    rows = [
        [
            str(args.requests),
            f"{reply_bytes / 1024:.1f}",
            f"{args.requests * reply_bytes / 2**20:.0f}",
            f"{before / 1024:.1f}",
            f"{after / 1024:.1f}",
            f"{(after - before) / 1024:+.1f}",
            f"{peak / 1024:.1f}",
            dropped,
            f"{seconds:.1f}",
            f"{ping_ms:.1f}",
        ]
    ]
    print_table(
        [
            "requests",
            "reply kB",
            "replies MB",
            "RSS before MB",
            "RSS after MB",
            "growth MB",
            "peak MB",
            "dropped",
            "busy s",
            "ping ms",
        ],
        rows,
    )
    write_json(
        args.json,
        {
            "machine": machine_info(requests=args.requests, tools=args.tools, queued=args.queued),
            "rss_before_kb": before,
            "rss_after_kb": after,
            "rss_peak_kb": peak,
            "reply_bytes": reply_bytes,
            "dropped_replies": None if front is None else front.dropped_replies,
            "busy_seconds": seconds,
            "ping_ms": ping_ms,
        },
    )


if __name__ == "__main__":
    main()
