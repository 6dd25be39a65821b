"""The stdio facade's first answer, given before the SDK is loaded (``supervisor.facade.handshake``):
the same as the SDK's own answer for every request it answers, no answer for the others, and the
reading of stdin around it; and the SDK's second answer to the same request, dropped (``Answers``)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import mcp_types as types
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.shared.message import SessionMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from supervisor.facade.handshake import (
    HANDSHAKE_VERSIONS,
    MODERN_VERSIONS,
    Answered,
    Opening,
    answer,
    first_answer,
)
from supervisor.facade.pipes import Answers, Unanswered
from supervisor.facade.server import Facade, FacadeOptions

WAIT = 30.0  # seconds any one wait of these tests may take

PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"

HOSTS_CAPABILITIES: list[dict[str, Any]] = [
    {},
    {"roots": {"listChanged": True}, "sampling": {}},
    {"roots": {"listChanged": True}, "sampling": {}, "elicitation": {}},
    {
        "sampling": {"context": {}, "tools": {}},
        "elicitation": {"form": {}, "url": {}},
        "roots": {"listChanged": False},
        "experimental": {"x": {}},
        "extensions": {"io.example/ui": {}},
        "tasks": {"list": {}, "cancel": {}, "requests": {"sampling": {"createMessage": {}}}},
    },
]
CLIENT_INFOS: list[dict[str, Any]] = [
    {"name": "claude-ai", "version": "0.1.0"},
    {"name": "Visual Studio Code", "version": "1.99.0", "title": "VS Code"},
    {"name": "Café", "version": "", "description": "a host", "websiteUrl": "https://example.com"},
]


def line(message: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **message}).encode()


def initialize(version: str, capabilities: Any = None, client: Any = None, id: Any = 1) -> bytes:
    params = {
        "protocolVersion": version,
        "capabilities": {} if capabilities is None else capabilities,
        "clientInfo": CLIENT_INFOS[0] if client is None else client,
    }
    return line({"id": id, "method": "initialize", "params": params})


def discover(meta: dict[str, Any] | None = None, id: Any = 1) -> bytes:
    envelope = {PROTOCOL_VERSION: MODERN_VERSIONS[-1], CLIENT_CAPABILITIES: {}} if meta is None else meta
    return line({"id": id, "method": "server/discover", "params": {"_meta": envelope}})


async def sdk_answer(request: bytes) -> dict[str, Any]:
    """The facade's SDK server's answer to ``request``, the first line of a connection, as its stdio
    transport writes it."""
    facade = Facade(FacadeOptions())
    to_server, messages = anyio.create_memory_object_stream[SessionMessage | Exception](1)
    answers, from_server = anyio.create_memory_object_stream[SessionMessage](1)
    with trio.fail_after(WAIT), to_server, messages, answers, from_server:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(facade.server.run, messages, answers, facade.initialization_options())
            await to_server.send(SessionMessage(types.jsonrpc_message_adapter.validate_json(request)))
            answered = await from_server.receive()
            tasks.cancel_scope.cancel()
    result: dict[str, Any] = json.loads(answered.message.model_dump_json(by_alias=True, exclude_unset=True))
    return result


# ------------------------------------------------------------------ the answer is the SDK's


def test_the_protocol_versions_are_the_sdks() -> None:
    assert HANDSHAKE_VERSIONS == HANDSHAKE_PROTOCOL_VERSIONS
    assert MODERN_VERSIONS == MODERN_PROTOCOL_VERSIONS


ANSWERED = [
    *(initialize(version) for version in (*HANDSHAKE_PROTOCOL_VERSIONS, "2026-07-28", "1999-01-01", "")),
    *(initialize("2025-06-18", capabilities) for capabilities in HOSTS_CAPABILITIES),
    *(initialize("2025-11-25", client=client) for client in CLIENT_INFOS),
    initialize("2025-11-25", id="abc"),
    initialize("2025-11-25", id=2**40),
    initialize("2025-11-25", id=-(2**70)),
    initialize("2025-11-25", id=0),
    discover(),
    discover(id="discover-1"),
    *(
        discover({PROTOCOL_VERSION: "2026-07-28", CLIENT_CAPABILITIES: capabilities, CLIENT_INFO: client})
        for capabilities, client in zip(HOSTS_CAPABILITIES, [*CLIENT_INFOS, CLIENT_INFOS[0]], strict=True)
    ),
]


@pytest.mark.parametrize("request_line", ANSWERED, ids=lambda request: request.decode(errors="replace")[:90])
async def test_a_request_answered_before_the_sdk_gets_the_sdks_answer(request_line: bytes) -> None:
    answered = answer(request_line)
    assert answered is not None
    assert answered.response == await sdk_answer(request_line)


def nested(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects of ``children`` (under any name but listChanged)."""
    names = st.text(min_size=1, max_size=8).filter(lambda name: name != "listChanged")
    return st.dictionaries(names, children, max_size=3)


