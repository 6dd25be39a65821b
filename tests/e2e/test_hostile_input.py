"""Nothing a client or a server sends takes a worker down: malformed tool and prompt arguments sent
raw through the front socket, and lines on the server's stdout that are not JSON-RPC (invalid UTF-8,
nesting deeper than any decoder recurses). Each one costs only itself: the caller gets
INVALID_ARGUMENTS naming the problem (or the server's line a warning), the worker keeps its pid and
its restart count, and the next good call works.

Against ``tests/servers/hostile_server.py``, one supervisor for the module.
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
import zmq

from supervisor.client.errors import ServerError
from supervisor.protocol import (
    CallResult,
    CallTool,
    ErrorReply,
    FrontReply,
    GetPrompt,
    decode_front_reply,
    encode,
)
from tests.e2e.harness import SupervisorProcess, poll

pytestmark = pytest.mark.e2e

HOSTILE_SERVER = Path(__file__).parent.parent / "servers" / "hostile_server.py"
ECHO = {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
PROMPT = {"name": "greet", "arguments": [{"name": "who"}]}
REPLY_TIMEOUT = 10_000  # ms for the supervisor's reply to a raw request


def hostile_server(pages: Path) -> dict[str, object]:
    return {"command": sys.executable, "args": [str(HOSTILE_SERVER)], "env": {"HOSTILE_PAGES": str(pages)}}


@pytest.fixture(scope="module")
def sup(
    start_module_supervisor: Callable[..., SupervisorProcess], tmp_path_factory: pytest.TempPathFactory
) -> SupervisorProcess:
    pages = tmp_path_factory.mktemp("hostile-input") / "pages.json"
    pages.write_text(json.dumps({"tools": [ECHO], "prompts": [PROMPT]}))
    return start_module_supervisor({"h": hostile_server(pages)})


def raw_request(sup: SupervisorProcess, request: CallTool | GetPrompt) -> FrontReply:
    """Send ``request`` on a DEALER of our own (its arguments are whatever bytes the test chose)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(sup.endpoint)
    try:
        sock.send(encode(request))
        assert sock.poll(REPLY_TIMEOUT), "no reply from the supervisor"
        return decode_front_reply(sock.recv())
    finally:
        sock.close()
        ctx.term()


def nested_maps(depth: int) -> bytes:
    return b"\x81\xa1a" * depth + b"\xc0"  # {"a": {"a": ... nil}}


BAD_ARGUMENTS = {
    "invalid UTF-8": (b"\x81\xa4text\xa2\xff\xfe", "not valid UTF-8"),
    "invalid UTF-8 in a key": (b"\x81\xa2\xff\xfe\xa1x", "not valid UTF-8"),
    "nested 100 levels": (nested_maps(100), "nested deeper than 64 levels"),
    "nested 500 levels": (nested_maps(500), "nested deeper than 64 levels"),
    "not a map": (b"\x92\x01\x02", "must be an object, not list"),
    "a string": (b"\xa3abc", "must be an object, not str"),
    "an integer key": (b"\x81\x01\xa1x", "keys must be strings"),
    "an integer key inside": (b"\x81\xa1a\x81\x01\xa1x", "keys must be strings"),
    "bytes": (b"\x81\xa4text\xc4\x02xy", "bytes are not JSON"),
    "an extension type": (b"\x81\xa4text\xd4\x01x", "extension type 1 is not JSON"),
    "a timestamp": (
        msgspec.msgpack.encode({"text": datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)}),
        "a timestamp is not JSON",
    ),
    "NaN": (msgspec.msgpack.encode({"text": float("nan")}), "nan is not JSON"),
}  # bytes that are not one msgpack value break the request around them: BAD_REQUEST at the supervisor


