"""The mcp-supervisor command given several supervisors: real supervisors, each with its own servers
and one server name on both, reached with repeated --endpoint, a comma list and --federation FILE."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.harness import SupervisorProcess, poll, stdio_test_server, worker_pids

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
CLI_TIMEOUT = 60  # seconds for one CLI command


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "supervisor", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False)


def servers(own: str) -> dict[str, object]:
    """A supervisor's servers: one of its own and ``common``, which the other has too."""
    return {
        own: stdio_test_server(),
        "common": stdio_test_server(TEST_SERVER_STATE_DIR="{state}"),
    }


@pytest.fixture(scope="module")
def pair(start_module_supervisor: Start) -> tuple[SupervisorProcess, SupervisorProcess]:
    return start_module_supervisor(servers("alpha")), start_module_supervisor(servers("beta"))


def federation_file(directory: Path, east: SupervisorProcess, west: SupervisorProcess) -> str:
    path = directory / "federation.json"
    entries = [{"endpoint": east.endpoint, "name": "east"}, {"endpoint": west.endpoint, "name": "west"}]
    path.write_text(json.dumps({"supervisors": entries}))
    return str(path)


def test_tools_are_merged_and_the_clash_is_named(pair: tuple[SupervisorProcess, SupervisorProcess]) -> None:
    east, west = pair
    done = cli("tools", "--endpoint", east.endpoint, "--endpoint", west.endpoint)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split() == ["TOOL", "SERVER", "HOST", "DESCRIPTION"]
    assert "mcp_alpha_echo" in done.stdout and "mcp_beta_echo" in done.stdout
    assert done.stdout.count("mcp_common_echo") == 1
    assert "'common'" in done.stderr and "left out" in done.stderr and west.endpoint in done.stderr
    as_json = cli("tools", "--json", "--endpoint", f"{east.endpoint},{west.endpoint}")
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    hosts = {tool["server"]: tool["host"] for tool in document["tools"]}
    assert hosts == {"alpha": east.endpoint, "common": east.endpoint, "beta": west.endpoint}
    assert document["clashes"] == [{"server": "common", "host": east.endpoint, "left_out": west.endpoint}]
    assert document["unreachable"] == []


def test_a_call_reaches_the_supervisor_whose_server_has_the_tool(
    pair: tuple[SupervisorProcess, SupervisorProcess],
) -> None:
    east, west = pair
    endpoints = f"{east.endpoint},{west.endpoint}"
    for server in ("alpha", "beta"):
        done = cli("call", f"mcp_{server}_echo", '{"text": "hi ' + server + '"}', "--endpoint", endpoints)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"hi {server}"
    slow = cli("call", "mcp_common_slow", '{"seconds": 0, "tag": "fed"}', "--endpoint", endpoints)
    assert slow.returncode == 0, slow.stderr
    assert (east.state_dir / "fed.started").exists() and not (west.state_dir / "fed.started").exists()
    unknown = cli("call", "mcp_nobody_x", "--endpoint", endpoints)
    assert unknown.returncode == 5 and "alpha, beta, common" in unknown.stderr


def test_status_has_a_host_per_row(pair: tuple[SupervisorProcess, SupervisorProcess], tmp_path: Path) -> None:
    file = federation_file(tmp_path, *pair)
    done = cli("status", "--federation", file)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["HOST", "SERVER", "STATE"]
    rows = {tuple(line.split()[:3]) for line in lines[1:5]}
    assert rows == {
        ("east", "alpha", "ready"),
        ("east", "common", "ready"),
        ("west", "beta", "ready"),
        ("west", "common", "ready"),
    }
    assert "east: events:" in done.stdout and "west: front:" in done.stdout
    as_json = json.loads(cli("status", "--json", "--federation", file).stdout)
    assert sorted((row["host"], row["server"]) for row in as_json["servers"]) == [
        ("east", "alpha"),
        ("east", "common"),
        ("west", "beta"),
        ("west", "common"),
    ]
    assert as_json["unreachable"] == [] and as_json["clashes"][0]["server"] == "common"


def test_restart_restarts_only_that_supervisors_server(
    pair: tuple[SupervisorProcess, SupervisorProcess], tmp_path: Path
) -> None:
    east, west = pair
    file = federation_file(tmp_path, east, west)
    before_east, before_west = worker_pids(east), worker_pids(west)
    done = cli("restart", "beta", "--federation", file)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "restart beta on west: done"
    poll("beta restarted", lambda: worker_pids(west)["beta"] != before_west["beta"], 30)
    west.wait_states()
    assert worker_pids(east) == before_east
    assert worker_pids(west)["common"] == before_west["common"]
    common = cli("restart", "common", "--json", "--federation", file)
    assert json.loads(common.stdout)["host"] == "east"
    poll("east's common restarted", lambda: worker_pids(east)["common"] != before_east["common"], 30)
    east.wait_states()
    assert worker_pids(west)["common"] == before_west["common"]
    logs = cli("logs", "beta", "--federation", file)
    assert logs.returncode == 0, logs.stderr
    nobody = cli("restart", "nobody", "--federation", file)
    assert nobody.returncode == 5 and "no server named 'nobody'" in nobody.stderr


