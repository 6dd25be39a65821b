"""A server's workers as the router sees them: replicas, per-client sessions, requests held for a
session that starts, and the config fields that ask for them. A fake owner: no supervisor, no worker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from supervisor.config.load import ServerSpec, parse_config
from supervisor.daemon.servers.crew import new_server
from supervisor.daemon.servers.keeper import Keeper
from supervisor.daemon.servers.pool import Refusal, Server
from supervisor.daemon.servers.replicas import Replicas
from supervisor.daemon.servers.sessions import Sessions
from supervisor.daemon.servers.spawn import SpawnMode, WorkerProcess
from supervisor.daemon.servers.worker_log import LogRing
from supervisor.protocol import ErrorCode, Ready, WorkerState, WorkerTool

TOOLS = [WorkerTool(name="echo", input_schema={"type": "object"})]


class Owner:
    """Records what the servers tell the supervisor."""

    worker_endpoint = "ipc:///nowhere"

    def __init__(self) -> None:
        self.busy: dict[bytes, int] = {}
        self.pending_calls: set[int] = set()
        self.sent: list[tuple[bytes, bytes]] = []
        self.states: list[tuple[str, WorkerState, WorkerState]] = []
        self.dropped: list[str] = []
        self.gone: list[tuple[bytes, str, ErrorCode]] = []

    async def spawn(self, name: str, mode: SpawnMode) -> WorkerProcess:
        raise AssertionError("these tests start no worker")

    def attach(self, identity: bytes, keeper: Keeper) -> None: ...

    def worker_gone(self, identity: bytes, reason: str, code: ErrorCode) -> None:
        self.gone.append((identity, reason, code))

    def drop_tools(self, server: str) -> None:
        self.dropped.append(server)

    def register_tools(self, spec: ServerSpec, tools: list[WorkerTool]) -> int:
        return len(tools)

    def state_changed(self, server: Server, previous: WorkerState) -> None:
        self.states.append((server.name, previous, server.state))

    def tool_count(self, server: str) -> int:
        return 1

    def send_to_worker(self, identity: bytes, payload: bytes) -> bool:
        self.sent.append((identity, payload))
        return True

    async def caught_up(self) -> None: ...

    def own_children(self) -> set[int]:
        return set()

    def log_ring(self, server: str) -> LogRing:
        return LogRing()

    def in_flight(self, worker: bytes) -> int:
        return self.busy.get(worker, 0)

    def pending(self, call: int) -> bool:
        return call in self.pending_calls

    async def idle(self, worker: bytes) -> None: ...


class Tasks:
    """Stands in for a nursery: records what would be started."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def start_soon(self, fn: Callable[..., Any], *args: Any, name: str = "") -> None:
        self.started.append(name)


def spec(**fields: object) -> ServerSpec:
    config = parse_config(msgspec.json.encode({"mcpServers": {"s": {"command": "true", **fields}}}))
    assert not config.problems, config.problems
    return config.servers["s"]


def make(owner: Owner, **fields: object) -> Server:
    server = new_server(spec(**fields), owner, parse_config(b'{"mcpServers": {}}').settings)
    server._nursery = Tasks()  # type: ignore[assignment]
    return server


def up(keeper: Keeper) -> bytes:
    """The keeper's worker has connected and is ready (as the worker link would make it)."""
    keeper.identity = keeper.target
    keeper.ready(Ready(tools=TOOLS))
    return keeper.identity


@pytest.fixture
def owner() -> Owner:
    return Owner()


async def test_replicas_route_to_the_least_busy_ready_one_taking_ties_in_turn(owner: Owner) -> None:
    server = make(owner, replicas=3)
    assert isinstance(server, Replicas)
    assert [keeper.label for keeper in server.members] == ["s#1", "s#2", "s#3"]
    refusal = server.route("anyone")
    assert isinstance(refusal, Refusal) and refusal.code == "UNAVAILABLE"
    one, two, three = (up(keeper) for keeper in server.members)
    assert server.state == "ready"
    owner.busy = {one: 2, two: 0, three: 1}
    assert [server.route("a") for _ in range(3)] == [server.members[1]] * 3
    owner.busy = {}
    assert {server.route("a") for _ in range(3)} == set(server.members)  # ties in turn
    assert server.route("a", avoid=server.members[:2]) is server.members[2]
    assert isinstance(server.route("a", avoid=server.members), Refusal)


async def test_the_tools_go_only_with_the_last_ready_replica(owner: Owner) -> None:
    server = make(owner, replicas=2)
    assert isinstance(server, Replicas)
    first, second = server.members
    up(first)
    up(second)
    first._exited = True  # its process exited (as a keeper marks it before it detaches)
    server.detach(first, "server 's#1': worker was killed by SIGKILL", "WORKER_CRASHED")
    assert owner.dropped == []
    second._exited = True
    server.detach(second, "server 's#2': worker was killed by SIGKILL", "WORKER_CRASHED")
    assert owner.dropped == ["s"]
    assert [code for _, _, code in owner.gone] == ["WORKER_CRASHED", "WORKER_CRASHED"]


