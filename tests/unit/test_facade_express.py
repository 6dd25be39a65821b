"""The facade's fast path (``supervisor.facade.express``), in one process: which requests it takes, and
that what it takes and answers is what the SDK reads and answers.

A real ``Facade`` over a fake link to the supervisor (its tools, settled). The SDK's side is the SDK's
own code: its stdio transport's decoding (``jsonrpc_message_adapter``) and its runner's shaping of a
handler's result (``ServerRunner._serialize``), against which the fast path is held."""

from __future__ import annotations

import json
from typing import Any, cast

import mcp_types as types
import msgspec
import pytest
import trio
import trio.lowlevel
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.server.connection import Connection
from mcp.server.runner import ServerRunner
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, KNOWN_PROTOCOL_VERSIONS

from supervisor.client.aio import AsyncSupervisorClient
from supervisor.facade.express import MAX_BRACKETS
from supervisor.facade.served_tools import ServedTools
from supervisor.facade.server import Facade, FacadeOptions
from supervisor.facade.upstream import Change, SupervisorGone, Upstream
from supervisor.facade.upstreams import Upstreams
from supervisor.protocol import ToolInfo, ToolResult
from tests.hostile import json_values

MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
ECHO = ToolInfo(name="mcp_t_echo", server="t", original_name="echo", input_schema={"type": "object"})
ENVELOPE = {
    types.PROTOCOL_VERSION_META_KEY: MODERN,
    types.CLIENT_INFO_META_KEY: {"name": "unit", "version": "0"},
    types.CLIENT_CAPABILITIES_META_KEY: {},
}


class FakeUpstream:
    """What the fast path reads of the link to the supervisor: its tools, as last listed."""

    def __init__(self, *tools: ToolInfo, settled: bool = True) -> None:
        self._tools = {tool.name: tool for tool in tools}
        self.settled = self.connected = settled
        self.version = 1

    def listed(self) -> list[ToolInfo]:
        return list(self._tools.values())

    def find(self, name: str) -> ToolInfo | None:
        return self._tools.get(name)

    def server_of(self, name: str, tool: ToolInfo | None) -> str | None:
        return tool.server if tool is not None else None


def facade(upstream: FakeUpstream | None = None, **options: Any) -> Facade:
    made = Facade(FacadeOptions(**options))
    made.upstream = cast(Upstreams, upstream or FakeUpstream(ECHO))
    return made


def line(message: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n"


def call(id: object = 1, **params: Any) -> bytes:
    return line({"id": id, "method": "tools/call", "params": {"name": "mcp_t_echo", **params}})


# ------------------------------------------------------------------ what is taken


def test_a_plain_call_is_taken_with_its_id_name_arguments_and_progress_token() -> None:
    taken = facade().express.take(call(7, arguments={"text": "hi"}, _meta={"progressToken": "p"}), HANDSHAKE)
    assert taken is not None
    assert (taken.id, taken.method, taken.version) == (7, "tools/call", HANDSHAKE)
    assert (taken.name, taken.arguments, taken.progress) == ("mcp_t_echo", {"text": "hi"}, "p")


def test_a_listing_is_taken_with_its_answer_made_once_per_version() -> None:
    express = facade().express
    first = express.take(line({"id": "l", "method": "tools/list"}), HANDSHAKE)
    again = express.take(line({"id": "m", "method": "tools/list", "params": {}}), HANDSHAKE)
    assert first is not None and again is not None and first.listing is again.listing
    listed = msgspec.json.decode(first.listing or b"")
    assert [tool["name"] for tool in listed["tools"]] == ["mcp_t_echo"]


def test_a_2026_request_is_taken_by_its_own_envelope() -> None:
    taken = facade().express.take(call(arguments={}, _meta=ENVELOPE), None)
    assert taken is not None and taken.version == MODERN


ODD_LINES = {
    "another member at the top": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "x": 1}',
    "jsonrpc 1.0": b'{"jsonrpc": "1.0", "id": 1, "method": "tools/list"}',
    "an id that is a fraction": b'{"jsonrpc": "2.0", "id": 1.0, "method": "tools/list"}',
    "an id that is true": b'{"jsonrpc": "2.0", "id": true, "method": "tools/list"}',
    "an id that is null": b'{"jsonrpc": "2.0", "id": null, "method": "tools/list"}',
    "an id too big for 64 bits": b'{"jsonrpc":"2.0","id":123456789012345678901234,"method":"tools/list"}',
    "a notification": b'{"jsonrpc": "2.0", "method": "tools/list"}',
    "another method": b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
    "a batch": b'[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]',
    "a call without params": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call"}',
    "params that are null": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": null}',
    "arguments that are null": call(arguments=None),
    "arguments that are a list": call(arguments=[1]),
    "a name that is a number": line({"id": 1, "method": "tools/call", "params": {"name": 5}}),
    "another member in params": call(task={"ttl": 5}),
    "another key in _meta": call(_meta={"progressToken": 1, "other": 2}),
    "a progress token that is a fraction": call(_meta={"progressToken": 1.5}),
    "a progress token that is true": call(_meta={"progressToken": True}),
    "the 2026 envelope on a handshake connection": call(_meta=ENVELOPE),
    "invalid UTF-8": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "\xff"}}',
    "JSON that breaks off": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {',
    "garbage after the JSON": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"} x',
    "a lone surrogate": call(arguments={"text": "\ud800"}),
    "brackets as many as the SDK nests": call(arguments={"l": [[]] * MAX_BRACKETS}),
    "an object nested 1000 deep": call().replace(
        b'"params": {', b'"params": {"arguments": {"a": ' + b'{"a": ' * 999 + b"1" + b"}" * 1000 + b", ", 1
    ),
}