@pytest.mark.parametrize(("payload", "problem"), BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_malformed_tool_arguments_are_invalid_arguments_and_the_worker_serves_on(
    sup: SupervisorProcess, payload: bytes, problem: str
) -> None:
    before = sup.status()["h"]
    reply = raw_request(sup, CallTool(id=1, name="mcp_h_echo", arguments=msgspec.Raw(payload), timeout=10))
    assert isinstance(reply, ErrorReply), reply
    assert (reply.code, reply.id) == ("INVALID_ARGUMENTS", 1)
    assert problem in reply.message
    assert sup.client.call_tool("mcp_h_echo", {"text": "still here"}).text == '{"text": "still here"}'
    after = sup.status()["h"]
    assert (after.worker_pid, after.restarts, after.state) == (before.worker_pid, before.restarts, "ready")


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        BAD_ARGUMENTS["invalid UTF-8"],
        BAD_ARGUMENTS["nested 100 levels"],
        BAD_ARGUMENTS["an extension type"],
        (msgspec.msgpack.encode({"who": 5}), "prompt arguments must be strings: 'who' is int"),
    ],
)
def test_malformed_prompt_arguments_are_invalid_arguments_and_the_worker_serves_on(
    sup: SupervisorProcess, payload: bytes, problem: str
) -> None:
    before = sup.status()["h"]
    reply = raw_request(sup, GetPrompt(id=2, name="mcp_h_greet", arguments=msgspec.Raw(payload), timeout=10))
    assert isinstance(reply, ErrorReply), reply
    assert (reply.code, reply.id) == ("INVALID_ARGUMENTS", 2)
    assert problem in reply.message
    assert "who" in sup.client.get_prompt("mcp_h_greet", {"who": "you"}).text
    after = sup.status()["h"]
    assert (after.worker_pid, after.restarts) == (before.worker_pid, before.restarts)


def test_arguments_nested_64_levels_still_reach_the_server(sup: SupervisorProcess) -> None:
    arguments: object = "x"
    for _ in range(64):  # the arguments object is one of the 64 levels
        arguments = {"a": arguments}
    reply = raw_request(
        sup, CallTool(id=3, name="mcp_h_echo", arguments=msgspec.Raw(encode(arguments)), timeout=10)
    )
    assert isinstance(reply, CallResult), reply


@pytest.mark.parametrize(
    "kind", ["text", "utf8", "utf8_id", "utf8_params", "deep", "deep_object", "deep_rpc", "deep_answer"]
)
def test_a_line_on_stdout_that_is_not_json_rpc_is_warned_about_and_harms_nothing(
    sup: SupervisorProcess, kind: str
) -> None:
    before = sup.status()["h"]
    warnings = sup.log.count("not JSON-RPC on stdout")
    assert sup.client.call_tool("mcp_h_hostile_garbage", {"kind": kind}).text == f"garbage {kind}"
    poll("the warning", lambda: sup.log.count("not JSON-RPC on stdout") > warnings, 5)
    assert sup.client.call_tool("mcp_h_echo", {"text": "still"}).text == '{"text": "still"}'
    after = sup.status()["h"]
    assert (after.worker_pid, after.restarts, after.state) == (before.worker_pid, before.restarts, "ready")


def test_a_tool_result_that_is_not_utf8_is_a_server_error_and_the_worker_serves_on(
    sup: SupervisorProcess,
) -> None:
    before = sup.status()["h"]
    with pytest.raises(ServerError, match="returned an invalid result: a string is not valid UTF-8"):
        sup.client.call_tool("mcp_h_hostile_garbage", {"kind": "utf8_result"})
    assert sup.client.call_tool("mcp_h_echo", {"text": "still"}).text == '{"text": "still"}'
    after = sup.status()["h"]
    assert (after.worker_pid, after.restarts) == (before.worker_pid, before.restarts)


def test_a_tool_result_nested_too_deeply_to_decode_is_a_server_error_at_once(sup: SupervisorProcess) -> None:
    with pytest.raises(ServerError, match="the server's answer does not decode: nested too deeply"):
        sup.client.call_tool("mcp_h_hostile_garbage", {"kind": "deep_result"}, timeout=30)
    assert sup.client.call_tool("mcp_h_echo", {"text": "still"}).text == '{"text": "still"}'
