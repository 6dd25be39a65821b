"""A long wait's probe of the supervisor (``supervisor.client.exchanges.Liveness``), on a fake clock."""

from __future__ import annotations

import pytest

from supervisor.client.errors import SupervisorUnreachableError
from supervisor.client.exchanges import LIVENESS_AFTER, LIVENESS_WAIT, Requests
from supervisor.client.liveness import Liveness
from supervisor.protocol import CallProgress, Done, Ping


def test_a_short_wait_never_pings() -> None:
    probe = Liveness(LIVENESS_AFTER + LIVENESS_WAIT, "ipc://x")
    assert not probe.on
    assert probe.due(0.0, Requests()) is None and probe.due(1e6, Requests()) is None


def test_silence_brings_a_ping_whose_answer_keeps_the_wait_going() -> None:
    requests, probe = Requests(), Liveness(3600, "ipc://x")
    assert probe.due(0.0, requests) is None  # the wait starts
    assert probe.due(LIVENESS_AFTER - 0.1, requests) is None
    ping = probe.due(LIVENESS_AFTER, requests)
    assert isinstance(ping, Ping)
    assert probe.due(LIVENESS_AFTER + 1, requests) is None  # one ping at a time
    assert probe.heard(Done(id=ping.id), LIVENESS_AFTER + 1)  # ours
    assert probe.due(2 * LIVENESS_AFTER, requests) is None  # silence counts from its answer
    assert isinstance(probe.due(2 * LIVENESS_AFTER + 1, requests), Ping)


def test_any_word_from_the_supervisor_counts_and_a_ping_unanswered_is_unreachable() -> None:
    requests, probe = Requests(), Liveness(3600, "ipc://here")
    probe.due(0.0, requests)
    assert not probe.heard(CallProgress(id=99, progress=1), LIVENESS_AFTER - 1)  # not ours, but a word
    assert probe.due(LIVENESS_AFTER, requests) is None
    ping = probe.due(2 * LIVENESS_AFTER, requests)
    assert ping is not None
    with pytest.raises(SupervisorUnreachableError, match="ipc://here stopped answering"):
        probe.due(2 * LIVENESS_AFTER + LIVENESS_WAIT, requests)
