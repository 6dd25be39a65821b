"""What the call table keeps of a request in flight: its ``Pending`` entry, the ``Gather`` of a
listing sent to several workers, and the ``CallMeter`` that hears each tool call's end.

Above: the router, which makes the entries as it sends requests (and the waiting room, which moves
them); the call table (``supervisor.daemon.call_table``), which keeps them until their terminal
reply; the metrics (``supervisor.ops.metrics.meter``), which implement ``CallMeter``. Below: nothing
but the wire's types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import msgspec

from supervisor.protocol import ErrorCode, ServerFailure

if TYPE_CHECKING:
    from supervisor.shared.spans import Span

__all__ = ["CallMeter", "Gather", "Pending"]


@dataclass(slots=True)
class Gather:
    """A listing sent to several workers: one reply once every one has answered (or failed)."""

    caller: bytes
    id: int
    named: bool  # the caller named one server: its failure is the reply
    waiting: int
    identity: str = ""  # the client identity it was admitted for (``CallTable.admit``)
    parts: dict[str, msgspec.Raw] = field(default_factory=dict)  # server -> its encoded entries
    failures: list[ServerFailure] = field(default_factory=list)


@dataclass(slots=True)
class Pending:
    caller: bytes  # the front routing id
    id: int  # the caller's request id
    worker: bytes  # the routing id of the worker incarnation that has it
    server: str
    tool: str
    what: str = ""  # for resources and prompts requests: what was asked
    gather: Gather | None = None  # for listings: where the answer goes
    progress: bool = False  # the caller asked for CallProgress replies
    call: int = 0  # its call id (set by ``CallTable.remember``)
    span: Span | None = None  # a tool call's span, while tracing and sampled (``supervisor.shared.tracing``)
    traceparent: str = ""  # the trace context it goes on with, while tracing (sampled or not)
    tracestate: str = ""
    started: float | None = None  # a tool call's time sent, while metered (set by ``CallTable.remember``)
    retry: object = None  # what runs it once more if its worker dies (the router's; ``retryIdempotent``)
    again: object = None  # a tool call's: what runs it on the next worker if this one never sent it
    identity: str = ""  # the client identity it was admitted for (``CallTable.admit``)


class CallMeter(Protocol):
    """What measures tool calls (``supervisor.ops.metrics.meter.CallMeter``): each one's end, and when it
    was sent (the table's clock)."""

    def answered(self, server: str, started: float, result: msgspec.Raw) -> None: ...

    def failed(self, server: str, started: float, code: ErrorCode) -> None: ...
