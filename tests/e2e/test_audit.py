"""The audit trail with a real supervisor, workers and test servers: exactly one line per call through
worker kills and a server crash, rotation under load, a trail that cannot be written, ``auditArguments``,
``principal`` and ``session`` from ``as_client``, and the ``audit`` command against a supervisor and
its files."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import zmq

from supervisor.client import AsyncSupervisorClient
from supervisor.client.errors import SupervisorError
from supervisor.daemon.audit.files import trail_files
from supervisor.protocol import AuditStats, CallTool, ErrorReply, decode_front_reply, encode
from supervisor.security.keys import ClientKeys, keygen, load_public
from tests.e2e.harness import SupervisorProcess, poll, raw_call, raw_client, stdio_test_server
from tests.e2e.web import listening, scrape, value

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
CLI_TIMEOUT = 60  # seconds for one `mcp-supervisor` command
FLUSH_TIMEOUT = 60  # seconds for the supervisor to have written every line


def digest_of(arguments: dict[str, Any]) -> str:
    """As the trail computes it: over the msgpack the client stubs send (``msgspec.msgpack``)."""
    return "sha256:" + hashlib.sha256(msgspec.msgpack.encode(arguments)).hexdigest()


def audit_stats(sup: SupervisorProcess) -> AuditStats:
    stats = sup.client.front_stats().audit
    assert stats is not None
    return stats


def written(sup: SupervisorProcess, lines: int) -> AuditStats:
    """Once ``lines`` lines are written and none waits."""
    return poll(  # type: ignore[no-any-return]
        f"{lines} audit lines written",
        lambda: (stats := audit_stats(sup)).lines == lines and stats.waiting == 0 and stats,
        FLUSH_TIMEOUT,
    )


def records_in(path: Path) -> list[dict[str, Any]]:
    """Every line of the trail's files, oldest first; each must be one JSON object (none split)."""
    found = []
    for file in reversed(trail_files(path)):
        for raw in file.read_bytes().split(b"\n")[:-1]:
            record = json.loads(raw)
            assert isinstance(record, dict), raw
            found.append(record)
    return found


def cli(sup: SupervisorProcess | None, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "supervisor", *args]
    if sup is not None:
        command += ["--endpoint", sup.endpoint]
    return subprocess.run(command, capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False)


# ------------------------------------------------------ one line per call, under faults

CALLS = 10_000
CLIENTS = 4
TASKS = 8  # per client
KILLS_AT = (2_000, 4_500, 7_000)  # calls answered when the test server's worker is SIGKILLed
CRASH_AT = 8_500  # calls answered when the test server is made to crash (its `crash` tool)


