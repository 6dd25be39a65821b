"""Benchmark: what observability costs a routed tool call: calls/s, p50 and p99 at 16 concurrent callers
against a fast tool, with the metrics listener off and on, side by side in one run.

    .venv/bin/python -m tests.benchmarks.observability [--modes off,metrics] [--server everything|python]
        [--callers C] [--calls N] [--rounds R] [--warmup W] [--json PATH]

Each configuration (--modes, the first is the baseline) runs in its own `mcp-supervisor run` with its
own server process of the same kind, all started before the measuring and left running:

  off      no HTTP listener (no call meter in the call table); the audit trail on, as by default
  noaudit  as off, with "audit": false: no line per call
  audit    as off (the trail on, written under the mode's own directory): against noaudit, what the
           trail costs a call
  metrics  "metrics": "127.0.0.1:0": every tool call counted and timed; /metrics is scraped after each
           of its rounds, and its ok counter must have grown by exactly the round's calls
  page     as metrics, with a status page's event stream (/events) open for the whole run: a stats
           event every second, computed from every server's sliding window
  tracing  "tracing": true with OTEL_TRACES_EXPORTER=none: a span per call in the supervisor and one in
           the worker, the context passed on to the server, nothing exported (the spans' cost alone)
  sampled  as tracing, with OTEL_TRACES_SAMPLER=parentbased_traceidratio and OTEL_TRACES_SAMPLER_ARG=0.01:
           1 % of new traces recorded; the others make no span, and only their context travels
  both     metrics and tracing together
  unmerged "memoryMerge": false: workers keep their memory out of the kernel's same-page merging;
           with KSM running, "off" against it is what merged pages cost a call

More configurations are one more entry in MODES: the config's "supervisor" settings,
and the environment the supervisor runs with.

Servers (--server, default everything), both stdio:
  everything  the npm reference server server-everything (Node), tool echo {"message": "hi"}
  python      tests/servers/mcp_test_server.py (the Python SDK), tool echo {"text": "hi"}

--rounds rounds; in each, every configuration makes --calls calls through one AsyncSupervisorClient
shared by --callers trio tasks (each timing its own calls back to back). The configurations take
turns in an order that rotates every two rounds and is reversed every other round, so that each
comes first, last and in between as often as the others, after each of them: drift on a shared
machine hits them alike. Before the rounds, --warmup unmeasured calls per configuration. Columns:

  mode            the configuration
  calls           measured calls over every round
  calls/s         a round's calls over the time it took: the median over rounds (min-max after it)
  p50 / p99 ms    latency of one call as its caller saw it, over every round's calls
  sup us/call     CPU time of the supervisor process per call (from /proc), over the rounds
  vs first        calls/s over the first mode's: the ratio of the medians, and the median of the
                  per-round ratios (each round measures every mode); the targets: >= 0.95 for
                  metrics and page, >= 0.90 for sampled, >= 0.75 for tracing

Then the meter's own cost, measured in this process (no noise from other processes): the time one
call's ``CallMeter.answered`` takes (the hot path's whole addition, but for one attribute check and
store in the call table), and that in % of the off mode's supervisor CPU per call.

Writes the figures, every round's, and the machine's description to --json. The supervisors are
stopped with SIGINT (bounded, then killed) on any exit. Not a test: pytest only collects test_*.py.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio
from prometheus_client.parser import text_string_to_metric_families

from supervisor.client import AsyncSupervisorClient, SupervisorClient
from supervisor.ops.metrics.meter import CallMeter
from supervisor.protocol import ToolResult, encode
from tests.benchmarks.common import (
    STDIO_SERVERS,
    Samples,
    cpu_seconds,
    launch_supervisor,
    log_problems,
    machine_info,
    print_table,
    run_block,
    stats,
    stop_supervisor,
    wait_ready,
    write_json,
)

LISTEN = re.compile(r"metrics and status page on http://127\.0\.0\.1:(\d+)/")
HTTP_TIMEOUT = 10.0  # seconds for one scrape


@dataclass(frozen=True)
class Mode:
    """One configuration of the supervisor to measure."""

    name: str
    settings: dict[str, Any]  # the config's top-level "supervisor" object
    env: dict[str, str] = field(default_factory=dict)  # added to the supervisor's environment
    scrape: bool = False  # check /metrics after each of its rounds
    page: bool = False  # hold /events open for the whole run


MODES = {
    "off": Mode("off", {}),  # the defaults: no listener, no tracing; the audit trail on
    # The audit trail off, and on (as by default) with its file in the mode's own directory.
    "noaudit": Mode("noaudit", {"audit": False}),
    "audit": Mode("audit", {}),
    "metrics": Mode("metrics", {"metrics": "127.0.0.1:0"}, scrape=True),
    "page": Mode("page", {"metrics": "127.0.0.1:0"}, scrape=True, page=True),
    # Spans recorded and passed on to the worker and the server, exported nowhere: their cost alone.
    "tracing": Mode("tracing", {"tracing": True}, env={"OTEL_TRACES_EXPORTER": "none"}),
    # As tracing, with 1 % of new traces sampled (the SDK's standard sampler settings).
    "sampled": Mode(
        "sampled",
        {"tracing": True},
        env={
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.01",
        },
    ),
    # Workers kept out of the kernel's same-page merging: against "off" (where they offer their memory),
    # with /sys/kernel/mm/ksm/run 1, what a merged page costs a call (a write to it copies it again).
    "unmerged": Mode("unmerged", {"memoryMerge": False}),
    "both": Mode(
        "both", {"metrics": "127.0.0.1:0", "tracing": True}, env={"OTEL_TRACES_EXPORTER": "none"}, scrape=True
    ),
}


@dataclass
class Running:
    mode: Mode
    proc: Any  # subprocess.Popen[bytes]
    endpoint: str
    tmp: Path
    port: int | None = None
    samples: Samples = field(default_factory=Samples)
    rounds: list[float] = field(default_factory=list)  # calls/s of each round
    cpu: float = 0.0  # supervisor CPU seconds over the rounds
    counted: list[int] = field(default_factory=list)  # /metrics ok-counter growth per round


@contextmanager
def supervisors(modes: list[Mode], server: str, tmp: Path, problems: list[str]) -> Iterator[list[Running]]:
    """A running, ready supervisor per mode; all stopped on the way out."""
    target = STDIO_SERVERS[server]
    target.check()
    running: list[Running] = []
    try:
        for mode in modes:
            home = tmp / mode.name
            home.mkdir()
            # Every file a supervisor keeps (its audit trail by default) in the mode's own directory.
            env = {**os.environ, "XDG_STATE_HOME": str(home / "state"), **mode.env}
            extra = {"supervisor": mode.settings} if mode.settings else {}
            proc, endpoint = launch_supervisor({"fast": target.config()}, home, env=env, extra=extra)
            running.append(Running(mode, proc, endpoint, home))
        for run in running:
            with SupervisorClient(run.endpoint, request_timeout=2.0) as client:
                wait_ready(client, run.proc, 1)
            if "metrics" in run.mode.settings:
                match = LISTEN.search((run.tmp / "supervisor.log").read_text(errors="replace"))
                if match is None:
                    raise RuntimeError(f"{run.mode.name}: no 'metrics and status page on' line in the log")
                run.port = int(match.group(1))
        yield running
    finally:
        for run in running:
            stop_supervisor(run.proc, problems)
            problems += [f"{run.mode.name}: {p}" for p in log_problems(run.tmp)]


def ok_calls(port: int) -> int:
    """The ok counter of /metrics for the server ``fast``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "mcp_supervisor_calls_total" and sample.labels == {
                "server": "fast",
                "code": "ok",
            }:
                return int(sample.value)
    raise RuntimeError("no mcp_supervisor_calls_total{server='fast', code='ok'} in /metrics")


