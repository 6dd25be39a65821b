"""The MCP facade, as MCP hosts see it: the official SDK's ``Client`` against ``mcp-supervisor mcp``
(stdio) and ``mcp-supervisor serve --http`` (streamable HTTP), in both protocol eras (the handshake
era, ``legacy``, and 2026-07-28, which ``auto`` negotiates).

A real supervisor runs the repository's test server twice: ``t`` (with resources, prompts and the
``slow`` markers) and ``u``. Tests that kill or restart things get a supervisor of their own.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import IO, Any

import httpx2
import mcp_types as types
import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment
from mcp.shared.exceptions import MCPError

from supervisor.client.blocking import SupervisorClient
from supervisor.client.errors import SupervisorUnreachableError
from tests.e2e.facade import (
    HOST_LIFETIME,
    HOST_TIMEOUT,
    HOST_WARNINGS,
    REPO,
    HttpFacade,
    Notes,
    facade_argv,
    http_host,
    stdio_host,
    text_of,
)
from tests.e2e.harness import START_TIMEOUT, SupervisorProcess, alive, poll, stdio_test_server

pytestmark = [pytest.mark.e2e, *HOST_WARNINGS]

TOKEN = f"facade-test-{secrets.token_hex(8)}"
PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="

OpenHost = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture(scope="module")
def sup(start_module_supervisor: Callable[..., SupervisorProcess]) -> SupervisorProcess:
    return start_module_supervisor(
        {
            "t": stdio_test_server(TEST_SERVER_RESOURCES=1, TEST_SERVER_STATE_DIR="{state}"),
            "u": stdio_test_server(TEST_SERVER_NAME="other"),
        },
    )


class Facades:
    """HTTP facades started for a test (one per set of arguments), stopped after it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.started: dict[tuple[str, ...], HttpFacade] = {}

    def url(self, endpoint: str, *args: str) -> str:
        key = (endpoint, *args)
        if key not in self.started:
            self.started[key] = HttpFacade(self.tmp, endpoint, TOKEN, *args)
        return self.started[key].url

    def stop(self) -> None:
        for facade in self.started.values():
            facade.stop()


@pytest.fixture
def facades(tmp_path: Path) -> Iterator[Facades]:
    started = Facades(tmp_path)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def open_host(facades: Facades) -> OpenHost:
    """``open_host(kind, endpoint, *facade_args, mode=..., notes=...)``: a host on stdio or HTTP."""

    @asynccontextmanager
    async def open_host(
        kind: str, endpoint: str, *args: str, mode: str = "legacy", notes: Notes | None = None, **options: Any
    ) -> AsyncIterator[Client]:
        if kind == "stdio":
            async with stdio_host(endpoint, *args, mode=mode, notes=notes, **options) as client:
                yield client
        else:
            url = facades.url(endpoint, *args)
            async with http_host(url, TOKEN, mode=mode, notes=notes, **options) as client:
                yield client

    return open_host


KINDS = ["stdio", "http"]
ERAS = ["legacy", "auto"]


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("kind", KINDS)
async def test_host_lists_every_tool_under_its_prefixed_name_with_schemas(
    sup: SupervisorProcess, open_host: OpenHost, kind: str, mode: str
) -> None:
    async with open_host(kind, sup.endpoint, mode=mode) as host:
        tools = {tool.name: tool for tool in (await host.list_tools()).tools}
        capabilities = host.server_capabilities
    # Told that every list changes, on each transport and in each era (hosts are told when they do).
    assert capabilities.tools is not None and capabilities.tools.list_changed
    assert capabilities.resources is not None and capabilities.resources.list_changed
    assert capabilities.prompts is not None and capabilities.prompts.list_changed
    registry = {tool.name for tool in sup.client.list_tools()}
    assert set(tools) == registry
    assert {"mcp_t_echo", "mcp_u_echo", "mcp_t_add", "mcp_t_weird_name_with_chars"} <= set(tools)
    assert tools["mcp_t_echo"].input_schema["properties"]["text"]["type"] == "string"
    assert tools["mcp_t_echo"].description
    add = tools["mcp_t_add"]
    assert add.output_schema is not None and "sum" in add.output_schema["properties"]


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("kind", KINDS)
async def test_call_relays_every_content_kind_and_structured_content(
    sup: SupervisorProcess, open_host: OpenHost, kind: str, mode: str
) -> None:
    async with open_host(kind, sup.endpoint, mode=mode) as host:
        echo = await host.call_tool("mcp_t_echo", {"text": "héllo ✓"})
        add = await host.call_tool("mcp_t_add", {"a": 2, "b": 3})
        mixed = await host.call_tool("mcp_t_mixed", {})
        image = await host.call_tool("mcp_t_image", {})
    assert text_of(echo) == "héllo ✓" and not echo.is_error
    assert add.structured_content == {"sum": 5}
    assert [item.type for item in mixed.content] == ["text", "audio", "resource_link", "resource"]
    link, embedded = mixed.content[2], mixed.content[3]
    assert isinstance(link, types.ResourceLink) and str(link.uri) == "test://doc/1"
    assert isinstance(embedded, types.EmbeddedResource) and str(embedded.resource.uri) == "test://doc/2"
    pictures = [item for item in image.content if isinstance(item, types.ImageContent)]
    assert len(pictures) == 1 and pictures[0].mime_type == "image/png"
    assert base64.b64decode(pictures[0].data) == base64.b64decode(PNG_1X1)