async def test_every_call_has_exactly_one_line_with_its_outcome_through_kills_a_crash_and_rotation(
    start_supervisor: Start, tmp_path: Path
) -> None:
    path = tmp_path / "trail" / "calls.jsonl"
    server = stdio_test_server() | {"maxRestarts": 50, "backoffInitial": 0.05, "toolTimeout": 60}
    settings = {"audit": {"path": str(path), "maxBytes": "256K", "keep": 500}}
    sup = start_supervisor({"test": server}, settings=settings)
    calls: list[tuple[str, dict[str, Any]]] = []
    for i in range(CALLS):
        marker = f"marker-{i:05d}-{secrets.token_hex(6)}"
        if i % 10 == 3:
            calls.append(("mcp_test_fail", {"message": marker}))  # a tool's error result
        elif i % 97 == 5:
            calls.append(("mcp_test_nope", {"text": marker}))  # UNKNOWN_TOOL
        else:
            calls.append(("mcp_test_echo", {"text": marker}))
    got: list[str | None] = [None] * CALLS
    answered = 0
    faults: list[trio.Event] = [trio.Event() for _ in (*KILLS_AT, CRASH_AT)]
    crash_outcome: list[str] = []
    next_call = iter(range(CALLS))

    async def outcome(client: AsyncSupervisorClient, name: str, arguments: dict[str, Any]) -> str:
        try:
            result = await client.call_tool(name, arguments, timeout=60, raise_on_error=False)
        except SupervisorError as exc:
            return exc.code
        return "tool_error" if result.is_error else "ok"

    async def caller(client: AsyncSupervisorClient) -> None:
        nonlocal answered
        for i in next_call:
            got[i] = await outcome(client, *calls[i])
            answered += 1
            for at, due in zip((*KILLS_AT, CRASH_AT), faults, strict=True):
                if answered == at:
                    due.set()

    async def ready_worker(client: AsyncSupervisorClient, other_than: int | None) -> int:
        with trio.fail_after(60):
            while True:
                (row,) = await client.status()
                if row.state == "ready" and row.worker_pid not in (None, other_than):
                    assert row.worker_pid is not None
                    return row.worker_pid
                await trio.sleep(0.05)

    async def faulter(client: AsyncSupervisorClient) -> None:
        pid = await ready_worker(client, None)
        for due in faults[:-1]:
            await due.wait()
            os.kill(pid, signal.SIGKILL)
            pid = await ready_worker(client, pid)
        await faults[-1].wait()
        crash_outcome.append(await outcome(client, "mcp_test_crash", {"code": 3}))

    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(AsyncSupervisorClient(sup.endpoint, request_timeout=30))
            for _ in range(CLIENTS)
        ]
        with trio.fail_after(600):
            async with trio.open_nursery() as calling:
                calling.start_soon(faulter, clients[0])
                for client in clients:
                    for _ in range(TASKS):
                        calling.start_soon(caller, client)

    assert None not in got and "WORKER_CRASHED" in got  # some calls were in flight at a kill
    written(sup, CALLS + 1)
    files = trail_files(path)
    assert len(files) > 5 and all(file.stat().st_size <= 256 * 1024 for file in files)  # rotated
    records = records_in(path)  # none split: each line one JSON object
    assert len(records) == CALLS + 1
    by_digest: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_digest.setdefault(record["argDigest"], []).append(record)
    for (name, arguments), outcome_got in zip(calls, got, strict=True):
        (record,) = by_digest[digest_of(arguments)]  # exactly one line per call
        assert (record["tool"], record["outcome"], record["kind"]) == (name, outcome_got, "call")
        assert record["server"] == ("" if name == "mcp_test_nope" else "test")
        assert record["argBytes"] == len(msgspec.msgpack.encode(arguments))
    (crash,) = by_digest[digest_of({"code": 3})]
    assert crash["outcome"] == crash_outcome[0] and crash["tool"] == "mcp_test_crash"
    everything = b"".join(file.read_bytes() for file in files)
    assert b"marker-" not in everything  # no argument or result value, ever
    assert {r["outcome"] for r in records} >= {"ok", "tool_error", "UNKNOWN_TOOL", "WORKER_CRASHED"}


# ------------------------------------------------------------------ a failing trail


def test_a_trail_that_cannot_be_written_is_reported_and_calls_go_on(
    start_supervisor: Start, tmp_path: Path
) -> None:
    directory = tmp_path / "trail"
    settings = {"audit": {"path": str(directory / "a.jsonl")}, "metrics": "127.0.0.1:0"}
    sup = start_supervisor({"test": stdio_test_server()}, settings=settings)
    port = listening(sup)
    for i in range(5):
        assert sup.client.call_tool("mcp_test_echo", {"text": f"before {i}"}).text == f"before {i}"
    written(sup, 5)
    shutil.rmtree(directory)
    directory.write_text("a file where the trail's directory was")
    for i in range(15):  # the calls still work
        assert sup.client.call_tool("mcp_test_echo", {"text": f"during {i}"}).text == f"during {i}"
    poll("a failed write of the trail", lambda: audit_stats(sup).failures >= 1, FLUSH_TIMEOUT)
    status = cli(sup, "status", "--json")
    assert status.returncode == 0, status.stderr
    audit = json.loads(status.stdout)["audit"]
    assert audit["path"] == str(directory / "a.jsonl") and audit["failures"] >= 1
    assert audit["lines"] == 5 and audit["waiting"] == 15 and audit["dropped"] == 0
    table = cli(sup, "status")
    assert f"audit:  {directory / 'a.jsonl'}: 5 lines written" in table.stdout, table.stdout
    poll("the failure in the log", lambda: "audit trail: cannot write to" in sup.log, FLUSH_TIMEOUT)
    assert "Not a directory" in sup.log and "1 writes failed" in sup.log
    series = scrape(port)
    assert value(series, "mcp_supervisor_audit_failures_total") >= 1
    assert value(series, "mcp_supervisor_audit_lines_total") == 5
    assert value(series, "mcp_supervisor_audit_dropped_total") == 0
    directory.unlink()  # the way is clear again: the 15 lines kept are written, in order
    written(sup, 20)
    assert [r["argDigest"] for r in records_in(directory / "a.jsonl")] == [
        digest_of({"text": f"during {i}"}) for i in range(15)
    ]
    poll("the recovery in the log", lambda: "audit trail: writing to" in sup.log, FLUSH_TIMEOUT)


