"""Servers that attack the machine, run sandboxed: real supervisor, worker, bwrap and server processes.

Each attack server (``tests/servers/attack_server.py``) tries one thing: allocate without bound,
fork without bound, open files without bound, burn CPU, connect to a listener on 127.0.0.1, read
and write outside its view, read a variable it was not given. A limit ends the server, its status
and the log name the limit, and it is restarted by policy; an access is refused and the server
runs on. Throughout, another server keeps answering every call.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from supervisor.client.errors import SupervisorError, ToolExecutionError, WorkerCrashedError
from supervisor.config.sandbox_entry import SandboxSpec, describe
from tests.e2e.harness import EVERYTHING, NODE, SupervisorProcess, call_in_thread, poll, stdio_test_server
from workers.sandbox import SandboxUnavailable, find_bwrap, probe

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
ATTACK_SERVER = str(Path(__file__).resolve().parents[1] / "servers" / "attack_server.py")
QUICK_RESTART = {"backoffInitial": 0.2, "maxRestarts": 20}
NOT_GIVEN = "SANDBOX_TEST_NOT_GIVEN"


def _sandbox_works() -> str | None:
    try:
        probe(find_bwrap(), network=False)
    except SandboxUnavailable as exc:
        return str(exc)
    return None


_WHY_NOT = _sandbox_works()
if _WHY_NOT is not None:
    pytestmark = [pytest.mark.e2e, pytest.mark.skip(reason=f"no sandbox can be made here: {_WHY_NOT}")]


def attack_server(sandbox: dict[str, Any] | bool, **entry: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [ATTACK_SERVER], "sandbox": sandbox, **QUICK_RESTART, **entry}


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A directory it may read, one it may write, and one outside its view, each with a file."""
    root = tmp_path_factory.mktemp("places")
    made = {}
    for name in ("readable", "writable", "outside"):
        (root / name).mkdir()
        (root / name / "file.txt").write_text(f"{name} text")
        made[name] = root / name
    return made


@pytest.fixture(scope="module")
def sup(start_module_supervisor: Start, places: dict[str, Path]) -> SupervisorProcess:
    view = {"read": [str(places["readable"])], "write": [str(places["writable"])]}
    return start_module_supervisor(
        {
            "mem": attack_server({"memory": "128M"}),
            "forks": attack_server({"processes": 24}),
            "files": attack_server({"files": 64}),
            "cpu": attack_server({"cpu": 2}),
            "reach": attack_server({"filesystem": view}, env={"GIVEN": "given value"}),
            "other": stdio_test_server(),
        },
        env={NOT_GIVEN: "the supervisor's own"},
    )


def _other_answers(sup: SupervisorProcess, until: threading.Event, failures: list[SupervisorError]) -> int:
    """Call the other server until ``until`` is set; how many calls it answered."""
    answered = 0
    while not until.is_set():
        try:
            sup.client.call_tool("mcp_other_echo", {"text": "still here"}, timeout=10)
            answered += 1
        except SupervisorError as exc:
            failures.append(exc)
    return answered


@pytest.mark.parametrize(
    ("server", "tool", "arguments", "says"),
    [
        ("mem", "allocate", {}, "memory limit 128 MB exceeded"),
        ("forks", "fork", {}, "processes limit 24 reached"),
        ("files", "open_files", {}, "files limit 64 reached"),
        ("cpu", "burn", {"seconds": 60}, "cpu limit 2 s exceeded"),
    ],
)
def test_a_server_past_a_limit_is_stopped_named_and_restarted_while_another_answers(
    sup: SupervisorProcess, server: str, tool: str, arguments: dict[str, Any], says: str
) -> None:
    before = sup.wait_states(**{server: "ready"})[server]
    done, failures = threading.Event(), []
    counted: list[int] = []
    other = threading.Thread(target=lambda: counted.append(_other_answers(sup, done, failures)), daemon=True)
    other.start()
    attack = call_in_thread(sup, f"mcp_{server}_{tool}", arguments, timeout=90)
    thread = attack["thread"]
    assert isinstance(thread, threading.Thread)
    thread.join(90)
    done.set()
    other.join(30)
    assert not thread.is_alive() and not other.is_alive()
    error = attack.get("error")
    assert isinstance(error, WorkerCrashedError) and says in str(error), attack
    after = poll(
        f"{server} to be restarted",
        lambda: (row := sup.status()[server]).state == "ready" and row.restarts > before.restarts and row,
        60,
    )
    assert after.last_error is not None and says in after.last_error
    assert says in sup.log
    assert failures == [] and counted and counted[0] > 0  # the other server answered throughout


