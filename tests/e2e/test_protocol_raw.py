"""The wire protocol as ``docs/protocol.md`` writes it, spoken to a real supervisor by a client that
knows nothing but that document: plain pyzmq sockets and msgpack maps (``msgspec.msgpack`` on
builtin dicts), none of the project's structs or stubs.

Its hex examples are sent byte for byte; then a listing, calls, errors, a progress call, a cancel, a
server request answered by the caller, bad input, the events socket, and CURVE on loopback TCP.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq

from supervisor.protocol.spec import hex_examples
from supervisor.security.keys import keygen
from tests.e2e.harness import SupervisorProcess, poll, stdio_test_server

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
SPEC = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text(encoding="utf-8")
REPLY_TIMEOUT = 10.0  # seconds for one reply
EVENT_TIMEOUT = 15.0  # seconds for an awaited event (a restart takes a worker's start)
MARKER_TIMEOUT = 10.0  # seconds for the test server to write a marker file

encode = msgspec.msgpack.encode


def decode(data: bytes) -> dict[str, Any]:
    message = msgspec.msgpack.decode(data)
    assert isinstance(message, dict), f"not a map: {message!r}"
    return message


class Wire:
    """A DEALER on the front socket, spoken by hand."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, curve: dict[int, bytes]) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        for option, value in curve.items():
            self.sock.setsockopt(option, value)
        self.sock.connect(endpoint)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.send(encode(message))

    def receive_frame(self, timeout: float = REPLY_TIMEOUT) -> bytes:
        assert self.sock.poll(int(timeout * 1000)), f"no reply within {timeout} s"
        return self.sock.recv()

    def receive(self, timeout: float = REPLY_TIMEOUT) -> dict[str, Any]:
        return decode(self.receive_frame(timeout))

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        reply = self.receive()
        assert reply["id"] == message["id"], reply
        return reply

    def nothing_more(self, id: int) -> None:
        """Nothing is queued for this connection: a ``Ping`` sent now is answered next (replies on one
        connection keep the order in which the supervisor sends them)."""
        assert self.request({"type": "Ping", "id": id}) == {"type": "Done", "id": id}


@contextmanager
def wire(
    endpoint: str, curve: dict[int, bytes] | None = None
) -> Iterator[tuple[Wire, zmq.Context[zmq.Socket[bytes]]]]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        yield Wire(ctx, endpoint, curve or {}), ctx
    finally:
        ctx.destroy(linger=0)


def subscribe(
    ctx: zmq.Context[zmq.Socket[bytes]],
    endpoint: str,
    topic: bytes = b"",
    curve: dict[int, bytes] | None = None,
) -> zmq.Socket[bytes]:
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    for option, value in (curve or {}).items():
        sub.setsockopt(option, value)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    sub.connect(endpoint)
    return sub


def next_event(sub: zmq.Socket[bytes], timeout: float = EVENT_TIMEOUT) -> tuple[bytes, dict[str, Any]]:
    assert sub.poll(int(timeout * 1000)), f"no event within {timeout} s"
    frames = sub.recv_multipart()
    assert len(frames) == 2, frames
    return frames[0], decode(frames[1])


def event_where(
    sub: zmq.Socket[bytes], wanted: Callable[[bytes, dict[str, Any]], bool], what: str
) -> tuple[bytes, dict[str, Any]]:
    deadline = time.monotonic() + EVENT_TIMEOUT
    while time.monotonic() < deadline:
        topic, event = next_event(sub, max(0.0, deadline - time.monotonic()))
        if wanted(topic, event):
            return topic, event
    pytest.fail(f"no {what} within {EVENT_TIMEOUT} s")


def call(id: int, name: str, arguments: Any, **fields: Any) -> dict[str, Any]:
    return {"type": "CallTool", "id": id, "name": name, "arguments": arguments, **fields}


# ------------------------------------------------------------------ the document's own bytes


