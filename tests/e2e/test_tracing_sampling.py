"""Sampling across the real processes: a supervisor with ``"tracing": true`` and 0 % of new traces
sampled (``parentbased_traceidratio``, ratio 0), whose worker serves the traced server over stdio.

Every span object the supervisor and its worker make is counted by ``tests/hooks/sitecustomize.py``
(on their ``PYTHONPATH``): a line per object, with the process's pid. A call whose trace is not
sampled, by its caller or at its root here, makes none, and the server still gets one trace context:
the caller's as it was sent, or the one begun in the supervisor. A call its caller sampled makes
exactly two in each process (our span, then the SDK's ``ReadableSpan`` it is exported as): the
supervisor's span and the worker's one, parent and child, whose context is what the server gets.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from supervisor.protocol import CallResult, CallTool, ToolResult
from supervisor.shared.trace_context import valid_traceparent
from tests.e2e.harness import RawClient, SupervisorProcess, raw_client
from tests.otel import SUPERVISOR, WORKER, exporting_to, otlp_receiver, spans_of, traced_stdio

pytestmark = pytest.mark.e2e

Start = Callable[..., SupervisorProcess]
HOOKS = Path(__file__).parent.parent / "hooks"
TRACE_ID = "7bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
STATE = "rojo=00f067aa0ba902b7"


def server_got(raw: RawClient, id: int, traceparent: str = "", tracestate: str = "") -> dict[str, str]:
    """The trace context the server got with a call that came with this one."""
    arguments = msgspec.Raw(msgspec.msgpack.encode({}))
    raw.send(
        CallTool(
            id=id,
            name="mcp_traced_context",
            arguments=arguments,
            timeout=10,
            traceparent=traceparent,
            tracestate=tracestate,
        )
    )
    reply = raw.recv()
    assert isinstance(reply, CallResult) and reply.id == id, reply
    got: dict[str, str] = json.loads(msgspec.msgpack.decode(reply.result, type=ToolResult).text)
    return got


def made(hook: Path) -> list[tuple[int, str]]:
    """The span objects made so far, as (pid, class name)."""
    lines = hook.read_text().splitlines() if hook.exists() else []
    return [(int(pid), name) for pid, name in (line.split() for line in lines)]


def test_unsampled_calls_make_no_span_object_in_either_process_and_a_sampled_one_makes_one_in_each(
    start_supervisor: Start, tmp_path: Path
) -> None:
    hook = tmp_path / "spans-made"
    with otlp_receiver() as receiver:
        env = exporting_to(
            receiver,
            OTEL_TRACES_SAMPLER="parentbased_traceidratio",
            OTEL_TRACES_SAMPLER_ARG="0",
            PYTHONPATH=str(HOOKS),
            MCPS_SPAN_HOOK=str(hook),
        )
        sup = start_supervisor({"traced": traced_stdio(receiver)}, env=env, settings={"tracing": True})
        before = len(made(hook))  # the worker's session began with the SDK's spans of its handshake
        with raw_client(sup.endpoint) as raw:
            not_sampled = f"00-{TRACE_ID}-{CALLER_SPAN}-00"
            assert server_got(raw, 1, not_sampled, STATE) == {"traceparent": not_sampled, "tracestate": STATE}
            root = server_got(raw, 2)  # no context: a trace begins in the supervisor, at 0 %
            assert valid_traceparent(root["traceparent"]) and root["traceparent"].endswith("-02")
            assert root["tracestate"] == ""
            assert made(hook)[before:] == []  # each span would have been begun before the reply

            sampled = server_got(raw, 3, f"00-{TRACE_ID}-{CALLER_SPAN}-01")
        found = spans_of(
            receiver, TRACE_ID, (SUPERVISOR, "route mcp_traced_context"), (WORKER, "tools/call context")
        )
        route = found[SUPERVISOR, "route mcp_traced_context"]
        serving = found[WORKER, "tools/call context"]
        assert route.parent_id == CALLER_SPAN and serving.parent_id == route.span_id
        assert sampled == {"traceparent": f"00-{TRACE_ID}-{serving.span_id}-01", "tracestate": ""}
        ours = {sup.process.pid: "supervisor", serving.resource["process.pid"]: "worker"}
        counted = Counter((ours[pid], name) for pid, name in made(hook)[before:] if pid in ours)
        assert counted == {
            ("supervisor", "Span"): 1,
            ("supervisor", "ReadableSpan"): 1,
            ("worker", "Span"): 1,
            ("worker", "ReadableSpan"): 1,
        }
        sup.stop()
        traces = {span.trace_id for span in receiver.received() if span.service in (SUPERVISOR, WORKER)}
        assert traces == {TRACE_ID}  # nothing of the other calls, nor of the handshake, at 0 %
