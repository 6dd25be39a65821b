"""One registry over supervisors on three hosts: the facade on the agent's host federates them.

The host (the SDK's ``Client``) starts ``mcp-supervisor mcp`` in the agent's network namespace with
one ``--endpoint`` per host (tcp, CURVE), lists once right after ``initialize`` and sees every host's
tools; a server name two hosts share is the first host's, and the clash is logged by name; calls go to
the host that owns their server. A host whose cable is pulled costs only its own tools (the host hears
``list_changed``, and a call to one of them is ``UNAVAILABLE``); they return when it does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from supervisor.cli.exit_codes import ExitCode
from tests.e2e.facade import HOST_LIFETIME, REPO, Notes
from tests.e2e.harness import poll, stdio_test_server
from tests.e2e.hosts import AGENT, HOSTS, Cluster
from tests.e2e.netns import Network, unavailable

_WHY_NOT = unavailable()
pytestmark = [pytest.mark.e2e] + (
    [pytest.mark.skip(reason=f"no network namespaces here: {_WHY_NOT}")] if _WHY_NOT else []
)

LOSS_WAIT = 60.0  # seconds for a lost host to be noticed (beacons stop), or to be back


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Each host's own server, and a server named ``common`` on alpha and on beta (a clash)."""
    more = {host: {"common": stdio_test_server(HOST_TAG=host)} for host in ("alpha", "beta")}
    with Network([*HOSTS, AGENT]) as network:
        made = Cluster(network, tmp_path_factory.mktemp("federation"), more)
        try:
            made.wait_ready()
            yield made
        finally:
            made.stop()


@asynccontextmanager
async def federated_host(cluster: Cluster, stderr: Path, notes: Notes | None = None) -> AsyncIterator[Client]:
    """A host on the agent's host that starts the facade over every host's supervisor."""
    endpoints = [arg for host in HOSTS for arg in ("--endpoint", cluster.endpoint(host))]
    facade = [sys.executable, "-m", "supervisor", "mcp", *endpoints, "--keys", str(cluster.keys)]
    argv = cluster.network.wrap(AGENT, ["sh", "-c", 'exec "$@" 2>>"$0"', str(stderr), *facade])
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ), cwd=str(REPO))
    handler = notes.handler if notes is not None else None
    with trio.fail_after(HOST_LIFETIME):
        async with Client(params, mode="legacy", message_handler=handler) as client:
            yield client


def _text(result: types.CallToolResult) -> str:
    return "".join(part.text for part in result.content if isinstance(part, types.TextContent))


async def _call(client: Client, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    with trio.fail_after(30):
        return await client.call_tool(name, arguments)


async def _names(client: Client) -> list[str]:
    with trio.fail_after(30):
        return [tool.name for tool in (await client.list_tools()).tools]


async def test_a_host_lists_once_and_sees_every_hosts_tools_and_calls_reach_their_owners(
    cluster: Cluster, tmp_path: Path
) -> None:
    stderr = tmp_path / "facade.log"
    async with federated_host(cluster, stderr) as client:
        names = await _names(client)  # once, right after initialize
        for host in HOSTS:
            assert f"mcp_{host}_echo" in names, names
        assert names.count("mcp_common_env") == 1
        for host in HOSTS:
            result = await _call(client, f"mcp_{host}_echo", {"text": f"to {host}"})
            assert not result.is_error and _text(result) == f"to {host}"
        owner = await _call(client, "mcp_common_env", {"name": "HOST_TAG"})
        assert _text(owner) == "alpha"  # the first endpoint given that has it
        with pytest.raises(MCPError, match="no tool named 'mcp_nowhere_echo'"):
            await _call(client, "mcp_nowhere_echo", {"text": "x"})
    log = stderr.read_text()
    beta = cluster.network.address("beta")
    assert f"server 'common' is on {cluster.network.address('alpha')} and {beta}" in log, log
    assert f"the one on {beta} is left out" in log


async def _lose_and_regain(
    cluster: Cluster, tmp_path: Path, lost: str, lose: Callable[[], None], regain: Callable[[], None]
) -> None:
    """Host ``lost`` goes away (``lose``) while a federating facade serves: only its tools leave (the
    host hears ``list_changed``; a call to one is ``UNAVAILABLE``), the others answer (alpha's
    ``common`` stays); then it is back (``regain``): ``list_changed`` again, and its tool answers."""
    notes = Notes()
    async with federated_host(cluster, tmp_path / "facade.log", notes) as client:
        assert f"mcp_{lost}_echo" in await _names(client)
        heard = notes.tools_changed
        lose()
        try:
            await notes.wait_tools_changed(heard, LOSS_WAIT)
            names = await _names(client)
            assert not any(name.startswith(f"mcp_{lost}_") for name in names), names
            assert "mcp_common_env" in names  # alpha's
            gone = await _call(client, f"mcp_{lost}_echo", {"text": "lost"})
            assert gone.is_error and _text(gone).startswith("UNAVAILABLE"), _text(gone)
            for host in HOSTS:
                if host != lost:
                    result = await _call(client, f"mcp_{host}_echo", {"text": "still here"})
                    assert _text(result) == "still here"
            heard = notes.tools_changed
        finally:
            regain()
        await notes.wait_tools_changed(heard, LOSS_WAIT)
        assert f"mcp_{lost}_echo" in await _names(client)
        with trio.fail_after(LOSS_WAIT):  # a restarted server may still be starting: the call waits for it
            back = await client.call_tool(f"mcp_{lost}_echo", {"text": "back"})
        assert not back.is_error and _text(back) == "back"


async def test_a_host_cut_off_costs_only_its_own_tools_and_they_return_with_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    network = cluster.network
    await _lose_and_regain(
        cluster, tmp_path, "beta", lambda: network.cut("beta"), lambda: network.mend("beta")
    )


async def test_a_host_whose_supervisor_is_killed_costs_only_its_tools_until_it_runs_again(
    cluster: Cluster, tmp_path: Path
) -> None:
    await _lose_and_regain(
        cluster, tmp_path, "gamma", lambda: cluster.kill("gamma"), lambda: cluster.start("gamma")
    )


def test_the_cli_on_the_agents_host_shows_every_hosts_servers_and_names_a_lost_host(cluster: Cluster) -> None:
    """``status`` over the three supervisors (a comma list): each host's servers with the host they run
    on, the clash named; with beta's cable pulled, beta named as unreachable (exit 3) and the others listed;
    ``call`` reaches beta's server again once it is back."""
    every = ["--endpoint", ",".join(cluster.endpoint(host) for host in HOSTS), "--keys", str(cluster.keys)]
    status = cluster.network.cli(AGENT, "status", "--json", *every, timeout=90)
    assert status.returncode == 0, status.stderr
    document = json.loads(status.stdout)
    rows = {(row["server"], row["host"]) for row in document["servers"]}
    address = cluster.network.address
    # every host's servers as they run there: the copy of common left out of the registry is beta's
    assert rows == {(host, address(host)) for host in HOSTS} | {
        ("common", address(h)) for h in ("alpha", "beta")
    }
    clash = {"server": "common", "host": address("alpha"), "left_out": address("beta")}
    assert document["clashes"] == [clash]
    text = cluster.network.cli(AGENT, "status", *every, timeout=90)
    assert text.returncode == 0 and "HOST" in text.stdout and address("gamma") in text.stdout
    cluster.network.cut("beta")
    try:
        lost = cluster.network.cli(AGENT, "status", "--json", *every, timeout=90)
        assert lost.returncode == ExitCode.UNREACHABLE, lost.stderr
        document = json.loads(lost.stdout)
        assert {row["server"] for row in document["servers"]} == {"alpha", "common", "gamma"}
        assert {row["host"] for row in document["servers"]} == {address("alpha"), address("gamma")}
        assert [failure["host"] for failure in document["unreachable"]] == [address("beta")]
    finally:
        cluster.network.mend("beta")
    call = ["call", "mcp_beta_echo", json.dumps({"text": "back"})]
    back = cluster.network.cli(AGENT, *call, *every, timeout=90)
    assert back.returncode == 0 and back.stdout.strip() == "back", back.stderr


def test_the_facade_refuses_to_start_a_supervisor_for_a_federation(cluster: Cluster, tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {}}))
    endpoints = ",".join(cluster.endpoint(host) for host in HOSTS)
    done = cluster.network.cli(AGENT, "mcp", "--endpoint", endpoints, "--config", str(config))
    assert done.returncode == 2 and "--config starts one supervisor" in done.stderr, done.stderr


