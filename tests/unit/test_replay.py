"""The HTTP facade's event replay: each session's own events, every session's within one bound."""

from __future__ import annotations

import gc

import mcp_types as types
from mcp.server.streamable_http import EventMessage

from supervisor.facade.replay import Ledger, Replay


def _message(n: int, text: str = "") -> types.JSONRPCMessage:
    return types.JSONRPCNotification(
        jsonrpc="2.0", method="notifications/message", params={"n": n, "t": text}
    )


async def _replayed(replay: Replay, after: str) -> tuple[str | None, list[tuple[str | None, int]]]:
    sent: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        sent.append(event)

    stream = await replay.replay_events_after(after, send)
    return stream, [(event.event_id, event.message.params["n"]) for event in sent]  # type: ignore[union-attr]


async def test_replay_sends_what_followed_on_that_stream_only() -> None:
    replay = Replay(Ledger())
    first = await replay.store_event("1", None)  # the priming event
    await replay.store_event("1", _message(1))
    other = await replay.store_event("2", _message(2))
    await replay.store_event("1", _message(3))
    stream, sent = await _replayed(replay, first)
    assert stream == "1"
    assert [n for _, n in sent] == [1, 3]
    assert (await _replayed(replay, other)) == ("2", [])
    assert (await _replayed(replay, "no-such-event")) == (None, [])


async def test_sessions_do_not_see_each_others_events() -> None:
    ledger = Ledger()
    mine, theirs = Replay(ledger), Replay(ledger)
    event = await theirs.store_event("1", None)
    await theirs.store_event("1", _message(1))
    assert (await _replayed(mine, event)) == (None, [])  # the same id, another session: unknown


async def test_the_ledger_drops_the_oldest_events_of_any_session() -> None:
    ledger = Ledger(max_bytes=10_000, max_events=5)
    a, b = Replay(ledger), Replay(ledger)
    first = await a.store_event("1", _message(0))
    for n in range(1, 6):
        await (a if n % 2 else b).store_event("1", _message(n))
    assert ledger.events == 5
    assert (await _replayed(a, first)) == (None, [])  # dropped: nothing to resume from
    big = Ledger(max_bytes=2_000)
    c = Replay(big)
    start = await c.store_event("1", None)
    for n in range(10):
        await c.store_event("1", _message(n, "x" * 500))
    assert big.bytes <= 2_000
    assert (await _replayed(c, start)) == (None, [])


async def test_a_gone_sessions_events_still_count_until_dropped() -> None:
    ledger = Ledger(max_events=3)
    gone = Replay(ledger)
    for n in range(3):
        await gone.store_event("1", _message(n))
    del gone
    gc.collect()
    kept = Replay(ledger)
    last = await kept.store_event("1", None)
    for n in range(3):
        await kept.store_event("1", _message(n))
    assert ledger.events == 3
    assert (await _replayed(kept, last)) == (None, [])  # its own priming event was the oldest left