capability_trees = st.recursive(
    st.fixed_dictionaries({}, optional={"listChanged": st.booleans()}), nested, max_leaves=8
)
capabilities = st.dictionaries(
    st.sampled_from(["roots", "sampling", "elicitation", "experimental", "extensions", "tasks", "other"]),
    capability_trees,
    max_size=4,
)
client_infos = st.fixed_dictionaries(
    {"name": st.text(max_size=8), "version": st.text(max_size=8)},
    optional={"title": st.text(max_size=8), "websiteUrl": st.text(max_size=8)},
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    version=st.sampled_from([*HANDSHAKE_PROTOCOL_VERSIONS, "2026-07-28", "2025-13-01"])
    | st.text(max_size=12),
    capabilities=capabilities,
    client=client_infos,
    modern=st.booleans(),
)
def test_whatever_the_shape_answered_before_the_sdk_the_sdk_answers_alike(
    version: str, capabilities: dict[str, Any], client: dict[str, Any], modern: bool
) -> None:
    if modern:
        request = discover(
            {PROTOCOL_VERSION: "2026-07-28", CLIENT_CAPABILITIES: capabilities, CLIENT_INFO: client}
        )
    else:
        request = initialize(version, capabilities, client)
    answered = answer(request)
    if answered is not None:
        assert answered.response == trio.run(sdk_answer, request)


NOT_ANSWERED = [
    b"not json",
    initialize("2025-11-25").decode().encode("utf-16"),
    initialize("2025-11-25", client={"name": "x", "version": "1"}).replace(b'"x"', b'"\xff"'),
    b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": NaN}}',
    b"[" + initialize("2025-11-25") + b"]",
    initialize("2025-11-25", id=True),
    initialize("2025-11-25", id=1.5),
    initialize("2025-11-25", id=None),
    initialize("2025-11-25").replace(b'"2.0"', b'"1.0"'),
    line({"id": 1, "method": "initialize"}),
    line({"id": 1, "method": "initialize", "params": {}, "extra": 1}),
    line({"id": 1, "method": "tools/list", "params": {}}),
    line({"id": 1, "method": "ping", "params": {}}),
    line({"method": "notifications/initialized"}),
    initialize("2025-11-25").replace(b'"clientInfo"', b'"_meta": {}, "clientInfo"'),
    initialize(7),  # type: ignore[arg-type]
    initialize("2025-11-25", capabilities={"roots": True}),
    initialize("2025-11-25", capabilities={"roots": {"listChanged": "yes"}}),
    initialize("2025-11-25", capabilities={"experimental": {"x": {"n": 1}}}),
    initialize("2025-11-25", capabilities=[]),
    initialize("2025-11-25", client={"name": "x"}),
    initialize("2025-11-25", client={"name": "x", "version": 1}),
    initialize("2025-11-25", client={"name": "x", "version": "1", "icons": []}),
    discover({PROTOCOL_VERSION: "2025-11-25", CLIENT_CAPABILITIES: {}}),
    discover({PROTOCOL_VERSION: "2027-01-01", CLIENT_CAPABILITIES: {}}),
    discover({PROTOCOL_VERSION: "2026-07-28"}),
    discover(
        {PROTOCOL_VERSION: "2026-07-28", CLIENT_CAPABILITIES: {}, "io.modelcontextprotocol/logLevel": "info"}
    ),
    discover({PROTOCOL_VERSION: "2026-07-28", CLIENT_CAPABILITIES: {}, "progressToken": 1}),
    discover({PROTOCOL_VERSION: "2026-07-28", CLIENT_CAPABILITIES: {}, CLIENT_INFO: {"name": "x"}}),
    line({"id": 1, "method": "server/discover", "params": {}}),
    line({"id": 1, "method": "server/discover", "params": {"_meta": {}, "cursor": "x"}}),
    b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": '
    + b"[" * 100_000
    + b"]" * 100_000
    + b"}",
]


