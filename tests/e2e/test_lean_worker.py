"""Stdio workers speak MCP themselves and never load the SDK's stack; remote workers come from a zygote
of their own, started only when a remote server needs a worker. Real supervisor, zygotes, workers
and servers.

Whether a process has loaded pydantic (and so the SDK's models, which need it) shows in its
``/proc/PID/maps``: pydantic's core is a compiled library, mapped once imported.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from supervisor.shared.processes import children
from tests.e2e.harness import SupervisorProcess, http_test_server, stdio_test_server

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
PYDANTIC = "_pydantic_core"  # the compiled library pydantic maps


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def zygotes(sup: SupervisorProcess) -> dict[str, int]:
    return {comm(pid): pid for pid in children(sup.process.pid) if comm(pid).startswith("mcp-zygote")}


def maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_a_stdio_worker_serves_tools_resources_and_prompts_without_loading_pydantic(
    start_supervisor: Start,
) -> None:
    sup = start_supervisor(
        {"a": stdio_test_server(TEST_SERVER_RESOURCES=1), "b": stdio_test_server(TEST_SERVER_RESOURCES=1)}
    )
    assert sup.client.call_tool("mcp_a_echo", {"text": "lean"}).text == "lean"
    assert sup.client.list_resources("a")
    assert sup.client.list_prompts("a")
    assert sup.client.list_resource_templates("a") is not None
    assert set(zygotes(sup)) == {"mcp-zygote"}  # no remote server: no second zygote
    for pid in [*zygotes(sup).values(), *(row.worker_pid for row in sup.status().values())]:
        assert pid is not None
        assert PYDANTIC not in maps(pid), f"process {pid} ({comm(pid)}) loaded pydantic"


def test_a_prompt_loads_the_sdks_models_in_its_own_worker_only(start_supervisor: Start) -> None:
    sup = start_supervisor(
        {"a": stdio_test_server(TEST_SERVER_RESOURCES=1), "b": stdio_test_server(TEST_SERVER_RESOURCES=1)}
    )
    prompt = sup.client.list_prompts("a")[0]
    assert sup.client.get_prompt(prompt.name, {key["name"]: "x" for key in prompt.arguments}).messages
    rows = sup.status()
    assert rows["a"].worker_pid is not None and rows["b"].worker_pid is not None
    assert PYDANTIC in maps(rows["a"].worker_pid)
    assert PYDANTIC not in maps(rows["b"].worker_pid)
    assert PYDANTIC not in maps(zygotes(sup)["mcp-zygote"])


def test_remote_workers_are_forked_from_a_zygote_of_their_own(start_supervisor: Start) -> None:
    with http_test_server() as url:
        sup = start_supervisor({"local": stdio_test_server(), "far": {"url": url}})
        assert sup.client.call_tool("mcp_far_echo", {"text": "remote"}).text == "remote"
        assert sup.client.call_tool("mcp_local_echo", {"text": "local"}).text == "local"
        forks = zygotes(sup)
        assert set(forks) == {"mcp-zygote", "mcp-zygote-http"}
        rows = sup.status()
        assert rows["far"].worker_pid is not None and rows["local"].worker_pid is not None
        assert PYDANTIC in maps(forks["mcp-zygote-http"])  # preloaded there: shared by remote workers
        assert PYDANTIC in maps(rows["far"].worker_pid)
        assert PYDANTIC not in maps(rows["local"].worker_pid)
        assert PYDANTIC not in maps(forks["mcp-zygote"])


def thread_names(pid: int) -> list[str]:
    return [(task / "comm").read_text().strip() for task in Path(f"/proc/{pid}/task").iterdir()]


def test_a_worker_speaks_zmtp_itself_and_runs_no_zeromq_thread(start_supervisor: Start) -> None:
    """On its ipc link a worker is its own DEALER (``supervisor.shared.zmtp_dealer``): it makes no
    ZeroMQ context, so none of libzmq's threads (``ZMQbg/IO/0``, ``ZMQbg/Reaper``), which the
    supervisor, holding the ROUTER, does run."""
    sup = start_supervisor({"a": stdio_test_server()})
    assert sup.client.call_tool("mcp_a_echo", {"text": "own dealer"}).text == "own dealer"
    worker = sup.status()["a"].worker_pid
    assert worker is not None
    assert not [name for name in thread_names(worker) if name.startswith("ZMQbg")], thread_names(worker)
    assert any(name.startswith("ZMQbg") for name in thread_names(sup.process.pid))  # the check sees them
