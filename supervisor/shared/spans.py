"""The spans of routed calls, made cheaply: sampled once per trace, where it starts; a call not sampled
makes no span object at all; one that is sampled is a few fields until it ends, and only then becomes
the SDK's ``ReadableSpan``, handed to the span processors.

Above: ``supervisor.shared.tracing``, which makes a ``Recorder`` when tracing starts and opens and ends
the supervisor's span (``route NAME``) and the worker's (``tools/call TOOL``) through it. Below: the
OpenTelemetry SDK (imported only once tracing starts: this module is loaded by ``tracing.start``) and
``supervisor.shared.trace_context`` (the W3C strings).

Why not the SDK's ``Tracer``: its span (``_Span``) checks and copies every attribute under a lock,
calls the processors at its start and its end and keeps the tracer's own metrics, some 15 us of CPU
per span, and a call it does not sample still costs a ``NonRecordingSpan``, a ``SpanContext`` and the
sampler's result, in each process the call crosses. Here:

- ``Sampling`` is the standard sampler the ``OTEL_TRACES_SAMPLER`` and ``OTEL_TRACES_SAMPLER_ARG``
  environment variables name, read as the SDK reads them, as one rule: a trace id is sampled when its
  low 64 bits are under a bound (0: never; 2**64: always; the SDK's ``TraceIdRatioBased`` bound
  otherwise), and a parent-based sampler follows the sampled flag of a valid parent instead. The
  same sampler, as the SDK's objects, goes to the tracer provider, for the MCP SDK's own spans.
- ``Recorder.begin`` decides from the incoming ``traceparent`` alone. Not sampled: no span, and the
  context passed on is the incoming one as it came (or, at a root, a new trace id and span id with
  the sampled flag clear), so the worker and the server see the same trace. Sampled: a ``Span``
  (the ids, the start time, a few names), whose context is passed on instead.
- ``Recorder.end`` builds the ``ReadableSpan`` once: the span's name and attributes come from a small
  cache keyed by the names and the outcome, so a call builds no attribute dict of its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    ParentBased,
    Sampler,
    TraceIdRatioBased,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from supervisor.shared.trace_context import (
    ERROR_TYPE,
    MAX_STATUS,
    METHOD,
    OPERATION,
    OUTCOME,
    SERVER,
    TOOL,
    TOOL_NAME,
    trace_state,
    valid_traceparent,
    valid_tracestate,
)

__all__ = ["ALWAYS", "Recorder", "Sampling", "Span"]

log = logging.getLogger("mcp_supervisor")

ALWAYS: Final = 1 << 64  # a bound every trace id is under (the 64 low bits, as the SDK compares them)
_LOW_64: Final = ALWAYS - 1
_SAMPLED: Final = 0x01  # W3C trace flags
_RANDOM: Final = 0x02  # the trace id's low 56 bits are random (W3C Trace Context Level 2)
_MAX_SHAPES: Final = 1024  # names and outcomes whose span name and attributes are kept, at most

_SAMPLER_NAMES: Final = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
_UNSET: Final = Status(StatusCode.UNSET)


@dataclass(frozen=True, slots=True)
class Sampling:
    """Which traces are recorded: a trace id whose low 64 bits are under ``bound``; with
    ``parent_based``, a trace that comes with a valid parent follows that parent's sampled flag."""

    parent_based: bool = True
    bound: int = ALWAYS

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Sampling:
        """The sampler ``OTEL_TRACES_SAMPLER`` and ``OTEL_TRACES_SAMPLER_ARG`` name, as the SDK reads
        them: ``parentbased_always_on`` by default and for a name it does not know; a ratio that is not
        a number from 0 to 1 is 1. ``OTEL_SDK_DISABLED=true`` records nothing."""
        if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return cls(parent_based=False, bound=0)
        name = environ.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").lower()
        if name not in _SAMPLER_NAMES:
            log.warning("tracing: OTEL_TRACES_SAMPLER %r is not a sampler; using parentbased_always_on", name)
            name = "parentbased_always_on"
        parent_based = name.startswith("parentbased_")
        if name.endswith("always_on"):
            return cls(parent_based, ALWAYS)
        if name.endswith("always_off"):
            return cls(parent_based, 0)
        try:
            rate = float(environ.get("OTEL_TRACES_SAMPLER_ARG", ""))
        except ValueError:
            rate = float("nan")
        if not 0.0 <= rate <= 1.0:
            log.warning("tracing: OTEL_TRACES_SAMPLER_ARG is not a ratio from 0 to 1; using 1")
            rate = 1.0
        return cls(parent_based, TraceIdRatioBased.get_bound_for_rate(rate))

    def sampled(self, trace_id: int, parent_flags: int | None) -> bool:
        """Whether the trace ``trace_id`` is recorded here; ``parent_flags``: the W3C flags of a valid
        parent, None at a root."""
        if parent_flags is not None and self.parent_based:
            return bool(parent_flags & _SAMPLED)
        return trace_id & _LOW_64 < self.bound

    def sdk_sampler(self) -> Sampler:
        """The same rule as the SDK's sampler, for the spans the SDK makes itself."""
        root: Sampler
        if self.bound == 0:
            root = ALWAYS_OFF
        elif self.bound >= ALWAYS:
            root = ALWAYS_ON
        else:
            root = TraceIdRatioBased(self.bound / ALWAYS)
        return ParentBased(root) if self.parent_based else root