def test_the_documented_ping_bytes_are_answered_with_the_documented_done_bytes(
    shared: SupervisorProcess,
) -> None:
    examples = hex_examples(SPEC)
    with wire(shared.endpoint) as (front, _):
        front.sock.send(examples["ping"][0])
        assert front.receive_frame() == examples["done"][0]


def test_the_documented_call_bytes_call_the_tool(shared: SupervisorProcess) -> None:
    with wire(shared.endpoint) as (front, _):
        front.sock.send(hex_examples(SPEC)["call"][0])
        reply = front.receive()
    assert reply == {
        "type": "CallResult",
        "id": 7,
        "result": {"content": [{"type": "text", "text": "hi"}], "text": "hi"},  # is_error false: left out
    }


# ------------------------------------------------------------------ requests and replies


def test_listing_the_tools_gives_each_with_its_server_and_the_registry_version(
    shared: SupervisorProcess,
) -> None:
    with wire(shared.endpoint) as (front, _):
        reply = front.request({"type": "ListTools", "id": 1})
    assert reply["type"] == "ToolList"
    tools = {tool["name"]: tool for tool in reply["tools"]}
    assert {"mcp_test_echo", "mcp_test_extra_6", "mcp_time_get_current_time"} <= set(tools)
    echo = tools["mcp_test_echo"]
    assert (echo["server"], echo["original_name"]) == ("test", "echo")
    assert echo["input_schema"]["properties"] == {"text": {"type": "string"}}
    assert isinstance(reply["version"], int) and reply["version"] >= 1


def test_requests_in_flight_together_are_each_answered_once_under_their_id(shared: SupervisorProcess) -> None:
    requests = {
        1: call(1, "mcp_test_echo", {"text": "one"}, timeout=10),
        2: call(2, "mcp_test_fail", {"message": "it broke"}),
        3: call(3, "mcp_test_raise_error", {"message": "no"}),
        4: call(4, "mcp_test_nope", {}),
        5: call(5, "mcp_test_echo", [1, 2]),
        6: call(6, "mcp_test_echo", {"text": "x"}, timeout=-1),
        7: call(7, "mcp_test_echo", {"text": "x"}, client="c" * 129),
        8: call(8, "mcp_test_echo", {"text": "int timeout"}, timeout=5),
        9: {"type": "GetStatus", "id": 9},
    }
    with wire(shared.endpoint) as (front, _):
        for request in requests.values():
            front.send(request)
        replies = {}
        for _ in requests:
            reply = front.receive()
            assert reply["id"] not in replies, f"a second reply to {reply['id']}"
            replies[reply["id"]] = reply
        front.nothing_more(10)
    assert replies[1]["result"]["text"] == "one"
    assert (
        replies[2]["type"] == "CallResult" and replies[2]["result"]["is_error"] is True
    )  # not an error reply
    errors = {id: replies[id]["code"] for id in (3, 4, 5, 6, 7)}
    assert errors == {
        3: "SERVER_ERROR",
        4: "UNKNOWN_TOOL",
        5: "INVALID_ARGUMENTS",
        6: "BAD_REQUEST",
        7: "BAD_REQUEST",
    }
    assert all(replies[id]["type"] == "ErrorReply" and replies[id]["message"] for id in errors)
    assert replies[8]["result"]["text"] == "int timeout"  # an integer where a float is expected
    status = replies[9]
    assert status["type"] == "StatusReply" and status["events"].startswith("ipc://")
    assert {row["server"]: row["state"] for row in status["servers"]} == {"test": "ready", "time": "ready"}
    assert set(status["front"]) <= {
        "clients",
        "in_flight",
        "overloaded",
        "malformed",
        "dropped_replies",
        "dropped_calls",
        "audit",
    }
    assert set(status["front"]["audit"]) == {"path", "lines", "failures", "dropped", "waiting"}


