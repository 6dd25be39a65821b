"""The MCP facade against hosts and servers nobody polite wrote: nothing either sends takes it down.

Hosts on stdio speak raw newline-delimited JSON-RPC to ``mcp-supervisor mcp`` (lines that are not
JSON, not UTF-8, nested 1000 deep, megabytes long, requests of the wrong shape, a second
``initialize``; and Hypothesis's lines): every request with an id is answered (a result, or an error
naming what is wrong), and afterwards the same facade still lists its tools and calls one. Hosts on
streamable HTTP send bodies and headers the SDK refuses: each gets a 4xx at once, never a 5xx or a
hang, and a proper host still works. Servers behind the facade (``tests/servers/hostile_server.py``)
list tools, resources and prompts the registry keeps but an MCP host cannot take, and return results
no host can take: the host's listings still succeed with every good entry (the facade leaves out, and
warns about, the others), and such a result reaches the host as an ``isError`` result saying
``SERVER_ERROR``.

One supervisor for the module: ``t`` (the repository's test server), ``h`` (a hostile server with
odd listings) and ``r`` (a hostile server whose tools/call, resources/read and prompts/get answers a
test rewrites).
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx2
import mcp_types as types
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from tests.e2e.facade import (
    HOST_LIFETIME,
    HOST_TIMEOUT,
    HOST_WARNINGS,
    REPO,
    HttpFacade,
    PipeHost,
    facade_argv,
    http_host,
    stdio_host,
    text_of,
)
from tests.e2e.harness import SupervisorProcess, stdio_test_server
from tests.hostile import json_values

pytestmark = [pytest.mark.e2e, *HOST_WARNINGS]

HOSTILE_SERVER = Path(__file__).parent.parent / "servers" / "hostile_server.py"
TOKEN = f"facade-hostile-{secrets.token_hex(8)}"
PROTOCOL = "2025-11-25"
DEPTH = 1000
MIB = 1 << 20
NO_ANSWER: Final = "no answer"  # what a line expects when nothing may answer it

OBJECT = {"type": "object"}
ECHO = {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
GOOD_TOOLS = [
    ECHO,
    {"name": "described", "description": "nothing odd about it", "inputSchema": OBJECT},
    {"name": "odd name/with.chars ñ", "inputSchema": OBJECT},
    {
        "name": "typed_output",
        "inputSchema": OBJECT,
        "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    },
]
# The registry keeps these (it checks what it needs); no MCP host can take them: the SDK checks a
# listing against the schema of the host's protocol version on its way out, and one of these failed
# the whole listing. (2026-07-28 lets an outputSchema be any JSON Schema: only older hosts refuse those.)
HOST_REJECTS = {
    "output_array": {"outputSchema": {"type": "array"}},
    "output_untyped": {"outputSchema": {"properties": {"n": {"type": "integer"}}}},
    "annotation_title_int": {"annotations": {"title": 5}},
    "annotation_hint_list": {"annotations": {"readOnlyHint": [1]}},
}
ANY_OUTPUT_SCHEMA = {"2026-07-28": {"output_array", "output_untyped"}}  # version -> rejects it takes
# The registry leaves these out itself: they must not break anything either.
REGISTRY_REJECTS = [
    {"name": "input_array", "inputSchema": {"type": "array"}},
    {"name": "properties_int", "inputSchema": {"type": "object", "properties": 5}},
    {"name": "annotations_list", "inputSchema": OBJECT, "annotations": [1]},
]
RESOURCES = [
    {"uri": "odd uri with spaces", "name": "spaces"},
    {"uri": "urn:ñ:ünïcødé", "name": "unicode"},
    {"uri": "x://tab\there", "name": "tab"},
    {"uri": "x://ok", "name": "ok"},
    {"uri": "x://bad-priority", "name": "bad", "annotations": {"priority": 9}},
]
TEMPLATES = [
    {"uriTemplate": "t://{unclosed", "name": "unclosed"},
    {"uriTemplate": "((", "name": "parens"},
    {"uriTemplate": "t://{a}/fine", "name": "fine"},
]
PROMPTS = [
    {"name": "p one/ñ", "arguments": [{"name": "a b"}]},
    {"name": "plain"},
    {"name": "required_maybe", "arguments": [{"name": "a", "required": "maybe"}]},
]


def hostile(pages: Path) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(HOSTILE_SERVER)], "env": {"HOSTILE_PAGES": str(pages)}}


@dataclass(frozen=True)
class Rig:
    sup: SupervisorProcess
    shaped: Path  # the pages of server ``r``, rewritten by the tests of results

    def shape(self, **answers: str) -> None:
        shape(self.shaped, **answers)


def shape(pages: Path, **answers: str) -> None:
    """Server ``r`` answers each method named (``tools_call`` for ``tools/call``, ...) with this JSON
    text (none: as the hostile server does)."""
    shaped = {
        "tools": [{"name": "shaped", "inputSchema": OBJECT}],
        "resources": [{"uri": "x://shaped", "name": "shaped"}],
        "prompts": [{"name": "shaped"}],
        "rawResults": {method.replace("_", "/"): raw for method, raw in answers.items()},
    }
    pages.write_text(json.dumps(shaped))


@pytest.fixture(scope="module")
def rig(
    start_module_supervisor: Callable[..., SupervisorProcess], tmp_path_factory: pytest.TempPathFactory
) -> Rig:
    tmp = tmp_path_factory.mktemp("facade-hostile")
    listed, shaped = tmp / "listed.json", tmp / "shaped.json"
    tools = GOOD_TOOLS + [{"name": name, "inputSchema": OBJECT, **odd} for name, odd in HOST_REJECTS.items()]
    pages = {"tools": tools + REGISTRY_REJECTS, "resources": RESOURCES, "resourceTemplates": TEMPLATES}
    listed.write_text(json.dumps({**pages, "prompts": PROMPTS}))
    shape(shaped)
    sup = start_module_supervisor({"t": stdio_test_server(), "h": hostile(listed), "r": hostile(shaped)})
    return Rig(sup, shaped)


# ------------------------------------------------------------------ a host on stdio, by hand


class RawHost(PipeHost):
    """``mcp-supervisor mcp`` with pipes, spoken to by hand: newline-delimited JSON-RPC lines (or not)."""

    def __init__(self, endpoint: str, stderr_path: Path) -> None:
        super().__init__(facade_argv(endpoint, "mcp"), stderr_path)
        self._ids = itertools.count(1)

    def next_id(self) -> str:
        """An id no Hypothesis line can name (its strings are shorter)."""
        return f"raw-host-{next(self._ids)}"

    def send(self, line: bytes) -> None:
        self.send_line(line)

    def request(self, id: object, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(json.dumps(message).encode())

    def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(json.dumps(message).encode())

    def call(self, method: str, params: Any = None) -> dict[str, Any]:
        id = self.next_id()
        self.request(id, method, params)
        return self.answer(id)

    def initialize(self) -> dict[str, Any]:
        answer = self.call(
            "initialize",
            {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
        )
        self.notify("notifications/initialized")
        return answer

    def assert_serving(self) -> None:
        """Alive, and a tools/list and a call of ``t``'s echo are answered as they should be."""
        assert self.process.poll() is None, f"the facade exited:\n{self.stderr[-3000:]}"
        listed = self.call("tools/list")
        assert "mcp_t_echo" in {tool["name"] for tool in listed["result"]["tools"]}, listed
        echoed = self.call("tools/call", {"name": "mcp_t_echo", "arguments": {"text": "still here"}})
        assert echoed["result"] == {"content": [{"type": "text", "text": "still here"}], "isError": False}


