"""A live registry: servers that add and drop tools while running, and agents told at once.

A tool change reaches the registry because the server announces it (``subscriptions/listen`` on
2026-07-28 servers, ``notifications/tools/list_changed`` on older ones) or because a
``refreshInterval`` re-list finds it. Agents see each change on the events socket: a watch, a tool
cache that never asks the supervisor again, or ``mcp-supervisor events``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from supervisor.client import AsyncSupervisorClient
from supervisor.protocol import RegistryChanged, StateChanged
from tests.e2e.harness import SupervisorProcess, poll, stdio_test_server

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
CLI = "import sys; from supervisor.cli.main import main; sys.exit(main())"
LEGACY_SERVER = Path(__file__).parent.parent / "servers" / "legacy_server.py"


def test_a_server_that_adds_and_removes_tools_updates_registry_watchers_and_caches(
    start_supervisor: Start,
) -> None:
    sup = start_supervisor({"live": stdio_test_server(), "other": stdio_test_server()})
    before = sup.client.tool_list()
    with sup.client.watch() as events, sup.client.tool_cache() as cache:
        assert {tool.name for tool in cache.tools()} == {tool.name for tool in before.tools}
        sup.client.call_tool("mcp_live_change_tools", {"add": ["fresh"], "remove": ["pid"]})

        event = events.next(timeout=15)
        while isinstance(event, StateChanged):
            event = events.next(timeout=15)
        assert isinstance(event, RegistryChanged), event
        assert (event.server, event.version) == ("live", before.version + 1)
        assert [info.name for info in event.added] == ["mcp_live_fresh"]
        assert (event.removed, event.changed) == (["mcp_live_pid"], [])

        names = poll(
            "the cache to see the change", lambda: {t.name for t in cache.tools(wait=0.5)} or None, 15
        )
        poll(
            "the cache to see the new tool",
            lambda: "mcp_live_fresh" in {t.name for t in cache.tools(wait=0.5)},
            15,
        )
        names = {tool.name for tool in cache.tools()}
        assert "mcp_live_pid" not in names and "mcp_other_pid" in names
        assert cache.version == before.version + 1

    after = sup.client.tool_list()
    assert after.version == before.version + 1
    assert {tool.name for tool in after.tools} == names
    assert sup.client.call_tool("mcp_live_fresh", {"text": "new"}).text == "new"
    assert sup.status()["other"].restarts == sup.status()["live"].restarts == 0


def test_refresh_interval_finds_changes_a_server_never_announces(start_supervisor: Start) -> None:
    silent = {**stdio_test_server(TEST_SERVER_SILENT_CHANGES=1), "refreshInterval": 0.5}
    sup = start_supervisor({"silent": silent, "deaf": stdio_test_server(TEST_SERVER_SILENT_CHANGES=1)})
    sup.client.call_tool("mcp_silent_change_tools", {"add": ["late"]})
    sup.client.call_tool("mcp_deaf_change_tools", {"add": ["late"]})
    poll(
        "the refresh to find the new tool",
        lambda: "mcp_silent_late" in {t.name for t in sup.client.list_tools()},
        15,
    )
    assert "mcp_deaf_late" not in {t.name for t in sup.client.list_tools()}  # no refresh, no announcement


def test_state_changes_are_published_and_the_cache_follows_a_restart(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server()})
    with sup.client.watch() as events, sup.client.tool_cache() as cache:
        sup.client.restart("test")
        seen: list[tuple[str, str]] = []

        def ready_again() -> bool:
            event = events.next(timeout=0.5)
            if isinstance(event, StateChanged):
                seen.append((event.previous, event.state))
            return ("starting", "ready") in seen or ("restarting", "ready") in seen

        poll("the restarted server's state events", ready_again, 30)
        assert seen[0][0] == "ready"
        poll("the cache to list the server's tools again", lambda: len(cache.tools(wait=0.5)) > 0, 15)
        assert "mcp_test_echo" in {tool.name for tool in cache.tools()}


def test_events_command_prints_json_lines(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server()})
    events = subprocess.Popen(
        [sys.executable, "-c", CLI, "events", "--json", "--count", "1", "--endpoint", sup.endpoint],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # the subscription takes a moment to join: keep changing until a change is seen
        def printed() -> bool:
            sup.client.call_tool("mcp_test_change_tools", {"add": [f"t{len(sup.client.list_tools())}"]})
            return events.poll() is not None

        poll("'events' to print one event", printed, 30, interval=0.3)
        out, err = events.communicate(timeout=10)
    finally:
        events.kill()
    assert events.returncode == 0, err
    line = json.loads(out.strip().splitlines()[0])
    assert line["type"] == "RegistryChanged" and line["server"] == "test"
    assert line["added"][0]["name"].startswith("mcp_test_t")


def test_async_watch_sees_a_new_tool_on_asyncio(start_supervisor: Start) -> None:
    sup = start_supervisor({"live": stdio_test_server()})

    async def main() -> RegistryChanged:
        async with AsyncSupervisorClient(sup.endpoint) as client, await client.watch() as events:
            await client.call_tool("mcp_live_change_tools", {"add": ["async_fresh"]})
            async with asyncio.timeout(15):
                async for event in events:
                    if isinstance(event, RegistryChanged):
                        return event
        raise AssertionError("the event stream ended")

    event = asyncio.run(main())
    assert (event.server, [info.name for info in event.added]) == ("live", ["mcp_live_async_fresh"])


async def _async_cache_follows_a_change(endpoint: str, sup: SupervisorProcess) -> tuple[str, set[str], int]:
    """Through an async client: its events endpoint, and a tool cache that sees a tool added and one
    removed by the server, never listing again for them."""
    async with AsyncSupervisorClient(endpoint) as client:
        events = await client.events_endpoint()
        before = await client.tool_list()
        async with await client.tool_cache() as cache:
            assert {tool.name for tool in await cache.tools()} == {tool.name for tool in before.tools}
            relists = cache.relists
            await client.call_tool("mcp_live_change_tools", {"add": ["fresh"], "remove": ["pid"]})
            with anyio.fail_after(15):
                names = {tool.name for tool in await cache.tools()}
                while "mcp_live_fresh" not in names:
                    names = {tool.name for tool in await cache.tools(wait=0.5)}
            assert cache.version == before.version + 1
            return events, names, cache.relists - relists


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_async_client_has_the_events_endpoint_and_a_tool_cache_kept_by_events(
    start_supervisor: Start, backend: str
) -> None:
    sup = start_supervisor({"live": stdio_test_server(), "other": stdio_test_server()})
    events, names, relists = anyio.run(_async_cache_follows_a_change, sup.endpoint, sup, backend=backend)
    assert events == sup.client.events_endpoint()
    assert "mcp_live_pid" not in names and "mcp_other_pid" in names
    assert relists == 0  # the change came as an event: no listing again
    assert names == {tool.name for tool in sup.client.list_tools()}


def test_a_handshake_era_server_announcing_a_change_by_notification_is_listed_again(
    start_supervisor: Start,
) -> None:
    legacy = {"command": sys.executable, "args": [str(LEGACY_SERVER)]}
    sup = start_supervisor({"old": legacy})
    before = sup.client.tool_list()
    assert {"mcp_old_echo", "mcp_old_add_tool"} <= {tool.name for tool in before.tools}
    with sup.client.watch() as events:
        assert sup.client.call_tool("mcp_old_add_tool", {"name": "newer"}).text == "added newer"
        event = events.next(timeout=15)
        while isinstance(event, StateChanged):
            event = events.next(timeout=15)
    assert isinstance(event, RegistryChanged), event
    assert ([info.name for info in event.added], event.version) == (["mcp_old_newer"], before.version + 1)
    assert sup.client.call_tool("mcp_old_newer", {"text": "hello"}).text == "hello"
