"""The async federated client (``AsyncFederatedClient``) over two real supervisors, each with a server
of its own and one server name on both (``common``), on trio and on asyncio: the tools merged with the
clash named, calls routed to each server's owner, status rows per supervisor, a restart on the owner
only, and a supervisor that stops reported by name while the other still answers."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import aclosing

import anyio
import pytest
import trio

from supervisor import (
    AsyncFederatedClient,
    Listing,
    Member,
    StateChanged,
    Status,
    SupervisorUnreachableError,
    ToolInfo,
    UnknownToolError,
)
from tests.e2e.harness import SupervisorProcess, stdio_test_server

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
Pair = tuple[SupervisorProcess, SupervisorProcess]
WAIT = 60  # seconds for any one test's exchanges
REQUEST_TIMEOUT = 3.0  # a stopped supervisor is given up on after this


def servers(own: str, tag: str) -> dict[str, object]:
    """A supervisor's servers: one of its own and ``common``, which the other has too; both say
    ``tag`` when asked for the environment variable TAG."""
    return {own: stdio_test_server(TAG=tag), "common": stdio_test_server(TAG=tag)}


def start_pair(start: Start) -> Pair:
    return start(servers("alpha", "one")), start(servers("beta", "two"))


@pytest.fixture(scope="module")
def pair(start_module_supervisor: Start) -> Pair:
    return start_pair(start_module_supervisor)


def federation(pair: Pair) -> list[Member]:
    east, west = pair
    return [Member(east.endpoint, "east"), Member(west.endpoint, "west")]


def owners(listing: Listing[ToolInfo] | Status) -> dict[str, str]:
    return {server: member.name for server, member in listing.owners.items()}


async def tags(fed: AsyncFederatedClient, *servers: str) -> list[str]:
    """What each server's ``env`` tool says TAG is, all asked at once."""
    said = dict.fromkeys(servers, "")

    async def ask(server: str) -> None:
        said[server] = (await fed.call_tool(f"mcp_{server}_env", {"name": "TAG"})).text

    async with anyio.create_task_group() as tasks:
        for server in servers:
            tasks.start_soon(ask, server)
    return [said[server] for server in servers]


async def test_tools_are_merged_and_the_clash_is_named(pair: Pair) -> None:
    with trio.fail_after(WAIT):
        async with AsyncFederatedClient(federation(pair)) as fed:
            listing = await fed.list_tools()
    names = [tool.name for tool in listing.entries]
    assert {"mcp_alpha_env", "mcp_beta_env", "mcp_common_env"} <= set(names)
    assert names.count("mcp_common_env") == 1
    assert owners(listing) == {"alpha": "east", "common": "east", "beta": "west"}
    [clash] = listing.clashes
    assert (clash.server, clash.owner.name, clash.left_out.name) == ("common", "east", "west")
    assert "'common'" in str(clash) and "east's is used, west's is left out" in str(clash)
    assert listing.failures == []


async def test_calls_go_to_the_owner_of_each_tool(pair: Pair) -> None:
    with trio.fail_after(WAIT):
        async with AsyncFederatedClient(federation(pair)) as fed:
            assert await tags(fed, "alpha", "beta", "common") == ["one", "two", "one"]
            with pytest.raises(UnknownToolError, match=r"'mcp_nobody_x'.*servers: alpha, beta, common"):
                await fed.call_tool("mcp_nobody_x")


async def test_status_has_every_supervisors_rows_each_with_its_member(pair: Pair) -> None:
    with trio.fail_after(WAIT):
        async with AsyncFederatedClient(federation(pair)) as fed:
            status = await fed.status()
    rows = sorted((row.member.name, row.status.server, row.status.state) for row in status.rows)
    assert rows == [
        ("east", "alpha", "ready"),
        ("east", "common", "ready"),
        ("west", "beta", "ready"),
        ("west", "common", "ready"),
    ]
    assert owners(status) == {"alpha": "east", "common": "east", "beta": "west"}
    assert [clash.server for clash in status.clashes] == ["common"] and status.failures == []