@pytest.mark.parametrize("kind", KINDS)
async def test_tool_errors_are_results_and_unknown_tools_and_bad_arguments_are_jsonrpc_errors(
    sup: SupervisorProcess, open_host: OpenHost, kind: str
) -> None:
    async with open_host(kind, sup.endpoint) as host:
        failed = await host.call_tool("mcp_t_fail", {"message": "boom"})
        raised = await host.call_tool("mcp_t_raise_error", {"message": "kaput"})
        with pytest.raises(MCPError) as unknown:
            await host.call_tool("mcp_t_no_such_tool", {})
        with pytest.raises(MCPError) as bad:
            await host.call_tool("mcp_t_echo", {"text": 5})
        still = await host.call_tool("mcp_t_echo", {"text": "still here"})
    assert failed.is_error and text_of(failed) == "boom"
    assert raised.is_error and text_of(raised).startswith("SERVER_ERROR: ") and "kaput" in text_of(raised)
    assert (
        unknown.value.error.code == types.INVALID_PARAMS
        and "mcp_t_no_such_tool" in unknown.value.error.message
    )
    assert bad.value.error.code == types.INVALID_PARAMS and "text" in bad.value.error.message
    assert text_of(still) == "still here"


@pytest.mark.parametrize("kind", KINDS)
async def test_server_progress_reaches_the_host_under_its_token(
    sup: SupervisorProcess, open_host: OpenHost, kind: str
) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    async with open_host(kind, sup.endpoint) as host:
        result = await host.call_tool(
            "mcp_t_progress", {"count": 20, "message": "step"}, progress_callback=progress
        )
    assert text_of(result) == "sent 20"
    assert seen, "no progress reached the host"
    assert seen[-1] == (20, 20, "step 20")  # the last one the server sent always comes through
    assert [done for done, _, _ in seen] == sorted({done for done, _, _ in seen})


async def _sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    text = types.TextContent(type="text", text="host says hi")
    return types.CreateMessageResult(role="assistant", model="host-model", content=text)


async def _elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Host"})


@pytest.mark.parametrize("answers", [False, True], ids=["plain", "sampling+elicitation"])
@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("kind", KINDS)
async def test_host_cancel_reaches_the_server_as_its_own_cancellation(
    sup: SupervisorProcess, open_host: OpenHost, kind: str, mode: str, answers: bool
) -> None:
    """In both protocol eras, whatever the host offers: a 2026-07-28 host that declares sampling and
    elicitation has its calls run apart (they may be resumed), and its cancel still reaches them."""
    tag = f"cancel-{kind}-{mode}-{answers}-{secrets.token_hex(4)}"
    started, cancelled = sup.state_dir / f"{tag}.started", sup.state_dir / f"{tag}.cancelled"
    options: dict[str, Any] = (
        {"sampling_callback": _sample, "elicitation_callback": _elicit} if answers else {}
    )
    async with open_host(kind, sup.endpoint, mode=mode, **options) as host:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host.call_tool, "mcp_t_slow", {"seconds": 60, "tag": tag})
            await wait_for_path(started)
            nursery.cancel_scope.cancel()  # the SDK client sends notifications/cancelled
        await wait_for_path(cancelled)
        after = await host.call_tool("mcp_t_echo", {"text": "after"})
    assert text_of(after) == "after"
    stats = sup.client.front_stats()
    assert stats.in_flight == 0