@pytest.mark.parametrize(
    "request_line", NOT_ANSWERED, ids=lambda request: request.decode(errors="replace")[:90]
)
def test_other_lines_are_left_to_the_sdk(request_line: bytes) -> None:
    assert answer(request_line) is None


# ------------------------------------------------------------------ reading stdin, writing stdout


@pytest.fixture
def pipes() -> Iterator[tuple[int, int, int, int]]:
    """(stdin's read end, its write end, stdout's read end, its write end)."""
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    yield stdin_r, stdin_w, stdout_r, stdout_w
    for fd in (stdin_r, stdin_w, stdout_r, stdout_w):
        with contextlib.suppress(OSError):  # closed by the test
            os.close(fd)


def written(fd: int) -> bytes:
    """What was written to a pipe so far (nothing waits)."""
    out = b""
    while select.select([fd], [], [], 0)[0]:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        out += chunk
    return out


def not_called() -> None:
    raise AssertionError("nothing is loaded in the background when the line is there")


def bounded(run: Any) -> Opening:
    """``run()`` in a thread, which must be done within ``WAIT`` seconds."""
    done: list[Opening] = []
    thread = threading.Thread(target=lambda: done.append(run()), daemon=True)
    thread.start()
    thread.join(WAIT)
    assert done, f"first_answer did not return within {WAIT} s"
    return done[0]


def test_a_line_that_is_there_is_answered_at_once_and_read_again_by_the_transport(
    pipes: tuple[int, int, int, int],
) -> None:
    stdin_r, stdin_w, stdout_r, stdout_w = pipes
    request, after = initialize("2025-11-25"), line({"method": "notifications/initialized"}) + b"\n{"
    os.write(stdin_w, request + b"\n" + after)
    opening = bounded(lambda: first_answer(not_called, stdin=stdin_r, stdout=stdout_w))
    assert opening.answered is not None and opening.answered.method == "initialize"
    assert opening.read == request + b"\n" + after
    sent = written(stdout_r)
    assert sent.endswith(b"\n") and json.loads(sent) == opening.answered.response