def test_a_sandboxed_server_reaches_nothing_outside_its_view(
    sup: SupervisorProcess, places: dict[str, Path]
) -> None:
    before = sup.wait_states(reach="ready")["reach"]

    def call(tool: str, **arguments: Any) -> str:
        return sup.client.call_tool(f"mcp_reach_{tool}", arguments, timeout=20).text

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0)
        port = listener.getsockname()[1]
        assert call("connect", host="127.0.0.1", port=port).startswith("refused: ")
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing came through
    assert call("read", path=str(places["readable"] / "file.txt")) == "readable text"
    assert call("read", path=str(places["outside"] / "file.txt")).startswith("refused: [Errno 2]")
    assert call("read", path=str(Path.home() / ".bashrc")).startswith("refused: ")
    assert call("write", path=str(places["outside"] / "new.txt")).startswith("refused: ")
    assert call("write", path=str(places["readable"] / "new.txt")).startswith("refused: [Errno 30]")
    assert call("write", path="/usr/mcp-supervisor-attack").startswith("refused: [Errno 30]")
    assert call("write", path=str(places["writable"] / "new.txt")) == "written"
    assert (places["writable"] / "new.txt").read_text() == "attack"
    assert not (places["outside"] / "new.txt").exists() and not (places["readable"] / "new.txt").exists()
    assert call("env", name=NOT_GIVEN) == "unset"
    assert call("env", name="GIVEN") == "given value"
    after = sup.status()["reach"]
    assert after.state == "ready" and after.restarts == before.restarts  # refused, not harmed


def test_status_shows_each_servers_confinement(sup: SupervisorProcess) -> None:
    rows = sup.status()
    assert rows["other"].sandbox is None
    assert rows["mem"].sandbox == describe(SandboxSpec(memory=128 << 20))
    view = "sees the system, its cwd, 1 read, 1 write"
    assert rows["reach"].sandbox == f"sandboxed: no network; {view}; no limits"
    shown = subprocess.run(
        [sys.executable, "-m", "supervisor", "status", "--endpoint", sup.endpoint],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert f"cpu: {describe(SandboxSpec(cpu=2))}" in shown
    assert "other: " not in shown


def test_a_sandbox_that_cannot_be_made_is_a_start_up_error_never_an_unconfined_run(
    start_supervisor: Start, tmp_path: Path
) -> None:
    """Without bwrap on PATH the server does not start, and its status says what to install."""
    marker = tmp_path / "ran"
    script = f"open({str(marker)!r}, 'w').close(); import runpy; runpy.run_path({ATTACK_SERVER!r})"
    entry = {"command": sys.executable, "args": ["-c", script], "sandbox": True, "maxRestarts": 1}
    sup = start_supervisor({"boxed": entry}, env={"PATH": str(tmp_path)}, wait=False)
    row = sup.wait_states(boxed="failed", timeout=60)["boxed"]
    assert row.last_error is not None
    assert "the server's sandbox needs bwrap, which is not on PATH: install bubblewrap" in row.last_error
    assert not marker.exists()
    assert "apt install bubblewrap" in sup.log


def test_the_bundled_config_runs_time_and_git_sandboxed(start_supervisor: Start) -> None:
    """config/mcp.json as ``run`` reads it: both servers sandboxed, git limited to this repository."""
    bundled = Path(__file__).resolve().parents[2] / "config" / "mcp.json"
    text = bundled.read_text().replace("${workspaceFolder}", str(bundled.parent))  # where it is
    sup = start_supervisor(json.loads(text)["mcpServers"])
    rows = sup.status()
    assert rows["time"].sandbox is not None and rows["git"].sandbox is not None
    assert "1 write" in rows["git"].sandbox
    now = sup.client.call_tool("mcp_time_get_current_time", {"timezone": "UTC"}, timeout=30)
    assert '"timezone": "UTC"' in now.text
    repository = str(bundled.parent.parent)
    status = sup.client.call_tool("mcp_git_git_status", {"repo_path": repository}, timeout=30)
    assert "On branch" in status.text or "HEAD detached" in status.text, status.text
    with pytest.raises(ToolExecutionError):  # the repository given is all it may touch
        sup.client.call_tool("mcp_git_git_status", {"repo_path": str(Path.home())}, timeout=30)


def test_a_reference_server_nobody_here_wrote_runs_sandboxed(start_supervisor: Start) -> None:
    """The npm reference server (Node, its packages in a node_modules tree) in a sandbox with limits."""
    limits = {"memory": "512M", "processes": 64, "files": 256}
    sup = start_supervisor(
        {"everything": {"command": str(NODE), "args": [str(EVERYTHING), "stdio"], "sandbox": limits}}
    )
    assert sup.client.call_tool("mcp_everything_echo", {"message": "boxed"}, timeout=30).text == "Echo: boxed"
    assert sup.status()["everything"].sandbox == describe(
        SandboxSpec(memory=512 << 20, processes=64, files=256)
    )