async def test_one_replica_is_the_server_itself(owner: Owner) -> None:
    server = make(owner)
    assert isinstance(server, Replicas)
    assert server.members[0].label == "s" and server.status().workers == []
    keeper = server.members[0]
    up(keeper)
    assert server.route("a") is keeper
    assert server.status().state == "ready"


async def test_a_session_starts_per_client_holds_its_requests_and_sends_those_still_pending(
    owner: Owner,
) -> None:
    server = make(owner, scope="client", maxSessions=2)
    assert isinstance(server, Sessions)
    refused = server.route("a")
    assert isinstance(refused, Refusal) and refused.code == "UNAVAILABLE"  # tools not listed yet
    up(server.lister)
    assert server.state == "ready" and server.lister.state == "stopped"  # it listed, and stops
    session = server.route("a")
    assert isinstance(session, Keeper) and session.label == "s@a" and not session.serving
    assert server.route("a") is session
    server.hold(session, 1, b"first")
    server.hold(session, 2, b"cancelled meanwhile")
    owner.pending_calls = {1}
    identity = up(session)
    assert owner.sent == [(identity, b"first")]
    assert server.route("b") is not session
    overloaded = server.route("c")
    assert isinstance(overloaded, Refusal) and overloaded.code == "OVERLOADED"
    assert "has 2 client sessions (maxSessions)" in overloaded.message
    assert [w.client for w in server.status().workers] == ["a", "b"]


async def test_a_session_whose_worker_died_is_replaced_on_the_next_request(owner: Owner) -> None:
    server = make(owner, scope="client")
    assert isinstance(server, Sessions)
    up(server.lister)
    session = server.route("a")
    assert isinstance(session, Keeper)
    up(session)
    session._exited = True
    fresh = server.route("a")
    assert isinstance(fresh, Keeper) and fresh is not session


async def test_requests_held_for_a_session_that_ends_before_it_starts_fail_at_once(owner: Owner) -> None:
    server = make(owner, scope="client")
    assert isinstance(server, Sessions)
    up(server.lister)
    session = server.route("a")
    assert isinstance(session, Keeper)
    server.hold(session, 1, b"call")
    held_for, record = session.target, server.sessions["a"]
    server.request_restart()  # ends the session before its task ran
    await server._run_session(record)
    assert owner.gone == [(held_for, "server 's@a': the session ended before it started", "UNAVAILABLE")]
    assert owner.sent == []


async def test_stop_drops_the_tools_and_ends_every_session(owner: Owner) -> None:
    server = make(owner, scope="client")
    assert isinstance(server, Sessions)
    up(server.lister)
    session = server.route("a")
    assert isinstance(session, Keeper)
    server.request_stop()
    assert server.state == "stopped" and owner.dropped == ["s"]
    assert session.state == "stopped" and server.sessions == {}
    refused = server.route("a")
    assert isinstance(refused, Refusal) and "is stopped" in refused.message
    assert server.request_start() and server.state == "starting"


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"replicas": 0}, "field 'replicas': expected 'int' >= 1"),
        ({"replicas": 65}, "field 'replicas': expected 'int' <= 64"),
        ({"scope": "agent"}, "field 'scope': invalid enum value 'agent'"),
        ({"scope": "client", "replicas": 2}, '"replicas" is for shared servers'),
        ({"idleTimeout": 5}, '"idleTimeout" applies only with "scope": "client"'),
        ({"scope": "client", "maxSessions": 0}, "field 'maxSessions': expected 'int' >= 1"),
        ({"scope": "client", "idleTimeout": -1}, "field 'idleTimeout': expected 'float' > 0"),
        ({"sampling": "always"}, "field 'sampling'"),
        (
            {"command": None, "url": "https://x/mcp", "oauth": True, "replicas": 2},
            'an "oauth" server runs one worker',
        ),
    ],
)
def test_pool_fields_that_make_no_sense_are_named(fields: dict[str, object], problem: str) -> None:
    config = parse_config(msgspec.json.encode({"mcpServers": {"s": {"command": "true", **fields}}}))
    assert len(config.problems) == 1 and problem in config.problems[0].message, config.problems


def test_pool_fields_and_their_defaults() -> None:
    assert (spec().replicas, spec().scope) == (1, "shared")
    client = spec(scope="client")
    assert (client.idle_timeout, client.max_sessions) == (300.0, 16)
    assert spec(sampling="caller").sampling_caller and spec(sampling="caller").sampling is None
