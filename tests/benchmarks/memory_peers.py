"""What memory.py measures on each side: a system holding N stdio servers, reached by a host (the SDK's
``mcp.Client``), its tools listed and each server's tool called once, its processes' memory read.

The systems are mcp-supervisor (through its stdio facade, ``mcp-supervisor mcp``) and the peers of
tests/benchmarks/peers.py, which installs them (pinned, a venv each under tests/benchmarks/.peers-venv)
and opens them as a host does: fastmcp's proxy (``create_proxy`` of every server, and one single-server
proxy per server mounted on one FastMCP), mcp-proxy (one streamable HTTP endpoint per server, so N
sessions) and magg. A peer's processes are those under what the host started (mcp-proxy: its HTTP
server); those whose environment carries the marker each server's entry sets are the servers' (a
server's children inherit it), the rest are the peer's own.
"""

from __future__ import annotations

import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from tests.benchmarks.fleet import Kind, Memory, descendants, memory
from tests.benchmarks.peer_install import Peer
from tests.benchmarks.peer_paths import PATHS, Ctx, Host, open_stdio, write_configs, write_scripts
from tests.benchmarks.peer_phases import short
from tests.benchmarks.peer_processes import SERVER_ENV, sweep

PEERS = ("fastmcp", "fastmcp-mount", "mcp-proxy", "magg")  # their keys in peers.PATHS
LABELS = {"ours": "mcp-supervisor", **{p.key: p.label for p in PATHS}}
NOTES = {
    "ours": "mcp-supervisor: supervision = the supervisor, its zygote and one worker per server; the "
    "stdio facade a host spawns to reach it is shown apart (one per host, however many servers)",
    "fastmcp": "fastmcp proxy (create_proxy of every server): with more than one server it keeps no "
    "server running between requests (it starts every server for each listing and each call, and "
    "stops them after), so it holds no servers when read, after the listing or after the calls; "
    "with one server it keeps that one running",
    "fastmcp-mount": "fastmcp mount: one single-server create_proxy per server mounted on one FastMCP; "
    "servers kept running",
    "mcp-proxy": "mcp-proxy: one HTTP server process, one endpoint per server (the host holds N "
    "sessions); servers kept running",
    "magg": "magg serve (stdio), on Python >= 3.12; servers kept running",
}
SUPERVISION = ("supervisor", "worker", "other", "peer")  # roles whose sum is the supervision cost
OPEN_TIMEOUT = 120.0  # seconds for the host to open our facade, list and call (bounded as a whole)

Read = Callable[[], dict[str, list[Memory]]]


@dataclass
class Exercised:
    """What one system held, by role, after the listing and after the calls."""

    listed: dict[str, list[Memory]] = field(default_factory=dict)
    called: dict[str, list[Memory]] = field(default_factory=dict)
    list_s: float = float("nan")  # spawn to the full listing
    calls_made: int = 0
    skipped: str | None = None  # why it has no figures
    detail: dict[str, Any] = field(default_factory=dict)


def server_entries(kind: Kind, names: list[str]) -> dict[str, dict[str, Any]]:
    """mcpServers entries of ``kind``, resolved as a worker resolves them (a peer may not look beside
    this interpreter), each marked in its environment with its name."""
    argv = kind.argv()
    return {name: {"command": argv[0], "args": argv[1:], "env": {SERVER_ENV: name}} for name in names}