@pytest.fixture(scope="module")
def raw_host(rig: Rig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawHost]:
    """One initialized facade on stdio for the module's hostile lines (each test checks it serves on)."""
    host = RawHost(rig.sup.endpoint, tmp_path_factory.mktemp("raw-host") / "facade.stderr")
    try:
        assert host.initialize()["result"]["protocolVersion"] == PROTOCOL
        yield host
    finally:
        host.close()


def _deep_object(levels: int) -> bytes:
    return b'{"a": ' * levels + b"1" + b"}" * levels


def _rpc(id: object, method: str, params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode()


def _call_line(id: object, arguments: bytes, name: bytes = b'"mcp_t_echo"') -> bytes:
    return (
        b'{"jsonrpc": "2.0", "id": %s, "method": "tools/call", "params": {"name": %s, "arguments": %s}}'
        % (
            json.dumps(id).encode(),
            name,
            arguments,
        )
    )


@dataclass(frozen=True)
class Hostile:
    """A line a host sends, and its answer: under ``id`` (None: null; NO_ANSWER: none), an error with
    ``code`` whose message has ``says`` (``code`` None: a result)."""

    line: bytes
    id: object
    code: int | None = None
    says: str = ""


HOSTILE_LINES = {
    "not JSON": Hostile(b"this is not JSON-RPC", None, types.PARSE_ERROR, "Parse error"),
    "invalid UTF-8 before the JSON": Hostile(b'\xff\xfe{"jsonrpc": "2.0", "id": 1}', None, types.PARSE_ERROR),
    "invalid UTF-8 in the method": Hostile(
        b'{"jsonrpc": "2.0", "id": 11, "method": "tools/\xff\xfe"}', 11, types.METHOD_NOT_FOUND
    ),
    # The SDK's transport reads stdin as UTF-8 with replacement: the text arrives as two U+FFFD.
    "invalid UTF-8 in the arguments": Hostile(_call_line(12, b'{"text": "\xff\xfe"}'), 12),
    "an array nested 1000 deep": Hostile(b"[" * DEPTH + b"]" * DEPTH, None, types.PARSE_ERROR, "recursion"),
    "an object nested 1000 deep in tools/call params": Hostile(
        _call_line(13, b'{"text": "x", "deep": ' + _deep_object(DEPTH) + b"}"),
        13,
        types.PARSE_ERROR,
        "recursion",
    ),
    "nesting 1000 deep before the id": Hostile(
        b'{"jsonrpc": "2.0", "method": "tools/list", "params": {"x": '
        + b"[" * DEPTH
        + b"]" * DEPTH
        + b'}, "id": "after-the-deep-part"}',
        "after-the-deep-part",
        types.PARSE_ERROR,
        "recursion",
    ),
    "a 5 MiB line that is not JSON": Hostile(b"x" * (5 * MIB), None, types.PARSE_ERROR),
    "JSON that breaks off after the id": Hostile(
        b'{"jsonrpc": "2.0", "id": 14, "method": "ping", "params": {', 14, types.PARSE_ERROR
    ),
    # The SDK reads a message whose id is not a string or an integer as a notification: no answer.
    "an id that is an object": Hostile(
        b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}', NO_ANSWER
    ),
    "an id that is a fraction": Hostile(b'{"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}', NO_ANSWER),
    "an id that is true": Hostile(b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', NO_ANSWER),
    "an id of the wrong type with bad params": Hostile(
        b'{"jsonrpc": "2.0", "id": 2.5, "method": "ping", "params": 7}', None, types.INVALID_REQUEST, "id"
    ),
    "arguments that are a list": Hostile(
        _call_line(15, b"[1, 2]"), 15, types.INVALID_PARAMS, "params.arguments: Input should be a valid dict"
    ),
    "arguments that are a string": Hostile(_call_line(16, b'"text"'), 16, types.INVALID_PARAMS, "arguments"),
    "a tool name that is not a string": Hostile(
        _call_line(17, b"{}", name=b"5"),
        17,
        types.INVALID_PARAMS,
        "params.name: Input should be a valid string",
    ),
    "a tool name that is null": Hostile(
        _call_line(18, b"{}", name=b"null"), 18, types.INVALID_PARAMS, "name"
    ),
    "params that are a list": Hostile(
        b'{"jsonrpc": "2.0", "id": 19, "method": "tools/call", "params": [1]}',
        19,
        types.INVALID_REQUEST,
        "params: Input should be an object",
    ),
    "jsonrpc 1.0": Hostile(
        b'{"jsonrpc": "1.0", "id": 20, "method": "ping"}', 20, types.INVALID_REQUEST, "jsonrpc"
    ),
    "a bare number": Hostile(b"42", None, types.INVALID_REQUEST),
    "an unknown method": Hostile(b'{"jsonrpc": "2.0", "id": 21, "method": "no/such/method"}', 21, -32601),
    "an unknown tool": Hostile(_call_line(22, b"{}", name=b'"mcp_t_no_such_tool"'), 22, types.INVALID_PARAMS),
    "a resource URI that is a number": Hostile(
        b'{"jsonrpc": "2.0", "id": 23, "method": "resources/read", "params": {"uri": 5}}',
        23,
        types.INVALID_PARAMS,
        "uri",
    ),
    "prompt arguments that are not strings": Hostile(
        _rpc(24, "prompts/get", {"name": "x", "arguments": {"a": 1}}),
        24,
        types.INVALID_PARAMS,
        "arguments.a",
    ),
    "a notification with params that are a string": Hostile(
        b'{"jsonrpc": "2.0", "method": "notifications/progress", "params": "garbage"}', NO_ANSWER
    ),
    "a cancellation of nothing, with garbage": Hostile(
        b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": [1], "x": {}}}',
        NO_ANSWER,
    ),
    "an unknown notification": Hostile(
        b'{"jsonrpc": "2.0", "method": "notifications/what", "params": 5}', NO_ANSWER
    ),
    "a response to nothing": Hostile(b'{"jsonrpc": "2.0", "id": 99999, "result": {"x": 1}}', NO_ANSWER),
    "an error response to nothing, of the wrong shape": Hostile(
        b'{"jsonrpc": "2.0", "id": 99998, "error": "bad"}', NO_ANSWER
    ),
    "a blank line": Hostile(b"   ", NO_ANSWER),
    "a request whose params are an empty string": Hostile(  # once taken for a blank line, never answered
        b'{"jsonrpc": "2.0", "id": 25, "method": "ping", "params": ""}', 25, types.INVALID_REQUEST, "params"
    ),
}


def check_answer(host: RawHost, case: Hostile) -> None:
    """Send ``case``'s line and a ping; the line's answer is as expected (none: none before the ping's)."""
    host.stray.clear()
    host.send(case.line)
    ping = host.next_id()
    host.request(ping, "ping")
    if case.id is NO_ANSWER:
        assert host.answer(ping) == {"jsonrpc": "2.0", "id": ping, "result": {}}
        assert not host.stray, f"a line that needs no answer was answered: {host.stray}"
        return
    answer = host.answer(case.id)
    if case.code is None:
        assert "result" in answer, answer
    else:
        assert answer["error"]["code"] == case.code, answer
        assert case.says in answer["error"]["message"], answer
    assert host.answer(ping)["result"] == {}


@pytest.mark.parametrize("case", HOSTILE_LINES.values(), ids=HOSTILE_LINES.keys())
def test_a_hostile_line_from_a_stdio_host_is_answered_as_it_should_be_and_harms_nothing(
    raw_host: RawHost, case: Hostile
) -> None:
    check_answer(raw_host, case)
    raw_host.assert_serving()


def test_invalid_utf8_in_the_arguments_arrives_as_replacement_characters(raw_host: RawHost) -> None:
    raw_host.send(_call_line(31, b'{"text": "a\xff\xfeb"}'))
    assert raw_host.answer(31)["result"]["content"] == [{"type": "text", "text": "a\ufffd\ufffdb"}]


def test_a_5_mib_request_is_answered_in_full(raw_host: RawHost) -> None:
    text = "y" * (5 * MIB)
    answer = raw_host.call("tools/call", {"name": "mcp_t_echo", "arguments": {"text": text}})
    assert answer["result"]["content"] == [{"type": "text", "text": text}]
    raw_host.assert_serving()


def test_a_second_initialize_is_answered_and_the_facade_serves_on(raw_host: RawHost) -> None:
    again = raw_host.initialize()
    assert again["result"]["serverInfo"]["name"] == "mcp-supervisor"
    raw_host.assert_serving()


def test_the_facade_warns_on_stderr_about_each_line_that_is_not_json_rpc(raw_host: RawHost) -> None:
    raw_host.send(b"certainly not JSON")
    raw_host.answer(None)
    assert "the host sent a line that is not JSON-RPC" in raw_host.stderr


def test_hostile_lines_before_the_handshake_then_a_proper_one(rig: Rig, tmp_path: Path) -> None:
    host = RawHost(rig.sup.endpoint, tmp_path / "facade.stderr")
    try:
        for case in HOSTILE_LINES.values():
            if case.code in (types.PARSE_ERROR, types.INVALID_REQUEST) or case.id is NO_ANSWER:
                check_answer(host, case)  # what the transport answers, it answers before the handshake too
            else:  # requests: an error under their id (the SDK refuses them before the handshake)
                host.stray.clear()
                host.send(case.line)
                assert "error" in host.answer(case.id), case
        early = host.call("tools/list")
        assert early["error"]["code"] == types.INVALID_PARAMS  # the SDK's answer before initialize
        assert host.initialize()["result"]["protocolVersion"] == PROTOCOL
        host.assert_serving()
    finally:
        host.close()


# Hypothesis: lines of any bytes, any JSON values, and JSON-RPC messages with any params.
METHODS = [
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "no/such/method",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/initialized",
    "notifications/roots/list_changed",
]
SAFE_TOOLS = ["mcp_t_echo", "mcp_t_add", "mcp_h_echo", "mcp_r_shaped", "mcp_t_no_such_tool"]


@st.composite
def rpc_like(draw: st.DrawFn) -> tuple[bool, dict[str, Any]]:
    """(whether the test gives it an id, a JSON-RPC message with any params); tools/call names a safe
    tool (one that neither crashes, nor hangs, nor changes the registry) or none."""
    method = draw(st.sampled_from(METHODS))
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    params = draw(st.none() | json_values())
    if method == "tools/call" and draw(st.booleans()):
        params = {"name": draw(st.sampled_from(SAFE_TOOLS)), "arguments": draw(json_values())}
    if params is not None:
        message["params"] = params
    return draw(st.booleans()), message


LINES = st.one_of(
    st.binary(max_size=200),
    json_values().map(lambda value: json.dumps(value).encode()),
    rpc_like(),
)


@settings(
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(lines=st.lists(LINES, min_size=1, max_size=6))
def test_any_lines_from_a_stdio_host_leave_it_answering_every_request(
    raw_host: RawHost, lines: list[bytes | tuple[bool, dict[str, Any]]]
) -> None:
    raw_host.stray.clear()
    expected = []
    for line in lines:
        if isinstance(line, bytes):
            raw_host.send(line.replace(b"\n", b" "))
            continue
        with_id, message = line
        if with_id:
            message = {**message, "id": raw_host.next_id()}
            expected.append(message["id"])
        raw_host.send(json.dumps(message).encode())
    ping = raw_host.next_id()
    raw_host.request(ping, "ping")
    for id in [*expected, ping]:  # every request with an id is answered (a result or an error)
        raw_host.answer(id)
    assert raw_host.process.poll() is None


def test_after_the_hypothesis_lines_the_facade_still_serves(raw_host: RawHost) -> None:
    raw_host.assert_serving()


# ------------------------------------------------------------------ hosts on HTTP, by hand


@pytest.fixture(scope="module")
def http_facade(rig: Rig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpFacade]:
    facade = HttpFacade(tmp_path_factory.mktemp("http-facade"), rig.sup.endpoint, TOKEN)
    try:
        yield facade
    finally:
        facade.stop()


AUTH = {"Authorization": f"Bearer {TOKEN}"}
POST = {**AUTH, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}


async def open_session(http: httpx2.AsyncClient, url: str) -> dict[str, str]:
    """Headers for requests in a new, initialized session of the facade."""
    response = await http.post(url, headers=POST, json=INITIALIZE)
    assert response.status_code == 200, response.text
    headers = {**POST, "Mcp-Session-Id": response.headers["mcp-session-id"], "Mcp-Protocol-Version": PROTOCOL}
    done = await http.post(
        url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
    )
    assert done.status_code == 202
    return headers


def json_rpc(id: int, method: str, params: Any = None) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params or {}}).encode()


