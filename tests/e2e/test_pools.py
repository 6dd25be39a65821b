"""Several workers for one server: replicas behind one set of tool names, and a worker per client.

Real supervisor, worker and server processes (``tests/servers/session_server.py``, which keeps a
counter and a working directory per process, and burns CPU on request).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from supervisor.client import AsyncSupervisorClient, SupervisorClient
from supervisor.client.errors import BadRequestError, SupervisorError
from supervisor.client.watch import EventWatch
from supervisor.protocol import CallResult, CallTool, ErrorReply, RegistryChanged, ServerStatus, ToolResult
from tests.e2e.harness import SupervisorProcess, alive, poll, raw_call, raw_client
from tests.e2e.test_cli import cli

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
SESSION_SERVER = Path(__file__).parent.parent / "servers" / "session_server.py"
FAST_RESTARTS = {"maxRestarts": 100, "backoffInitial": 0.05, "backoffMax": 0.2}


def session_server(**fields: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SESSION_SERVER)], **fields}


def client(sup: SupervisorProcess, identity: str | None = None) -> SupervisorClient:
    return SupervisorClient(sup.endpoint, request_timeout=10.0, keys=False, identity=identity)


def workers(sup: SupervisorProcess, server: str) -> dict[str, Any]:
    return {worker.name: worker for worker in sup.status()[server].workers}


def all_ready(sup: SupervisorProcess, server: str) -> ServerStatus:
    """The server's row once every one of its workers is ready (the server is as soon as one is)."""

    def check() -> ServerStatus | None:
        row = sup.status()[server]
        return row if row.workers and all(w.state == "ready" for w in row.workers) else None

    return poll(f"every worker of {server!r} ready", check, 60)  # type: ignore[no-any-return]


def drain(events: EventWatch) -> list[object]:
    """The events received so far (each wait bounded)."""
    seen: list[object] = []
    while (event := events.next(timeout=0.2)) is not None:
        seen.append(event)
    return seen


def pid_of(sup_client: SupervisorClient, tool: str) -> int:
    result = sup_client.call_tool(tool, {}, timeout=30)
    assert isinstance(result.structured_content, dict)
    return int(result.structured_content["pid"])


# ----------------------------------------------------------------------------------- replicas


