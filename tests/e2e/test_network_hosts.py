"""Supervisors on three hosts and an agent on a fourth, across real network boundaries on one machine.

Each host is a network namespace with an address of its own on one bridge (``tests/e2e/netns.py``);
each runs a supervisor bound to its own address over tcp with CURVE, and the agent's host runs the
CLI. Calls reach every host's servers; a key the supervisors do not allow is refused across the
boundary; a host whose cable is pulled costs only its own servers, which answer again once it is
back. Skipped, saying why, where namespaces cannot be made.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from supervisor.cli.exit_codes import ExitCode
from tests.e2e.hosts import AGENT, HOSTS, Cluster
from tests.e2e.netns import Network, unavailable

_WHY_NOT = unavailable()
pytestmark = [pytest.mark.e2e] + (
    [pytest.mark.skip(reason=f"no network namespaces here: {_WHY_NOT}")] if _WHY_NOT else []
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Network([*HOSTS, AGENT]) as network:
        made = Cluster(network, tmp_path_factory.mktemp("hosts"))
        try:
            made.wait_ready()
            yield made
        finally:
            made.stop()


def _echo(cluster: Cluster, host: str, text: str, **options: object) -> subprocess.CompletedProcess[str]:
    return cluster.agent("call", f"mcp_{host}_echo", json.dumps({"text": text}), host=host, **options)  # type: ignore[arg-type]


def test_calls_from_the_agents_host_reach_every_hosts_servers(cluster: Cluster) -> None:
    for host in HOSTS:
        done = _echo(cluster, host, f"to {host}")
        assert done.returncode == 0 and done.stdout.strip() == f"to {host}", (host, done.stderr)
        rows = json.loads(cluster.agent("status", "--json", host=host).stdout)["servers"]
        assert [row["server"] for row in rows] == [host] and rows[0]["state"] == "ready"


def test_a_key_the_supervisors_do_not_allow_is_refused_across_the_boundary(cluster: Cluster) -> None:
    for host in HOSTS:
        refused = cluster.agent("status", host=host, keys=cluster.stranger, timeout=90)
        assert refused.returncode == ExitCode.UNREACHABLE, (host, refused.stdout, refused.stderr)
        assert "key" in refused.stderr.lower(), refused.stderr


def test_a_host_cut_off_costs_only_its_own_servers_and_they_answer_once_it_is_back(cluster: Cluster) -> None:
    cluster.network.cut("beta")
    try:
        lost = cluster.agent("status", host="beta", timeout=90)
        assert lost.returncode == ExitCode.UNREACHABLE, (lost.stdout, lost.stderr)
        for host in ("alpha", "gamma"):
            done = _echo(cluster, host, "still here")
            assert done.returncode == 0 and done.stdout.strip() == "still here", (host, done.stderr)
    finally:
        cluster.network.mend("beta")
    back = _echo(cluster, "beta", "back", timeout=90)
    assert back.returncode == 0 and back.stdout.strip() == "back", back.stderr