@pytest.mark.parametrize("body", ODD_LINES.values(), ids=ODD_LINES.keys())
def test_anything_unusual_goes_the_sdks_way(body: bytes) -> None:
    assert facade().express.take(body, HANDSHAKE) is None


ODD_ENVELOPES = {
    "no envelope": {},
    "no capabilities": {types.PROTOCOL_VERSION_META_KEY: MODERN},
    "a version the SDK does not serve": {**ENVELOPE, types.PROTOCOL_VERSION_META_KEY: "2099-01-01"},
    "a version that is a number": {**ENVELOPE, types.PROTOCOL_VERSION_META_KEY: 2026},
    "capabilities that are a list": {**ENVELOPE, types.CLIENT_CAPABILITIES_META_KEY: []},
    "a host that offers sampling": {**ENVELOPE, types.CLIENT_CAPABILITIES_META_KEY: {"sampling": {}}},
    "a host that offers elicitation": {**ENVELOPE, types.CLIENT_CAPABILITIES_META_KEY: {"elicitation": {}}},
    "another key": {**ENVELOPE, "io.modelcontextprotocol/other": 1},
}


@pytest.mark.parametrize("meta", ODD_ENVELOPES.values(), ids=ODD_ENVELOPES.keys())
def test_a_2026_request_with_an_unusual_envelope_goes_the_sdks_way(meta: dict[str, Any]) -> None:
    assert facade().express.take(call(_meta=meta), None) is None


def test_a_host_that_offers_sampling_or_elicitation_has_its_calls_made_the_sdks_way() -> None:
    assert facade().express.take(call(), HANDSHAKE, plain_host=False) is None


def test_nothing_is_taken_before_the_facade_has_a_supervisor_and_its_listing() -> None:
    express = facade(FakeUpstream(ECHO, settled=False)).express
    assert express.take(call(), HANDSHAKE) is None
    assert express.take(line({"id": 1, "method": "tools/list"}), HANDSHAKE) is None


def test_a_search_facade_lists_on_the_fast_path_and_calls_the_sdks_way() -> None:
    express = facade(search=True).express
    assert express.take(line({"id": 1, "method": "tools/list"}), HANDSHAKE) is not None
    assert express.take(call(), HANDSHAKE) is None