HTTP_BODIES = {  # (body, status, what the JSON-RPC error's message says)
    "a body that is not JSON": (b"this is not JSON", 400, "Parse error"),
    "invalid UTF-8": (b'{"jsonrpc": "2.0", "id": 5, "method": "ping\xff\xfe"}', 400, "Parse error"),
    "invalid UTF-8 in the arguments": (_call_line(6, b'{"text": "\xff\xfe"}'), 400, "Parse error"),
    "an array nested 1000 deep": (b"[" * DEPTH + b"]" * DEPTH, 400, "recursion limit"),
    "an object nested 1000 deep in tools/call params": (
        _call_line(7, b'{"text": "x", "deep": ' + _deep_object(DEPTH) + b"}"),
        400,
        "recursion limit",
    ),
    "an empty body": (b"", 400, "Parse error"),
    "params that are a list": (
        b'{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": [1]}',
        400,
        "",
    ),
    "a body over 4 MiB": (
        json_rpc(9, "tools/call", {"name": "mcp_t_echo", "arguments": {"text": "z" * (5 * MIB)}}),
        413,
        "",
    ),
}


@pytest.mark.parametrize(("body", "status", "says"), HTTP_BODIES.values(), ids=HTTP_BODIES.keys())
async def test_a_hostile_body_on_http_is_a_4xx_at_once_and_the_session_serves_on(
    http_facade: HttpFacade, body: bytes, status: int, says: str
) -> None:
    async with httpx2.AsyncClient(timeout=HOST_TIMEOUT) as http:
        with trio.fail_after(HOST_TIMEOUT):
            session = await open_session(http, http_facade.url)
            refused = await http.post(http_facade.url, headers=session, content=body)
            assert refused.status_code == status, refused.text
            if says:
                assert says in refused.json()["error"]["message"]
            after = await http.post(http_facade.url, headers=session, content=json_rpc(10, "ping"))
    assert after.status_code == 200 and '"id":10,"result":{}' in after.text
    assert http_facade.process.poll() is None


