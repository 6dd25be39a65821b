"""The phases of a peers run: spawn to full listing, timed calls at 1 and 16 callers, and calls lost
around ``kill -9`` of a backend server; a ``Row`` of the table per path."""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import trio

from tests.benchmarks.common import (
    Samples,
    percentile,
)
from tests.benchmarks.peer_paths import (
    CALL_TIMEOUT,
    Ctx,
    Host,
    Listing,
    PathSpec,
)
from tests.benchmarks.peer_processes import (
    backend_pid,
    supervisor_running,
)

MEASURED_CALL_TIMEOUT = 60.0  # seconds a measured call may take (a slow path is measured, not failed)
SPAWN_TIMEOUT = 120.0  # seconds for a path to start and answer its first listing
KILL_PACE = 0.05  # seconds between the calls of the kill run
KILL_BUDGET = 90.0  # seconds a kill run may take; the kill comes at a third of its calls or of this
GIVE_UP_AFTER = 3  # consecutive timed-out calls after which a kill run counts the rest as lost
SLOW_P50_MS = 1000.0  # a path slower than this with one caller is not driven by 16
WARMUP = 10  # unmeasured calls per path before the measured blocks
CALLERS = 16


# ------------------------------------------------------------------ measuring


@dataclass
class Row:
    path: str
    servers: int
    protocol: str | None = None
    spawn_ms: list[float] = field(default_factory=list)
    first_listings: list[int] = field(default_factory=list)  # each spawn's first listing: tools
    first_full: list[bool] = field(default_factory=list)
    tools: int | None = None  # the settled listing: all tools, per server, the path's own
    tools_per_server: int | None = None
    own_tools: int | None = None
    missing_vs_direct: list[str] = field(default_factory=list)  # s0's tools a direct session has
    first_missing: list[str] = field(default_factory=list)  # what first listings lacked, by server
    p50_ms: float | None = None
    p90_ms: float | None = None
    calls_1: int = 0
    calls_per_s_16: float | None = None
    calls_16: int = 0
    lost: int | None = None
    kill_calls: int | None = None
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def cells(self, calls: int) -> list[str]:
        spawn = f"{statistics.median(self.spawn_ms):.0f}" if self.spawn_ms else "-"
        full = f"{sum(self.first_full)}/{len(self.first_full)}" if self.first_full else "-"
        p50 = "-" if self.p50_ms is None else f"{self.p50_ms:.2f}"
        p90 = "-" if self.p90_ms is None else f"{self.p90_ms:.2f}"
        if self.p50_ms is not None and self.calls_1 < calls:
            p50 += f" (n={self.calls_1})"
        rate = "-" if self.calls_per_s_16 is None else f"{self.calls_per_s_16:.0f}"
        if self.calls_per_s_16 is not None and self.calls_16 < calls:
            rate += f" (n={self.calls_16})"
        lost = "-" if self.lost is None else f"{self.lost}/{self.kill_calls}"
        if self.errors and not self.spawn_ms:
            spawn = "failed" if not self.errors[0].startswith("not installable") else "not installable"
        return [self.path, str(self.servers), spawn, full, p50, p90, rate, lost]

    def remarks(self) -> list[str]:
        """What the table cannot say: tools listed, errors, notes."""
        said = []
        if self.tools_per_server is not None:
            own = f" (+{self.own_tools} of its own)" if self.own_tools else ""
            said.append(f"{self.tools_per_server} tools per server{own}")
        if self.first_missing:
            said.append(f"a first listing lacked {'; '.join(self.first_missing)}")
        return said + self.errors + self.notes


HEADER = [
    "path",
    "servers",
    "spawn->full listing ms",
    "first listing full",
    "p50 ms",
    "p90 ms",
    "calls/s @16",
    "lost around kill -9",
    "notes",
]


def rotated(items: list[Any], turn: int) -> list[Any]:
    k = turn % len(items) if items else 0
    return items[k:] + items[:k]