def test_a_call_that_asks_for_progress_gets_it_before_its_one_result_and_none_after(
    shared: SupervisorProcess,
) -> None:
    with wire(shared.endpoint) as (front, _):
        front.send(call(1, "mcp_test_progress", {"count": 20, "message": "step"}, progress=True, timeout=20))
        progress = []
        while (reply := front.receive())["type"] == "CallProgress":
            assert reply["id"] == 1
            progress.append(reply)
        assert reply == {"type": "CallResult", "id": 1, "result": reply["result"]}
        front.nothing_more(2)

        front.send(call(3, "mcp_test_progress", {"count": 5}, timeout=20))  # progress not asked for
        assert front.receive()["type"] == "CallResult"
    values = [item["progress"] for item in progress]
    assert progress and values == sorted(set(values))
    assert progress[-1] == {
        "type": "CallProgress",
        "id": 1,
        "progress": 20.0,
        "total": 20.0,
        "message": "step 20",
    }


def test_a_cancelled_call_is_answered_cancelled_and_its_server_told(shared: SupervisorProcess) -> None:
    started, cancelled = shared.state_dir / "raw-cancel.started", shared.state_dir / "raw-cancel.cancelled"
    with wire(shared.endpoint) as (front, _):
        front.send(call(1, "mcp_test_slow", {"seconds": 60, "tag": "raw-cancel"}, timeout=120))
        poll("the slow call to start", started.exists, MARKER_TIMEOUT)
        front.send({"type": "Cancel", "id": 1})
        reply = front.receive()
        assert (reply["type"], reply["id"], reply["code"]) == ("ErrorReply", 1, "CANCELLED")
        poll("the server to be told", cancelled.exists, MARKER_TIMEOUT)
        front.send({"type": "Cancel", "id": 1})  # answered already: ignored, no reply
        front.send({"type": "Cancel", "id": 99})  # never sent: ignored, no reply
        front.nothing_more(2)


def test_a_server_request_reaches_the_caller_that_answers_it_and_its_answer_the_server(
    shared: SupervisorProcess,
) -> None:
    form = {"message": "Who?", "schema": {"type": "object", "properties": {"name": {"type": "string"}}}}
    with wire(shared.endpoint) as (front, _):
        front.send(call(1, "mcp_test_ask", form, answers=["elicitation/create"], timeout=30))
        asked = front.receive()
        assert (asked["type"], asked["id"], asked["method"]) == ("ServerRequest", 1, "elicitation/create")
        assert asked["params"]["message"] == "Who?" and "requestedSchema" in asked["params"]
        answer = {"action": "accept", "content": {"name": "Ada"}}
        front.send({"type": "Answer", "id": 1, "ask": asked["ask"], "result": answer})
        reply = front.receive()
        assert (reply["type"], reply["id"]) == ("CallResult", 1)
        assert reply["result"]["structured_content"] == answer
        front.send({"type": "Answer", "id": 1, "ask": asked["ask"], "result": answer})  # call over: dropped
        front.nothing_more(2)

        front.send(call(3, "mcp_test_ask", form, timeout=30))  # answers nothing: the config declines
        reply = front.receive()
        assert (reply["type"], reply["result"]["structured_content"]["action"]) == ("CallResult", "decline")


def test_bad_input_is_bad_request_with_the_id_when_readable_and_unknown_keys_are_skipped(
    shared: SupervisorProcess,
) -> None:
    with wire(shared.endpoint) as (front, _):
        unknown_kind = front.request({"type": "Nope", "id": 42})
        assert (unknown_kind["code"], unknown_kind["id"]) == ("BAD_REQUEST", 42)
        assert "$.type" in unknown_kind["message"]
        assert front.request({"id": 43})["code"] == "BAD_REQUEST"  # no tag
        bin_for_str = front.request({"type": "Restart", "id": 44, "server": b"test"})
        assert (bin_for_str["code"], bin_for_str["id"]) == ("BAD_REQUEST", 44)
        for garbage in (b"\xc1 not msgpack", encode({"type": "Ping", "id": "one"}), encode([1, 2]), b""):
            front.sock.send(garbage)
            reply = front.receive()
            assert (reply["type"], reply["id"], reply["code"]) == ("ErrorReply", 0, "BAD_REQUEST"), garbage
        front.sock.send_multipart([encode({"type": "Ping", "id": 45}), b"second frame"])  # dropped
        future = front.request({"id": 46, "type": "Ping", "from_a_newer_client": {"a": [1, None]}})
        assert future == {"type": "Done", "id": 46}
        assert (
            front.request(call(47, "mcp_test_echo", {"text": "still here"}))["result"]["text"] == "still here"
        )