async def test_hostile_headers_on_http_are_4xx_at_once(http_facade: HttpFacade) -> None:
    url = http_facade.url
    async with httpx2.AsyncClient(timeout=HOST_TIMEOUT) as http:
        with trio.fail_after(HOST_TIMEOUT):
            session = await open_session(http, url)
            ping = json_rpc(11, "ping")
            refused = {
                "a wrong Content-Type": await http.post(
                    url, headers={**session, "Content-Type": "text/plain"}, content=ping
                ),
                "no Content-Type": await http.post(
                    url, headers={k: v for k, v in session.items() if k != "Content-Type"}, content=ping
                ),
                "an Accept without event streams": await http.post(
                    url, headers={**session, "Accept": "text/html"}, content=ping
                ),
                "a session that does not exist": await http.post(
                    url, headers={**session, "Mcp-Session-Id": "no-such-session"}, content=ping
                ),
                "no session": await http.post(
                    url, headers={k: v for k, v in session.items() if k != "Mcp-Session-Id"}, content=ping
                ),
                "a GET of a session that does not exist": await http.get(
                    url, headers={**AUTH, "Accept": "text/event-stream", "Mcp-Session-Id": "no-such-session"}
                ),
                "a DELETE of a session that does not exist": await http.delete(
                    url, headers={**AUTH, "Mcp-Session-Id": "no-such-session"}
                ),
            }
            # A GET without Accept (httpx sends "*/*" unless the header is taken out).
            bare = http.build_request(
                "GET", url, headers={**AUTH, "Mcp-Session-Id": session["Mcp-Session-Id"]}
            )
            del bare.headers["Accept"]
            response = await http.send(bare, stream=True)
            await response.aclose()
            refused["a GET without Accept"] = response
            after = await http.post(url, headers=session, content=json_rpc(12, "ping"))
    statuses = {what: response.status_code for what, response in refused.items()}
    assert all(400 <= status < 500 for status in statuses.values()), statuses
    assert statuses["a session that does not exist"] == 404
    assert statuses["a GET of a session that does not exist"] == 404
    assert statuses["a GET without Accept"] == 406
    assert after.status_code == 200 and '"id":12,"result":{}' in after.text
    assert http_facade.process.poll() is None