async def test_http_facade_drains_on_sigterm_and_exits_0(sup: SupervisorProcess, tmp_path: Path) -> None:
    """As a service manager stops it: the call in flight is answered, then the facade exits 0."""
    facade = HttpFacade(tmp_path, sup.endpoint, TOKEN)
    tag = f"drain-{secrets.token_hex(4)}"
    results: list[types.CallToolResult] = []
    try:
        try:
            async with http_host(facade.url, TOKEN) as host, trio.open_nursery() as nursery:

                async def call() -> None:
                    results.append(await host.call_tool("mcp_t_slow", {"seconds": 2, "tag": tag}))

                nursery.start_soon(call)
                await wait_for_path(sup.state_dir / f"{tag}.started")
                facade.process.send_signal(signal.SIGTERM)
        except* httpx2.ConnectError:
            pass  # the host's goodbye, once the call is answered, finds the facade gone: as it should
        assert [result.is_error for result in results] == [False]
        assert await trio.to_thread.run_sync(lambda: facade.process.wait(HOST_TIMEOUT)) == 0
        assert "SIGTERM" in facade.stderr and "Traceback" not in facade.stderr
    finally:
        facade.stop()


async def test_a_draining_http_facade_serves_a_host_that_asks_again_soon_after_its_answer(
    sup: SupervisorProcess, tmp_path: Path
) -> None:
    """After SIGTERM, a request that comes a moment after the last answer (as a host's next step
    follows it, slowed by a busy machine) is still served, and then the facade exits 0."""
    facade = HttpFacade(tmp_path, sup.endpoint, TOKEN)
    tag = f"quiet-{secrets.token_hex(4)}"
    try:
        async with http_host(facade.url, TOKEN) as host:
            await host.list_tools()
            async with trio.open_nursery() as nursery:
                results: list[types.CallToolResult] = []

                async def call() -> None:
                    results.append(await host.call_tool("mcp_t_slow", {"seconds": 1, "tag": tag}))

                nursery.start_soon(call)
                await wait_for_path(sup.state_dir / f"{tag}.started")
                facade.process.send_signal(signal.SIGTERM)
            assert [result.is_error for result in results] == [False]
            await trio.sleep(0.3)  # the host's next step, a moment later: part of the scenario
            names = {tool.name for tool in (await host.list_tools()).tools}
            assert "mcp_t_slow" in names
        assert await trio.to_thread.run_sync(lambda: facade.process.wait(HOST_TIMEOUT)) == 0
        assert "Traceback" not in facade.stderr
    finally:
        facade.stop()


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("kind", KINDS)
async def test_host_hears_list_changed_when_a_server_adds_a_tool(
    sup: SupervisorProcess, open_host: OpenHost, kind: str, mode: str
) -> None:
    name = f"added_{kind}_{mode}"
    notes = Notes()
    async with open_host(kind, sup.endpoint, mode=mode, notes=notes) as host:
        await host.list_tools()
        if mode == "legacy":
            before = notes.tools_changed
            await host.call_tool("mcp_t_change_tools", {"add": [name]})
            await notes.wait_tools_changed(before)
        else:
            async with host.listen(tools_list_changed=True) as events:
                await host.call_tool("mcp_t_change_tools", {"add": [name]})
                with trio.fail_after(HOST_TIMEOUT):
                    async for _ in events:
                        break
        names = {tool.name for tool in (await host.list_tools()).tools}
        assert f"mcp_t_{name}" in names
        added = await host.call_tool(f"mcp_t_{name}", {"text": "new"})
        assert text_of(added) == "new"
        await host.call_tool("mcp_t_change_tools", {"remove": [name]})


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("kind", KINDS)
async def test_resources_templates_and_prompts_of_every_ready_server(
    sup: SupervisorProcess, open_host: OpenHost, kind: str, mode: str
) -> None:
    async with open_host(kind, sup.endpoint, mode=mode) as host:
        resources = {str(r.uri) for r in (await host.list_resources()).resources}
        templates = {t.uri_template for t in (await host.list_resource_templates()).resource_templates}
        doc = await host.read_resource("test://doc/1")
        by_template = await host.read_resource("test://doc/77")
        pixel = await host.read_resource("test://image/pixel.png")
        prompts = {p.name: p for p in (await host.list_prompts()).prompts}
        greeting = await host.get_prompt("mcp_t_greet", {"name": "Ada"})
        with pytest.raises(MCPError) as missing:
            await host.read_resource("nowhere://at/all")
        with pytest.raises(MCPError) as no_prompt:
            await host.get_prompt("mcp_t_no_such_prompt", {})
    assert {"test://doc/1", "test://doc/2", "test://image/pixel.png"} <= resources
    assert "test://doc/{n}" in templates
    assert [c.text for c in doc.contents if isinstance(c, types.TextResourceContents)] == ["document 1"]
    assert [c.text for c in by_template.contents if isinstance(c, types.TextResourceContents)] == [
        "document 77"
    ]
    blobs = [c for c in pixel.contents if isinstance(c, types.BlobResourceContents)]
    assert len(blobs) == 1 and blobs[0].blob == PNG_1X1
    assert "mcp_t_greet" in prompts and "mcp_u_greet" not in prompts  # u offers no prompts
    assert {a.name for a in prompts["mcp_t_greet"].arguments or []} >= {"name"}
    message = greeting.messages[0]
    assert isinstance(message.content, types.TextContent) and message.content.text == "Hello, Ada!"
    assert missing.value.error.code == types.INVALID_PARAMS
    assert no_prompt.value.error.code == types.INVALID_PARAMS


