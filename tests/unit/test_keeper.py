"""A keeper's operator commands and what it tells its owner, with a fake owner (no supervisor, no worker)."""

from __future__ import annotations

import msgspec
import pytest

from supervisor.config.load import ServerSpec, parse_config
from supervisor.daemon.servers.keeper import Keeper
from supervisor.daemon.servers.spawn import SpawnMode, WorkerProcess
from supervisor.daemon.servers.worker_log import LogRing
from supervisor.protocol import ErrorCode, WorkerState, WorkerTool


class Owner:
    """Records what a keeper tells its owner (its server and the supervisor in one); spawns nothing."""

    worker_endpoint = "ipc:///nowhere"

    @property
    def owner(self) -> Owner:
        return self

    def __init__(self) -> None:
        self.states: list[tuple[str, WorkerState, WorkerState]] = []  # server, previous, state
        self.tools = 3

    async def spawn(self, name: str, mode: SpawnMode) -> WorkerProcess:
        raise AssertionError("these tests start no worker")

    def attach(self, identity: bytes, keeper: Keeper) -> None: ...

    def detach(self, keeper: Keeper, reason: str, code: ErrorCode) -> None: ...

    def state_changed(self, keeper: Keeper, previous: WorkerState) -> None:
        self.states.append((keeper.name, previous, keeper.state))

    def tools_changed(self, keeper: Keeper, tools: list[WorkerTool]) -> int:
        return len(tools)

    def tool_count(self, server: str) -> int:
        return self.tools

    def send_to_worker(self, identity: bytes, payload: bytes) -> bool:
        return False

    async def caught_up(self) -> None: ...

    def own_children(self) -> set[int]:
        return set()

    def log_ring(self, server: str) -> LogRing:
        return LogRing()


def spec(**fields: object) -> ServerSpec:
    config = parse_config(msgspec.json.encode({"mcpServers": {"files": {"command": "true", **fields}}}))
    return config.servers["files"]


@pytest.fixture
def owner() -> Owner:
    return Owner()


def test_a_disabled_server_starts_stopped_saying_why(owner: Owner) -> None:
    keeper = Keeper(spec(disabled=True), owner, parse_config(b'{"mcpServers": {}}').settings)
    assert keeper.state == "stopped"
    assert keeper.status().last_error == "disabled in config"


def test_an_operator_stop_then_start_is_told_to_the_owner_in_order(owner: Owner) -> None:
    keeper = Keeper(spec(), owner, parse_config(b'{"mcpServers": {}}').settings)
    keeper.request_stop()
    assert keeper.request_start()
    assert not keeper.request_start()  # already starting
    assert owner.states == [("files", "starting", "stopped"), ("files", "stopped", "starting")]


def test_restarts_coalesce_until_the_new_worker_is_ready(owner: Owner) -> None:
    keeper = Keeper(spec(), owner, parse_config(b'{"mcpServers": {}}').settings)
    assert keeper.request_restart()
    assert not keeper.request_restart()
    assert keeper.state == "starting"


def test_status_counts_the_tools_its_owner_registered(owner: Owner) -> None:
    keeper = Keeper(spec(), owner, parse_config(b'{"mcpServers": {}}').settings)
    owner.tools = 7
    row = keeper.status()
    assert (row.server, row.tools, row.transport, row.worker_pid) == ("files", 7, "stdio", None)


def test_reloaded_settings_are_the_ones_the_keeper_uses(owner: Owner) -> None:
    keeper = Keeper(spec(), owner, parse_config(b'{"mcpServers": {}}').settings)
    settings = parse_config(b'{"mcpServers": {}, "supervisor": {"heartbeatInterval": 0.25}}').settings
    keeper.use_settings(settings)
    assert keeper.settings.heartbeat_interval == 0.25