def test_replicas_share_the_load_and_status_shows_each(start_supervisor: Start) -> None:
    sup = start_supervisor({"cpu": session_server(replicas=2)})
    row = all_ready(sup, "cpu")
    assert (row.state, row.tools, row.scope) == ("ready", 9, "shared")
    assert [(w.name, w.state) for w in row.workers] == [("cpu#1", "ready"), ("cpu#2", "ready")]
    assert len({w.worker_pid for w in row.workers}) == 2
    names = [tool.name for tool in sup.client.list_tools()]
    assert names.count("mcp_cpu_whoami") == 1  # one set of tool names

    # Two slow calls at once go to different replicas: each has one in flight.
    done: list[str] = []
    threads = [
        threading.Thread(
            target=lambda: done.append(sup.client.call_tool("mcp_cpu_sleep", {"seconds": 2}).text)
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    poll(
        "one call in flight on each replica",
        lambda: [w.in_flight for w in sup.status()["cpu"].workers] == [1, 1],
        10,
    )
    for thread in threads:
        thread.join(10)
    assert done == ["slept", "slept"]

    # Calls one after another are taken in turn.
    servers = {w.server_pid for w in row.workers}
    assert {pid_of(sup.client, "mcp_cpu_whoami") for _ in range(4)} == servers

    table = cli("status", endpoint=sup.endpoint)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:2] == ["SERVER", "STATE"] and "IN_FLIGHT" in lines[0]
    assert [line.split()[:2] for line in lines[1:4]] == [
        ["cpu", "ready"],
        ["cpu#1", "ready"],
        ["cpu#2", "ready"],
    ]


def test_a_kill_9_of_one_replica_under_load_fails_only_the_calls_on_it(start_supervisor: Start) -> None:
    sup = start_supervisor({"cpu": session_server(replicas=2, **FAST_RESTARTS)})
    all_ready(sup, "cpu")
    victim = workers(sup, "cpu")["cpu#2"]
    outcomes: list[tuple[str, str]] = []  # (outcome, message)
    killed = trio.Event()

    async def main() -> None:
        async with AsyncSupervisorClient(sup.endpoint, keys=False) as sup_client:

            async def caller() -> None:
                for _ in range(40):
                    try:
                        await sup_client.call_tool("mcp_cpu_sleep", {"seconds": 0.05}, timeout=10)
                        outcomes.append(("ok", ""))
                    except SupervisorError as exc:
                        outcomes.append((exc.code, str(exc)))

            async def killer() -> None:
                await trio.sleep(0.5)
                os.kill(victim.worker_pid, signal.SIGKILL)
                killed.set()

            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    for _ in range(8):
                        nursery.start_soon(caller)
                    nursery.start_soon(killer)

    trio.run(main)
    assert killed.is_set()
    failed = [(code, message) for code, message in outcomes if code != "ok"]
    assert len(outcomes) == 8 * 40
    # Only calls that were on the killed replica fail (at most one per caller: each waits for its
    # answer), each as WORKER_CRASHED naming that replica; every other call has its result.
    assert len(failed) <= 8, failed
    assert all(code == "WORKER_CRASHED" and "'cpu#2'" in message for code, message in failed), failed
    assert sup.status()["cpu"].state == "ready"

    def replica_back() -> dict[str, Any] | None:
        rows = workers(sup, "cpu")
        return rows if rows["cpu#2"].state == "ready" else None

    rows = poll("the killed replica back", replica_back, 30)
    assert rows["cpu#2"].restarts == 1 and rows["cpu#1"].restarts == 0
    assert not alive(victim.server_pid)


def test_a_restart_replaces_replicas_one_by_one_and_the_tools_never_go(start_supervisor: Start) -> None:
    sup = start_supervisor({"cpu": session_server(replicas=2)})
    all_ready(sup, "cpu")
    before = {w.name: w.worker_pid for w in sup.status()["cpu"].workers}
    with client(sup) as caller, sup.client.watch() as events:
        sup.client.restart("cpu")
        calls = 0

        def replaced() -> bool:  # calls go on while the replicas restart; none may fail
            nonlocal calls
            caller.call_tool("mcp_cpu_counter_get", {}, timeout=10)
            calls += 1
            rows = workers(sup, "cpu")
            return all(w.state == "ready" and w.worker_pid != before[w.name] for w in rows.values())

        poll("both replicas replaced", replaced, 60)
        assert calls > 1
        assert sup.status()["cpu"].restarts == 0  # an operator's restart is no failure
        removed = [e for e in drain(events) if isinstance(e, RegistryChanged) and e.removed]
    assert removed == []


# ----------------------------------------------------------------------------- client sessions


def test_two_agents_on_a_client_scoped_server_never_see_each_others_state(
    start_supervisor: Start, tmp_path: Path
) -> None:
    sup = start_supervisor({"shell": session_server(scope="client")})
    row = sup.status()["shell"]
    assert (row.state, row.scope, row.tools, row.workers) == ("ready", "client", 9, [])
    (tmp_path / "a-dir").mkdir()
    with client(sup, "agent-a") as a, client(sup, "agent-b") as b:
        for _ in range(3):
            a.call_tool("mcp_shell_counter_add", {"n": 1})
        b.call_tool("mcp_shell_counter_add", {"n": 10})
        a.call_tool("mcp_shell_cd", {"path": str(tmp_path / "a-dir")})
        assert a.call_tool("mcp_shell_counter_get", {}).structured_content == {"value": 3}
        assert b.call_tool("mcp_shell_counter_get", {}).structured_content == {"value": 10}
        assert a.call_tool("mcp_shell_pwd", {}).text == str(tmp_path / "a-dir")
        assert b.call_tool("mcp_shell_pwd", {}).text != str(tmp_path / "a-dir")
        assert pid_of(a, "mcp_shell_whoami") != pid_of(b, "mcp_shell_whoami")
        sessions = workers(sup, "shell")
        assert set(sessions) == {"shell@agent-a", "shell@agent-b"}
        assert sessions["shell@agent-a"].client == "agent-a"

    # One client object is one identity, in every thread; another object is another.
    with client(sup) as one, client(sup) as other:
        one.call_tool("mcp_shell_counter_add", {"n": 5})
        seen: list[object] = []
        thread = threading.Thread(
            target=lambda: seen.append(one.call_tool("mcp_shell_counter_get", {}).structured_content)
        )
        thread.start()
        thread.join(30)
        assert seen == [{"value": 5}]
        assert other.call_tool("mcp_shell_counter_get", {}).structured_content == {"value": 0}


def test_the_cli_calls_as_the_identity_it_is_given(start_supervisor: Start) -> None:
    sup = start_supervisor({"shell": session_server(scope="client")})
    with client(sup, "agent-a") as a:
        a.call_tool("mcp_shell_counter_add", {"n": 7})
    as_a = cli("call", "mcp_shell_counter_get", "--json", "--identity", "agent-a", endpoint=sup.endpoint)
    assert as_a.returncode == 0, as_a.stderr
    assert json.loads(as_a.stdout)["structured_content"] == {"value": 7}
    anyone = cli("call", "mcp_shell_counter_get", endpoint=sup.endpoint)
    assert anyone.stdout.strip() == "0"
    bad = cli("call", "mcp_shell_counter_get", "--identity", "", endpoint=sup.endpoint)
    assert bad.returncode == 2 and "--identity: identity must be 1 to 128 printable characters" in bad.stderr


def test_an_idle_session_is_reaped_and_the_next_call_starts_a_fresh_one(start_supervisor: Start) -> None:
    sup = start_supervisor({"shell": session_server(scope="client", idleTimeout=1)})
    with client(sup, "agent-a") as a:
        a.call_tool("mcp_shell_counter_add", {"n": 2})
        session = workers(sup, "shell")["shell@agent-a"]
        poll("the idle session reaped", lambda: not sup.status()["shell"].workers, 10)
        poll(
            "its worker and server gone",
            lambda: not alive(session.worker_pid) and not alive(session.server_pid),
            10,
        )
        assert "session of client 'agent-a' idle for 1 s: reaped" in sup.log
        assert a.call_tool("mcp_shell_counter_get", {}).structured_content == {"value": 0}
        assert sup.status()["shell"].state == "ready"


def test_a_call_longer_than_the_idle_timeout_keeps_its_session(start_supervisor: Start) -> None:
    sup = start_supervisor({"shell": session_server(scope="client", idleTimeout=1)})
    with client(sup, "agent-a") as a:
        a.call_tool("mcp_shell_counter_add", {"n": 1})
        assert a.call_tool("mcp_shell_sleep", {"seconds": 2.5}, timeout=10).text == "slept"
        assert a.call_tool("mcp_shell_counter_get", {}).structured_content == {"value": 1}


def test_past_max_sessions_a_new_client_is_overloaded(start_supervisor: Start) -> None:
    sup = start_supervisor({"shell": session_server(scope="client", maxSessions=2)})
    with client(sup, "a") as a, client(sup, "b") as b, client(sup, "c") as c:
        a.call_tool("mcp_shell_whoami", {})
        b.call_tool("mcp_shell_whoami", {})
        with pytest.raises(SupervisorError) as refused:
            c.call_tool("mcp_shell_whoami", {})
        assert refused.value.code == "OVERLOADED"
        assert "has 2 client sessions (maxSessions)" in str(refused.value)
        assert a.call_tool("mcp_shell_whoami", {}).is_error is False  # the others carry on
        assert len(sup.status()["shell"].workers) == 2


def test_a_connection_without_an_identity_is_a_client_of_its_own(start_supervisor: Start) -> None:
    sup = start_supervisor({"shell": session_server(scope="client")})
    with raw_client(sup.endpoint) as one, raw_client(sup.endpoint) as two:
        one.send(raw_call(1, "mcp_shell_counter_add", {"n": 4}, timeout=30))
        assert one.recv(30).id == 1
        two.send(raw_call(1, "mcp_shell_counter_get", {}, timeout=30))
        reply = two.recv(30)
        assert isinstance(reply, CallResult)
        assert msgspec.msgpack.decode(reply.result, type=ToolResult).structured_content == {"value": 0}
        one.send(CallTool(id=2, name="mcp_shell_counter_get", client="x\n" * 3))
        refused = one.recv()
        assert isinstance(refused, ErrorReply) and refused.code == "BAD_REQUEST"
        assert "client identity must be 1 to 128 printable characters" in refused.message
    with pytest.raises(ValueError, match="identity must be 1 to 128 printable characters"):
        SupervisorClient(sup.endpoint, identity="")


def test_a_restart_ends_every_session_and_the_tools_stay(start_supervisor: Start) -> None:
    sup = start_supervisor({"shell": session_server(scope="client")})
    with client(sup, "a") as a, sup.client.watch() as events:
        a.call_tool("mcp_shell_counter_add", {"n": 1})
        sup.client.restart("shell")
        poll("the session ended", lambda: not sup.status()["shell"].workers, 10)
        assert a.call_tool("mcp_shell_counter_get", {}, timeout=30).structured_content == {"value": 0}
        removed = [e for e in drain(events) if isinstance(e, RegistryChanged) and e.removed]
    assert removed == []


def test_stop_and_start_of_a_client_scoped_server(start_supervisor: Start) -> None:
    sup = start_supervisor({"shell": session_server(scope="client")})
    with client(sup, "a") as a:
        a.call_tool("mcp_shell_whoami", {})
        sup.client.stop("shell")
        row = sup.wait_states(shell="stopped")["shell"]
        assert (row.tools, row.workers) == (0, [])
        with pytest.raises(SupervisorError) as unavailable:
            a.call_tool("mcp_shell_whoami", {})
        assert unavailable.value.code == "UNAVAILABLE"
        sup.client.start("shell")
        sup.wait_states(shell="ready")
        assert pid_of(a, "mcp_shell_whoami") > 0


def test_a_reload_changes_the_replica_count(start_supervisor: Start) -> None:
    sup = start_supervisor({"cpu": session_server(replicas=2)})
    sup.config.write_text(sup.config.read_text().replace('"replicas": 2', '"replicas": 3'))
    summary = sup.client.reload()
    assert summary.changed == ["cpu"]

    def three_ready() -> ServerStatus | None:
        row = sup.status()["cpu"]
        return row if [w.state for w in row.workers] == ["ready"] * 3 else None

    rows = poll("three replicas ready", three_ready, 60)
    assert isinstance(rows, ServerStatus)
    with pytest.raises(BadRequestError):
        sup.config.write_text(sup.config.read_text().replace('"replicas": 3', '"replicas": 0'))
        sup.client.reload()