@pytest.mark.parametrize("listen", ["127.0.0.1", "127.0.0.2"])
async def test_a_foreign_host_or_origin_is_refused_on_every_address_even_without_auth(
    rig: Rig, tmp_path: Path, listen: str
) -> None:
    """DNS rebinding: a page on another site, whose name now resolves to the listener, may not call
    tools (the MCP transport says servers MUST check Origin); --allow-host adds a name of one's own."""
    facade = HttpFacade(
        tmp_path, rig.sup.endpoint, None, "--http", f"{listen}:0", "--allow-host", "mcp.example"
    )
    try:
        url, port = facade.url, facade.url.split(":")[2].split("/")[0]
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        async with httpx2.AsyncClient(timeout=HOST_TIMEOUT) as http:
            with trio.fail_after(HOST_TIMEOUT):
                statuses = {
                    what: (await http.post(url, headers={**headers, **extra}, json=INITIALIZE)).status_code
                    for what, extra in {
                        "foreign Host": {"Host": f"evil.example:{port}"},
                        "foreign Origin": {"Origin": "http://evil.example"},
                        "foreign Origin on our port": {"Origin": f"http://evil.example:{port}"},
                        "Origin null": {"Origin": "null"},
                        "own Host": {},
                        "own Origin": {"Origin": f"http://{listen}:{port}"},
                        "loopback name": {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"},
                        "allowed name": {"Host": "mcp.example", "Origin": "https://mcp.example"},
                    }.items()
                }
        assert statuses == {
            "foreign Host": 421,
            "foreign Origin": 403,
            "foreign Origin on our port": 403,
            "Origin null": 403,
            "own Host": 200,
            "own Origin": 200,
            "loopback name": 200,
            "allowed name": 200,
        }
        assert facade.process.poll() is None
    finally:
        facade.stop()


async def test_a_proper_http_host_works_after_the_hostile_ones(http_facade: HttpFacade) -> None:
    async with http_host(http_facade.url, TOKEN) as host:
        assert "mcp_t_echo" in {tool.name for tool in (await host.list_tools()).tools}
        assert text_of(await host.call_tool("mcp_t_echo", {"text": "fine"})) == "fine"
    assert http_facade.process.poll() is None


# ------------------------------------------------------------------ hostile servers behind the facade


@asynccontextmanager
async def logged_stdio_host(endpoint: str, stderr_path: Path, mode: str = "legacy") -> AsyncIterator[Client]:
    """``stdio_host``, with the facade's stderr in ``stderr_path`` (the SDK's default is the stderr of
    this process as it was when the SDK was imported: pytest's, out of a test's reach)."""
    argv = facade_argv(endpoint, "mcp")
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ), cwd=str(REPO))
    with stderr_path.open("w") as errlog, trio.fail_after(HOST_LIFETIME):
        async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:  # type: ignore[arg-type]
            yield client