async def test_http_facade_refuses_requests_without_the_token(
    sup: SupervisorProcess, facades: Facades
) -> None:
    url = facades.url(sup.endpoint)
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    async with httpx2.AsyncClient(timeout=HOST_TIMEOUT) as http:
        missing = await http.post(url, json=body)
        wrong = await http.post(url, json=body, headers={"Authorization": f"Bearer {TOKEN}x"})
        basic = await http.post(url, json=body, headers={"Authorization": f"Basic {TOKEN}"})
    for response in (missing, wrong, basic):
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
    with pytest.RaisesGroup(pytest.RaisesExc(MCPError, match="error response"), flatten_subgroups=True):
        async with http_host(url, "not-the-token") as host:  # the SDK's client gives up on the 401
            await host.list_tools()
    async with http_host(url, TOKEN) as host:  # the right one still works
        assert text_of(await host.call_tool("mcp_t_echo", {"text": "ok"})) == "ok"


async def test_many_hosts_on_the_http_facade_at_once(sup: SupervisorProcess, facades: Facades) -> None:
    url = facades.url(sup.endpoint)
    answers: list[str] = []

    async def one_host(index: int) -> None:
        async with http_host(url, TOKEN) as host:
            for call in range(5):
                answers.append(text_of(await host.call_tool("mcp_u_echo", {"text": f"{index}.{call}"})))

    async with trio.open_nursery() as nursery:
        for index in range(8):
            nursery.start_soon(one_host, index)
    assert sorted(answers) == sorted(f"{i}.{c}" for i in range(8) for c in range(5))


# ------------------------------------------------------------------ views


@pytest.mark.parametrize("kind", KINDS)
async def test_servers_and_tools_views_narrow_what_a_host_sees_and_may_call(
    sup: SupervisorProcess, open_host: OpenHost, kind: str
) -> None:
    async with open_host(kind, sup.endpoint, "--servers", "u") as host:
        only_u = {tool.name for tool in (await host.list_tools()).tools}
        with pytest.raises(MCPError):
            await host.call_tool("mcp_t_echo", {"text": "hidden"})
        assert not (await host.list_prompts()).prompts  # t's prompts are not in this view
    async with open_host(kind, sup.endpoint, "--tools", "mcp_t_e*,mcp_u_add") as host:
        globbed = {tool.name for tool in (await host.list_tools()).tools}
        assert text_of(await host.call_tool("mcp_t_echo", {"text": "seen"})) == "seen"
    assert only_u and all(name.startswith("mcp_u_") for name in only_u)
    assert globbed == {"mcp_t_echo", "mcp_t_empty", "mcp_t_env", "mcp_u_add"}