async def _restarted(fed: AsyncFederatedClient, server: str, owner: Member) -> Member:
    """Restart ``server`` through the federation; once it is ready again on ``owner``, the member the
    restart went to."""
    async with await fed.client(owner).watch() as events, aclosing(aiter(events)) as stream:
        member = await fed.restart(server)
        async for event in stream:
            if isinstance(event, StateChanged) and event.server == server and event.state == "ready":
                return member
    raise AssertionError("the event stream ended")


async def test_a_restart_goes_to_the_servers_owner_only(pair: Pair) -> None:
    east, west = federation(pair)
    with trio.fail_after(WAIT):
        async with AsyncFederatedClient([east, west]) as fed:

            async def pids() -> dict[tuple[str, str], int | None]:
                rows = (await fed.status()).rows
                return {(row.member.name, row.status.server): row.status.worker_pid for row in rows}

            before = await pids()
            assert await _restarted(fed, "beta", west) == west
            after = await pids()
            assert after[("west", "beta")] != before[("west", "beta")]
            assert {k: v for k, v in after.items() if k != ("west", "beta")} == {
                k: v for k, v in before.items() if k != ("west", "beta")
            }
            assert await _restarted(fed, "common", east) == east
            again = await pids()
            assert again[("east", "common")] != after[("east", "common")]
            assert again[("west", "common")] == after[("west", "common")]


async def _on_asyncio(members: list[Member]) -> tuple[Listing[ToolInfo], list[str], Status]:
    with anyio.fail_after(WAIT):
        async with AsyncFederatedClient(members) as fed:
            return await fed.list_tools(), await tags(fed, "alpha", "beta", "common"), await fed.status()


def test_the_same_on_asyncio(pair: Pair) -> None:
    listing, said, status = anyio.run(_on_asyncio, federation(pair), backend="asyncio")
    assert owners(listing) == {"alpha": "east", "common": "east", "beta": "west"}
    assert [(c.server, c.owner.name, c.left_out.name) for c in listing.clashes] == [
        ("common", "east", "west")
    ]
    assert said == ["one", "two", "one"]
    assert sorted((row.member.name, row.status.server) for row in status.rows) == [
        ("east", "alpha"),
        ("east", "common"),
        ("west", "beta"),
        ("west", "common"),
    ]


async def test_a_stopped_supervisor_is_named_while_the_other_still_answers(start_supervisor: Start) -> None:
    pair = start_pair(start_supervisor)
    east, west = federation(pair)
    with trio.fail_after(WAIT):
        async with AsyncFederatedClient([east, west], request_timeout=REQUEST_TIMEOUT) as fed:
            assert owners(await fed.list_tools()) == {"alpha": "east", "common": "east", "beta": "west"}
            await trio.to_thread.run_sync(pair[1].stop)
            listing = await fed.list_tools()
            [failure] = listing.failures
            assert failure.member == west and failure.unreachable
            assert str(failure).startswith(f"west ({west.endpoint}): UNREACHABLE")
            assert owners(listing) == {"alpha": "east", "common": "east"} and listing.clashes == []
            assert await tags(fed, "alpha", "common") == ["one", "one"]
            with pytest.raises(SupervisorUnreachableError, match=r"'mcp_beta_env'.*west"):
                await fed.call_tool("mcp_beta_env", {"name": "TAG"})
            status = await fed.status()
            assert {(row.member.name, row.status.server) for row in status.rows} == {
                ("east", "alpha"),
                ("east", "common"),
            }
            assert [f.member for f in status.failures] == [west]
        # a supervisor that is not there when the client is entered: its failure on every request
        async with AsyncFederatedClient([east, west], request_timeout=REQUEST_TIMEOUT) as fed:
            listing = await fed.list_tools()
            assert [f.member for f in listing.failures] == [west] and listing.failures[0].unreachable
            assert owners(listing) == {"alpha": "east", "common": "east"}
            assert await tags(fed, "common") == ["one"]
            reloaded = await fed.reload()
            assert reloaded[0].value is not None and reloaded[1].failure is not None
            with pytest.raises(SupervisorUnreachableError, match=r"server named 'beta' \(west \("):
                await fed.logs("beta")