# ------------------------------------------- arguments, principals, and the audit command


@pytest.fixture(scope="module")
def audited(
    start_module_supervisor: Start, tmp_path_factory: pytest.TempPathFactory
) -> tuple[SupervisorProcess, Path]:
    """A supervisor with two test servers, only ``open`` recording its arguments; its trail's path."""
    path = tmp_path_factory.mktemp("trail") / "t.jsonl"
    open_server = stdio_test_server(TEST_SERVER_RESOURCES=1) | {"auditArguments": True}
    servers = {"open": open_server, "closed": stdio_test_server()}
    sup = start_module_supervisor(servers, settings={"audit": {"path": str(path)}})
    sup.client.call_tool("mcp_open_echo", {"text": "open-words-1"})
    sup.client.call_tool("mcp_closed_echo", {"text": "closed-words-2"})
    sup.client.call_tool("mcp_closed_fail", {"message": "closed-words-3"}, raise_on_error=False)
    written(sup, 3)
    return sup, path


def test_only_the_server_that_opts_in_has_its_arguments_recorded(
    audited: tuple[SupervisorProcess, Path],
) -> None:
    _, path = audited
    records = {r["argDigest"]: r for r in records_in(path)}
    opened = records[digest_of({"text": "open-words-1"})]
    assert opened["arguments"] == {"text": "open-words-1"} and list(opened)[-1] == "arguments"
    closed = records[digest_of({"text": "closed-words-2"})]
    assert "arguments" not in closed and closed["outcome"] == "ok" and closed["server"] == "closed"
    assert records[digest_of({"message": "closed-words-3"})]["outcome"] == "tool_error"
    assert b"closed-words" not in path.read_bytes()


async def test_principal_and_session_from_as_client_name_the_caller(
    audited: tuple[SupervisorProcess, Path],
) -> None:
    sup, _ = audited
    async with AsyncSupervisorClient(sup.endpoint) as client:
        view = client.as_client("agent-7", principal="alice@example.com", session="host-42")
        await view.call_tool("mcp_open_echo", {"text": "hello"})
        await view.read_resource("open", "test://doc/1")
        await view.get_prompt("mcp_open_greet", {"name": "Eve"})
        bare = client.as_client("agent-8")
        await bare.call_tool("mcp_closed_echo", {"text": "bare"})
        with trio.fail_after(FLUSH_TIMEOUT):  # bounded: the lines are written by the supervisor's thread
            while len((records := await client.audit(identity="alice@example.com")).records) != 3:  # noqa: ASYNC110
                await trio.sleep(0.05)
        agent = (await client.audit(identity="agent-8")).records
    kinds = [(r["kind"], r["tool"], r["server"], r["session"]) for r in map(json.loads, records.records)]
    assert kinds == [
        ("prompt", "mcp_open_greet", "open", "host-42"),
        ("read", "test://doc/1", "open", "host-42"),
        ("call", "mcp_open_echo", "open", "host-42"),
    ]
    assert json.loads(agent[0])["session"] == "agent-8"  # no session given: the client identity
    with raw_client(sup.endpoint) as raw:  # no client, no principal: the connection's name
        raw.send(raw_call(1, "mcp_closed_echo", {"text": "raw"}))
        assert raw.recv().id == 1
        bad = CallTool(
            id=2, name="mcp_closed_echo", arguments=raw_call(2, "x", {}).arguments, principal="a\nb"
        )
        raw.send(bad)
        refused = raw.recv()
        assert (
            isinstance(refused, ErrorReply)
            and refused.code == "BAD_REQUEST"
            and "principal" in refused.message
        )
    poll(
        "the raw calls' lines",
        lambda: '"a\\nb"' in "".join(sup.client.audit(tool="mcp_closed_echo", limit=1).records),
        FLUSH_TIMEOUT,
    )
    latest = [json.loads(text) for text in sup.client.audit(tool="mcp_closed_echo", limit=2).records]
    assert [(r["identity"], r["session"], r["outcome"]) for r in latest] == [
        ("a\nb", "", "BAD_REQUEST"),
        ("local", "", "ok"),
    ]