@settings(max_examples=300)
@given(
    id=st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=8)),
    name=st.text(max_size=8),
    arguments=st.dictionaries(st.text(max_size=5), json_values(), max_size=4),
    token=st.none() | st.integers(0, 10) | st.text(max_size=4),
)
def test_what_the_fast_path_takes_the_sdk_reads_alike(
    id: object, name: str, arguments: Any, token: Any
) -> None:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    body = line({"id": id, "method": "tools/call", "params": params})
    taken = facade().express.take(body, HANDSHAKE)
    if taken is None:
        return  # (many brackets, or a value msgspec does not read as pydantic does): the SDK's way
    read = types.jsonrpc_message_adapter.validate_json(body.decode(), by_name=False)
    assert isinstance(read, types.JSONRPCRequest)
    assert (read.id, read.method) == (taken.id, taken.method)
    assert read.params is not None
    assert (read.params["name"], read.params["arguments"], token) == (
        taken.name,
        taken.arguments,
        taken.progress,
    )


@given(st.binary(max_size=200))
def test_any_bytes_are_taken_or_left_without_raising(body: bytes) -> None:
    facade().express.take(body, HANDSHAKE)
    facade().express.take(body, None)


# ------------------------------------------------------------------ what is answered


def sdk_shaped(made: Facade, version: str, result: ToolResult) -> dict[str, Any]:
    """The SDK's path: the facade's handler result (``ServedTools.relayed``) through the SDK's runner."""
    handler_result = types.CallToolResult.model_validate(
        ServedTools.relayed(version, ECHO, result), by_name=False
    )
    runner = ServerRunner(made.server, cast(Connection, None), None)
    return runner._serialize("tools/call", version, handler_result)


CONTENT = [
    {"type": "text", "text": "plain"},
    {"type": "text", "text": "with meta", "_meta": {"k": [1, None]}},
    {"type": "text", "text": "with annotations", "annotations": {"audience": ["user"], "priority": 1}},
    {"type": "text", "text": "with a member no schema has", "x": 1},
    {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
    {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
    {"type": "resource_link", "uri": "test://doc/1", "name": "doc-1", "mimeType": "text/plain"},
    {"type": "resource", "resource": {"uri": "test://doc/2", "text": "embedded"}},
    {"type": "text", "text": 5},
    {"type": "nonsense"},
]
item = st.sampled_from(CONTENT) | st.dictionaries(
    st.sampled_from(["type", "text", "data", "x"]), json_values(3)
)


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from(KNOWN_PROTOCOL_VERSIONS),
    content=st.lists(item, max_size=4),
    structured=st.none() | st.dictionaries(st.text(max_size=4), json_values(4), max_size=3) | json_values(3),
    is_error=st.booleans(),
)
def test_a_result_is_the_sdks_as_a_json_value(
    version: str, content: Any, structured: Any, is_error: bool
) -> None:
    made = facade()
    result = ToolResult(content=content, structured_content=structured, is_error=is_error)
    fast = made.express.result(version, ECHO, result)
    assert msgspec.json.decode(msgspec.json.encode(fast)) == sdk_shaped(made, version, result)


@pytest.mark.parametrize("version", (*HANDSHAKE_PROTOCOL_VERSIONS, MODERN))
def test_plain_results_are_relayed_as_they_came_and_stamped_as_the_sdk_stamps(version: str) -> None:
    made = facade()
    result = ToolResult(content=[CONTENT[0]], structured_content={"n": 1})
    fast = made.express.result(version, ECHO, result)
    assert fast["content"][0] is CONTENT[0]  # not copied through any model
    assert fast == sdk_shaped(made, version, result)


# ------------------------------------------------------------------ the call's link to the supervisor


async def test_a_call_in_flight_when_the_supervisor_goes_away_ends_at_once_as_supervisor_gone() -> None:
    async def changed(change: Change) -> None:
        pass

    upstream = Upstream(None, changed=changed)
    with pytest.raises(SupervisorGone, match="not connected"):  # none yet: said at once
        async with upstream.calling():
            pass
    client = cast(AsyncSupervisorClient, object())
    upstream._client = client
    async with upstream.calling() as given:  # a call that ends on its own raises nothing
        assert given is client
    with pytest.raises(SupervisorGone, match="went away during the request"):
        async with upstream.calling():
            upstream._end_calls()  # as when its beacons stop
            await trio.lowlevel.checkpoint()
            pytest.fail("the call went on after the supervisor went away")
    with pytest.raises(ValueError, match="its own"):  # the call's own failure is its own
        async with upstream.calling():
            raise ValueError("its own")