@pytest.mark.parametrize("kind", KINDS)
async def test_search_view_lists_two_tools_that_find_and_call_the_registry(
    sup: SupervisorProcess, open_host: OpenHost, kind: str
) -> None:
    async with open_host(kind, sup.endpoint, "--search") as host:
        listed = [tool.name for tool in (await host.list_tools()).tools]
        found = await host.call_tool("search_tools", {"query": "sum of two numbers", "limit": 3})
        called = await host.call_tool("call_tool", {"name": "mcp_t_add", "arguments": {"a": 40, "b": 2}})
        with pytest.raises(MCPError):
            await host.call_tool("mcp_t_add", {"a": 1, "b": 1})  # only the two tools are listed
        with pytest.raises(MCPError):
            await host.call_tool("call_tool", {"name": "mcp_t_no_such_tool"})
    assert listed == ["search_tools", "call_tool"]
    assert isinstance(found.structured_content, dict)
    names = [entry["name"] for entry in found.structured_content["tools"]]
    assert names[0] in ("mcp_t_add", "mcp_u_add") and len(names) <= 3
    assert found.structured_content["tools"][0]["inputSchema"]["properties"]["a"]
    assert called.structured_content == {"sum": 42}
    assert json.loads(text_of(found)) == found.structured_content  # the text carries the schemas too


# ------------------------------------------------------------------ faults


@pytest.mark.parametrize("kind", KINDS)
async def test_server_killed_mid_call_is_an_error_result_then_the_tool_works_again(
    start_supervisor: Callable[..., SupervisorProcess], open_host: OpenHost, kind: str
) -> None:
    own = start_supervisor({"k": stdio_test_server(TEST_SERVER_STATE_DIR="{state}")})
    tag = f"killed-{kind}"
    async with open_host(kind, own.endpoint) as host:
        async with trio.open_nursery() as nursery:
            results: list[types.CallToolResult] = []

            async def slow() -> None:
                results.append(await host.call_tool("mcp_k_slow", {"seconds": 60, "tag": tag}))

            nursery.start_soon(slow)
            await wait_for_path(own.state_dir / f"{tag}.started")
            server_pid = own.status()["k"].server_pid
            assert server_pid is not None
            os.kill(server_pid, signal.SIGKILL)
        [crashed] = results
        assert crashed.is_error and text_of(crashed).startswith("WORKER_CRASHED: ")
        assert "'k'" in text_of(crashed)
        with trio.fail_after(HOST_TIMEOUT):
            while True:
                again = await host.call_tool("mcp_k_echo", {"text": "back"})
                if not again.is_error:
                    break
                assert text_of(again).startswith("UNAVAILABLE: ")  # restarting: said at once
                await trio.sleep(0.1)
    assert text_of(again) == "back"


@pytest.mark.parametrize("kind", KINDS)
async def test_facade_reconnects_when_the_supervisor_restarts_and_the_host_hears_of_it(
    start_supervisor: Callable[..., SupervisorProcess], open_host: OpenHost, tmp_path: Path, kind: str
) -> None:
    endpoint = f"ipc://{tmp_path}/restarting.sock"
    first = start_supervisor({"r": stdio_test_server()}, endpoint=endpoint)
    notes = Notes()
    async with open_host(kind, endpoint, notes=notes) as host:
        assert text_of(await host.call_tool("mcp_r_echo", {"text": "one"})) == "one"
        first.stop()
        with trio.fail_after(HOST_TIMEOUT):  # never a hang: an error result, at once or once it is noticed
            while True:
                gone = await host.call_tool("mcp_r_echo", {"text": "two"})
                if gone.is_error:
                    break
        assert text_of(gone).startswith("UNAVAILABLE: ")
        heard = notes.tools_changed
        start_supervisor({"r": stdio_test_server()}, endpoint=endpoint)
        await notes.wait_tools_changed(heard)
        with trio.fail_after(HOST_TIMEOUT):
            while True:
                back = await host.call_tool("mcp_r_echo", {"text": "three"})
                if not back.is_error:
                    break
                await trio.sleep(0.1)
    assert text_of(back) == "three"