def audit_json(sup: SupervisorProcess | None, *args: str) -> list[dict[str, Any]]:
    done = cli(sup, "audit", "--json", *args)
    assert done.returncode == 0, done.stderr
    return [json.loads(text) for text in done.stdout.splitlines()]


def test_the_audit_command_filters_the_supervisors_trail_and_its_files_alike(
    audited: tuple[SupervisorProcess, Path],
) -> None:
    sup, path = audited
    everything = audit_json(sup, "--limit", "10000")
    assert len(everything) >= 3 and everything == records_in(path)[-len(everything) :]  # newest last
    for source in (sup, None):
        file = () if source is not None else ("--file", str(path))
        tools = audit_json(source, *file, "--tool", "mcp_closed_*")
        assert tools and all(r["tool"].startswith("mcp_closed_") for r in tools)
        servers = audit_json(source, *file, "--server", "open")
        assert servers and all(r["server"] == "open" for r in servers)
        identity = everything[0]["identity"]
        assert audit_json(source, *file, "--identity", identity) == [
            r for r in everything if r["identity"] == identity
        ]
        assert audit_json(source, *file, "--limit", "2") == everything[-2:]
        assert audit_json(source, *file, "--since", "1h") == everything
        assert audit_json(source, *file, "--since", "2999-01-01T00:00:00Z") == []
        assert audit_json(source, *file, "--since", everything[-1]["time"]) == [
            r for r in everything if r["time"] >= everything[-1]["time"]
        ]
    table = cli(sup, "audit", "--limit", "2")
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["TIME", "IDENTITY", "KIND", "TOOL", "OUTCOME", "MS"] and len(rows) == 2
    newest = everything[-1]
    assert rows[-1].split()[0] == newest["time"] and f" {newest['tool']} " in rows[-1]  # newest last


def test_the_audit_command_says_what_is_wrong(
    audited: tuple[SupervisorProcess, Path], tmp_path: Path
) -> None:
    sup, _ = audited
    since = cli(sup, "audit", "--since", "yesterday")
    assert since.returncode == 2 and "--since must be an age like 10m" in since.stderr
    missing = cli(None, "audit", "--file", str(tmp_path / "nothing.jsonl"))
    assert missing.returncode == 2 and "no audit trail at" in missing.stderr
    unreadable = tmp_path / "dir.jsonl"
    unreadable.mkdir()
    failed = cli(None, "audit", "--file", str(unreadable))
    assert failed.returncode == 1 and "cannot read the audit trail" in failed.stderr
    gone = subprocess.run(
        [sys.executable, "-m", "supervisor", "audit", "--endpoint", f"ipc://{tmp_path}/nobody.sock"],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    assert gone.returncode == 3, gone.stderr
    limit = cli(sup, "audit", "--limit", "0", "--json")
    assert limit.returncode == 2 and json.loads(limit.stdout)["error"]["code"] == "USAGE"


def test_a_curve_client_that_names_no_identity_is_named_by_its_public_key(
    start_supervisor: Start, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    keygen(keys)
    with socket.socket() as probe:  # a port free a moment ago
        probe.bind(("127.0.0.1", 0))
        endpoint = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    path = tmp_path / "trail.jsonl"
    sup = start_supervisor(
        {"test": stdio_test_server()}, endpoint=endpoint, keys=keys, settings={"audit": {"path": str(path)}}
    )
    ctx = zmq.Context()
    try:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        ClientKeys.load(keys).connect(sock)
        sock.connect(endpoint)
        sock.send(encode(raw_call(1, "mcp_test_echo", {"text": "keyed"})))
        assert sock.poll(30_000), "no reply over CURVE"
        assert decode_front_reply(sock.recv()).id == 1
        sock.close()
    finally:
        ctx.term()
    written(sup, 1)
    (record,) = records_in(path)
    assert record["identity"] == load_public(keys / "client.key").decode()  # its public key, z85
    assert record["session"] == "" and record["outcome"] == "ok"