def marked(pid: int) -> bool:
    """Whether ``pid``'s environment holds the servers' marker (it is a server or a server's child)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return any(item.startswith(f"{SERVER_ENV}=".encode()) for item in environ.split(b"\0"))


def sort_tree(roots: list[int]) -> dict[str, list[int]]:
    """``roots`` and their descendants, sorted into the servers' processes and the rest (the peer's)."""
    tree = set(roots)
    for root in roots:
        tree |= descendants(root)
    servers = {pid for pid in tree if marked(pid)}
    return {"peer": sorted(tree - servers), "server": sorted(servers)}


def tracebacks(path: Path, upto: int | None) -> int:
    """Tracebacks in the first ``upto`` bytes of a log (all of it for None); a missing log has none."""
    if not path.exists():
        return 0
    return path.read_bytes()[:upto].count(b"Traceback (most recent call last)")


def readings(by_role: dict[str, list[int]]) -> dict[str, list[Memory]]:
    return {role: [m for pid in pids if (m := memory(pid)) is not None] for role, pids in by_role.items()}


async def exercise(
    host: Host, names: list[str], kind: Kind, settle: float, calls: bool, read: Read, out: Exercised
) -> None:
    """List (every server's tool must be there), rest, read; call each server's tool once, rest, read."""
    started = time.perf_counter()
    listing = await host.listing()
    out.detail["listing_s"] = time.perf_counter() - started
    if missing := [name for name in names if kind.tool not in listing.tools.get(name, frozenset())]:
        raise RuntimeError(f"{len(missing)} servers' {kind.tool} not listed, e.g. {missing[0]}")
    await trio.sleep(settle)  # a rest before reading, not a wait for a state
    out.listed = read()
    if not calls:
        return
    assert host.call is not None
    started = time.perf_counter()
    for name in names:
        await host.call(name, kind.tool, kind.arguments)
        out.calls_made += 1
        out.detail["calls_s"] = time.perf_counter() - started
    await trio.sleep(settle)
    out.called = read()


def context(
    servers: dict[str, dict[str, Any]], tmp: Path, peers: dict[str, Peer], endpoint: str = "", sup: int = 0
) -> Ctx:
    """What peers.py's openers take (their files in ``tmp``); ``endpoint`` and ``sup``: a running
    supervisor's endpoint and pid."""
    configs, scripts = write_configs(tmp, servers), write_scripts(tmp)
    return Ctx(servers, tmp, endpoint, sup, peers, secrets.token_urlsafe(8), configs, scripts)


async def through_facade(
    ctx: Ctx, kind: Kind, settle: float, calls: bool, read: Callable[[int], dict[str, list[Memory]]]
) -> Exercised:
    """Our side: the host reaches the running supervisor through the stdio facade; ``read`` is given the
    facade's pid."""
    out = Exercised()
    started = time.perf_counter()
    with trio.fail_after(OPEN_TIMEOUT + len(ctx.names)):
        async with open_stdio(ctx) as host:
            out.list_s = time.perf_counter() - started
            facade = host.roots[0]  # the process the host spawned; then the supervisor
            await exercise(host, ctx.names, kind, settle, calls, lambda: read(facade), out)
    return out


async def measure_peer(key: str, ctx: Ctx, kind: Kind, args: Any, problems: list[str]) -> Exercised:
    """One peer holding ``ctx.servers``, bounded by ``args.peer_budget`` seconds."""
    out = Exercised()
    spec = next(p for p in PATHS if p.key == key)
    if spec.peer is not None and (why := ctx.peers[spec.peer].problem):
        out.skipped = why
        return out
    started = time.perf_counter()
    roots: list[int] = []
    measured: dict[Path, int] = {}  # the size of each log when the last reading was taken
    with trio.move_on_after(args.peer_budget) as budget:
        try:
            async with spec.open(ctx) as host:
                roots = host.roots

                def read() -> dict[str, list[Memory]]:
                    by_role = sort_tree(host.roots)
                    out.detail["pids"] = by_role
                    return readings(by_role)

                out.list_s = time.perf_counter() - started
                await exercise(host, ctx.names, kind, args.settle, args.calls, read, out)
                measured = {path: path.stat().st_size for path in ctx.logs.values() if path.exists()}
        except Exception as exc:
            out.skipped = f"failed: {short(exc)}"
    if budget.cancelled_caught:
        done = "it did not list"
        if out.listed:
            done = f"its listing took {out.detail['listing_s']:.1f} s"
            if made := out.calls_made:
                spent = out.detail["calls_s"]
                done += f", then {made} of {len(ctx.names)} calls {spent:.0f} s ({spent / made:.1f} s a call)"
        out.skipped = f"did not finish within the {args.peer_budget:g} s budget: {done}"
    out.detail["roots"] = roots
    for path in ctx.logs.values():  # up to the end of the measurement, or all if it did not end
        if count := tracebacks(path, measured.get(path)):
            who = f"{LABELS[key]}, {kind.name} x{len(ctx.names)}"
            problems.append(f"{who}: {count} tracebacks in its stderr while measured")
    ctx.logs.clear()
    problems += [f"{LABELS[key]} left running, killed: {p}" for p in sweep()]
    return out


def measure_peers(
    kind: Kind, names: list[str], keys: list[str], peers: dict[str, Peer], args: Any, problems: list[str]
) -> dict[str, Exercised]:
    """Each peer in turn holding N servers of ``kind``."""
    results: dict[str, Exercised] = {}
    with tempfile.TemporaryDirectory(prefix="bench-mem-peers-") as tmpdir:
        ctx = context(server_entries(kind, names), Path(tmpdir), peers)
        for key in keys:
            print(f"... {kind.name} x{len(names)}: {LABELS[key]}", file=sys.stderr, flush=True)
            results[key] = trio.run(measure_peer, key, ctx, kind, args, problems)
            if why := results[key].skipped:
                print(f"    skipped: {why}", file=sys.stderr, flush=True)
    return results


def wanted_peers(keys: list[str]) -> set[str]:
    """The peers (installs) that the paths ``keys`` need."""
    return {p.peer for p in PATHS if p.key in keys and p.peer}
