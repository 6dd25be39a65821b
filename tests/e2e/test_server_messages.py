"""Log messages, argument completions and resource subscriptions, from a server nobody here wrote
(``@modelcontextprotocol/server-everything`` on stdio) to the ZeroMQ stub and to MCP hosts through
the facade.

server-everything logs at ``info`` when a client subscribes or unsubscribes (respecting the level the
client set), sends ``notifications/resources/updated`` for the subscribed URIs when its
``toggle-subscriber-updates`` tool is called (then every 5 s), and completes the arguments of its
``completable-prompt`` (a department, then a name within it) and of its resource templates (a
positive integer id is its own completion).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import mcp_types as types
import pytest
import trio
from mcp.shared.exceptions import MCPError

from supervisor.client.errors import BadRequestError, SupervisorUnreachableError, UnknownToolError
from supervisor.client.watch import EventWatch, message_data
from supervisor.protocol import ResourceUpdated, ServerMessage
from tests.e2e.facade import stdio_host, text_of
from tests.e2e.harness import EVERYTHING, NODE, SupervisorProcess, npm_package, poll

pytestmark = [
    pytest.mark.e2e,
    # logging and resources/subscribe are the handshake era's (deprecated by the SDK for 2026-07-28)
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

URI = "demo://resource/dynamic/text/1"
TEMPLATE = "demo://resource/dynamic/text/{resourceId}"
EVENT_TIMEOUT = 20.0  # seconds for an event to arrive
SUBSCRIBED = "Received Subscribe Resource request for URI: " + URI
UNSUBSCRIBED = "Received Unsubscribe Resource request: " + URI


@pytest.fixture
def sup(start_supervisor: Callable[..., SupervisorProcess]) -> SupervisorProcess:
    return start_supervisor({"ev": {"command": str(NODE), "args": [str(npm_package(EVERYTHING)), "stdio"]}})


def _answers(process: SupervisorProcess) -> bool:
    try:
        process.client.ping()
    except SupervisorUnreachableError:
        return False
    return True


def _next(watch: EventWatch, wanted: Callable[[Any], bool], what: str) -> Any:
    """The next event ``wanted`` accepts, within ``EVENT_TIMEOUT`` (others are skipped)."""
    seen: list[Any] = []

    def check() -> Any:
        event = watch.next(0.2)
        if event is not None:
            seen.append(event)
        return event if event is not None and wanted(event) else None

    try:
        return poll(what, check, EVENT_TIMEOUT, interval=0)
    except BaseException:
        print("events seen:", seen)
        raise


def _logged(text: str) -> Callable[[Any], bool]:
    def wanted(event: Any) -> bool:
        return isinstance(event, ServerMessage) and event.server == "ev" and text in str(message_data(event))

    return wanted


def _updated(uri: str) -> Callable[[Any], bool]:
    return lambda event: isinstance(event, ResourceUpdated) and (event.server, event.uri) == ("ev", uri)


def test_stub_hears_log_messages_and_updates_kept_across_a_kill(sup: SupervisorProcess) -> None:
    client = sup.client
    with client.watch(messages=True) as watch:
        client.set_log_level("debug")
        client.subscribe("ev", URI)
        message = _next(watch, _logged(SUBSCRIBED), "the server's log message about the subscription")
        assert message.level == "info"
        client.call_tool("mcp_ev_toggle-subscriber-updates", {})
        _next(watch, _updated(URI), "the resource update")

        # A server killed comes back set to the level and subscribed again, without being asked again.
        pid = sup.status()["ev"].server_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        poll("a new server", lambda: sup.status()["ev"].server_pid not in (None, pid), EVENT_TIMEOUT)
        sup.wait_states(ev="ready")
        _next(watch, _logged(SUBSCRIBED), "the log message of the subscription made again")
        client.call_tool("mcp_ev_toggle-subscriber-updates", {})
        _next(watch, _updated(URI), "the resource update from the new server")

        client.unsubscribe("ev", URI)
        _next(watch, _logged(UNSUBSCRIBED), "the server's log message about the unsubscription")


def test_a_plain_watch_hears_no_messages(sup: SupervisorProcess) -> None:
    """Log messages and updates go only to subscribers that ask for them (topics ``log``, ``resource``)."""
    client = sup.client
    with client.watch() as plain, client.watch(messages=True) as asking:
        client.set_log_level("debug")
        client.subscribe("ev", URI)
        _next(asking, _logged(SUBSCRIBED), "the log message, on the watch that asked")
        client.restart("ev")  # a state event after the message: the plain watch sees it, and nothing before
        event = _next(plain, lambda event: True, "the restart's state event")
        assert not isinstance(event, ServerMessage | ResourceUpdated), event


def test_stub_completes_prompt_and_template_arguments(sup: SupervisorProcess) -> None:
    client = sup.client
    prompt = {"type": "ref/prompt", "name": "mcp_ev_completable-prompt"}
    assert client.complete(prompt, ("department", "E")).values == ["Engineering"]
    named = {"type": "ref/prompt", "name": "completable-prompt"}
    done = client.complete(named, ("name", "A"), {"department": "Engineering"}, server="ev")
    assert done.values == ["Alice"]
    template = {"type": "ref/resource", "uri": TEMPLATE}
    assert client.complete(template, ("resourceId", "7"), server="ev").values == ["7"]
    with pytest.raises(UnknownToolError, match=r"prefixed name \(mcp_"):
        client.complete({"type": "ref/prompt", "name": "nobody"}, ("department", "E"))
    with pytest.raises(UnknownToolError, match="no prompt named"):
        client.complete({"type": "ref/prompt", "name": "mcp_ev_nothing"}, ("department", "E"))


def test_bad_wishes_are_refused_naming_what_is_wrong(sup: SupervisorProcess) -> None:
    client = sup.client
    with pytest.raises(BadRequestError, match="log level must be one of debug"):
        client.set_log_level("loud")
    with pytest.raises(UnknownToolError, match="no server named 'nope'"):
        client.subscribe("nope", URI)
    with pytest.raises(UnknownToolError, match="no server named 'nope'"):
        client.set_log_level("info", "nope")
    with pytest.raises(BadRequestError, match="resource URI must be 1 to"):
        client.subscribe("ev", "")
    client.unsubscribe("ev", URI)  # never subscribed: nothing to do, and no error
    assert sup.status()["ev"].state == "ready"


class Heard:
    """What a host heard: log messages and resource updates, with a wake-up."""

    def __init__(self) -> None:
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.updated: list[str] = []
        self._wake = trio.Event()

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        self._wake.set()

    async def on_message(self, message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, types.ResourceUpdatedNotification):
            self.updated.append(str(root.params.uri))
            self._wake.set()

    async def until(self, check: Callable[[], bool], what: str) -> None:
        with trio.move_on_after(EVENT_TIMEOUT):
            while not check():
                await self._wake.wait()
                self._wake = trio.Event()
            return
        pytest.fail(f"no {what} within {EVENT_TIMEOUT} s; heard {self.logs} and updates of {self.updated}")


async def test_handshake_host_sets_a_level_subscribes_and_completes_through_the_facade(
    sup: SupervisorProcess,
) -> None:
    heard = Heard()
    async with stdio_host(
        sup.endpoint, logging_callback=heard.on_log, message_handler=heard.on_message
    ) as host:
        assert host.server_capabilities.logging is not None
        assert host.server_capabilities.completions is not None
        assert host.server_capabilities.resources is not None and host.server_capabilities.resources.subscribe
        await host.set_logging_level("debug")
        await host.subscribe_resource(URI)
        await heard.until(lambda: any(SUBSCRIBED in str(p.data) for p in heard.logs), "the log message")
        message = next(p for p in heard.logs if SUBSCRIBED in str(p.data))
        assert (message.level, message.logger) == ("info", "ev")  # the server's name as the logger
        await host.call_tool("mcp_ev_toggle-subscriber-updates", {})
        await heard.until(lambda: URI in heard.updated, "the resource update")

        prompt = types.PromptReference(type="ref/prompt", name="mcp_ev_completable-prompt")
        completed = await host.complete(prompt, {"name": "department", "value": "S"})
        assert completed.completion.values == ["Sales", "Support"]
        template = types.ResourceTemplateReference(type="ref/resource", uri=TEMPLATE)
        by_template = await host.complete(template, {"name": "resourceId", "value": "7"})
        assert by_template.completion.values == ["7"]
        await host.unsubscribe_resource(URI)
        await heard.until(lambda: any(UNSUBSCRIBED in str(p.data) for p in heard.logs), "the unsubscription")


async def test_one_server_facade_keeps_the_servers_own_names(sup: SupervisorProcess) -> None:
    heard = Heard()
    async with stdio_host(sup.endpoint, "--server", "ev", logging_callback=heard.on_log) as host:
        names = {tool.name for tool in (await host.list_tools()).tools}
        assert {"echo", "toggle-subscriber-updates"} <= names
        assert not any(name.startswith("mcp_") for name in names)
        assert text_of(await host.call_tool("echo", {"message": "hi"})) == "Echo: hi"
        prompts = {prompt.name for prompt in (await host.list_prompts()).prompts}
        assert "completable-prompt" in prompts
        result = await host.get_prompt("completable-prompt", {"department": "Sales", "name": "Eve"})
        assert result.messages
        prompt = types.PromptReference(type="ref/prompt", name="completable-prompt")
        completed = await host.complete(prompt, {"name": "name", "value": ""}, {"department": "Sales"})
        assert completed.completion.values == ["David", "Eve", "Frank"]
        await host.set_logging_level("info")
        await host.subscribe_resource(URI)
        await heard.until(lambda: any(SUBSCRIBED in str(p.data) for p in heard.logs), "the log message")
        message = next(p for p in heard.logs if SUBSCRIBED in str(p.data))
        assert message.logger is None  # the server's own (it names none)


async def test_2026_host_hears_updates_on_its_listen_stream(sup: SupervisorProcess) -> None:
    async with stdio_host(sup.endpoint, mode="auto") as host:
        assert host.protocol_version == "2026-07-28"
        async with host.listen(resource_subscriptions=[URI]) as stream:
            await host.call_tool("mcp_ev_toggle-subscriber-updates", {})
            with trio.fail_after(EVENT_TIMEOUT):
                async for event in stream:
                    if getattr(event, "uri", None) == URI:
                        break


async def test_the_facade_answers_bad_requests_with_errors_naming_them(sup: SupervisorProcess) -> None:
    async with stdio_host(sup.endpoint) as host:
        with pytest.raises(MCPError, match="Resource not found: no server lists 'nowhere://x'"):
            await host.subscribe_resource("nowhere://x")
        with pytest.raises(MCPError, match="Unknown prompt: mcp_ev_nothing"):
            await host.complete(
                types.PromptReference(type="ref/prompt", name="mcp_ev_nothing"), {"name": "a", "value": ""}
            )
        unknown = types.ResourceTemplateReference(type="ref/resource", uri="demo://nothing/{x}")
        with pytest.raises(MCPError, match="Unknown resource template: demo://nothing/"):
            await host.complete(unknown, {"name": "x", "value": ""})
        with pytest.raises(MCPError, match=r"logging/setLevel: params\.level: Input should be"):
            await host.session.send_request(
                types.SetLevelRequest(params=types.SetLevelRequestParams.model_construct(level="loud")),
                types.EmptyResult,
            )
        assert text_of(await host.call_tool("mcp_ev_echo", {"message": "still here"})) == "Echo: still here"


async def test_a_one_server_facade_for_a_server_the_supervisor_lacks_says_so(sup: SupervisorProcess) -> None:
    said: list[str] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        said.append(str(params.data))

    async with stdio_host(sup.endpoint, "--server", "nope", logging_callback=on_log) as host:
        assert (await host.list_tools()).tools == []
        assert any("no server named 'nope' (servers: ev)" in text for text in said), said


def test_events_command_prints_the_servers_log_messages(sup: SupervisorProcess, tmp_path: Any) -> None:
    out, err = tmp_path / "events.out", tmp_path / "events.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        events = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "events", "--endpoint", sup.endpoint, "--log-level", "info"],
            stdout=stdout,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
        )
    try:
        poll("events to watch", lambda: "watching" in err.read_text(), EVENT_TIMEOUT)
        sup.client.subscribe("ev", URI)
        line = f"log      ev: info: {SUBSCRIBED}"
        poll("the log line", lambda: line in out.read_text(), EVENT_TIMEOUT)
    finally:
        events.send_signal(signal.SIGINT)
        events.wait(EVENT_TIMEOUT)


def test_the_first_listing_holds_the_tools_a_server_adds_once_a_client_is_initialized(
    start_supervisor: Callable[..., SupervisorProcess],
) -> None:
    """server-everything registers the tools that depend on what the client offers just after the
    handshake and announces them: a listing that waits for the first starts includes them."""
    stdio = {"command": str(NODE), "args": [str(npm_package(EVERYTHING)), "stdio"]}
    process = start_supervisor({f"ev{n}": stdio for n in range(4)}, wait=False)
    poll("the supervisor to answer", lambda: _answers(process), EVENT_TIMEOUT)
    reply = process.client.tool_list(wait=60)
    assert reply.starting == []
    names = {tool.name for tool in reply.tools}
    for n in range(4):
        assert f"mcp_ev{n}_trigger-elicitation-request" in names, sorted(names)
