"""Parts of the HTTP facade's wire, alone: a response's head held until its body (one write), and the
fast lane's reading of a request's headers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from supervisor.facade.guard import _HeldHead
from supervisor.facade.http_lane import _Headers


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
    routing = _Headers().of(raw(**FAST))
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
    assert _Headers().of(raw(**{**FAST, **change})) is None


def test_a_routing_header_sent_twice_is_not_the_lanes() -> None:
    assert _Headers().of([*raw(**FAST), (b"mcp-name", b"mcp_t_echo")]) is None


def test_the_verdicts_on_accept_and_content_type_are_the_same_kept_as_made() -> None:
    headers = _Headers()
    for value, taken in [("*/*", True), ("application/*, text/*", True), ("text/html", False)] * 40:
        assert (headers.of(raw(**{**FAST, "accept": value})) is not None) is taken
    for n in range(200):  # more distinct values than are kept: still judged alike
        assert headers.of(raw(**{**FAST, "accept": f"application/json, text/event-stream;q=0.{n}"}))
