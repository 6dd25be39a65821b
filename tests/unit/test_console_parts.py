"""The console's pure parts: the hour of call history, the timeline's reading of state changes, the
audit query string, a tool's parameters, the new paths (with a fake backend) and the site's use of an
audit trail when the supervisor has one."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from supervisor.config.load import parse_config
from supervisor.config.model import MAX_STATUS_BUCKET, ConfigError
from supervisor.ops.metrics.history import BUCKET, SLOTS, CallHistory, bucket_end
from supervisor.ops.metrics.latency import BOUNDS, quantile
from supervisor.ops.metrics.meter import CallMeter
from supervisor.ops.web.app import App
from supervisor.ops.web.detail import params
from supervisor.ops.web.http import Deferred, Request, Response
from supervisor.ops.web.query import AUDIT_LIMIT, AuditQuery, QueryError, audit_query
from supervisor.ops.web.site import _Backend
from supervisor.ops.web.timeline import TIMELINE, Timeline, classify
from supervisor.protocol import AuditStats, StateChanged
from supervisor.shared.address import HostCheck, ListenAddress
from tests.unit.test_web_parts import HOST, FakeBackend

EPOCH = 1_700_000_040.0  # a minute's start

# --- the hour of history ---------------------------------------------------------------------


BUCKETS = st.one_of(st.sampled_from([1, 2, 60, 3600]), st.integers(1, MAX_STATUS_BUCKET))  # statusBucket


@given(
    BUCKETS,
    st.lists(
        st.tuples(st.integers(0, len(BOUNDS)), st.booleans(), st.floats(0, 3, allow_nan=False)),
        max_size=200,
    ),
    st.floats(0, 0.2),
)
def test_history_holds_exactly_the_calls_of_its_last_buckets_at_any_width(
    bucket: int, spread: list[tuple[int, bool, float]], later: float
) -> None:
    """Calls in time order over three spans of the history, read at the last call or a little later:
    each bucket has exactly the calls of its ``bucket`` seconds, whatever ``bucket`` is."""
    span = SLOTS * bucket
    calls = sorted(((lat, err, offset * span) for lat, err, offset in spread), key=lambda call: call[2])
    history = CallHistory(bucket)
    for latency, error, offset in calls:
        history.add(latency, error, EPOCH + offset)
    now = EPOCH + (calls[-1][2] if calls else 0) + later * span
    last = int(now // bucket)
    series = history.series(now)
    assert len(series.calls) == len(series.errors) == len(series.p50) == len(series.p99) == SLOTS
    for position, index in enumerate(range(last - SLOTS + 1, last + 1)):
        inside = [(lat, err) for lat, err, offset in calls if int((EPOCH + offset) // bucket) == index]
        counts = [0] * (len(BOUNDS) + 1)
        for latency, _ in inside:
            counts[latency] += 1
        assert series.calls[position] == len(inside)
        assert series.errors[position] == sum(err for _, err in inside)
        assert series.p50[position] == quantile(0.5, counts)
        assert series.p99[position] == quantile(0.99, counts)


def test_a_clock_set_back_starts_its_bucket_again_and_never_grows_the_history() -> None:
    history = CallHistory()
    history.add(3, False, EPOCH + 30)
    history.add(3, True, EPOCH - 3600 + 30)  # the same slot, an hour before: the newer call is gone
    series = history.series(EPOCH - 3600 + 31)
    assert series.calls[-1] == 1 and series.errors[-1] == 1 and sum(series.calls) == 1
    assert sum(history.series(EPOCH + 31).calls) == 0  # nothing of that hour is left


def test_a_history_needs_positive_sizes() -> None:
    with pytest.raises(ValueError, match="positive bucket and slot count"):
        CallHistory(bucket=0)
    with pytest.raises(ValueError, match="a history bucket must be a positive number of seconds, not 0"):
        CallMeter(lambda: 0.0, bucket=0)


@given(BUCKETS, st.floats(0, 10 * 3600, allow_nan=False))
def test_the_meters_history_ends_at_the_end_of_the_bucket_now_is_in(bucket: int, offset: float) -> None:
    wall = EPOCH + offset
    meter = CallMeter(lambda: 100.0, lambda: wall, bucket=bucket)
    meter.failed("files", 99.9, "TIMEOUT")
    history = meter.history(["files"])
    assert history.bucket == bucket and history.end % bucket == 0
    assert history.end - bucket <= wall < history.end
    series = history.servers["files"]
    assert (series.calls[-1], series.errors[-1], sum(series.calls)) == (1, 1, 1)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (0, "expected 'int' >= 1"),
        (3601, "expected 'int' <= 3600"),
        (1.5, "expected 'int', got 'float'"),
        ("60", "expected 'int', got 'str'"),
    ],
)
def test_a_bad_status_bucket_rejects_the_config_naming_the_field(value: object, says: str) -> None:
    text = json.dumps({"mcpServers": {}, "supervisor": {"statusBucket": value}})
    with pytest.raises(ConfigError) as info:
        parse_config(text.encode(), environ={})
    assert f"\"supervisor\": field 'statusBucket': {says}" in str(info.value)


def test_the_status_bucket_loads_and_defaults_to_a_minute() -> None:
    def bucket(settings: dict[str, Any]) -> int:
        text = json.dumps({"mcpServers": {}, "supervisor": settings})
        return parse_config(text.encode(), environ={}).settings.status_bucket

    assert (bucket({}), bucket({"statusBucket": 2}), bucket({"statusBucket": 3600})) == (60, 2, 3600)


def test_the_meters_history_has_every_server_asked_for_and_ends_with_the_current_minute() -> None:
    wall = [EPOCH + 12.5]
    meter = CallMeter(lambda: 100.0, lambda: wall[0])
    meter.failed("files", 99.9, "TIMEOUT")
    meter.answered("files", 99.99, msgspec.Raw(msgspec.msgpack.encode({})))
    history = msgspec.json.decode(msgspec.json.encode(meter.history(["files", "quiet"])))
    assert history["bucket"] == BUCKET and history["end"] == EPOCH + BUCKET == bucket_end(wall[0])
    files = history["servers"]["files"]
    assert (files["calls"][-1], files["errors"][-1], sum(files["calls"])) == (2, 1, 2)
    assert files["p50"][-1] is not None and files["p50"][:-1] == [None] * (SLOTS - 1)
    assert history["servers"]["quiet"] == {
        "calls": [0] * SLOTS,
        "errors": [0] * SLOTS,
        "p50": [None] * SLOTS,
        "p99": [None] * SLOTS,
    }


# --- the timeline ----------------------------------------------------------------------------


def change(state: str, previous: str, restarts: int = 0, error: str | None = None) -> StateChanged:
    return StateChanged(server="files", state=state, previous=previous, restarts=restarts, last_error=error)


def test_the_timeline_tells_a_crash_from_an_operators_restart_and_keeps_newest_first() -> None:
    clock = iter(range(1000, 2000))
    timeline = Timeline(wall=lambda: float(next(clock)))
    for event in [
        change("starting", "starting"),
        change("ready", "starting"),
        change("restarting", "ready", 1, "worker was killed by SIGKILL"),
        change("starting", "restarting", 1, "worker was killed by SIGKILL"),
        change("ready", "starting", 1, "worker was killed by SIGKILL"),
        change("restarting", "ready", 0, "worker was killed by SIGKILL"),  # restart: the count goes to 0
        change("stopped", "starting"),
        change("starting", "stopped"),
        change("failed", "ready", 6, "more than 5 restarts"),
        change("needs-login", "starting", 0, "log in first"),
    ]:
        timeline.state_changed(event)
    timeline.reloaded(None)
    timeline.reloaded("the file is not valid JSON")
    kinds = [(entry.kind, entry.detail) for entry in reversed(timeline.newest())]
    assert kinds == [
        ("state", "starting → starting"),
        ("ready", ""),
        ("crash", "worker was killed by SIGKILL"),
        ("state", "restarting → starting"),
        ("ready", "after 1 restart"),
        ("restart", "from ready"),
        ("stop", "from starting"),
        ("start", "from stopped"),
        ("failed", "more than 5 restarts"),
        ("login", "log in first"),
        ("reload", "applied"),
        ("reload", "rejected: the file is not valid JSON"),
    ]
    assert [entry.time for entry in timeline.newest(2)] == [1011.0, 1010.0]
    assert timeline.newest()[0].server == ""  # a reload is the whole supervisor's


def test_a_crash_without_a_reason_still_says_what_ended() -> None:
    assert classify(change("restarting", "ready", 2), 1) == ("crash", "the worker ended")
    assert classify(change("restarting", "ready", 2), None) == ("restart", "from ready")  # first seen


def test_the_timeline_is_bounded() -> None:
    timeline = Timeline()
    for n in range(TIMELINE + 50):
        timeline.state_changed(change("ready", "starting", n))
    assert len(timeline) == TIMELINE and timeline.newest()[0].detail == f"after {TIMELINE + 49} restarts"


# --- the audit query -------------------------------------------------------------------------


def test_an_audit_query_reads_every_parameter() -> None:
    assert audit_query("") == AuditQuery()
    assert audit_query("since=90.5&identity=ci%40build&tool=mcp_*&limit=7") == AuditQuery(
        since=90.5, identity="ci@build", tool="mcp_*", limit=7
    )
    assert audit_query("identity=&tool=") == AuditQuery()  # blank: no filter
    assert audit_query(f"limit={AUDIT_LIMIT}").limit == AUDIT_LIMIT


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("since=soon", "since must be a number of seconds, not 'soon'"),
        ("since=nan", "since must be a number of seconds of 0 or more"),
        ("since=-5", "since must be a number of seconds of 0 or more"),
        ("limit=1.5", "limit must be a whole number"),
        (f"limit={AUDIT_LIMIT + 1}", f"limit must be from 1 to {AUDIT_LIMIT}"),
        ("limit=\u0661", "limit must be a whole number"),  # an Arabic-Indic digit is not one
        ("verbose=1", "unknown parameter 'verbose' (this path takes since, identity, tool, limit)"),
        ("since=1&since=2", "the parameter 'since' is given twice"),
        ("tool", "the query string is malformed"),
        ("tool=%ff", "the query string is malformed"),
        ("identity=" + "x" * 300, "longer than 256 characters"),
    ],
)
def test_a_bad_audit_query_names_what_is_wrong(query: str, says: str) -> None:
    with pytest.raises(QueryError, match=re.escape(says)):
        audit_query(query)


@given(st.text(max_size=80))
def test_any_query_string_is_a_query_or_a_query_error(query: str) -> None:
    try:
        read = audit_query(query)
    except QueryError as exc:
        assert str(exc)
    else:
        assert 1 <= read.limit <= AUDIT_LIMIT and (read.since is None or read.since >= 0)


# --- a tool's parameters ---------------------------------------------------------------------


def test_parameters_sum_up_the_schemas_properties() -> None:
    schema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Where.\nMore lines."},
            "tags": {"type": "array", "items": {"type": "string"}},
            "mode": {"enum": ["r", "w"]},
            "size": {"type": ["integer", "null"]},
            "either": {"anyOf": [{"type": "string"}, {"type": "number"}]},
            "free": True,
        },
        "required": ["path", 3],
    }
    assert params(schema) == [
        {"name": "path", "type": "string", "required": True, "description": "Where."},
        {"name": "tags", "type": "string[]", "required": False, "description": ""},
        {"name": "mode", "type": "'r' | 'w'", "required": False, "description": ""},
        {"name": "size", "type": "integer | null", "required": False, "description": ""},
        {"name": "either", "type": "string | number", "required": False, "description": ""},
        {"name": "free", "type": "any", "required": False, "description": ""},
    ]
    assert params(None) == params({"type": "object"}) == params({"properties": []}) == []


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=20,
)


@given(JSON)
def test_any_schema_gives_parameters_without_raising(schema: Any) -> None:
    found = params(schema)
    assert all(set(one) == {"name", "type", "required", "description"} for one in found)


# --- the paths, with a fake backend ----------------------------------------------------------


class ConsoleBackend(FakeBackend):
    def __init__(self, audit: bool = False) -> None:
        super().__init__()
        self.trail = audit
        self.asked: list[tuple[Any, ...]] = []

    def history(self) -> bytes:
        return b'{"bucket": 60, "end": 0, "servers": {}}'

    def timeline(self) -> bytes:
        return b'{"events": []}'

    def server(self, name: str) -> bytes | str:
        return b'{"server": "time"}' if name == "time" else f"no server named {name!r} (servers: time)"

    async def audit(self, since: float | None, identity: str | None, tool: str | None, limit: int) -> Any:
        self.asked.append((since, identity, tool, limit))
        return (
            {"records": [], "path": "audit.jsonl", "lines": 0, "failures": 0, "dropped": 0}
            if self.trail
            else None
        )

    def identities(self) -> dict[str, Any] | None:
        return {"identities": []} if self.trail else None


def answer(app: App, method: str, path: str, query: str = "", host: str = HOST) -> tuple[int, Any]:
    reply = app.handle(Request(method, path, {"host": host}, b"", query))
    if isinstance(reply, Deferred):  # an audit query: awaited
        reply = trio.run(reply.make)
    assert isinstance(reply, Response)
    is_json = reply.content_type == "application/json"
    return reply.status, json.loads(reply.body) if is_json else reply.body


def test_the_console_paths_answer_from_the_backend() -> None:
    app = App(ConsoleBackend())
    assert answer(app, "GET", "/api/history") == (200, {"bucket": 60, "end": 0, "servers": {}})
    assert answer(app, "GET", "/api/timeline") == (200, {"events": []})
    assert answer(app, "GET", "/api/servers/time") == (200, {"server": "time"})
    missing = (404, {"error": "no server named 'tïme' (servers: time)"})
    assert answer(app, "GET", "/api/servers/t%C3%AFme") == missing
    assert answer(app, "GET", "/api/servers/%ff")[0] == 400
    assert answer(app, "POST", "/api/servers/time")[0] == 405
    assert answer(app, "DELETE", "/api/servers/time")[0] == 405
    assert answer(app, "GET", "/api/servers/time/tools")[0] == 404


def test_the_audit_paths_are_404_without_an_audit_trail_and_pass_the_query_on() -> None:
    backend = ConsoleBackend()
    app = App(backend)
    assert answer(app, "GET", "/api/audit", "since=60") == (404, {"error": "no audit trail"})
    assert answer(app, "GET", "/api/identities") == (404, {"error": "no audit trail"})
    assert answer(app, "GET", "/api/audit", "limit=0")[0] == 400  # a bad query first
    backend.trail = True
    status, body = answer(app, "GET", "/api/audit", "since=60&identity=ci&tool=mcp_*&limit=5")
    assert status == 200 and body["path"] == "audit.jsonl"
    assert backend.asked[-1] == (60.0, "ci", "mcp_*", 5)
    assert answer(app, "GET", "/api/identities") == (200, {"identities": []})


@pytest.mark.parametrize("path", ["/page.css", "/page.js", "/views.js", "/api/history", "/api/audit"])
def test_the_console_paths_check_the_host(path: str) -> None:
    status, body = answer(App(ConsoleBackend()), "GET", path, host="evil.example:9464")
    assert status == 421 and "does not name this listener" in body["error"]


def test_the_pages_files_are_served_with_their_types_and_request_nothing_elsewhere() -> None:
    app = App(ConsoleBackend())
    types = {
        "/": "text/html",
        "/page.css": "text/css",
        "/page.js": "text/javascript",
        "/views.js": "text/javascript",
    }
    for path, kind in types.items():
        reply = app.handle(Request("GET", path, {"host": HOST}, b""))
        assert isinstance(reply, Response) and reply.status == 200 and reply.content_type.startswith(kind)
        policy = dict(reply.headers)["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        text = reply.body.decode().replace('"http://www.w3.org/2000/svg"', "")  # a namespace, not a request
        assert not re.search(r"https?://|//cdn|@import|url\(", text), path
    page = app.handle(Request("GET", "/", {"host": HOST}, b""))
    assert isinstance(page, Response)
    assert b'<script src="page.js" defer></script>' in page.body and b"<style" not in page.body
    assert b" style=" not in page.body  # the policy allows no inline style


# --- the site and the audit trail ------------------------------------------------------------


class Trail:
    spec = "on"  # the trail's settings: None when it is off

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    async def query(self, **filters: Any) -> list[dict[str, Any]]:
        self.asked.append(filters)
        return [{"tool": "mcp_a_b"}]

    def stats(self) -> AuditStats:
        return AuditStats(path="x", lines=3, failures=1, dropped=0)

    def identities(self) -> list[dict[str, Any]]:
        return [{"identity": "ci", "active": True}]


def site_backend(supervisor: object) -> _Backend:
    hosts = HostCheck(ListenAddress("127.0.0.1", 9464), 9464)
    return _Backend(supervisor, CallMeter(lambda: 0.0), hosts)  # type: ignore[arg-type]


async def test_the_site_asks_the_supervisors_audit_trail_when_it_has_one() -> None:
    assert await site_backend(SimpleNamespace()).audit(None, None, None, 10) is None
    assert site_backend(SimpleNamespace()).identities() is None
    off = Trail()
    off.spec = None  # type: ignore[assignment]
    assert site_backend(SimpleNamespace(audit=off)).identities() is None  # "audit": false
    trail = Trail()
    backend = site_backend(SimpleNamespace(audit=trail))
    before = time.time()
    assert await backend.audit(60.0, "ci", "mcp_*", 5) == {
        "records": [{"tool": "mcp_a_b"}],
        "path": "x",
        "lines": 3,
        "failures": 1,
        "dropped": 0,
    }
    (asked,) = trail.asked
    assert before - 60.0 <= asked.pop("since") <= time.time() - 60.0  # seconds ago, as a time
    assert asked == {"identity": "ci", "tool": "mcp_*", "limit": 5}
    assert backend.identities() == {"identities": [{"identity": "ci", "active": True}]}


def test_the_site_keeps_the_timeline_with_no_one_listening_and_feeds_it_to_listeners() -> None:
    backend = site_backend(SimpleNamespace())
    backend.event(change("ready", "starting"))
    backend.reloaded(None)
    assert [e["kind"] for e in json.loads(backend.timeline())["events"]] == ["reload", "ready"]
    subscription = backend.subscribe()
    assert subscription is not None
    backend.event(change("restarting", "ready", 1, "worker was killed by SIGKILL"))
    sent: Counter[bytes] = Counter()
    while True:
        try:
            message = subscription._receive.receive_nowait()
        except trio.WouldBlock:
            break
        sent[message.split(b"\n")[0]] += 1
        if message.startswith(b"event: timeline"):
            assert json.loads(message.split(b"data: ")[1])["kind"] == "crash"
    assert sent == {b"event: timeline": 1, b"event: state": 1}