def short(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {str(exc)[:200]}"


async def spawn_once(spec: PathSpec, ctx: Ctx) -> tuple[float, Listing, str]:
    started = time.perf_counter()
    with trio.fail_after(SPAWN_TIMEOUT):
        async with spec.open(ctx) as host:
            listing = await host.listing()
            elapsed = (time.perf_counter() - started) * 1e3
    return elapsed, listing, host.protocol


async def spawn_phase(
    specs: list[PathSpec], ctx: Ctx, rows: dict[str, Row], repeat: int
) -> dict[str, list[Listing]]:
    """Each path spawned ``repeat`` times, the order rotating; the first listings, for checking later."""
    firsts: dict[str, list[Listing]] = {s.key: [] for s in specs}
    for turn in range(repeat):
        for spec in rotated(specs, turn):
            row = rows[spec.key]
            if row.errors:
                continue
            try:
                elapsed, listing, protocol = await spawn_once(spec, ctx)
            except Exception as exc:
                row.errors.append(f"spawn: {short(exc)}")
                continue
            row.spawn_ms.append(elapsed)
            row.protocol = protocol
            firsts[spec.key].append(listing)
            print(f"  spawn {spec.label}: {elapsed:.0f} ms, {listing.total} tools", file=sys.stderr)
    return firsts


async def timed_calls(
    call: Callable[[], Awaitable[None]], n: int, callers: int, budget: float, out: Samples
) -> None:
    """``n`` calls over ``callers`` tasks, each timing its own; none is started after ``budget`` s."""
    deadline = trio.current_time() + budget
    left = n

    async def caller() -> None:
        nonlocal left
        while left > 0 and trio.current_time() < deadline:
            left -= 1
            t0 = time.perf_counter_ns()
            with trio.move_on_after(MEASURED_CALL_TIMEOUT) as scope:
                await call()
            if scope.cancelled_caught:
                raise RuntimeError(f"a call took over {MEASURED_CALL_TIMEOUT:g} s")
            out.ns.append(time.perf_counter_ns() - t0)

    start = time.perf_counter_ns()
    async with trio.open_nursery() as nursery:
        for _ in range(callers):
            nursery.start_soon(caller)
    out.wall_ns += time.perf_counter_ns() - start


@asynccontextmanager
async def held(specs: list[PathSpec], ctx: Ctx, rows: dict[str, Row]) -> AsyncIterator[dict[str, Host]]:
    """Every path open at once, each held by a task of its own (a path that fails is only marked)."""
    hosts: dict[str, Host] = {}
    leave = trio.Event()

    async def hold(spec: PathSpec, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started = False
        try:
            with trio.fail_after(SPAWN_TIMEOUT) as opening:
                async with spec.open(ctx) as host:
                    opening.deadline = float("inf")
                    hosts[spec.key] = host
                    task_status.started()
                    started = True
                    await leave.wait()
        except Exception as exc:
            if leave.is_set():
                rows[spec.key].notes.append(f"closing its session: {short(exc)}")
            else:
                rows[spec.key].errors.append(f"session: {short(exc)}")
            hosts.pop(spec.key, None)
            if not started:
                task_status.started()

    async with trio.open_nursery() as nursery:
        for spec in specs:
            await nursery.start(hold, spec)
        try:
            yield hosts
        finally:
            leave.set()


def settle(row: Row, listing: Listing, direct: Listing | None) -> None:
    per = {len(t) for t in listing.tools.values()}
    row.tools, row.own_tools = listing.total, len(listing.own)
    row.tools_per_server = per.pop() if len(per) == 1 else None
    if row.tools_per_server is None:
        row.errors.append(f"servers listed unevenly: { {s: len(t) for s, t in listing.tools.items()} }")
    elif row.tools_per_server == 0:
        row.errors.append("no backend server's tools listed")
    if direct is not None:
        first = next(iter(direct.tools))
        row.missing_vs_direct = sorted(direct.tools[first] - listing.tools[first])
        if row.missing_vs_direct:
            row.notes.append(f"lists no {', '.join(row.missing_vs_direct)} (a direct session does)")


async def calls_phase(
    specs: list[PathSpec], ctx: Ctx, rows: dict[str, Row], args: argparse.Namespace
) -> dict[str, Listing]:
    """Every path held open: warm-up and settled listing, then p50/p90 with one caller and calls/s
    with CALLERS, in --repeat blocks each, the order rotating."""
    settled: dict[str, Listing] = {}
    lat = {s.key: Samples() for s in specs}
    rate = {s.key: Samples() for s in specs}
    async with held(specs, ctx, rows) as hosts:

        async def guarded(key: str, block: Callable[..., Awaitable[None]], *block_args: Any) -> None:
            if key not in hosts or rows[key].errors:
                return
            try:
                await block(*block_args)
            except Exception as exc:
                rows[key].errors.append(f"calls: {short(exc)}")

        async def warm(key: str) -> None:
            await timed_calls(hosts[key].echo, WARMUP, 1, args.budget, Samples())
            with trio.fail_after(SPAWN_TIMEOUT):
                settled[key] = await hosts[key].listing()

        for key in list(hosts):
            await guarded(key, warm, key)
        for callers, samples in ((1, lat), (CALLERS, rate)):
            for turn in range(args.repeat):
                size = args.calls // args.repeat + (turn < args.calls % args.repeat)
                for spec in rotated(specs, turn):
                    if callers > 1 and (p := lat[spec.key].ns) and percentile(sorted(p), 0.5) > SLOW_P50_MS:
                        continue
                    if spec.key in hosts:
                        call = hosts[spec.key].echo
                        await guarded(
                            spec.key, timed_calls, call, size, callers, args.budget, samples[spec.key]
                        )
            print(f"  {callers} caller(s): done", file=sys.stderr)
    for spec in specs:
        row, ordered = rows[spec.key], sorted(lat[spec.key].ns)
        if ordered:
            row.p50_ms, row.p90_ms, row.calls_1 = (
                percentile(ordered, 0.5),
                percentile(ordered, 0.9),
                len(ordered),
            )
        if rate[spec.key].ns:
            row.calls_16 = len(rate[spec.key].ns)
            row.calls_per_s_16 = row.calls_16 / rate[spec.key].wall_ns * 1e9
        elif ordered and row.p50_ms is not None and row.p50_ms > SLOW_P50_MS:
            row.notes.append(f"not driven by {CALLERS} callers (p50 > {SLOW_P50_MS / 1e3:g} s)")
    return settled


async def kill_run(host: Host, calls: int, row: Row) -> None:
    """Calls every KILL_PACE s; s0's server process is killed with SIGKILL after a third of them."""
    await host.echo()
    row.lost, row.kill_calls = 0, 0
    started, killed, timeouts = trio.current_time(), False, 0
    for i in range(calls):
        elapsed = trio.current_time() - started
        if elapsed > KILL_BUDGET:
            row.notes.append(f"kill run stopped at the {KILL_BUDGET:g} s budget")
            break
        if not killed and (i >= calls // 3 or elapsed > KILL_BUDGET / 3):
            pid = backend_pid(host.roots, "s0")
            if pid is None:
                row.lost = row.kill_calls = None
                row.notes.append("no long-lived s0 process to kill (each call starts the servers)")
                return
            os.kill(pid, signal.SIGKILL)
            killed = True
        row.kill_calls += 1
        failed = False
        with trio.move_on_after(CALL_TIMEOUT) as scope:
            try:
                await host.echo()
            except Exception as exc:  # a call that failed is what is counted
                failed = True
                if not row.lost:
                    row.notes.append(f"first failure: {short(exc)}")
        timeouts = timeouts + 1 if scope.cancelled_caught else 0
        row.lost += failed or scope.cancelled_caught
        if timeouts >= GIVE_UP_AFTER:
            row.lost += calls - 1 - i
            row.kill_calls += calls - 1 - i
            row.notes.append(
                f"no answer after the kill ({GIVE_UP_AFTER} calls timed out: the rest counted lost)"
            )
            break
        await trio.sleep(KILL_PACE)  # the caller's pace, not a wait for a state


async def kill_phase(
    specs: list[PathSpec], ctx: Ctx, rows: dict[str, Row], calls: int, problems: list[str]
) -> None:
    """A fresh session of each path (and for the supervisor's paths, a fresh supervisor)."""
    for spec in specs:
        row = rows[spec.key]
        if row.errors:
            continue
        try:
            with trio.fail_after(KILL_BUDGET + 4 * SPAWN_TIMEOUT):
                if spec.supervised:
                    tmp = Path(tempfile.mkdtemp(dir=ctx.tmp, prefix=f"kill-{spec.key}-"))
                    async with supervisor_running(ctx.servers, tmp, problems, crashes_expected=True) as sup:
                        fresh = replace(ctx, endpoint=sup[0], supervisor_pid=sup[1])
                        async with spec.open(fresh) as host:
                            await kill_run(host, calls, row)
                else:
                    async with spec.open(ctx) as host:
                        await kill_run(host, calls, row)
        except Exception as exc:
            if not row.kill_calls or row.lost is None:
                row.errors.append(f"kill run: {short(exc)}")
            elif row.kill_calls < calls:
                row.notes.append(f"the session ended after the kill ({short(exc)}): the rest counted lost")
                row.lost += calls - row.kill_calls
                row.kill_calls = calls
            else:
                row.notes.append(f"closing after the kill run: {short(exc)}")
        print(f"  kill -9 {spec.label}: lost {row.lost}/{row.kill_calls}", file=sys.stderr)