def registry_name(sup: SupervisorProcess, server: str, original: str) -> str:
    [name] = [t.name for t in sup.client.list_tools() if t.server == server and t.original_name == original]
    return name


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_host_lists_the_good_tools_when_a_server_lists_some_no_host_can_take(
    rig: Rig, mode: str, tmp_path: Path
) -> None:
    registry = {tool.name for tool in rig.sup.client.list_tools()}
    assert {f"mcp_h_{name}" for name in HOST_REJECTS} <= registry  # the facade is the one to leave them out
    good = {registry_name(rig.sup, "h", tool["name"]) for tool in GOOD_TOOLS} | {"mcp_t_echo", "mcp_r_shaped"}
    stderr_path = tmp_path / "facade.stderr"
    async with logged_stdio_host(rig.sup.endpoint, stderr_path, mode=mode) as host:
        version = host.protocol_version
        listed = {tool.name: tool for tool in (await host.list_tools()).tools}
        echoed = await host.call_tool("mcp_h_echo", {"text": "hi"})
        called = await host.call_tool("mcp_h_typed_output", {"n": 3})
    taken = {f"mcp_h_{name}" for name in ANY_OUTPUT_SCHEMA.get(version, ())}
    rejects = {f"mcp_h_{name}" for name in HOST_REJECTS} - taken
    assert good | taken <= listed.keys()
    assert not rejects & listed.keys()
    assert listed["mcp_h_typed_output"].output_schema is not None
    assert text_of(echoed) == '{"text": "hi"}' and called.structured_content == {"n": 3}
    stderr = stderr_path.read_text()
    for name in rejects:
        assert f"tool {name!r} left out of the MCP listing (protocol {version})" in stderr, stderr[-3000:]
    assert "annotations.title: Input should be a valid string" in stderr


