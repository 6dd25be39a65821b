"""The federated client's merging and routing (``supervisor.client.federated``), over fake members."""

from __future__ import annotations

from typing import Any, cast

import pytest

from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import (
    BadRequestError,
    SupervisorError,
    SupervisorUnreachableError,
    UnknownToolError,
)
from supervisor.client.federated import FederatedClient
from supervisor.protocol import ReloadSummary, ServerLog, ServerStatus, ToolInfo, ToolResult
from supervisor.shared.federation import Member

A = Member("ipc:///tmp/a.sock", "a")
B = Member("ipc:///tmp/b.sock", "b")
C = Member("tcp://c:5555", "c", keys="/keys/c")


class FakeSupervisor:
    """A member: its servers (each with its tools), what it was asked, and whether it answers."""

    def __init__(self, member: Member, servers: dict[str, list[str]], *, down: bool = False) -> None:
        self.member, self.servers, self.down = member, servers, down
        self.asked: list[tuple[str, Any]] = []
        self.closed = False

    def _answer(self, what: str, detail: Any = None) -> None:
        if self.down:
            raise SupervisorUnreachableError(f"no answer from the supervisor at {self.member.endpoint}")
        self.asked.append((what, detail))

    def list_tools(self, wait: float = 0.0) -> list[ToolInfo]:
        self._answer("list_tools")
        return [
            ToolInfo(name=f"mcp_{server}_{tool}", server=server, original_name=tool)
            for server, tools in self.servers.items()
            for tool in tools
        ]

    def status(self) -> list[ServerStatus]:
        self._answer("status")
        return [
            ServerStatus(server=server, state="ready", tools=len(t)) for server, t in self.servers.items()
        ]

    def call_tool(self, name: str, arguments: Any = None, timeout: Any = None, **kw: Any) -> ToolResult:
        self._answer("call_tool", name)
        if not any(name == f"mcp_{s}_{t}" for s, tools in self.servers.items() for t in tools):
            raise UnknownToolError(f"unknown tool {name!r}")
        return ToolResult(text=f"{self.member.name}:{name}")

    def restart(self, server: str) -> None:
        self._answer("restart", server)

    def logs(self, server: str, *, after: int = 0, limit: int = 100) -> ServerLog:
        self._answer("logs", server)
        return ServerLog(server=server, last=0, lines=[])

    def reload(self) -> ReloadSummary:
        self._answer("reload")
        if "broken" in self.servers:
            raise BadRequestError("mcp.json: not valid JSON")
        return ReloadSummary(config=f"{self.member.name}.json")

    def shutdown(self, *, grace: float | None = None) -> None:
        self._answer("shutdown", grace)

    def close(self) -> None:
        self.closed = True


def federation(*fakes: FakeSupervisor) -> FederatedClient:
    by_member = {fake.member: fake for fake in fakes}
    return FederatedClient(
        [fake.member for fake in fakes], connect=lambda m: cast(SupervisorClient, by_member[m])
    )


def test_tools_merge_with_the_first_member_owning_a_clashing_server() -> None:
    a = FakeSupervisor(A, {"files": ["read"], "time": ["now"]})
    b = FakeSupervisor(B, {"gpu": ["run"], "time": ["now", "later"]})
    with federation(a, b) as fed:
        listing = fed.list_tools()
    assert [t.name for t in listing.entries] == ["mcp_files_read", "mcp_time_now", "mcp_gpu_run"]
    assert listing.owners == {"files": A, "time": A, "gpu": B}
    [clash] = listing.clashes
    assert (clash.server, clash.owner, clash.left_out) == ("time", A, B)
    warning = str(clash)
    assert "'time'" in warning and "a's is used" in warning and "b's is left out" in warning
    assert B.endpoint in warning and not listing.failures
    assert a.closed and b.closed


def test_an_unreachable_member_contributes_nothing_and_is_named() -> None:
    a = FakeSupervisor(A, {"files": ["read"]})
    b = FakeSupervisor(B, {"gpu": ["run"]}, down=True)
    with federation(a, b) as fed:
        listing = fed.list_tools()
        status = fed.status()
    assert [t.server for t in listing.entries] == ["files"]
    [failure] = listing.failures
    assert failure.member == B and failure.unreachable
    assert str(failure).startswith(f"b ({B.endpoint}): UNREACHABLE")
    assert [(row.member, row.status.server) for row in status.rows] == [(A, "files")]
    assert [f.member for f in status.failures] == [B]


def test_status_keeps_every_members_rows_each_with_its_member() -> None:
    a = FakeSupervisor(A, {"time": ["now"]})
    b = FakeSupervisor(B, {"time": ["now"], "gpu": ["run"]})
    with federation(a, b) as fed:
        status = fed.status()
    assert [(r.member.name, r.status.server) for r in status.rows] == [
        ("a", "time"),
        ("b", "time"),
        ("b", "gpu"),
    ]
    assert status.owners == {"time": A, "gpu": B} and len(status.clashes) == 1


