"""Parts of the HTTP facade's wire, alone: a response's head held until its body (one write), and the
fast lane's reading of a request's headers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.facade.guard import _HeldHead
from supervisor.facade.lane_requests import Headers, cancelled_request


class Transport:
    """What a response cycle writes to: the writes, as they were made."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def held(transport: Transport) -> _HeldHead:
    return _HeldHead(transport, asyncio.get_running_loop())  # type: ignore[arg-type]


def test_a_head_and_the_body_after_it_leave_in_one_write() -> None:
    async def main() -> list[bytes]:
        transport = Transport()
        writer = held(transport)
        writer.write(b"HEAD")
        writer.write(b"BODY")
        writer.write(b"MORE")
        await asyncio.sleep(0)  # the loop's next turn: nothing held is left to write
        return transport.writes

    assert asyncio.run(main()) == [b"HEADBODY", b"MORE"]


def test_a_head_alone_leaves_at_the_loops_next_turn() -> None:
    async def main() -> tuple[list[bytes], list[bytes]]:
        transport = Transport()
        held(transport).write(b"HEAD")
        before = list(transport.writes)
        await asyncio.sleep(0)
        return before, transport.writes

    assert asyncio.run(main()) == ([], [b"HEAD"])


def test_closing_writes_the_held_head_first_and_a_closed_transport_gets_nothing() -> None:
    async def main() -> tuple[list[bytes], bool, list[bytes]]:
        transport, gone = Transport(), Transport()
        writer = held(transport)
        writer.write(b"HEAD")
        writer.close()
        late = held(gone)
        late.write(b"HEAD")
        gone.closed = True  # the connection closed before the loop's next turn
        await asyncio.sleep(0)
        return transport.writes, transport.closed, gone.writes

    assert asyncio.run(main()) == ([b"HEAD"], True, [])


def raw(**headers: str) -> list[tuple[bytes, bytes]]:
    return [(name.replace("_", "-").encode(), value.encode()) for name, value in headers.items()]


FAST: dict[str, Any] = {
    "content_type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp_protocol_version": "2026-07-28",
    "mcp_method": "tools/call",
    "mcp_name": "mcp_t_echo",
    "content_length": "40",
}


def test_the_lane_reads_the_version_and_routing_headers_of_a_request_it_may_take() -> None:
    routing = Headers().of(raw(**FAST))
    assert routing is not None
    assert (routing.version, routing.method, routing.name) == ("2026-07-28", "tools/call", b"mcp_t_echo")


@pytest.mark.parametrize(
    "change",
    [
        {"mcp_protocol_version": "2025-11-25"},
        {"content_type": "text/plain"},
        {"accept": "application/json"},
        {"accept": "text/event-stream"},
        {"content_length": "99999999999"},
        {"content_length": "-1"},
        {"mcp_session_id": "abc"},
        {"mcp_param_text": "x"},
    ],
)
def test_a_request_the_sdk_must_answer_is_not_the_lanes(change: dict[str, str]) -> None:
    assert Headers().of(raw(**{**FAST, **change})) is None


def test_a_routing_header_sent_twice_is_not_the_lanes() -> None:
    assert Headers().of([*raw(**FAST), (b"mcp-name", b"mcp_t_echo")]) is None


def test_the_verdicts_on_accept_and_content_type_are_the_same_kept_as_made() -> None:
    headers = Headers()
    for value, taken in [("*/*", True), ("application/*, text/*", True), ("text/html", False)] * 40:
        assert (headers.of(raw(**{**FAST, "accept": value})) is not None) is taken
    for n in range(200):  # more distinct values than are kept: still judged alike
        assert headers.of(raw(**{**FAST, "accept": f"application/json, text/event-stream;q=0.{n}"}))


SESSION: dict[str, Any] = {
    "content_type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp_protocol_version": "2025-11-25",
    "mcp_session_id": "a1b2",
}


def test_a_host_sessions_request_is_read_with_its_session_and_handshake_version() -> None:
    routing = Headers().of(raw(**SESSION))
    assert routing is not None
    assert (routing.version, routing.method, routing.name, routing.session) == (
        "2025-11-25",
        None,
        None,
        "a1b2",
    )


@pytest.mark.parametrize(
    "change",
    [
        {"mcp_protocol_version": "2026-07-28"},  # a session on the stateless era's version: the SDK's
        {"mcp_protocol_version": "1999-01-01"},
        {"mcp_method": "tools/call"},  # no handshake-era host sends routing headers
        {"mcp_name": "mcp_t_echo"},
        {"accept": "application/json"},
    ],
)
def test_a_session_request_the_sdk_must_answer_is_not_the_lanes(change: dict[str, str]) -> None:
    assert Headers().of(raw(**{**SESSION, **change})) is None


def test_a_cancel_names_the_request_it_cancels_as_the_sdk_keys_its_streams() -> None:
    def cancel(request: object, method: str = "notifications/cancelled") -> bytes:
        return json.dumps({"jsonrpc": "2.0", "method": method, "params": {"requestId": request}}).encode()

    assert cancelled_request(cancel(7)) == "7"
    assert cancelled_request(cancel("r-7")) == "r-7"
    assert cancelled_request(cancel(7, "notifications/progress")) is None
    assert cancelled_request(cancel(None)) is None
    assert cancelled_request(b'{"method": "notifications/cancelled"}') is None


CANCEL_PREFIX = b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": '


@given(st.binary(max_size=300) | st.builds(lambda tail: CANCEL_PREFIX + tail, st.binary(max_size=40)))
def test_any_bytes_are_a_cancel_or_not_without_raising(body: bytes) -> None:
    request = cancelled_request(body)
    if request is not None:  # then it is one, and names what it cancels
        message = json.loads(body)
        assert message["method"] == "notifications/cancelled"
        assert str(message["params"]["requestId"]) == request