async def test_odd_resources_templates_and_prompts_do_not_break_the_listings(rig: Rig) -> None:
    prompts = {p.original_name: p.name for p in rig.sup.client.list_prompts() if p.server == "h"}
    async with stdio_host(rig.sup.endpoint) as host:
        resources = {str(r.uri) for r in (await host.list_resources()).resources}
        templates = {t.uri_template for t in (await host.list_resource_templates()).resource_templates}
        listed_prompts = {p.name for p in (await host.list_prompts()).prompts}
        spaces = await host.read_resource("odd uri with spaces")
        unicode = await host.read_resource("urn:ñ:ünïcødé")
        by_template = await host.read_resource("t://anything/fine")
        prompt = await host.get_prompt(prompts["p one/ñ"], {"a b": "value"})
        with pytest.raises(MCPError) as unknown:
            await host.read_resource("nowhere at all")
        after = await host.call_tool("mcp_t_echo", {"text": "after"})
    assert {"odd uri with spaces", "urn:ñ:ünïcødé", "x://tab\there", "x://ok", "x://shaped"} <= resources
    assert "x://bad-priority" not in resources  # no host can take its annotations (left out before us)
    assert {"t://{unclosed", "((", "t://{a}/fine"} <= templates
    assert {prompts["p one/ñ"], prompts["plain"]} <= listed_prompts
    assert [c.text for c in spaces.contents if isinstance(c, types.TextResourceContents)] == [
        "read odd uri with spaces"
    ]
    assert [c.text for c in unicode.contents if isinstance(c, types.TextResourceContents)] == [
        "read urn:ñ:ünïcødé"
    ]
    assert [c.text for c in by_template.contents if isinstance(c, types.TextResourceContents)] == [
        "read t://anything/fine"
    ]
    message = prompt.messages[0]
    assert isinstance(message.content, types.TextContent) and json.loads(message.content.text) == {
        "a b": "value"
    }
    assert unknown.value.error.code == types.INVALID_PARAMS
    assert text_of(after) == "after"