def test_a_call_goes_to_the_owner_of_its_tool_and_the_listing_is_kept() -> None:
    a = FakeSupervisor(A, {"files": ["read"]})
    b = FakeSupervisor(B, {"gpu": ["run"]})
    with federation(a, b) as fed:
        assert fed.call_tool("mcp_gpu_run").text == "b:mcp_gpu_run"
        assert fed.call_tool("mcp_files_read").text == "a:mcp_files_read"
    assert [what for what, _ in a.asked] == ["list_tools", "call_tool"]
    assert [what for what, _ in b.asked] == ["list_tools", "call_tool"]


def test_an_unknown_tool_is_listed_again_once_then_named_with_the_servers() -> None:
    a = FakeSupervisor(A, {"files": ["read"]})
    b = FakeSupervisor(B, {"gpu": ["run"]})
    with federation(a, b) as fed:
        fed.list_tools()
        b.servers["new"] = ["tool"]  # added since the listing: found by listing again
        assert fed.call_tool("mcp_new_tool").text == "b:mcp_new_tool"
        with pytest.raises(UnknownToolError, match=r"'mcp_nobody_x'.*servers: files, gpu, new"):
            fed.call_tool("mcp_nobody_x")
    assert [what for what, _ in a.asked].count("list_tools") == 3


def test_a_tool_that_moved_is_called_on_its_new_owner() -> None:
    a = FakeSupervisor(A, {"files": ["read"]})
    b = FakeSupervisor(B, {"gpu": ["run"]})
    with federation(a, b) as fed:
        fed.list_tools()
        a.servers["gpu"] = b.servers.pop("gpu")
        assert fed.call_tool("mcp_gpu_run").text == "a:mcp_gpu_run"


def test_a_tool_not_found_while_a_member_is_down_is_unreachable_naming_it() -> None:
    a = FakeSupervisor(A, {"files": ["read"]})
    b = FakeSupervisor(B, {"gpu": ["run"]}, down=True)
    with federation(a, b) as fed, pytest.raises(SupervisorUnreachableError, match=r"b \(ipc:///tmp/b.sock\)"):
        fed.call_tool("mcp_gpu_run")


def test_an_owner_that_stops_answering_is_named() -> None:
    a = FakeSupervisor(A, {"files": ["read"]})
    b = FakeSupervisor(B, {"gpu": ["run"]})
    with federation(a, b) as fed:
        fed.list_tools()
        b.down = True
        with pytest.raises(
            SupervisorUnreachableError, match=r"^UNREACHABLE: b \(ipc:///tmp/b.sock\): no answer"
        ):
            fed.call_tool("mcp_gpu_run")


def test_server_requests_go_to_the_servers_owner_only() -> None:
    a = FakeSupervisor(A, {"files": ["read"], "time": ["now"]})
    b = FakeSupervisor(B, {"gpu": ["run"], "time": ["now"]})
    with federation(a, b) as fed:
        assert fed.restart("gpu") == B
        assert fed.restart("time") == A
        assert fed.logs("gpu").server == "gpu"
        with pytest.raises(UnknownToolError, match=r"no server named 'nobody'.*servers: files, gpu, time"):
            fed.restart("nobody")
    assert ("restart", "gpu") in b.asked and ("restart", "time") not in b.asked
    assert ("restart", "time") in a.asked and ("logs", "gpu") in b.asked


def test_reload_and_shutdown_reach_every_member_and_report_each() -> None:
    a = FakeSupervisor(A, {"files": ["read"]})
    b = FakeSupervisor(B, {"broken": []})
    c = FakeSupervisor(C, {}, down=True)
    with federation(a, b, c) as fed:
        reloaded = fed.reload()
        stopped = fed.shutdown(grace=3)
    assert [o.member for o in reloaded] == [A, B, C]
    assert reloaded[0].value is not None and reloaded[0].value.config == "a.json"
    assert reloaded[1].failure is not None and isinstance(reloaded[1].failure.error, BadRequestError)
    assert reloaded[2].failure is not None and reloaded[2].failure.unreachable
    assert [o.failure is None for o in stopped] == [True, True, False]
    assert ("shutdown", 3) in a.asked


def test_a_member_without_keys_of_its_own_uses_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str, Any]] = []

    class Recorder:
        def __init__(self, endpoint: str, *, keys: Any, request_timeout: float, identity: Any) -> None:
            made.append((endpoint, keys))

        def close(self) -> None:
            pass

    monkeypatch.setattr("supervisor.client.federated.SupervisorClient", Recorder)
    FederatedClient([A, C], keys="/keys/default").close()
    assert made == [(A.endpoint, "/keys/default"), (C.endpoint, "/keys/c")]


def test_other_failures_of_a_member_are_its_failure_too() -> None:
    a = FakeSupervisor(A, {"files": ["read"]})
    b = FakeSupervisor(B, {"gpu": ["run"]})

    def fails(wait: float = 0.0) -> list[ToolInfo]:
        raise SupervisorError("odd")

    b.list_tools = fails  # type: ignore[method-assign]
    with federation(a, b) as fed:
        listing = fed.list_tools()
    [failure] = listing.failures
    assert failure.member == B and not failure.unreachable