@pytest.mark.parametrize("kind", KINDS)
async def test_config_starts_a_supervisor_whose_every_tool_is_in_the_first_listing(
    tmp_path: Path, kind: str
) -> None:
    """A host that lists once, right after initialize, sees every server's tools: the first listing
    waits for the supervisor the facade starts and for its servers' first starts (one takes 2 s)."""
    config = tmp_path / "mcp.json"
    slow = stdio_test_server(TEST_SERVER_INIT_DELAY=2)
    config.write_text(json.dumps({"mcpServers": {"a": stdio_test_server(), "slow": slow}}))
    endpoint = f"ipc://{tmp_path}/auto/supervisor.sock"
    with pytest.raises(SupervisorUnreachableError), SupervisorClient(endpoint, request_timeout=1) as client:
        client.ping()
    facade: HttpFacade | None = None
    try:
        if kind == "stdio":
            host = stdio_host(endpoint, "--config", str(config), env={"XDG_RUNTIME_DIR": str(tmp_path)})
        else:
            facade = HttpFacade(tmp_path, endpoint, TOKEN, "--config", str(config))
            host = http_host(facade.url, TOKEN)
        async with host as client_:
            names = {tool.name for tool in (await client_.list_tools()).tools}  # once, as most hosts do
            assert {"mcp_a_echo", "mcp_slow_echo"} <= names
            assert text_of(await client_.call_tool("mcp_slow_echo", {"text": "auto"})) == "auto"
        if facade is not None:
            facade.stop()
        with SupervisorClient(endpoint, request_timeout=5) as client:  # the facade is gone; it is not
            client.ping()
            assert [row.state for row in client.status()] == ["ready", "ready"]
        assert (tmp_path / "auto" / "supervisor.log").exists()  # beside its own endpoint
    finally:
        if facade is not None:
            facade.stop()
        for pid in supervisors_of(config):
            os.kill(pid, signal.SIGINT)
            poll(f"supervisor {pid} to exit", lambda pid=pid: not alive(pid), 20)  # type: ignore[misc]


# ------------------------------------------------------------------ helpers


async def wait_for_path(path: Path, timeout: float = HOST_TIMEOUT) -> None:
    with trio.fail_after(timeout):
        while not path.exists():  # noqa: ASYNC110, ASYNC240 (a file the server writes, polled with a bound)
            await trio.sleep(0.02)


def supervisors_of(config: Path) -> list[int]:
    """Live ``mcp-supervisor run CONFIG`` processes (found by their command line)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdecimal():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"run" in argv and str(config.resolve()).encode() in argv and alive(int(proc.name)):
            pids.append(int(proc.name))
    return pids


# ------------------------------------------------------------------ the command line


def start_cli(env: dict[str, str], out: IO[bytes], *args: str) -> subprocess.Popen[bytes]:
    """``mcp-supervisor ARGS...`` in the background, in exactly ``env``."""
    argv = [sys.executable, "-m", "supervisor", *args]
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=REPO)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def test_host_config_prints_an_entry_that_starts_this_facade(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text("{}")
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    done = run_cli(
        "host-config", "vscode", "--config", str(config), "--search", "--servers", "a,b",
        env={"XDG_RUNTIME_DIR": str(runtime), "MCP_SUPERVISOR_ENDPOINT": ""},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    server = json.loads(done.stdout)["servers"]["mcp-supervisor"]
    assert server["type"] == "stdio" and Path(server["command"]).name == "mcp-supervisor"
    endpoint = f"ipc://{runtime}/mcp-supervisor/supervisor.sock"  # as resolved where the user is
    assert server["args"] == [
        "mcp", "--config", str(config.resolve()), "--endpoint", endpoint, "--servers", "a,b", "--search"
    ]  # fmt: skip
    assert ".vscode/mcp.json" in done.stderr
    refused = run_cli("host-config", "claude-desktop", "--url", "http://127.0.0.1:1/mcp")
    assert refused.returncode == 2 and "local servers only" in refused.stderr
    one = run_cli("host-config", "generic", "--server", "git", "--endpoint", endpoint)
    assert one.returncode == 0, one.stderr
    entries = json.loads(one.stdout)["mcpServers"]  # named as the server: the host names its tools as before
    assert list(entries) == ["git"] and entries["git"]["args"][-2:] == ["--server", "git"]
    clash = run_cli("mcp", "--server", "git", "--search", "--endpoint", endpoint)
    assert clash.returncode == 2 and "--server and --search" in clash.stderr
    other = run_cli("mcp", "--server", "git", "--servers", "a", "--endpoint", endpoint)
    assert other.returncode == 2 and "leave out --servers" in other.stderr


async def test_a_host_with_only_the_sdks_default_environment_reaches_the_users_supervisor(
    tmp_path: Path,
) -> None:
    """The user starts a supervisor from a login shell (XDG_RUNTIME_DIR set, default endpoint) and
    prints the host entry there; the host starts that entry with the SDK's default environment plus
    the entry's own env (no XDG_RUNTIME_DIR), lists once and calls."""
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    login_shell = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    login_shell.pop("MCP_SUPERVISOR_ENDPOINT", None)
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"a": stdio_test_server()}}))
    log = (tmp_path / "run.log").open("wb")
    sup = start_cli(login_shell, log, "run", str(config))
    try:
        endpoint = f"ipc://{runtime}/mcp-supervisor/supervisor.sock"  # as the user's shell resolves it
        poll("the user's supervisor to answer", lambda: _answers(endpoint), START_TIMEOUT)
        entry = run_cli("host-config", "claude-desktop", env=login_shell)
        assert entry.returncode == 0, entry.stderr
        server = json.loads(entry.stdout)["mcpServers"]["mcp-supervisor"]
        env = {**get_default_environment(), **server.get("env", {})}
        assert "XDG_RUNTIME_DIR" not in env and "MCP_SUPERVISOR_ENDPOINT" not in env
        params = StdioServerParameters(command=server["command"], args=server["args"], env=env)
        with trio.fail_after(HOST_LIFETIME):
            async with Client(params) as host:
                names = {tool.name for tool in (await host.list_tools()).tools}
                assert "mcp_a_echo" in names
                assert text_of(await host.call_tool("mcp_a_echo", {"text": "found"})) == "found"
    finally:
        sup.send_signal(signal.SIGINT)
        try:
            sup.wait(HOST_TIMEOUT)
        except subprocess.TimeoutExpired:
            sup.kill()
            sup.wait()
        log.close()