# Results the supervisor relays (it checks what it needs) that no MCP host can take, or that the
# supervisor refuses itself: each reaches the host as an isError result starting with SERVER_ERROR.
SHAPED_RESULTS = {
    "structured content that is a list": (
        '{"content": [], "structuredContent": [1, 2]}',
        "structuredContent",
    ),
    "a text item with priority 5": (
        '{"content": [{"type": "text", "text": "x", "annotations": {"priority": 5}}]}',
        "priority",
    ),
    "a content item of an unknown type": ('{"content": [{"type": "hologram", "x": 1}]}', "hologram"),
    "content that is a number": ('{"content": 5}', "content"),
    "a text item whose text is a number": ('{"content": [{"type": "text", "text": 5}]}', "text"),
    "isError that is a string": ('{"content": [], "isError": "yes"}', "isError"),
    "a result that is a list": ("[1]", ""),
}


async def test_results_no_host_can_take_are_server_errors_and_the_facade_serves_on(rig: Rig) -> None:
    seen: dict[str, str] = {}
    async with stdio_host(rig.sup.endpoint) as host:
        for kind in ("utf8_result", "deep_result"):
            result = await host.call_tool("mcp_h_hostile_garbage", {"kind": kind})
            assert result.is_error, kind
            seen[kind] = text_of(result)
        for what, (raw, _) in SHAPED_RESULTS.items():
            rig.shape(tools_call=raw)
            result = await host.call_tool("mcp_r_shaped", {})
            assert result.is_error, (what, result)
            seen[what] = text_of(result)
        rig.shape()
        again = await host.call_tool("mcp_r_shaped", {"back": True})
        echoed = await host.call_tool("mcp_t_echo", {"text": "still"})
    for what, text in seen.items():
        assert text.startswith("SERVER_ERROR: server 'h'") or text.startswith("SERVER_ERROR: server 'r'"), (
            text
        )
        assert SHAPED_RESULTS.get(what, ("", ""))[1] in text, (what, text)
    assert json.loads(text_of(again)) == {"back": True} and not again.is_error
    assert text_of(echoed) == "still"


SHAPED_READS = {
    "resources/read": '{"contents": [{"uri": "x://shaped"}]}',
    "prompts/get": '{"messages": [{"role": "robot", "content": {"type": "text", "text": "x"}}]}',
}


async def test_reads_and_prompts_no_host_can_take_are_errors_naming_the_server(rig: Rig) -> None:
    async with stdio_host(rig.sup.endpoint) as host:
        rig.shape(resources_read=SHAPED_READS["resources/read"], prompts_get=SHAPED_READS["prompts/get"])
        with pytest.raises(MCPError) as read:
            await host.read_resource("x://shaped")
        with pytest.raises(MCPError) as prompt:
            await host.get_prompt("mcp_r_shaped", {})
        rig.shape()
        fine = await host.read_resource("x://shaped")
    for error in (read.value.error, prompt.value.error):
        assert error.code == types.INTERNAL_ERROR and error.message.startswith("SERVER_ERROR: server 'r'"), (
            error
        )
    assert [c.text for c in fine.contents if isinstance(c, types.TextResourceContents)] == ["read x://shaped"]
