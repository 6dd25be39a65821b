"""Benchmark: what losing one host costs a facade that federates three, across real network boundaries.

    .venv/bin/python -m tests.benchmarks.host_loss [--calls N] [--rounds R]    (as root)

Three hosts (network namespaces, ``tests/e2e/hosts.py``) each run a supervisor over tcp with CURVE; the
SDK's ``Client`` on a fourth starts ``mcp-supervisor mcp`` with the three endpoints. Each round: N
sequential calls to alpha's echo (before); beta's cable is pulled, and the time until the host hears
``list_changed`` is taken, then N calls to alpha's echo (during) and one to beta's (its answer
recorded); the cable is put back, and the time until ``list_changed`` again and until beta's echo
answers is taken. Prints a table of medians over the rounds; no pass/fail. Not a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import mcp_types as types
import trio
from mcp import Client, StdioServerParameters

from tests.benchmarks.common import Samples, machine_info, print_table, stats
from tests.e2e.facade import REPO, Notes
from tests.e2e.hosts import AGENT, HOSTS, Cluster
from tests.e2e.netns import Network, unavailable


async def _calls(client: Client, name: str, count: int) -> float:
    """p50 ms of ``count`` sequential calls to ``name``."""
    samples = Samples()
    for _ in range(count):
        began = time.perf_counter_ns()
        result = await client.call_tool(name, {"text": "x"})
        samples.ns.append(time.perf_counter_ns() - began)
        if result.is_error:
            raise SystemExit(f"{name} failed: {result.content}")
    samples.wall_ns = sum(samples.ns)
    return stats(samples).p50_ms


async def _rounds(cluster: Cluster, calls: int, rounds: int) -> list[dict[str, object]]:
    endpoints = [arg for host in HOSTS for arg in ("--endpoint", cluster.endpoint(host))]
    facade = [sys.executable, "-m", "supervisor", "mcp", *endpoints, "--keys", str(cluster.keys)]
    argv = cluster.network.wrap(AGENT, facade)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ), cwd=str(REPO))
    notes = Notes()
    found: list[dict[str, object]] = []
    async with Client(params, mode="legacy", message_handler=notes.handler) as client:
        await client.list_tools()
        await _calls(client, "mcp_alpha_echo", 50)  # warm-up
        for _ in range(rounds):
            row: dict[str, object] = {"before": await _calls(client, "mcp_alpha_echo", calls)}
            heard, began = notes.tools_changed, time.monotonic()
            cluster.network.cut("beta")
            try:
                await notes.wait_tools_changed(heard, 60)
                row["noticed"] = time.monotonic() - began
                row["during"] = await _calls(client, "mcp_alpha_echo", calls)
                lost = await client.call_tool("mcp_beta_echo", {"text": "x"})
                texts = [part.text for part in lost.content if isinstance(part, types.TextContent)]
                row["lost_call"] = "".join(texts).split(":", 1)[0]
                heard = notes.tools_changed
            finally:
                cluster.network.mend("beta")
            began = time.monotonic()
            await notes.wait_tools_changed(heard, 60)
            row["back"] = time.monotonic() - began
            with trio.fail_after(60):
                await client.call_tool("mcp_beta_echo", {"text": "x"})
            row["answers"] = time.monotonic() - began
            found.append(row)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--calls", type=int, default=500, help="calls to alpha before and during (default 500)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="cuts of beta's cable (default 5)")
    options = parser.parse_args()
    why = unavailable()
    if why is not None:
        raise SystemExit(f"host_loss: no network namespaces here: {why}")
    print(machine_info(calls=options.calls, rounds=options.rounds))
    with tempfile.TemporaryDirectory(prefix="mcps-bench-") as tmp, Network([*HOSTS, AGENT]) as network:
        cluster = Cluster(network, Path(tmp))
        try:
            cluster.wait_ready()
            rows = trio.run(_rounds, cluster, options.calls, options.rounds)
        finally:
            cluster.stop()

    def median(key: str) -> float:
        values = sorted(float(row[key]) for row in rows)  # type: ignore[arg-type]
        return values[len(values) // 2]

    print("\nOne of three hosts cut off from a federating facade, medians of the rounds")
    print_table(
        [
            "alpha p50 before ms",
            "alpha p50 during ms",
            "loss heard s",
            "a lost call",
            "tools back s",
            "answers s",
        ],
        [
            [
                f"{median('before'):.3f}",
                f"{median('during'):.3f}",
                f"{median('noticed'):.1f}",
                str(rows[0]["lost_call"]),
                f"{median('back'):.1f}",
                f"{median('answers'):.1f}",
            ]
        ],
        left=0,
    )


if __name__ == "__main__":
    main()