# ------------------------------------------------------------------ events


def test_events_bring_the_beacon_registry_changes_and_state_changes(start_supervisor: Start) -> None:
    sup = start_supervisor({"test": stdio_test_server()})
    with wire(sup.endpoint) as (front, ctx):
        endpoint = front.request({"type": "GetStatus", "id": 1})["events"]
        assert endpoint == sup.endpoint.removesuffix(".sock") + "-events.sock"
        every, states = subscribe(ctx, endpoint), subscribe(ctx, endpoint, b"state")
        topic, beacon = next_event(every)  # joined: the beacon comes every second
        assert (topic, beacon["type"]) == (b"version", "RegistryVersion")
        version = front.request({"type": "ListTools", "id": 2})["version"]
        assert beacon["version"] == version

        front.request(call(3, "mcp_test_change_tools", {"add": ["raw_added"]}, timeout=10))
        _, changed = event_where(every, lambda topic, _: topic == b"registry", "RegistryChanged")
        assert (changed["type"], changed["version"], changed["server"]) == (
            "RegistryChanged",
            version + 1,
            "test",
        )
        assert [tool["name"] for tool in changed["added"]] == ["mcp_test_raw_added"]
        _, beacon = event_where(every, lambda topic, _: topic == b"version", "a beacon")
        assert beacon == {"type": "RegistryVersion", "version": version + 1}

        assert front.request({"type": "Restart", "id": 4, "server": "test"}) == {"type": "Done", "id": 4}
        seen = []
        while not seen or seen[-1]["state"] != "ready":
            topic, event = next_event(states)
            assert (topic, event["type"], event["server"]) == (b"state", "StateChanged", "test")
            seen.append(event)
        assert [(event["previous"], event["state"]) for event in seen] == [
            ("ready", "restarting"),
            ("restarting", "starting"),
            ("starting", "ready"),
        ]


# ------------------------------------------------------------------ CURVE


def curve_options(keys: Path) -> dict[int, bytes]:
    """The three socket options, read from the key files as the spec describes them."""

    def key(name: str, which: str) -> bytes:
        found = re.search(rf'^\s*{which}-key = "(.{{40}})"$', (keys / name).read_text(), re.MULTILINE)
        assert found is not None, f"no {which} key in {name}"
        return found[1].encode()

    return {
        zmq.CURVE_SERVERKEY: key("server.key", "public"),
        zmq.CURVE_PUBLICKEY: key("client.key", "public"),
        zmq.CURVE_SECRETKEY: key("client.key_secret", "secret"),
    }


def test_a_client_with_allowed_curve_keys_talks_over_tcp_and_one_without_gets_nothing(
    start_supervisor: Start, tmp_path: Path
) -> None:
    keygen(tmp_path / "keys")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        endpoint = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    sup = start_supervisor({"test": stdio_test_server()}, endpoint=endpoint, keys=tmp_path / "keys")
    curve = curve_options(tmp_path / "keys")
    with wire(endpoint, curve) as (front, ctx):
        status = front.request({"type": "GetStatus", "id": 1})
        assert status["events"].startswith("tcp://127.0.0.1:")
        events = subscribe(ctx, status["events"], curve=curve)
        assert next_event(events)[0] == b"version"
        assert (
            front.request(call(2, "mcp_test_echo", {"text": "over curve"}))["result"]["text"] == "over curve"
        )
    with wire(endpoint) as (plain, _):  # no keys: the handshake fails, no request is read
        plain.send({"type": "Ping", "id": 1})
        assert not plain.sock.poll(2000)
    assert sup.process.poll() is None