# A host on another machine than the HTTP facade: lists, then calls each host's echo and common's env.
_HTTP_HOST = """
import json, sys
import trio
from supervisor.cli.exit_codes import ExitCode
from tests.e2e.facade import http_host, text_of

async def main(url, token):
    async with http_host(url, token) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        calls = {}
        for name, arguments in json.loads(sys.argv[3]).items():
            result = await client.call_tool(name, arguments)
            calls[name] = text_of(result)
        print(json.dumps({"names": names, "calls": calls}))

trio.run(main, sys.argv[1], sys.argv[2])
"""


def test_the_http_facade_federates_from_a_file_as_the_kubernetes_deployment_does(
    cluster: Cluster, tmp_path: Path
) -> None:
    """``serve --http --federation FILE --token-file FILE`` on the agent's host (the flags of the
    Deployment in deploy/kubernetes), reached by a host on gamma over the network."""
    federation = tmp_path / "federation.json"
    members = [{"endpoint": cluster.endpoint(host), "name": host} for host in HOSTS]
    federation.write_text(json.dumps({"supervisors": members}))
    tokens = tmp_path / "tokens"
    tokens.write_text("# agents\ns3cret-token\n")
    address = cluster.network.address(AGENT)
    serve = [sys.executable, "-m", "supervisor", "serve", "--http", f"{address}:8080"]
    serve += ["--federation", str(federation), "--keys", str(cluster.keys), "--token-file", str(tokens)]
    with (tmp_path / "facade.log").open("wb") as log:
        facade = cluster.network.popen(AGENT, serve, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        poll("the facade to listen", lambda: "LISTENING" in (tmp_path / "facade.log").read_text(), 30)
        calls = {f"mcp_{host}_echo": {"text": f"to {host}"} for host in HOSTS}
        calls["mcp_common_env"] = {"name": "HOST_TAG"}
        argv = [
            sys.executable,
            "-c",
            _HTTP_HOST,
            f"http://{address}:8080/mcp",
            "s3cret-token",
            json.dumps(calls),
        ]
        done = cluster.network.run("gamma", argv, timeout=120, cwd=REPO, env=dict(os.environ))
        assert done.returncode == 0, (done.stderr, (tmp_path / "facade.log").read_text())
        seen = json.loads(done.stdout)
        assert all(f"mcp_{host}_echo" in seen["names"] for host in HOSTS)
        assert seen["calls"] == {
            **{f"mcp_{host}_echo": f"to {host}" for host in HOSTS},
            "mcp_common_env": "alpha",
        }
    finally:
        facade.terminate()
        facade.wait(30)
