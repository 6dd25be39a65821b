"""Config reload with real processes: ``reload`` and SIGHUP start, stop and restart only what changed.

Every test that reloads ends with a census: nothing the supervisor started
survives it, and servers a reload removed are gone before that.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import trio

from supervisor.client import AsyncSupervisorClient
from supervisor.client.errors import BadRequestError, SupervisorError, UnknownToolError, WorkerCrashedError
from supervisor.protocol import ReloadSummary
from supervisor.shared.processes import children
from tests.e2e.harness import SupervisorProcess, alive, poll, stdio_test_server

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
CLI_TIMEOUT = 60  # seconds for one CLI command
CALL_TIMEOUT = 60  # seconds a call under test may take; it must end long before by other means


def write_config(sup: SupervisorProcess, servers: dict[str, Any], **top: Any) -> None:
    """Replace the supervisor's config file (``{state}`` in values becomes its state directory)."""
    text = json.dumps({**top, "mcpServers": servers}).replace("{state}", str(sup.state_dir))
    sup.config.write_text(text)


def census(sup: SupervisorProcess, pids: list[int | None]) -> None:
    """Stop the supervisor; nothing it started may survive it, and no zombie may remain."""
    supervisor_pid = sup.process.pid
    if sup.process.poll() is None:
        poll("no zombie children of the supervisor", lambda: "Z" not in children(supervisor_pid).values(), 5)
    assert sup.stop() == 0
    poll("every process to be gone", lambda: not [pid for pid in pids if alive(pid)], 5)


def all_pids(sup: SupervisorProcess) -> list[int | None]:
    return [pid for row in sup.status().values() for pid in (row.worker_pid, row.server_pid)]


def env_of(sup: SupervisorProcess, server: str, name: str) -> str:
    return sup.client.call_tool(f"mcp_{server}_env", {"name": name}).text


