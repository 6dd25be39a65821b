"""The worker's own MCP client for stdio servers (``workers.lean``): what it takes for a JSON-RPC message
(exactly what the SDK's parser takes), that no line can raise out of it, and that it says to a server
what the SDK's client says, byte for byte.

The lines the SDK's client writes are the SDK's own, recorded here as the SDK 2.3 ``Client`` (mode
``auto``, the worker's callbacks) wrote them to a server.
"""

from __future__ import annotations

import json
from typing import Any, cast

import mcp_types
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.config.model import RootEntry, ServerSpec
from tests.hostile import json_values
from workers.lean import LeanClient
from workers.messages import LogMessage
from workers.own_requests import OwnRequests
from workers.requests import ServerRequests
from workers.server_errors import MCPError
from workers.stdio import StdioServer

WAIT = 5.0  # seconds any one wait may take
INFO = {"name": "mcp-supervisor", "version": "0.1.0"}
CAPABILITIES = {"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": True}}
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": INFO,
    "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
}
SDK_DISCOVER = (
    '{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{'
    '"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
    '"io.modelcontextprotocol/clientInfo":{"name":"mcp-supervisor","version":"0.1.0"},'
    '"io.modelcontextprotocol/clientCapabilities":{"sampling":{},"elicitation":{"form":{},"url":{}},'
    '"roots":{"listChanged":true}}}}}'
)
SDK_INITIALIZE = (
    '{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    '"capabilities":{"sampling":{},"elicitation":{"form":{},"url":{}},"roots":{"listChanged":true}},'
    '"clientInfo":{"name":"mcp-supervisor","version":"0.1.0"}}}'
)
SDK_INITIALIZED = '{"jsonrpc":"2.0","method":"notifications/initialized"}'