async def watch_page(port: int, received: list[int]) -> None:
    """Hold the status page's event stream open, reading (and counting) what comes."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port)
        while data := await stream.receive_some(65536):
            received[0] += data.count(b"event: stats")


def turn_order(running: list[Running], round_: int) -> list[Running]:
    """Rotated every two rounds, reversed every other round."""
    shift = (round_ // 2) % len(running)
    rotated = running[shift:] + running[:shift]
    return rotated if round_ % 2 == 0 else rotated[::-1]


async def bench(args: argparse.Namespace, running: list[Running]) -> dict[str, int]:
    target = STDIO_SERVERS[args.server]
    name = f"mcp_fast_{target.tool}"
    page_events = [0]
    async with trio.open_nursery() as nursery:
        async with AsyncExitStack() as stack:
            clients = {}
            for run in running:
                clients[run.mode.name] = await stack.enter_async_context(AsyncSupervisorClient(run.endpoint))
                if run.mode.page and run.port is not None:
                    nursery.start_soon(watch_page, run.port, page_events)

            def caller(mode: str) -> Any:
                client = clients[mode]

                async def call() -> None:
                    await client.call_tool(name, target.arguments)

                return call

            for run in running:
                await run_block(caller(run.mode.name), args.warmup, args.callers, Samples())
            for round_ in range(args.rounds):
                for run in turn_order(running, round_):
                    before_ok = await trio.to_thread.run_sync(ok_calls, run.port) if run.mode.scrape else 0
                    block = Samples()
                    cpu = cpu_seconds([run.proc.pid])
                    await run_block(caller(run.mode.name), args.calls, args.callers, block)
                    run.cpu += cpu_seconds([run.proc.pid]) - cpu
                    run.samples.ns += block.ns
                    run.samples.wall_ns += block.wall_ns
                    run.rounds.append(len(block.ns) / block.wall_ns * 1e9)
                    if run.mode.scrape:
                        run.counted.append(await trio.to_thread.run_sync(ok_calls, run.port) - before_ok)
                summary = "  ".join(f"{run.mode.name} {run.rounds[-1]:.0f}/s" for run in running)
                print(f"round {round_ + 1}/{args.rounds}: {summary}", file=sys.stderr)
        nursery.cancel_scope.cancel()  # the page's stream
    return {"page_stats_events": page_events[0]}


def report(args: argparse.Namespace, running: list[Running]) -> dict[str, Any]:
    first = running[0]
    header = [
        "mode",
        "calls",
        "calls/s",
        "min-max",
        "p50 ms",
        "p99 ms",
        "sup us/call",
        "vs first",
        "per round",
    ]
    rows, figures = [], {}
    for run in running:
        figure = stats(run.samples)
        median = statistics.median(run.rounds)
        ratio = median / statistics.median(first.rounds)
        per_round = statistics.median(r / f for r, f in zip(run.rounds, first.rounds, strict=True))
        cpu_us = run.cpu / figure.calls * 1e6
        rows.append(
            [
                run.mode.name,
                str(figure.calls),
                f"{median:.0f}",
                f"{min(run.rounds):.0f}-{max(run.rounds):.0f}",
                f"{figure.p50_ms:.3f}",
                f"{figure.p99_ms:.3f}",
                f"{cpu_us:.0f}",
                f"{ratio:.3f}",
                f"{per_round:.3f}",
            ]
        )
        figures[run.mode.name] = {
            "calls": figure.calls,
            "calls_per_s_median": median,
            "calls_per_s_rounds": run.rounds,
            "p50_ms": figure.p50_ms,
            "p99_ms": figure.p99_ms,
            "supervisor_cpu_us_per_call": cpu_us,
            "ratio_of_medians": ratio,
            "median_round_ratio": per_round,
            "metrics_counted_per_round": run.counted,
        }
    print_table(header, rows)
    return figures


def meter_cost(calls: int = 200_000) -> float:
    """Seconds one ``CallMeter.answered`` takes, for a small result, in this process."""
    meter = CallMeter(time.perf_counter)
    result = msgspec.Raw(encode(ToolResult(content=[{"type": "text", "text": "hi"}], text="hi")))
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            meter.answered("fast", started, result)
        best = min(best, (time.perf_counter() - started) / calls)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--modes", default="off,metrics", help=f"comma-separated, of: {', '.join(MODES)}")
    parser.add_argument("--server", choices=sorted(STDIO_SERVERS), default="everything")
    parser.add_argument("--callers", type=int, default=16, help="concurrent callers")
    parser.add_argument("--calls", type=int, default=2000, help="measured calls per round and mode")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=1000, help="unmeasured calls per mode first")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args()
    names = [name.strip() for name in args.modes.split(",") if name.strip()]
    unknown = [name for name in names if name not in MODES]
    if unknown or not names or len(set(names)) != len(names):
        parser.error(f"--modes: a list of distinct names of {', '.join(MODES)} (not {unknown or names})")
    if min(args.callers, args.calls, args.rounds) < 1 or args.warmup < 0:
        parser.error("--callers, --calls and --rounds >= 1, --warmup >= 0 please")
    machine = machine_info(
        server=args.server, callers=args.callers, calls=args.calls, rounds=args.rounds, warmup=args.warmup
    )
    problems: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-obs-") as tmpdir:
        with supervisors([MODES[name] for name in names], args.server, Path(tmpdir), problems) as running:
            extra = trio.run(bench, args, running)
        for key, value in machine.items():
            print(f"{key}: {value}")
        figures = report(args, running)
    cost = meter_cost()
    baseline = figures[running[0].mode.name]["supervisor_cpu_us_per_call"]
    share = cost * 1e6 / baseline * 100
    print(f"meter: {cost * 1e6:.2f} us per call, {share:.1f} % of the supervisor's CPU per call (off)")
    for run in running:
        wrong = [count for count in run.counted if count != args.calls]
        if wrong:
            problems.append(f"{run.mode.name}: /metrics counted {wrong} calls in a round of {args.calls}")
    if any(MODES[name].page for name in names):
        print(f"stats events read from /events: {extra['page_stats_events']}")
    print(f"took {time.monotonic() - started:.0f} s")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    data = {"machine": machine, "figures": figures, "meter_us_per_call": cost * 1e6, **extra}
    write_json(args.json, {**data, "problems": problems})
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