class Call(threading.Thread):
    """A tool call on its own thread; ``outcome`` is its text or the error it raised."""

    def __init__(self, sup: SupervisorProcess, name: str, arguments: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.sup, self.name, self.arguments = sup, name, arguments
        self.outcome: str | SupervisorError | None = None
        self.start()

    def run(self) -> None:
        try:
            self.outcome = self.sup.client.call_tool(self.name, self.arguments, timeout=CALL_TIMEOUT).text
        except SupervisorError as exc:
            self.outcome = exc

    def result(self) -> str | SupervisorError | None:
        self.join(CALL_TIMEOUT + 5)
        assert not self.is_alive(), f"call {self.name} did not end"
        return self.outcome


def slow(sup: SupervisorProcess, server: str, tag: str, seconds: float) -> Call:
    call = Call(sup, f"mcp_{server}_slow", {"seconds": seconds, "tag": tag})
    poll(f"the call {tag!r} to reach its server", (sup.state_dir / f"{tag}.started").exists, 20)
    return call


def test_reload_adds_removes_and_restarts_only_what_changed_while_other_calls_finish(
    start_supervisor: Start,
) -> None:
    state = {"TEST_SERVER_STATE_DIR": "{state}"}
    servers = {
        "keep": stdio_test_server(**state),
        "gone": stdio_test_server(**state),
        "edit": stdio_test_server(**state, MODE="old"),
    }
    sup = start_supervisor(servers)
    before = sup.status()
    assert env_of(sup, "edit", "MODE") == "old"
    on_keep = slow(sup, "keep", "keep-call", 3)
    on_gone = slow(sup, "gone", "gone-call", CALL_TIMEOUT)
    on_edit = slow(sup, "edit", "edit-call", CALL_TIMEOUT)

    write_config(
        sup,
        {
            "keep": stdio_test_server(**state),
            "edit": stdio_test_server(**state, MODE="new"),
            "fresh": stdio_test_server(**state),
        },
    )
    summary = sup.client.reload()

    assert summary == ReloadSummary(
        config=str(sup.config), added=["fresh"], removed=["gone"], changed=["edit"], unchanged=["keep"]
    )
    # removed: stopped by the time reload returns, its call told why, its tools and row gone
    assert not alive(before["gone"].worker_pid) and not alive(before["gone"].server_pid)
    gone_error = on_gone.result()
    assert isinstance(gone_error, WorkerCrashedError), gone_error
    assert "server 'gone': removed from the config (reload)" in str(gone_error)
    edit_error = on_edit.result()
    assert isinstance(edit_error, WorkerCrashedError), edit_error
    assert "restarted with its new config (reload)" in str(edit_error)
    rows = sup.wait_states(keep="ready", edit="ready", fresh="ready")
    assert list(rows) == ["keep", "edit", "fresh"]
    with pytest.raises(UnknownToolError):
        sup.client.call_tool("mcp_gone_echo", {"text": "x"})
    with pytest.raises(UnknownToolError, match="no server named 'gone'"):
        sup.client.start("gone")
    # untouched: the same processes, and the call that ran through the reload finished normally
    assert on_keep.result() == "done keep-call"
    assert (rows["keep"].worker_pid, rows["keep"].server_pid) == (
        before["keep"].worker_pid,
        before["keep"].server_pid,
    )
    # changed: a new worker with the new spec; added: its tools in the registry
    assert rows["edit"].worker_pid != before["edit"].worker_pid
    assert env_of(sup, "edit", "MODE") == "new"
    tools = {tool.name for tool in sup.client.list_tools()}
    assert "mcp_fresh_echo" in tools and not any(name.startswith("mcp_gone_") for name in tools)
    assert sup.client.call_tool("mcp_fresh_echo", {"text": "hi"}).text == "hi"
    assert "reload of" in sup.log and "added fresh; removed gone; changed edit; 1 unchanged" in sup.log
    census(sup, [before["edit"].worker_pid, before["edit"].server_pid, *all_pids(sup)])


def test_sighup_reloads_the_config(start_supervisor: Start) -> None:
    sup = start_supervisor({"keep": stdio_test_server(), "gone": stdio_test_server()})
    before = sup.status()
    write_config(sup, {"keep": stdio_test_server(), "fresh": stdio_test_server(MODE="hup")})
    sup.process.send_signal(signal.SIGHUP)

    def reloaded() -> bool:
        rows = sup.status()
        return list(rows) == ["keep", "fresh"] and rows["fresh"].state == "ready"

    poll("the SIGHUP reload to be applied", reloaded, 60)
    assert not alive(before["gone"].worker_pid) and not alive(before["gone"].server_pid)
    assert sup.status()["keep"].worker_pid == before["keep"].worker_pid
    assert env_of(sup, "fresh", "MODE") == "hup"
    assert "SIGHUP received; reloading the config" in sup.log
    census(sup, all_pids(sup))


BAD_FILES = {
    "missing": (None, "config file does not exist"),
    "not JSON": ('{"mcpServers": {', "not valid JSON: unexpected end of file"),
    "a bad supervisor object": (
        '{"supervisor": {"shutdownGrace": "soon"}, "mcpServers": {}}',
        '"supervisor"',
    ),
}


def test_a_file_that_cannot_be_used_is_rejected_and_nothing_changes(start_supervisor: Start) -> None:
    sup = start_supervisor({"keep": stdio_test_server()})
    before = sup.status()
    for what, (content, expected) in BAD_FILES.items():
        if content is None:
            sup.config.unlink()
        else:
            sup.config.write_text(content)
        with pytest.raises(BadRequestError) as caught:
            sup.client.reload()
        assert "config rejected, nothing changed" in caught.value.message, what
        assert expected in caught.value.message, what
        assert sup.status() == before, what
    assert sup.client.call_tool("mcp_keep_echo", {"text": "still"}).text == "still"
    assert sup.log.count("reload: config rejected") == len(BAD_FILES)
    census(sup, all_pids(sup))


def test_a_file_with_bad_entries_is_rejected_listing_every_problem(start_supervisor: Start) -> None:
    sup = start_supervisor({"keep": stdio_test_server(), "other": stdio_test_server()})
    before = sup.status()
    write_config(
        sup,
        {"keep": {**stdio_test_server(), "comand": "typo"}, "fresh": {"args": ["no command"]}},
    )
    with pytest.raises(BadRequestError) as caught:
        sup.client.reload()
    message = caught.value.message
    assert f"config {sup.config} rejected, nothing changed:" in message
    assert "server 'keep': unknown field 'comand'" in message
    assert "server 'fresh': needs \"command\"" in message
    assert sup.status() == before  # "other" was not removed, "keep" not restarted
    census(sup, all_pids(sup))


def test_reload_keeps_an_operator_stop_and_stops_servers_disabled_in_the_file(
    start_supervisor: Start,
) -> None:
    servers = {
        "held": stdio_test_server(),
        "held_edit": stdio_test_server(MODE="old"),
        "off": stdio_test_server(),
        "later": {**stdio_test_server(MODE="on"), "disabled": True},
    }
    sup = start_supervisor(servers)
    sup.client.stop("held")
    sup.client.stop("held_edit")
    before = sup.wait_states(held="stopped", held_edit="stopped", later="stopped")
    write_config(
        sup,
        {
            "held": stdio_test_server(),
            "held_edit": stdio_test_server(MODE="new"),
            "off": {**stdio_test_server(), "disabled": True},
            "later": stdio_test_server(MODE="on"),
        },
    )
    summary = sup.client.reload()
    assert summary.changed == ["held_edit", "off", "later"] and summary.unchanged == ["held"]
    rows = sup.wait_states(held="stopped", held_edit="stopped", off="stopped", later="ready")
    assert rows["off"].last_error == "disabled in config"
    assert not alive(before["off"].worker_pid)
    assert rows["later"].last_error is None
    # the operator's stop held; a start runs the new spec
    sup.client.start("held_edit")
    sup.wait_states(held_edit="ready")
    assert env_of(sup, "held_edit", "MODE") == "new"
    census(sup, all_pids(sup))


def test_concurrent_reloads_do_not_interleave(start_supervisor: Start) -> None:
    sup = start_supervisor({"keep": stdio_test_server(), "gone": stdio_test_server()})
    write_config(sup, {"keep": stdio_test_server(), "fresh": stdio_test_server()})
    summaries: list[ReloadSummary] = []

    async def reload_many() -> None:
        async def one(client: AsyncSupervisorClient) -> None:
            summaries.append(await client.reload())

        with trio.fail_after(60):
            async with AsyncSupervisorClient(sup.endpoint) as client, trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(one, client)

    trio.run(reload_many)
    # One reload applied the change, once; the requests that waited for it share its summary, and a
    # reload that ran after it found nothing to do.
    assert len(summaries) == 4
    applied = [summary for summary in summaries if summary.added or summary.removed]
    assert applied, summaries
    for summary in applied:
        assert (summary.added, summary.removed, summary.unchanged) == (["fresh"], ["gone"], ["keep"])
    for later in summaries:
        if later not in applied:
            assert (later.added, later.removed, later.changed) == ([], [], [])
            assert later.unchanged == ["keep", "fresh"]
    assert sup.log.count("added fresh;") == 1
    sup.wait_states(keep="ready", fresh="ready")
    assert list(sup.status()) == ["keep", "fresh"]
    census(sup, all_pids(sup))


def cli(*args: str, endpoint: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "supervisor", *args, "--endpoint", endpoint]
    return subprocess.run(command, capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False)


def test_cli_reload_prints_the_summary_and_exits_2_on_a_bad_file(start_supervisor: Start) -> None:
    sup = start_supervisor({"keep": stdio_test_server(), "gone": stdio_test_server()})
    write_config(sup, {"keep": stdio_test_server(), "fresh": stdio_test_server()})
    done = cli("reload", endpoint=sup.endpoint)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"reloaded {sup.config}",
        "added:     fresh",
        "removed:   gone",
        "changed:   -",
        "unchanged: keep",
        "settings:  -",
    ]
    write_config(
        sup, {"keep": stdio_test_server(), "fresh": stdio_test_server()}, supervisor={"shutdownGrace": 1}
    )
    done = cli("reload", "--json", endpoint=sup.endpoint)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "config": str(sup.config),
        "added": [],
        "removed": [],
        "changed": [],
        "unchanged": ["keep", "fresh"],
        "settings": ["shutdownGrace"],
    }
    sup.config.write_text("not json")
    done = cli("reload", endpoint=sup.endpoint)
    assert done.returncode == 2
    assert done.stderr.startswith("mcp-supervisor: error: config rejected, nothing changed:")
    assert "not valid JSON" in done.stderr and "Traceback" not in done.stderr
    write_config(sup, {"keep": {"command": "x", "bogus": 1}})
    done = cli("reload", endpoint=sup.endpoint)
    assert done.returncode == 2
    assert "server 'keep': unknown field 'bogus'" in done.stderr
    assert list(sup.status()) == ["keep", "fresh"]
    census(sup, all_pids(sup))


def test_cli_reload_exits_3_without_a_supervisor(tmp_path: Any) -> None:
    done = cli("reload", endpoint=f"ipc://{tmp_path}/nobody.sock")
    assert done.returncode == 3
    assert "no supervisor at" in done.stderr