class FakeServer:
    """A stdio server as the client sees it: its lines collected, answered by ``answer``."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.written = trio.Event()
        self.own = OwnRequests(self._write)
        self._seen = 0  # lines looked at by ``next_request``

    def _write(self, line: bytes, *, at_once: bool = False) -> int:
        self.lines.append(line)
        self.written.set()
        return sum(len(line) + 1 for line in self.lines[:-1])

    def send(self, line: bytes) -> None:
        self._write(line)

    async def next_request(self) -> dict[str, Any]:
        """The next request written after those already looked at."""
        while True:
            while self._seen < len(self.lines):
                message = cast(dict[str, Any], json.loads(self.lines[self._seen]))
                self._seen += 1
                if "id" in message and "method" in message:
                    return message
            self.written = trio.Event()
            await self.written.wait()

    def answer(self, request: dict[str, Any], **outcome: Any) -> None:
        assert self.own.take(json.dumps({"jsonrpc": "2.0", "id": request["id"], **outcome}).encode())


def spec() -> ServerSpec:
    """A stdio server with roots and caller sampling: every capability is offered."""
    return ServerSpec(
        name="s",
        transport="stdio",
        command="x",
        args=(),
        env={},
        cwd=None,
        url=None,
        headers={},
        tool_timeout=30.0,
        disabled=False,
        roots=(RootEntry(uri="file:///tmp"),),
        sampling_caller=True,
    )


def client_for(server: FakeServer, nursery: trio.Nursery, events: list[Any] | None = None) -> LeanClient:
    def on_event(kind: str, value: Any) -> None:
        if events is not None:
            events.append((kind, value))

    requests = ServerRequests(spec())
    return LeanClient(cast(StdioServer, server), requests, INFO, on_event, nursery)


def without_id(line: bytes | str) -> dict[str, Any]:
    message = cast(dict[str, Any], json.loads(line))
    message.pop("id", None)
    return message


async def test_a_handshake_era_server_gets_the_sdks_discover_then_initialize_and_initialized() -> None:
    server = FakeServer()
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            client = client_for(server, nursery)
            nursery.start_soon(client.connect)
            discover = await server.next_request()
            server.answer(discover, error={"code": -32601, "message": "Method not found"})
            initialize = await server.next_request()
            assert initialize["method"] == "initialize"
            result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": True}}}
            server.answer(initialize, result={**result, "serverInfo": {"name": "s", "version": "1"}})
    assert [without_id(line) for line in server.lines] == [
        without_id(SDK_DISCOVER),
        without_id(SDK_INITIALIZE),
        without_id(SDK_INITIALIZED),
    ]
    # Byte for byte, but for the ids (the worker's own are above OWN_IDS, the SDK's count from 1).
    assert server.lines[2] == SDK_INITIALIZED.encode()
    assert (
        server.lines[1].replace(b'"id":' + str(initialize["id"]).encode(), b'"id":2')
        == SDK_INITIALIZE.encode()
    )
    assert client.protocol_version == "2025-06-18"
    assert client.server_capabilities.tools is not None and client.server_capabilities.tools.list_changed
    assert client.own.envelope is None  # handshake-era requests carry no _meta


async def test_a_modern_server_is_adopted_and_every_request_then_carries_the_envelope() -> None:
    server = FakeServer()
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            client = client_for(server, nursery)
            nursery.start_soon(client.connect)
            discover = await server.next_request()
            meta = {"io.modelcontextprotocol/serverInfo": {"name": "m", "version": "2"}}
            result = {"supportedVersions": ["2026-07-28"], "capabilities": {}, "_meta": meta}
            server.answer(discover, result=result)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(client.set_logging_level, "info")
            request = await server.next_request()
            server.answer(request, result={})
    assert client.protocol_version == "2026-07-28"
    assert client.server_info is not None and (client.server_info.name, client.server_info.version) == (
        "m",
        "2",
    )
    assert request["params"] == {"level": "info", "_meta": ENVELOPE}
    assert len(server.lines) == 2  # no notifications/initialized on 2026-07-28


async def test_an_initialize_answer_that_is_not_the_sdks_initialize_result_fails_as_the_sdk_fails() -> None:
    server = FakeServer()
    with trio.fail_after(WAIT), pytest.RaisesGroup(pytest.RaisesExc(Exception, match="serverInfo")):
        async with trio.open_nursery() as nursery:
            client = client_for(server, nursery)
            nursery.start_soon(client.connect)
            server.answer(await server.next_request(), error={"code": -32601, "message": "no"})
            server.answer(
                await server.next_request(), result={"protocolVersion": "2025-06-18", "capabilities": {}}
            )


async def test_a_server_request_is_answered_with_the_sdks_answer_and_ping_without_the_sdk() -> None:
    server = FakeServer()
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            client = client_for(server, nursery)
            client.protocol_version = "2025-06-18"
            assert client.receive(b'{"jsonrpc":"2.0","id":"p","method":"ping"}')
            assert client.receive(b'{"jsonrpc":"2.0","id":7,"method":"roots/list"}')
            assert client.receive(b'{"jsonrpc":"2.0","id":8,"method":"nope/nothing"}')
    answers = {json.loads(line)["id"]: json.loads(line) for line in server.lines}
    assert answers["p"] == {"jsonrpc": "2.0", "id": "p", "result": {}}
    assert answers[7]["result"] == {"roots": [{"uri": "file:///tmp"}]}
    assert answers[8]["error"] == {"code": -32601, "message": "Method not found", "data": "nope/nothing"}


async def test_a_request_the_server_cancels_is_not_answered() -> None:
    server = FakeServer()
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            client = client_for(server, nursery)
            client.protocol_version = "2025-06-18"
            asked = trio.Event()

            async def slow(method: str, params: dict[str, Any]) -> None:
                asked.set()
                await trio.sleep_forever()

            client.requests.ask_caller = slow  # type: ignore[assignment]
            client.receive(
                b'{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"m",'
                b'"requestedSchema":{"type":"object","properties":{}}}}'
            )
            await asked.wait()
            client.receive(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}')
    assert server.lines == []


def test_notifications_reach_the_worker_and_bad_ones_are_dropped() -> None:
    events: list[Any] = []
    client = client_for(FakeServer(), cast(trio.Nursery, None), events)
    assert client.receive(b'{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}')
    assert client.receive(
        b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":[1]}}'
    )
    assert client.receive(
        b'{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"x://a"}}'
    )
    assert client.receive(
        b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"loud","data":1}}'
    )
    assert client.receive(b'{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{}}')
    assert events == [("tools", None), ("logged", LogMessage(level="info", data=[1])), ("updated", "x://a")]


def _sdk_takes(line: bytes) -> bool:
    try:
        mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        return False
    return True


def _taken(line: bytes) -> bool:
    client = client_for(FakeServer(), cast(trio.Nursery, None))
    client._tasks = cast(trio.Nursery, type("Tasks", (), {"start_soon": lambda *args: None})())
    return client.receive(line)


GARBAGE = [
    b"",
    b"not json",
    b"\xff\xfe",
    b"[]",
    b"5",
    b'"2.0"',
    b"{}",
    b'{"jsonrpc":"1.0","method":"x"}',
    b'{"jsonrpc":"2.0"}',
    b'{"jsonrpc":"2.0","id":1}',
    b'{"jsonrpc":"2.0","id":1,"result":5}',
    b'{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}',
    b'{"jsonrpc":"2.0","method":5}',
    b'{"jsonrpc":"2.0","method":"x","params":[1]}',
    b'{"jsonrpc":"2.0","id":null,"result":{}}',
    b"[" * 5000 + b"]" * 5000,
    b'{"jsonrpc":"2.0","method":"x","params":{"a":' + b"[" * 5000 + b"]" * 5000 + b"}}",
]
MESSAGES = [
    b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":"a","method":"x","params":{}}',
    b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}',
    b'{"jsonrpc":"2.0","id":1,"result":{}}',
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}',
    b'{"jsonrpc":"2.0","id":1,"method":"x","extra":true}',
]


@pytest.mark.parametrize("line", GARBAGE + MESSAGES)
def test_a_line_is_a_message_exactly_when_the_sdk_takes_it_for_one(line: bytes) -> None:
    assert _taken(line) == _sdk_takes(line) == (line in MESSAGES)


_keys = st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error", "code", "message", "data"])
_atoms = st.one_of(
    st.sampled_from(["2.0", "1.0", "ping", "x", 0, 1, -1, None, True, 1.5, 1.0, "1", " 2 ", "1.0", "id", []]),
    st.dictionaries(
        st.sampled_from(["code", "message", "data"]),
        st.sampled_from([1, "m", None, 1.5, 2.0, True, "3", "x", []]),
        max_size=3,
    ),
    st.just({}),
)
_message_like = st.dictionaries(_keys, _atoms, max_size=6)


@given(_message_like)
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_message_like_objects_are_taken_exactly_when_the_sdk_takes_them(message: dict[str, Any]) -> None:
    line = json.dumps(message).encode()
    assert _taken(line) == _sdk_takes(line), line


@given(st.one_of(st.binary(max_size=200), json_values().map(lambda value: json.dumps(value).encode())))
@settings(max_examples=300, deadline=None)
def test_no_line_raises_out_of_the_client(line: bytes) -> None:
    assert _taken(line) in (True, False)


def test_the_errors_read_as_the_sdks() -> None:
    error = MCPError(-32602, "bad", {"x": 1})
    assert (str(error), error.code, error.data, type(error).__name__) == ("bad", -32602, {"x": 1}, "MCPError")


async def test_a_2026_session_refuses_a_ping_as_the_sdk_does() -> None:
    server = FakeServer()
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            client = client_for(server, nursery)
            client.protocol_version = "2026-07-28"
            assert client.receive(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    [answer] = [json.loads(line) for line in server.lines]
    assert answer["error"] == {"code": -32601, "message": "Method not found", "data": "ping"}


async def test_a_listen_stream_yields_its_events_and_ends_as_the_server_says() -> None:
    server = FakeServer()
    seen: list[Any] = []
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            client = client_for(server, nursery)
            client.protocol_version = "2026-07-28"

            async def consume() -> None:
                async with client.listen(tools_list_changed=True) as subscription:
                    async for event in subscription:
                        seen.append(event)

            nursery.start_soon(consume)
            request = await server.next_request()
            assert request["method"] == "subscriptions/listen" and request["id"].startswith("listen-")
            assert request["params"]["notifications"] == {"toolsListChanged": True}
            stamp = {"io.modelcontextprotocol/subscriptionId": request["id"]}
            ack = {"notifications": {"toolsListChanged": True}, "_meta": stamp}
            client.receive(
                json.dumps(
                    {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": ack}
                ).encode()
            )
            changed = {
                "jsonrpc": "2.0",
                "method": "notifications/tools/list_changed",
                "params": {"_meta": stamp},
            }
            client.receive(json.dumps(changed).encode())
            await trio.testing.wait_all_tasks_blocked()
            server.answer(request, result={})  # the graceful close
    assert [type(event).__name__ for event in seen] == ["ListChanged"]


async def test_a_lost_listen_stream_raises_subscription_lost_itself() -> None:
    server = FakeServer()
    with trio.fail_after(WAIT):
        async with trio.open_nursery() as nursery:
            client = client_for(server, nursery)
            client.protocol_version = "2026-07-28"
            outcome: list[BaseException] = []

            async def consume() -> None:
                try:
                    async with client.listen(tools_list_changed=True) as subscription:
                        async for _ in subscription:
                            pass
                except Exception as exc:
                    outcome.append(exc)

            nursery.start_soon(consume)
            request = await server.next_request()
            server.answer(request, error={"code": -32601, "message": "Method not found"})
    [error] = outcome
    assert isinstance(error, MCPError) and error.code == -32601