def test_reload_and_wait_reach_every_supervisor(
    pair: tuple[SupervisorProcess, SupervisorProcess], tmp_path: Path
) -> None:
    east, west = pair
    file = federation_file(tmp_path, east, west)
    done = cli("reload", "--federation", file)
    assert done.returncode == 0, done.stderr
    assert f"east: reloaded {east.config}" in done.stdout
    assert f"west: reloaded {west.config}" in done.stdout
    as_json = json.loads(cli("reload", "--json", "--federation", file).stdout)
    assert [(entry["host"], entry["config"]) for entry in as_json] == [
        ("east", str(east.config)),
        ("west", str(west.config)),
    ]
    waited = cli("wait", "--timeout", "30", "--federation", file)
    assert waited.returncode == 0, waited.stderr
    assert "all 4 servers ready on 2 supervisors" in waited.stdout


def test_a_stopped_supervisor_is_named_while_the_others_rows_print(start_supervisor: Start) -> None:
    east = start_supervisor({"alpha": stdio_test_server()})
    west = start_supervisor({"beta": stdio_test_server()})
    west.stop()
    endpoints = ["--endpoint", east.endpoint, "--endpoint", west.endpoint]
    done = cli("status", *endpoints)
    assert done.returncode == 3, done.stderr
    assert "alpha" in done.stdout and "beta" not in done.stdout
    assert west.endpoint in done.stderr and "UNREACHABLE" in done.stderr
    as_json = cli("status", "--json", *endpoints)
    assert as_json.returncode == 3
    document = json.loads(as_json.stdout)
    assert [row["server"] for row in document["servers"]] == ["alpha"]
    assert [entry["endpoint"] for entry in document["unreachable"]] == [west.endpoint]
    call = cli("call", "mcp_beta_echo", '{"text": "x"}', *endpoints)
    assert call.returncode == 3 and west.endpoint in call.stderr
    reload = cli("reload", *endpoints)
    assert reload.returncode == 3 and "reloaded" in reload.stdout and west.endpoint in reload.stderr


def test_shutdown_stops_every_supervisor(start_supervisor: Start) -> None:
    east = start_supervisor({"alpha": stdio_test_server()})
    west = start_supervisor({"beta": stdio_test_server()})
    done = cli("shutdown", "--endpoint", f"{east.endpoint},{west.endpoint}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("has stopped") == 2
    assert east.process.wait(20) == 0 and west.process.wait(20) == 0


def test_commands_that_talk_to_one_supervisor_say_so(
    pair: tuple[SupervisorProcess, SupervisorProcess],
) -> None:
    east, west = pair
    done = cli("events", "--endpoint", f"{east.endpoint},{west.endpoint}")
    assert done.returncode == 2 and "events talks to one supervisor" in done.stderr


def test_resources_and_prompts_of_several_supervisors_are_listed_together_and_read_from_their_owner(
    start_supervisor: Start,
) -> None:
    east = start_supervisor({"docs": stdio_test_server(TEST_SERVER_RESOURCES=1)})
    west = start_supervisor({"notes": stdio_test_server(TEST_SERVER_RESOURCES=1)})
    endpoints = ("--endpoint", f"{east.endpoint},{west.endpoint}")
    listed = cli("resources", "--json", *endpoints)
    assert listed.returncode == 0, listed.stderr
    document = json.loads(listed.stdout)
    assert {(r["server"], r["uri"]) for r in document["resources"]} >= {
        ("docs", "test://doc/1"),
        ("notes", "test://doc/1"),
    }
    assert document["clashes"] == [] and document["unreachable"] == []
    templates = cli("resource-templates", *endpoints)
    assert templates.returncode == 0 and "docs" in templates.stdout and "notes" in templates.stdout
    read = cli("read", "notes", "test://doc/2", *endpoints)
    assert read.returncode == 0 and read.stdout.strip() == "document 2", read.stderr
    prompts = cli("prompts", *endpoints)
    assert prompts.returncode == 0, prompts.stderr
    assert "mcp_docs_greet" in prompts.stdout and "mcp_notes_greet" in prompts.stdout
    greeted = cli("prompt", "mcp_notes_greet", '{"name": "west"}', *endpoints)
    assert greeted.returncode == 0 and "Hello, west!" in greeted.stdout, greeted.stderr
    west.stop()
    partial = cli("prompts", *endpoints)
    assert partial.returncode == 3 and "mcp_docs_greet" in partial.stdout
    assert west.endpoint in partial.stderr
