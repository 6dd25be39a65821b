"""Benchmark: what a gateway file costs a call through the HTTP facade.

    .venv/bin/python -m tests.benchmarks.gateway [--calls N] [--concurrency 1,16] [--blocks B]

One supervisor holding tests/servers/mcp_test_server.py; two `serve --http` facades on it, side by
side in one run, in alternating blocks (AB, then BA):

  tokens   `serve --http` with a bearer token in $MCP_SUPERVISOR_TOKEN (no gateway)
  gateway  `serve --http --gateway FILE`: the token is a client's, with a view (a servers list and a
           tools glob) and limits high enough never to refuse (so every call is admitted, and counted:
           its body is read for its method, its principal's window and in-flight count kept)
  jwt      the same client matched by subject, its access token an RS256 JWT of a real authorization
           server (tests/servers/oauth_server.py --jwt), checked by the facade as a protected resource
           (the signature once, then the verdict kept until the token expires)

The host is the SDK's ``mcp.Client`` over streamable HTTP (2026-07-28 requests: the fast path),
calling ``mcp_t_echo``. Prints p50/p99 and calls/s per path and concurrency, and the gateway's
added p50. Not a test: pytest only collects ``test_*.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the tests package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from supervisor.client import SupervisorClient
from tests.benchmarks.common import (
    REPO,
    Samples,
    block_order,
    launch_supervisor,
    print_table,
    run_block,
    stats,
    stop_process,
    stop_supervisor,
    wait_ready,
)
from tests.e2e.oauth_hosts import AuthServer
from workers.remote import keepalive_http_client

TEST_SERVER = REPO / "tests" / "servers" / "mcp_test_server.py"
LISTEN_TIMEOUT = 30.0


def facade(endpoint: str, tmp: Path, token: str, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    """``serve --http 127.0.0.1:0`` with ``args``; its URL from its LISTENING line (bounded wait)."""
    log = tmp / f"facade-{len(list(tmp.glob('facade-*')))}.log"
    argv = [
        sys.executable,
        "-m",
        "supervisor",
        "serve",
        "--http",
        "127.0.0.1:0",
        "--endpoint",
        endpoint,
        *args,
    ]
    env = {**os.environ, "MCP_SUPERVISOR_TOKEN": token}
    with log.open("wb") as err:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env
        )
    deadline = time.monotonic() + LISTEN_TIMEOUT
    while time.monotonic() < deadline:
        match = re.search(r"^LISTENING (\S+)", log.read_text(errors="replace"), re.MULTILINE)
        if match:
            return proc, match.group(1)
        if proc.poll() is not None:
            raise RuntimeError(f"serve --http exited with {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.05)
    raise RuntimeError("serve --http printed no LISTENING line in time")


async def bench(args: argparse.Namespace, urls: dict[str, str], tokens: dict[str, str]) -> list[list[str]]:
    rows: list[list[str]] = []
    async with AsyncExitStack() as stack:
        calls = {}
        for name, url in urls.items():
            http = await stack.enter_async_context(
                keepalive_http_client({"Authorization": f"Bearer {tokens[name]}"})
            )
            client = await stack.enter_async_context(Client(streamable_http_client(url, http_client=http)))
            result = await client.call_tool("mcp_t_echo", {"text": "hi"})
            assert not result.is_error, result

            async def call(client: Client = client) -> None:
                result = await client.call_tool("mcp_t_echo", {"text": "hi"})
                if result.is_error:
                    raise RuntimeError(f"call failed: {result}")

            calls[name] = call
        for concurrency in args.concurrency:
            samples = {name: Samples() for name in urls}
            for name in urls:  # warm-up, not counted
                await run_block(calls[name], args.warmup, concurrency, Samples())
            for block in range(args.blocks):
                for name in block_order(list(urls), block):
                    await run_block(calls[name], args.calls, concurrency, samples[name])
            base = stats(samples["tokens"])
            for name in urls:
                s = stats(samples[name])
                added = "" if name == "tokens" else f"{(s.p50_ms - base.p50_ms) * 1000:+.0f} us"
                rows.append(
                    [
                        name,
                        str(concurrency),
                        f"{s.p50_ms:.3f}",
                        f"{s.p99_ms:.3f}",
                        f"{s.calls_per_s:.0f}",
                        added,
                    ]
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per path per block (2000)")
    parser.add_argument("--warmup", type=int, default=200, help="calls per path before timing (200)")
    parser.add_argument("--blocks", type=int, default=4, help="alternating blocks (4)")
    parser.add_argument(
        "--concurrency", type=lambda t: [int(x) for x in t.split(",")], default=[1, 16], help="callers (1,16)"
    )
    args = parser.parse_args()
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mcps-gw.") as where:
        tmp = Path(where)
        test_server = {"command": sys.executable, "args": [str(TEST_SERVER)]}
        proc, endpoint = launch_supervisor({"t": test_server, "u": test_server}, tmp)
        facades: list[subprocess.Popen[bytes]] = []
        issuer: AuthServer | None = None
        try:
            with SupervisorClient(endpoint) as sup:
                wait_ready(sup, proc, 2)
            tokens = {"tokens": secrets.token_urlsafe(24), "gateway": secrets.token_urlsafe(24)}
            gateway = tmp / "gateway.json"
            client = {
                "name": "bench",
                "token": tokens["gateway"],
                "servers": ["t"],
                "tools": ["mcp_t_*"],
                "limits": {"callsPerMinute": 1_000_000, "concurrent": 10_000},
            }
            gateway.write_text(json.dumps({"clients": [client]}))
            plain, plain_url = facade(endpoint, tmp, tokens["tokens"])
            facades.append(plain)
            gated, gated_url = facade(endpoint, tmp, tokens["tokens"], "--gateway", str(gateway))
            facades.append(gated)
            issuer = AuthServer(tmp, "--jwt", "--any-resource")
            oauth = tmp / "oauth.json"
            subject = {**client, "subject": "bench"}
            del subject["token"]
            oauth.write_text(json.dumps({"oauth": {"issuer": issuer.base}, "clients": [subject]}))
            verified, verified_url = facade(endpoint, tmp, tokens["tokens"], "--gateway", str(oauth))
            facades.append(verified)
            tokens["jwt"] = issuer.mint(aud=verified_url, sub="bench", expires_in=3600)
            urls = {"tokens": plain_url, "gateway": gated_url, "jwt": verified_url}
            rows = trio.run(bench, args, urls, tokens)
        finally:
            for process in facades:
                stop_process(process)
            if issuer is not None:
                issuer.stop()
            stop_supervisor(proc, problems)
    print(f"{args.calls} calls x {args.blocks} blocks per path, alternating; SDK Client over streamable HTTP")
    print_table(["path", "callers", "p50 ms", "p99 ms", "calls/s", "added p50"], rows)
    for problem in problems:
        print("problem:", problem)


if __name__ == "__main__":
    main()