def test_a_line_left_to_the_sdk_is_not_answered_but_handed_over(pipes: tuple[int, int, int, int]) -> None:
    stdin_r, stdin_w, stdout_r, stdout_w = pipes
    os.write(stdin_w, b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n')
    opening = bounded(lambda: first_answer(not_called, stdin=stdin_r, stdout=stdout_w))
    assert opening == Opening(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n', None)
    assert written(stdout_r) == b""


def test_a_host_that_closes_stdin_before_a_whole_line_is_not_answered(
    pipes: tuple[int, int, int, int],
) -> None:
    stdin_r, stdin_w, stdout_r, stdout_w = pipes
    os.write(stdin_w, initialize("2025-11-25"))  # no newline
    os.close(stdin_w)
    opening = bounded(lambda: first_answer(not_called, stdin=stdin_r, stdout=stdout_w))
    assert opening == Opening(initialize("2025-11-25"), None)
    assert written(stdout_r) == b""


def test_while_the_line_has_not_come_the_sdk_loads_and_then_the_facade_waits_no_longer(
    pipes: tuple[int, int, int, int],
) -> None:
    stdin_r, stdin_w, stdout_r, stdout_w = pipes
    os.write(stdin_w, b'{"jsonrpc": "2.0",')  # a line begun, never ended
    loaded = threading.Event()
    opening = bounded(lambda: first_answer(loaded.set, stdin=stdin_r, stdout=stdout_w))
    assert loaded.is_set()
    assert opening == Opening(b'{"jsonrpc": "2.0",', None)
    assert written(stdout_r) == b""


def test_a_line_that_comes_while_the_sdk_loads_is_answered(pipes: tuple[int, int, int, int]) -> None:
    stdin_r, stdin_w, stdout_r, stdout_w = pipes
    request = discover()

    def load() -> None:
        os.write(stdin_w, request + b"\n")  # the host writes while the facade is loading

    opening = bounded(lambda: first_answer(load, stdin=stdin_r, stdout=stdout_w))
    assert opening.answered is not None and opening.answered.method == "server/discover"
    assert opening.read == request + b"\n"
    assert json.loads(written(stdout_r)) == opening.answered.response


def test_a_failure_to_load_in_the_background_is_left_to_the_main_thread(
    pipes: tuple[int, int, int, int],
) -> None:
    stdin_r, _, _, stdout_w = pipes

    def load() -> None:
        raise ImportError("no such module")

    assert bounded(lambda: first_answer(load, stdin=stdin_r, stdout=stdout_w)) == Opening()


def test_a_host_gone_before_the_answer_is_written_leaves_it_to_the_transport(
    pipes: tuple[int, int, int, int],
) -> None:
    stdin_r, stdin_w, stdout_r, stdout_w = pipes
    os.write(stdin_w, initialize("2025-11-25") + b"\n")
    os.close(stdout_r)  # the host reads no more: EPIPE
    opening = bounded(lambda: first_answer(not_called, stdin=stdin_r, stdout=stdout_w))
    assert opening.answered is not None  # the SDK's answer is dropped all the same


# ------------------------------------------------------------------ the SDK's answer, dropped


def response(id: int | str, result: dict[str, Any]) -> SessionMessage:
    return SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=id, result=result))


async def test_the_sdks_answer_to_the_request_answered_before_is_dropped_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    request = initialize("2025-11-25")
    answered = answer(request)
    assert answered is not None
    sdk = types.jsonrpc_message_adapter.validate_python(await sdk_answer(request))
    out, into = anyio.create_memory_object_stream[SessionMessage](10)
    unanswered = Unanswered()
    await unanswered.add(1)
    await unanswered.add(2)
    with out, into, caplog.at_level(logging.DEBUG, "mcp_supervisor.facade"):
        answers = Answers(out, unanswered, answered)
        await answers.send(SessionMessage(sdk))
        await answers.send(response(2, {}))
        await answers.send(response(1, {}))  # a later answer under the same id goes out
        sent = [into.receive_nowait().message for _ in range(into.statistics().current_buffer_used)]
    assert [message.id for message in sent if isinstance(message, types.JSONRPCResponse)] == [2, 1]
    assert len(unanswered) == 0
    assert "the SDK answers initialize as the facade did" in caplog.text
    assert "otherwise" not in caplog.text


async def test_an_sdk_answer_unlike_the_one_sent_is_warned_of(caplog: pytest.LogCaptureFixture) -> None:
    answered = Answered(1, "initialize", {"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "x"}})
    out, into = anyio.create_memory_object_stream[SessionMessage](10)
    with out, into, caplog.at_level(logging.WARNING, "mcp_supervisor.facade"):
        await Answers(out, Unanswered(), answered).send(response(1, {"protocolVersion": "y"}))
        assert into.statistics().current_buffer_used == 0
    assert "otherwise than the SDK does" in caplog.text