class Span:
    """A sampled call's span while it runs: its ids, when it began, and what it will say."""

    __slots__ = (
        "flags",
        "message",
        "name",
        "outcome",
        "parent_flags",
        "parent_id",
        "route",
        "server",
        "span_id",
        "start",
        "tool",
        "trace_id",
        "tracestate",
    )

    def __init__(
        self,
        route: bool,
        name: str,
        trace_id: int,
        span_id: int,
        flags: int,
        parent_id: int,
        parent_flags: int,
        tracestate: str,
    ) -> None:
        self.route = route  # the supervisor's span ``route NAME``, else the worker's ``tools/call NAME``
        self.name = name  # the tool's name as the call names it there
        self.trace_id = trace_id
        self.span_id = span_id
        self.flags = flags
        self.parent_id = parent_id  # 0 at a root
        self.parent_flags = parent_flags
        self.tracestate = tracestate  # valid, or ""
        self.start = time.time_ns()
        self.server = ""  # the call's server and its own name for the tool (the supervisor's span)
        self.tool = ""
        self.outcome = ""  # "ok" or an error code, once the call is answered
        self.message = ""  # the error's message

    @property
    def traceparent(self) -> str:
        """This span's context on the wire."""
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{self.flags:02x}"


class Recorder:
    """Decides, opens and ends this process's spans of calls, for ``processors`` (those of the
    provider, which also gets the SDK's own spans)."""

    def __init__(
        self,
        sampling: Sampling,
        processors: Sequence[SpanProcessor],
        resource: Resource,
        scope: InstrumentationScope,
        ids: IdGenerator,
    ) -> None:
        self.sampling = sampling
        self._processors = tuple(processors)
        self._resource = resource
        self._scope = scope
        self._trace_id = ids.generate_trace_id
        self._span_id = ids.generate_span_id
        self._root_flags = _RANDOM if ids.is_trace_id_random() else 0
        self._shapes: dict[tuple[bool, str, str, str, str], tuple[str, Mapping[str, AttributeValue]]] = {}

    def begin(
        self, route: bool, name: str, traceparent: str, tracestate: str
    ) -> tuple[Span | None, str, str]:
        """A call arrives with the context it was sent (``traceparent`` not valid: none, and a trace
        begins here): its span, None when the trace is not sampled, and the context to pass on as
        (traceparent, tracestate)."""
        if traceparent and valid_traceparent(traceparent):
            flags = int(traceparent[53:55], 16)
            trace_id = int(traceparent[3:35], 16)
            state = tracestate if not tracestate or valid_tracestate(tracestate) else ""
            if not self.sampling.sampled(trace_id, flags):
                if flags & _SAMPLED:  # a sampler that is not parent-based overruled the parent
                    return None, f"00-{traceparent[3:53]}{flags & ~_SAMPLED:02x}", state
                return None, traceparent if traceparent[:2] == "00" else "00" + traceparent[2:], state
            parent_id = int(traceparent[36:52], 16)
            span = Span(
                route, name, trace_id, self._span_id(), _SAMPLED | flags & _RANDOM, parent_id, flags, state
            )
            return span, span.traceparent, state
        trace_id = self._trace_id()
        if not self.sampling.sampled(trace_id, None):
            return None, f"00-{trace_id:032x}-{self._span_id():016x}-{self._root_flags:02x}", ""
        span = Span(route, name, trace_id, self._span_id(), _SAMPLED | self._root_flags, 0, 0, "")
        return span, span.traceparent, ""

    def end(self, span: Span) -> None:
        """``span`` is over: to the processors, as the SDK's ``ReadableSpan``."""
        end = time.time_ns()
        title, attributes = self._shape(span)
        state = trace_state(span.tracestate) if span.tracestate else None
        context = SpanContext(span.trace_id, span.span_id, False, TraceFlags(span.flags), state)
        parent = None
        if span.parent_id:
            parent = SpanContext(span.trace_id, span.parent_id, True, TraceFlags(span.parent_flags), state)
        status = _UNSET
        if span.outcome and span.outcome != "ok":
            status = Status(StatusCode.ERROR, span.message[:MAX_STATUS])
        finished = ReadableSpan(
            title,
            context,
            parent,
            self._resource,
            attributes,
            kind=SpanKind.SERVER,
            status=status,
            start_time=span.start,
            end_time=end,
            instrumentation_scope=self._scope,
        )
        for processor in self._processors:
            processor.on_end(finished)

    def _shape(self, span: Span) -> tuple[str, Mapping[str, AttributeValue]]:
        """A span's name and attributes, made once for each tool, server and outcome."""
        key = (span.route, span.name, span.server, span.tool, span.outcome)
        shape = self._shapes.get(key)
        if shape is None:
            if len(self._shapes) >= _MAX_SHAPES:  # names a client made up: start over, rather than grow
                self._shapes.clear()
            attributes: dict[str, AttributeValue] = {
                METHOD: "tools/call",
                OPERATION: "execute_tool",
                TOOL_NAME: span.name,
            }
            if span.server:
                attributes[SERVER] = span.server
            if span.tool:
                attributes[TOOL] = span.tool
            if span.outcome:
                attributes[OUTCOME] = span.outcome
            if span.outcome and span.outcome != "ok":
                attributes[ERROR_TYPE] = span.outcome
            title = f"route {span.name}" if span.route else f"tools/call {span.name}"
            shape = self._shapes[key] = (title, MappingProxyType(attributes))  # shared: read-only
        return shape
