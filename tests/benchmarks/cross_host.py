"""Benchmark: a call to a supervisor on another host vs on the same host, across a real network boundary,
through the client stub and through the MCP facade federating one or three supervisors.

    .venv/bin/python -m tests.benchmarks.cross_host [--calls N] [--blocks B]    (as root)

Network namespaces on one bridge (``tests/e2e/netns.py``) stand for hosts: ``server`` runs a
supervisor with the test server (``test``), bound to its own address over tcp with CURVE; ``beta``
and ``gamma`` run one each with a server of their own. The same measurement of ``mcp_test_echo``
runs, in alternating blocks:
  stub, same host        the async stub from ``server`` itself (same endpoint and CURVE)
  stub, another host     the async stub from ``agent`` (a veth hop each way, through the bridge)
  facade, 1 supervisor   the SDK's ``Client`` on ``agent``, through ``mcp-supervisor mcp --endpoint``
                         the server's supervisor (stdio facade, legacy handshake)
  facade, 3 supervisors  the same facade with the three supervisors' endpoints (a federation)
Columns: p50 and p99 of sequential calls, and calls/s with 16 callers. Prints a table; no pass/fail.
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
from tests.benchmarks.common import Samples, block_order, machine_info, print_table, run_block, stats
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


async def _measure_facade(endpoints: str, keys: str, calls: int, concurrency: int) -> dict[str, float]:
    from mcp import Client, StdioServerParameters

    argv = [sys.executable, "-m", "supervisor", "mcp", "--endpoint", endpoints, "--keys", keys]
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    samples = Samples()
    async with Client(params, mode="legacy") as client:

        async def call() -> None:
            result = await client.call_tool("mcp_test_echo", {"text": "x"})
            if result.is_error:
                raise SystemExit(f"the call through the facade failed: {result.content}")

        await run_block(call, 50, concurrency, Samples())  # warm-up
        await run_block(call, calls, concurrency, samples)
    figures = stats(samples)
    return {"p50": figures.p50_ms, "p99": figures.p99_ms, "per_s": figures.calls_per_s}


def _block(
    network: Network,
    host: str,
    endpoint: str,
    keys: Path,
    calls: int,
    concurrency: int,
    how: str = "--measure",
) -> dict[str, float]:
    argv = [sys.executable, "-m", "tests.benchmarks.cross_host", how, endpoint, str(keys)]
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
    parser.add_argument("--measure-facade", nargs=2, metavar=("ENDPOINTS", "KEYS"), help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=1, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.measure:
        endpoint, keys = options.measure
        print(json.dumps(trio.run(_measure, endpoint, keys, options.calls, options.concurrency)))
        return
    if options.measure_facade:
        endpoints, keys = options.measure_facade
        print(json.dumps(trio.run(_measure_facade, endpoints, keys, options.calls, options.concurrency)))
        return
    why = unavailable()
    if why is not None:
        raise SystemExit(f"cross_host: no network namespaces here: {why}")
    print(machine_info(calls=options.calls, blocks=options.blocks))
    hosts = {"server": "test", "beta": "beta", "gamma": "gamma"}  # host -> the server it runs
    with tempfile.TemporaryDirectory(prefix="mcps-bench-") as tmp, Network([*hosts, "agent"]) as network:
        keys = Path(tmp) / "keys"
        keygen(keys)
        endpoints = {host: f"tcp://{network.address(host)}:{PORT}" for host in hosts}
        supervisors = []
        for host, server in hosts.items():
            config = Path(tmp) / f"{host}.json"
            config.write_text(json.dumps({"mcpServers": {server: stdio_test_server()}}))
            run = [sys.executable, "-m", "supervisor", "run", str(config), "--endpoint", endpoints[host]]
            log = (Path(tmp) / f"{host}.log").open("wb")
            env = {**os.environ, "XDG_RUNTIME_DIR": str(Path(tmp) / host)}
            supervisors.append(
                network.popen(host, [*run, "--keys", str(keys)], env=env, stdout=log, stderr=log)
            )
            log.close()
        endpoint, federation = endpoints["server"], ",".join(endpoints.values())
        paths = {  # name -> (where it runs, how, endpoints)
            "stub, same host": ("server", "--measure", endpoint),
            "stub, another host": ("agent", "--measure", endpoint),
            "facade, 1 supervisor": ("agent", "--measure-facade", endpoint),
            "facade, 3 supervisors": ("agent", "--measure-facade", federation),
        }
        try:
            for host in hosts:
                ready = network.cli(
                    "agent", "wait", "--timeout", "60", "--endpoint", endpoints[host], "--keys", str(keys)
                )
                if ready.returncode != 0:
                    raise SystemExit(f"the supervisor on {host} did not get ready: {ready.stderr}")
            figures: dict[tuple[str, int], list[dict[str, float]]] = {}
            for block in range(options.blocks):
                for name in block_order(list(paths), block):
                    place, how, where = paths[name]
                    for concurrency in (1, 16):
                        measured = _block(network, place, where, keys, options.calls, concurrency, how)
                        figures.setdefault((name, concurrency), []).append(measured)
        finally:
            for supervisor in supervisors:
                supervisor.terminate()
            for supervisor in supervisors:
                supervisor.wait(30)

    def median(name: str, concurrency: int, key: str) -> float:
        values = sorted(block[key] for block in figures[(name, concurrency)])
        return values[len(values) // 2]

    rows = [
        [
            name,
            f"{median(name, 1, 'p50'):.3f}",
            f"{median(name, 1, 'p99'):.3f}",
            f"{median(name, 16, 'per_s'):.0f}",
        ]
        for name in paths
    ]
    print("\nA call to mcp_test_echo over tcp+CURVE, medians of the blocks")
    print_table(["path", "p50 ms", "p99 ms", "calls/s at 16"], rows)


if __name__ == "__main__":
    main()
