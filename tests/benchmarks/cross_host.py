"""Benchmark: a call to a supervisor on another host vs on the same host, across a real network boundary.

    .venv/bin/python -m tests.benchmarks.cross_host [--calls N] [--blocks B]    (as root)

Two network namespaces on one bridge (``tests/e2e/netns.py``) stand for two hosts: ``server`` runs a
supervisor with the test server, bound to its own address over tcp with CURVE; the same client
measurement runs from ``agent`` (another host: a veth hop each way, through the bridge) and from
``server`` itself (same host, same endpoint and CURVE), in alternating blocks. Columns: p50 and p99
of sequential calls, and calls/s with 16 callers (the async stub). Prints a table; no pass/fail.
Not a test: pytest only collects ``test_*.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import trio

from supervisor.security.keys import keygen
from tests.benchmarks.common import Samples, machine_info, print_table, run_block, stats
from tests.e2e.harness import stdio_test_server
from tests.e2e.netns import Network, unavailable

PORT = 5555


async def _measure(endpoint: str, keys: str, calls: int, concurrency: int) -> dict[str, float]:
    from supervisor.client import AsyncSupervisorClient

    samples = Samples()
    async with AsyncSupervisorClient(endpoint, keys=Path(keys)) as sup:

        async def call() -> None:
            await sup.call_tool("mcp_test_echo", {"text": "x"})

        await run_block(call, 50, concurrency, Samples())  # warm-up
        await run_block(call, calls, concurrency, samples)
    figures = stats(samples)
    return {"p50": figures.p50_ms, "p99": figures.p99_ms, "per_s": figures.calls_per_s}


def _block(
    network: Network, host: str, endpoint: str, keys: Path, calls: int, concurrency: int
) -> dict[str, float]:
    argv = [sys.executable, "-m", "tests.benchmarks.cross_host", "--measure", endpoint, str(keys)]
    argv += ["--calls", str(calls), "--concurrency", str(concurrency)]
    done = network.run(host, argv, timeout=600, env=dict(os.environ))
    if done.returncode != 0:
        raise SystemExit(f"measuring from {host} failed: {done.stderr}")
    return dict(json.loads(done.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per block (default 2000)")
    parser.add_argument("--blocks", type=int, default=4, help="blocks per place and mode (default 4)")
    parser.add_argument("--measure", nargs=2, metavar=("ENDPOINT", "KEYS"), help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=1, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.measure:
        endpoint, keys = options.measure
        print(json.dumps(trio.run(_measure, endpoint, keys, options.calls, options.concurrency)))
        return
    why = unavailable()
    if why is not None:
        raise SystemExit(f"cross_host: no network namespaces here: {why}")
    print(machine_info(calls=options.calls, blocks=options.blocks))
    with tempfile.TemporaryDirectory(prefix="mcps-bench-") as tmp, Network(["server", "agent"]) as network:
        keys = Path(tmp) / "keys"
        keygen(keys)
        config = Path(tmp) / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"test": stdio_test_server()}}))
        endpoint = f"tcp://{network.address('server')}:{PORT}"
        run = [
            sys.executable,
            "-m",
            "supervisor",
            "run",
            str(config),
            "--endpoint",
            endpoint,
            "--keys",
            str(keys),
        ]
        log = (Path(tmp) / "supervisor.log").open("wb")
        supervisor = network.popen(
            "server", run, env={**os.environ, "XDG_RUNTIME_DIR": tmp}, stdout=log, stderr=log
        )
        try:
            ready = network.cli(
                "agent", "wait", "--timeout", "60", "--endpoint", endpoint, "--keys", str(keys)
            )
            if ready.returncode != 0:
                raise SystemExit(f"the supervisor did not get ready: {ready.stderr}")
            figures: dict[tuple[str, int], list[dict[str, float]]] = {}
            for block in range(options.blocks):
                places = ["agent", "server"] if block % 2 == 0 else ["server", "agent"]
                for place in places:
                    for concurrency in (1, 16):
                        measured = _block(network, place, endpoint, keys, options.calls, concurrency)
                        figures.setdefault((place, concurrency), []).append(measured)
        finally:
            supervisor.terminate()
            supervisor.wait(30)
            log.close()

    def median(place: str, concurrency: int, key: str) -> float:
        values = sorted(block[key] for block in figures[(place, concurrency)])
        return values[len(values) // 2]

    rows = []
    for place, label in (("server", "same host"), ("agent", "another host")):
        rows.append(
            [
                label,
                f"{median(place, 1, 'p50'):.3f}",
                f"{median(place, 1, 'p99'):.3f}",
                f"{median(place, 16, 'per_s'):.0f}",
            ]
        )
    print("\nA call to the supervisor's tcp+CURVE endpoint, medians of the blocks")
    print_table(["client on", "p50 ms", "p99 ms", "calls/s at 16"], rows)


if __name__ == "__main__":
    main()