def _answers(endpoint: str) -> bool:
    with SupervisorClient(endpoint, request_timeout=2.0) as client:
        try:
            client.ping()
        except SupervisorUnreachableError:
            return False
    return True


async def test_a_facade_that_finds_no_supervisor_says_why_and_the_tools_arrive_when_one_answers(
    start_supervisor: Callable[..., SupervisorProcess], tmp_path: Path
) -> None:
    endpoint = f"ipc://{tmp_path}/later/supervisor.sock"
    notes = LogNotes()
    async with stdio_host(endpoint, "--list-wait", "1", notes=notes) as host:
        assert (await host.list_tools()).tools == []
        assert any(f"no supervisor answers at {endpoint}" in text for text in notes.said), notes.said
        start_supervisor({"a": stdio_test_server()}, wait=False, endpoint=endpoint)
        with trio.fail_after(60):  # the supervisor starts, then the facade's dial finds it
            while "mcp_a_echo" not in {t.name for t in (await host.list_tools()).tools}:
                await notes.wait_tools_changed(notes.tools_changed)


class LogNotes(Notes):
    """What a host heard, and the log messages' texts."""

    def __init__(self) -> None:
        super().__init__()
        self.said: list[str] = []

    async def handler(self, message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, types.LoggingMessageNotification):
            self.said.append(str(root.params.data))
        await super().handler(message)


def test_serve_without_tokens_refuses_to_start_and_says_how(tmp_path: Path) -> None:
    done = run_cli("serve", "--http", "127.0.0.1:0", env={"MCP_SUPERVISOR_TOKEN": ""})
    assert done.returncode == 2
    assert "--token-file" in done.stderr and "--no-auth" in done.stderr
    bad = run_cli("serve", "--http", "nowhere", "--no-auth")
    assert bad.returncode == 2 and "HOST:PORT" in bad.stderr
    missing = run_cli("mcp", "--config", str(tmp_path / "absent.json"))
    assert missing.returncode == 2 and "absent.json" in missing.stderr


def test_http_facade_accepts_a_connection_the_moment_it_prints_listening(tmp_path: Path) -> None:
    """A script that connects on the LISTENING line is queued by the kernel, never refused: the line
    is printed once the socket listens (not once uvicorn, imported later, gets round to it)."""
    endpoint = f"ipc://{tmp_path}/nobody.sock"  # no supervisor: the listener does not depend on one
    process = subprocess.Popen(
        facade_argv(endpoint, "serve", "--http", "127.0.0.1:0", "--no-auth"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        assert process.stderr is not None
        line = ""
        deadline = threading.Timer(HOST_TIMEOUT, process.kill)  # the read below is bounded by this
        deadline.start()
        try:
            for line in process.stderr:
                if line.startswith("LISTENING "):
                    break
        finally:
            deadline.cancel()
        assert line.startswith("LISTENING "), f"no LISTENING line within {HOST_TIMEOUT} s: {line!r}"
        port = int(line.split()[1].rsplit(":", 1)[1].split("/")[0])
        with socket.create_connection(("127.0.0.1", port), timeout=HOST_TIMEOUT):
            pass  # connected: before the fix, ECONNREFUSED while uvicorn was still being imported
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(HOST_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
