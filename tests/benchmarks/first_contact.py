"""Benchmark: a host's first contact with the facade, and its calls through a restart of the server.

    .venv/bin/python -m tests.benchmarks.first_contact [--servers 1,10] [--repeat R] [--calls N]
                                                       [--json PATH]

A host here is the official SDK's ``mcp.Client``, spawning its server with the SDK's default
environment, as MCP hosts do. For each count of servers behind it (server-everything on Node), with
a supervisor already running them (``mcp-supervisor run``, started once per count):

- ``init ms``: spawn of ``mcp-supervisor mcp`` (stdio) to ``initialize`` answered;
- ``list ms``: spawn to the first ``tools/list`` answered, and whether it held every server's tools
  (the host lists once, right after ``initialize``);
- the same for ``direct``: the host spawns one server itself (no supervisor): the floor;
- ``lost``: a host calls ``echo`` every 50 ms for ``--calls`` calls while the server behind the
  facade is killed with ``kill -9`` after a third of them: the calls that failed (each call has
  a 10 s timeout).

Medians over ``--repeat`` spawns, paths interleaved. Not a test: pytest only collects test_*.py.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment

from supervisor.client.blocking import SupervisorClient
from tests.benchmarks.common import (
    EVERYTHING,
    NODE,
    REPO,
    launch_supervisor,
    machine_info,
    print_table,
    stop_supervisor,
    wait_ready,
    write_json,
)

CALL_TIMEOUT = 10.0  # seconds each call of the restart run may take
PACE = 0.05  # seconds between the calls of the restart run


async def first_contact(params: StdioServerParameters, expect: int) -> tuple[float, float, bool]:
    """(spawn to initialize, spawn to first listing) in ms, and whether the listing held ``expect``."""
    started = time.perf_counter()
    with trio.fail_after(120):
        async with Client(params) as host:  # initialize happens on entry
            initialized = time.perf_counter()
            tools = (await host.list_tools()).tools
            listed = time.perf_counter()
    return (initialized - started) * 1e3, (listed - started) * 1e3, len(tools) >= expect


async def calls_through_a_kill(params: StdioServerParameters, endpoint: str, calls: int) -> int:
    """Calls lost while the first server behind the facade is killed with kill -9."""
    lost = 0
    with trio.fail_after(300):
        async with Client(params) as host:
            await host.list_tools()
            for i in range(calls):
                if i == calls // 3:
                    with SupervisorClient(endpoint) as sup:
                        pid = sup.status()[0].server_pid
                    assert pid is not None
                    os.kill(pid, signal.SIGKILL)
                try:
                    with trio.fail_after(CALL_TIMEOUT + 2):
                        result = await host.call_tool("mcp_s0_echo", {"message": f"{i}"})
                    lost += bool(result.is_error)
                except Exception:  # one call that failed is what is counted
                    lost += 1
                await trio.sleep(PACE)  # the host's pace, not a wait for a state
    return lost


def facade_params(endpoint: str) -> StdioServerParameters:
    script = Path(sys.executable).with_name("mcp-supervisor")
    args = ["mcp", "--endpoint", endpoint, "--timeout", str(CALL_TIMEOUT)]
    return StdioServerParameters(command=str(script), args=args, env=get_default_environment(), cwd=str(REPO))


def direct_params() -> StdioServerParameters:
    return StdioServerParameters(
        command=str(NODE), args=[str(EVERYTHING), "stdio"], env=get_default_environment()
    )


async def measure(count: int, repeat: int, calls: int) -> list[dict[str, Any]]:
    servers = {f"s{i}": {"command": str(NODE), "args": [str(EVERYTHING), "stdio"]} for i in range(count)}
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, endpoint = launch_supervisor(servers, Path(tmp))
        try:
            with SupervisorClient(endpoint) as sup:
                wait_ready(sup, proc, count)
                per_server = len(sup.list_tools()) // count
            samples: dict[str, list[tuple[float, float, bool]]] = {"stdio facade": [], "direct": []}
            for _ in range(repeat):
                samples["stdio facade"].append(
                    await first_contact(facade_params(endpoint), per_server * count)
                )
                samples["direct"].append(await first_contact(direct_params(), 0))  # its own, all of them
            lost = await calls_through_a_kill(facade_params(endpoint), endpoint, calls)
        finally:
            stop_supervisor(proc, problems)
    rows = []
    for path, runs in samples.items():
        rows.append(
            {
                "servers": count if path != "direct" else 1,
                "path": path,
                "init_ms": statistics.median(r[0] for r in runs),
                "list_ms": statistics.median(r[1] for r in runs),
                "full_first_listing": f"{sum(r[2] for r in runs)}/{len(runs)}",
                "lost": f"{lost}/{calls}" if path != "direct" else "-",
            }
        )
    if problems:
        print("problems:", *problems, sep="\n  ", file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--servers", default="1,10", help="counts of servers behind the facade")
    parser.add_argument("--repeat", type=int, default=5, help="spawns of each path per count")
    parser.add_argument("--calls", type=int, default=60, help="calls of the restart run, every 50 ms")
    parser.add_argument("--json", type=Path, help="write the rows and the machine here")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for count in (int(c) for c in args.servers.split(",")):
        rows += trio.run(measure, count, args.repeat, args.calls)
    header = ["path", "servers", "init ms", "list ms", "full first listing", "calls lost around kill -9"]
    table = [
        [
            r["path"],
            str(r["servers"]),
            f"{r['init_ms']:.0f}",
            f"{r['list_ms']:.0f}",
            r["full_first_listing"],
            r["lost"],
        ]
        for r in rows
    ]
    print_table(header, table)
    machine = machine_info(servers=args.servers, repeat=args.repeat, calls=args.calls)
    print(f"machine: {machine['nproc']} cores, load {machine['loadavg']}, Python {machine['python']}")
    write_json(args.json, {"machine": machine, "rows": rows})


if __name__ == "__main__":
    main()
