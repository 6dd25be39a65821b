"""The audit trail's parts: a record's line, the files (rotation, a failed write, reading back filtered),
``--since``, the identities table, and the trail itself in a trio loop (its writer, a failing write
kept and retried, drops counted, requests never answered recorded ``dropped``)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from supervisor.config.audit_entry import AuditSpec, audit_spec, instance_name, parse_size
from supervisor.config.load import parse_config
from supervisor.daemon.audit import trail as trail_module
from supervisor.daemon.audit.files import Filters, TrailFile, parse_since, read_trail, trail_files
from supervisor.daemon.audit.identities import ACTIVE_WITHIN, MAX_SESSIONS, Identities
from supervisor.daemon.audit.record import Opened, arguments_json, digest, iso_time, line, outcome_of
from supervisor.daemon.audit.trail import Trail
from supervisor.daemon.registry import Registry
from supervisor.protocol import (
    CallResult,
    CallTool,
    ErrorReply,
    FrontReply,
    GetAudit,
    GetPrompt,
    ReadResource,
    ToolResult,
    encode,
)

KEYS = ["time", "identity", "session", "kind", "tool", "server", "outcome", "ms"]
KEYS += ["argBytes", "resultBytes", "argDigest"]


def opened(identity: str = "alice", tool: str = "mcp_a_echo", **more: Any) -> Opened:
    fields: dict[str, Any] = {
        "arrived": 1_700_000_000.25,
        "started": 0.0,
        "identity": identity,
        "session": "s1",
        "kind": "call",
        "tool": tool,
        "server": "a",
    }
    return Opened(**(fields | more))


# ------------------------------------------------------------------ records


@given(st.text(), st.text(), st.text(), st.text())
def test_any_identity_session_tool_or_server_makes_one_valid_json_line(
    identity: str, session: str, tool: str, server: str
) -> None:
    data = line(opened(identity, tool, session=session, server=server), "ok", 0.0123456, 7)
    assert data.endswith(b"\n") and data.count(b"\n") == 1  # never a newline inside a line
    record = json.loads(data)
    assert list(record) == KEYS
    assert record["ms"] == 12.346 and record["resultBytes"] == 7
    for key, value in (("identity", identity), ("session", session), ("tool", tool)):
        # text that UTF-8 can hold comes back as it was; a lone surrogate comes back as U+FFFD
        expected = value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        assert record[key] == expected


_SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text() | st.binary()


@given(
    st.recursive(_SCALARS, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=20)
)
def test_any_msgpack_arguments_become_json_or_a_string_saying_why_not(value: Any) -> None:
    payload = msgspec.Raw(msgspec.msgpack.encode({"v": value}))
    data = line(opened(arguments=arguments_json(payload)), "ok", 0.0, 0)
    assert data.count(b"\n") == 1
    assert list(json.loads(data))[-1] == "arguments"


def test_arguments_that_do_not_decode_are_named_so_not_written() -> None:
    assert arguments_json(msgspec.Raw(b"\xc1")) == b'"<arguments that do not decode as msgpack>"'
    ext = msgspec.Raw(msgspec.msgpack.encode({"x": msgspec.msgpack.Ext(1, b"\x00")}))
    assert arguments_json(ext) == b'"<arguments JSON cannot hold>"'


def test_the_digest_is_sha256_of_the_payload_as_received() -> None:
    payload = msgspec.msgpack.encode({"text": "hi"})
    assert digest(msgspec.Raw(payload)) == "sha256:" + hashlib.sha256(payload).hexdigest()


def test_outcomes_read_is_error_without_decoding_the_rest() -> None:
    failing = CallResult(id=1, result=msgspec.Raw(encode(ToolResult(is_error=True, text="no"))))
    fine = CallResult(id=1, result=msgspec.Raw(encode(ToolResult(text="yes"))))
    assert outcome_of(failing, "call") == ("tool_error", len(failing.result))
    assert outcome_of(fine, "call") == ("ok", len(fine.result))
    assert outcome_of(failing, "read")[0] == "ok"  # a read's result has no isError
    assert outcome_of(ErrorReply(id=1, code="TIMEOUT", message="late"), "call") == ("TIMEOUT", 0)
    garbage = CallResult(id=1, result=msgspec.Raw(b"\xc1"))
    assert outcome_of(garbage, "call") == ("ok", 1)


def test_times_are_utc_iso_with_milliseconds_and_z() -> None:
    assert iso_time(0.0) == "1970-01-01T00:00:00.000Z"
    assert iso_time(1_700_000_000.2509) == "2023-11-14T22:13:20.250Z"
    assert iso_time(59.9999) == "1970-01-01T00:00:59.999Z"


# -------------------------------------------------------------------- files


def lines_of(n: int, start: int = 0, size: int = 100) -> list[bytes]:
    out = []
    for i in range(start, start + n):
        record = line(opened(tool=f"t{i}"), "ok", 0.0, 0)
        out.append(record[:-2] + b',"pad":"' + b"x" * max(0, size - len(record) - 10) + b'"}\n')
    return out


def all_lines(path: Path) -> list[bytes]:
    """Every line of the trail, oldest first."""
    return [raw for file in reversed(trail_files(path)) for raw in file.read_bytes().splitlines(True)]


def test_rotation_keeps_whole_lines_under_the_bound_and_drops_the_oldest_file(tmp_path: Path) -> None:
    path = tmp_path / "audit" / "x.jsonl"
    trail = TrailFile(path, max_bytes=1000, keep=3)
    written = lines_of(45)
    for i in range(0, 45, 7):
        assert trail.append(written[i : i + 7]) == (len(written[i : i + 7]), None)
    files = trail_files(path)
    assert [file.name for file in files] == ["x.jsonl", "x.jsonl.1", "x.jsonl.2", "x.jsonl.3"]
    assert all(0 < file.stat().st_size <= 1000 for file in files)
    kept = all_lines(path)
    assert kept == written[-len(kept) :]  # the newest, in order, none split
    for older, newer in zip(files[1:], files, strict=False):  # each rotated when the next line did not fit
        assert older.stat().st_size + len(newer.read_bytes().splitlines(True)[0]) > 1000
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700" and oct(path.stat().st_mode & 0o777) == "0o600"


def test_a_line_longer_than_the_bound_gets_a_file_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    trail = TrailFile(path, max_bytes=1024, keep=5)
    big = lines_of(1, size=3000)
    assert trail.append([*lines_of(2), *big, *lines_of(1, 9)]) == (4, None)
    assert [len(f.read_bytes().splitlines()) for f in trail_files(path)] == [1, 1, 2]
    assert trail_files(path)[1].read_bytes() == big[0]


def test_keep_zero_starts_the_file_again(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    trail = TrailFile(path, max_bytes=1024, keep=0)
    trail.append(lines_of(30))
    assert trail_files(path) == [path] and path.stat().st_size <= 1024


def test_a_directory_replaced_by_a_file_is_an_error_that_writes_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "audit"
    trail = TrailFile(directory / "x.jsonl", max_bytes=10_000, keep=2)
    assert trail.append(lines_of(2)) == (2, None)
    (directory / "x.jsonl").unlink()
    directory.rmdir()
    directory.write_text("in the way")
    written, error = trail.append(lines_of(3))
    assert written == 0 and isinstance(error, NotADirectoryError)


def test_a_write_that_stops_part_way_cuts_its_torn_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.jsonl"
    trail = TrailFile(path, max_bytes=100_000, keep=2)
    batch = lines_of(5)
    real_write = os.write
    budget = [len(batch[0]) + len(batch[1]) + 10]  # two lines and a piece of the third, then ENOSPC

    def short_write(fd: int, data: Any) -> int:
        if budget[0] <= 0:
            raise OSError(28, "No space left on device")
        done = real_write(fd, bytes(data)[: budget[0]])
        budget[0] -= done
        return done

    monkeypatch.setattr(os, "write", short_write)
    written, error = trail.append(batch)
    assert written == 2 and error is not None and error.errno == 28
    assert path.read_bytes() == batch[0] + batch[1]  # the torn third line cut off again
    monkeypatch.setattr(os, "write", real_write)
    assert trail.append(batch[2:]) == (3, None)
    assert path.read_bytes() == b"".join(batch)


def test_reading_filters_newest_first_across_files_and_skips_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    trail = TrailFile(path, max_bytes=2000, keep=10)
    records = []
    for i in range(40):
        record = opened(identity="alice" if i % 2 else "bob", tool=f"mcp_{'a' if i % 3 else 'b'}_t{i}")
        record.arrived = 1_700_000_000 + i
        records.append(line(record, "ok", 0.0, 0))
    trail.append(records)
    with path.open("ab") as file:
        file.write(b'{"time": "2099-01-01T00:00:00.000Z", "ident')  # torn: skipped
    every = read_trail(path, Filters(), 1000)
    assert [json.loads(text)["tool"] for text in every] == [
        f"mcp_{'a' if i % 3 else 'b'}_t{i}" for i in range(39, -1, -1)
    ]
    alice = read_trail(path, Filters(identity="alice", tool="mcp_a_*"), 1000)
    assert [json.loads(text)["tool"] for text in alice] == [
        f"mcp_a_t{i}" for i in range(39, -1, -1) if i % 2 and i % 3
    ]
    recent = read_trail(path, Filters(since=1_700_000_030), 1000)
    assert len(recent) == 10
    assert len(read_trail(path, Filters(), 5)) == 5
    assert read_trail(path, Filters(server="nope"), 10) == []
    newer = [line(opened(tool="mcp_a_waiting"), "ok", 0.0, 0)]
    assert json.loads(read_trail(path, Filters(), 1, newer=newer)[0])["tool"] == "mcp_a_waiting"


@pytest.mark.parametrize(
    ("text", "ago"), [("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), ("1w", 604800), ("1.5h", 5400)]
)
def test_since_as_an_age(text: str, ago: float) -> None:
    assert parse_since(text, 1_000_000.0) == 1_000_000.0 - ago


def test_since_as_an_iso_time_without_a_zone_is_utc() -> None:
    assert parse_since("2023-11-14T22:13:20Z", 0) == 1_700_000_000.0
    assert parse_since("2023-11-14T22:13:20", 0) == 1_700_000_000.0
    assert parse_since("2023-11-14T23:13:20+01:00", 0) == 1_700_000_000.0


@pytest.mark.parametrize("text", ["", "10", "10x", "yesterday", "2023-13-01", "-5m"])
def test_a_bad_since_names_itself(text: str) -> None:
    with pytest.raises(ValueError, match="--since must be an age like 10m") as raised:
        parse_since(text, 0)
    assert repr(text) in str(raised.value)


# ------------------------------------------------------------------- config


def test_sizes_and_their_errors() -> None:
    assert parse_size("10M") == 10 * 1024**2 and parse_size("512k") == 512 * 1024 and parse_size(4096) == 4096
    assert parse_size("1G") == 1024**3 and parse_size("2KiB") == 2048
    for bad, why in (("10X", "a size like"), (100, "at least 1024"), (True, "a size like")):
        with pytest.raises(ValueError, match=why):
            parse_size(bad)


def test_the_default_trail_is_named_after_the_endpoint_under_the_state_directory(tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    assert instance_name(f"ipc://{runtime}/supervisor.sock", runtime) == "supervisor"
    assert instance_name("tcp://0.0.0.0:5555", runtime) == "tcp-0.0.0.0-5555"
    elsewhere = instance_name("ipc:///srv/mcp/front.sock", runtime)
    assert elsewhere == "ipc-srv-mcp-front.sock"
    spec = audit_spec(None, "supervisor", {"XDG_STATE_HOME": str(tmp_path)})
    assert spec == AuditSpec(tmp_path / "mcp-supervisor" / "audit" / "supervisor.jsonl", 10 * 1024**2, 5)
    assert audit_spec(False, "supervisor") is None
    config = parse_config(
        b'{"mcpServers": {}, "supervisor": {"audit": {"path": "/x/a.jsonl", "maxBytes": "2K"}}}'
    )
    assert audit_spec(config.settings.audit, "s") == AuditSpec(Path("/x/a.jsonl"), 2048, 5)


# --------------------------------------------------------------- identities


def test_the_identities_table_is_bounded_and_counts() -> None:
    table = Identities(limit=3)
    for i in range(MAX_SESSIONS + 5):
        table.seen("alice", f"s{i}", ok=i % 4 != 0, now=100.0 + i)
    table.seen("bob", "", ok=True, now=1000.0)
    table.seen("carol", "c", ok=True, now=1001.0)
    rows = table.rows(now=1001.0)
    assert [row["identity"] for row in rows] == ["carol", "bob", "alice"]
    alice = rows[2]
    assert alice["calls"] == MAX_SESSIONS + 5 and alice["errors"] == 10
    assert len(alice["sessions"]) == MAX_SESSIONS and alice["sessions"][0] == f"s{MAX_SESSIONS + 4}"
    assert alice["firstSeen"] == iso_time(100.0) and not alice["active"]
    assert rows[0]["active"] and rows[1]["sessions"] == []
    table.seen("dave", "d", ok=True, now=1002.0)  # the one seen longest ago goes
    assert [row["identity"] for row in table.rows(now=1002.0 + ACTIVE_WITHIN)] == ["dave", "carol", "bob"]


# -------------------------------------------------------------------- trail


class Harness:
    """A trail in a trio loop, with the replies it sends kept."""

    def __init__(self, path: Path, *, arguments_of: tuple[str, ...] = ()) -> None:
        servers = {name: {"command": "x", "auditArguments": name in arguments_of} for name in ("a", "b")}
        config = parse_config(json.dumps({"mcpServers": servers}).encode())
        self.replies: list[tuple[bytes, FrontReply]] = []
        self.trail = Trail(
            AuditSpec(path, 100_000, 3),
            Registry(),
            config.servers,
            lambda: config,
            lambda caller, reply: self.replies.append((caller, reply)),
        )


async def until(what: str, check: Callable[[], bool]) -> None:
    """Poll ``check``, bounded (the writer's thread does the work: there is no event to wait on)."""
    with trio.fail_after(10):
        while not check():  # noqa: ASYNC110
            await trio.sleep(0.005)
    assert check(), what


def call(id: int, name: str = "mcp_a_echo", **fields: Any) -> CallTool:
    return CallTool(id=id, name=name, arguments=msgspec.Raw(msgspec.msgpack.encode({"n": id})), **fields)


OK = msgspec.Raw(encode(ToolResult(text="fine")))


async def test_each_request_gets_one_line_when_its_terminal_reply_goes_out(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    h = Harness(path, arguments_of=("b",))
    trail = h.trail
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trail.run)
        trail.opened(b"c1", call(1, principal="alice@corp", session="host-1", client="agent"))
        trail.opened(b"c1", call(2, "mcp_b_echo", client="agent"))
        trail.opened(b"c2", ReadResource(id=1, server="a", uri="file:///x"))
        trail.opened(
            b"c2",
            GetPrompt(id=2, name="mcp_b_greet", arguments=msgspec.Raw(msgspec.msgpack.encode({"who": "x"}))),
        )
        trail.opened(b"c2", call(3, "mcp_nobody_x"))
        trail.replied(b"c1", CallResult(id=1, result=OK))
        trail.replied(b"c1", ErrorReply(id=2, code="TIMEOUT", message="late"))
        trail.replied(b"c2", CallResult(id=1, result=OK))
        trail.replied(b"c2", ErrorReply(id=3, code="UNKNOWN_TOOL", message="no"))
        trail.replied(b"c2", ErrorReply(id=99, code="UNKNOWN_TOOL", message="not open: no line"))
        trail.forgotten(b"c2")  # the prompt was never answered: its caller does not read
        await until("five lines", lambda: trail.lines == 5)
        records = await trail.query(limit=10)
        nursery.cancel_scope.cancel()
    assert [
        (r["identity"], r["session"], r["kind"], r["tool"], r["server"], r["outcome"]) for r in records
    ] == [
        ("local", "", "prompt", "mcp_b_greet", "b", "dropped"),
        ("local", "", "call", "mcp_nobody_x", "", "UNKNOWN_TOOL"),
        ("local", "", "read", "file:///x", "a", "ok"),
        ("agent", "agent", "call", "mcp_b_echo", "b", "TIMEOUT"),
        ("alice@corp", "host-1", "call", "mcp_a_echo", "a", "ok"),
    ]
    assert records[3]["arguments"] == {"n": 2} and records[0]["arguments"] == {"who": "x"}  # server b opts in
    assert "arguments" not in records[4] and records[2]["argDigest"] == ""
    assert records[4]["argDigest"] == digest(msgspec.msgpack.encode({"n": 1}))
    assert await trail.query(identity="alice@corp", limit=10) == [records[4]]
    assert await trail.query(tool="mcp_b_*", server="b", limit=10) == [records[0], records[3]]
    who = {row["identity"]: row for row in trail.identities()}
    assert who["local"]["calls"] == 3 and who["local"]["errors"] == 2 and who["agent"]["errors"] == 1
    assert who["alice@corp"]["sessions"] == ["host-1"] and who["alice@corp"]["active"]


async def test_a_failing_write_keeps_its_lines_retries_and_counts_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(trail_module, "RETRY_INTERVAL", 0.01)
    monkeypatch.setattr(trail_module, "MAX_WAITING_BYTES", 20_000)
    directory = tmp_path / "audit"
    directory.write_text("a file where the directory should be")
    h = Harness(directory / "x.jsonl")
    trail = h.trail
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trail.run)
        for id in range(1, 301):  # some 260 bytes a line: the buffer holds about 75
            trail.opened(b"c", call(id))
            trail.replied(b"c", CallResult(id=id, result=OK))
            if id == 1:
                await until("a failed write", lambda: trail.failures == 1)
        await until("two more failed writes", lambda: trail.failures >= 3)
        stats = trail.stats()
        assert stats.lines == 0 and stats.dropped > 200 and stats.waiting == 300 - stats.dropped
        assert stats.path == str(directory / "x.jsonl")
        waiting = stats.waiting
        directory.unlink()  # the way is clear: the lines waiting are written, in order
        await until("the lines waiting written", lambda: trail.lines == waiting)
        nursery.cancel_scope.cancel()
    written = [json.loads(raw) for raw in (directory / "x.jsonl").read_bytes().splitlines()]
    assert len(written) == waiting and [r["outcome"] for r in written] == ["ok"] * waiting
    assert written[0]["argDigest"] == digest(msgspec.msgpack.encode({"n": 1}))  # the oldest kept first
    trouble = [r.getMessage() for r in caplog.records if "audit trail: cannot write" in r.getMessage()]
    assert len(trouble) == 1, trouble  # at most one line per period, with the counts
    assert "Not a directory" in trouble[0] and "lines dropped" in trouble[0]
    assert any("writing to" in r.getMessage() and "again" in r.getMessage() for r in caplog.records)


async def test_close_records_what_was_never_answered_and_writes_everything(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    trail = Harness(path).trail
    trail.opened(b"c", call(1))
    trail.opened(b"c", call(1))  # a reused id: two requests, two lines
    trail.replied(b"c", CallResult(id=1, result=OK))
    trail.close()  # no writer ran: close writes it all
    outcomes = [json.loads(raw)["outcome"] for raw in path.read_bytes().splitlines()]
    assert outcomes == ["ok", "dropped"]
    assert trail.stats().lines == 2


async def test_get_audit_is_answered_with_the_records_and_the_figures(tmp_path: Path) -> None:
    h = Harness(tmp_path / "x.jsonl")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(h.trail.run)
        for id in range(1, 6):
            h.trail.opened(b"c", call(id))
            h.trail.replied(b"c", CallResult(id=id, result=OK))
        h.trail.answer(b"op", GetAudit(id=7, limit=3), nursery)
        await until("the answer", lambda: any(caller == b"op" for caller, _ in h.replies))
        nursery.cancel_scope.cancel()
    (reply,) = [reply for caller, reply in h.replies if caller == b"op"]
    assert reply.id == 7 and len(reply.records) == 3  # type: ignore[union-attr]
    assert reply.stats is not None and reply.stats.path.endswith("x.jsonl")  # type: ignore[union-attr]


async def test_an_off_trail_has_no_path_and_no_records() -> None:
    config = parse_config(b'{"mcpServers": {}}')
    trail = Trail(None, Registry(), {}, lambda: config, lambda caller, reply: None)
    assert not trail.on and trail.stats().path == ""
    assert await trail.query() == []


async def test_a_very_long_principal_or_tool_is_cut_in_its_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    trail = Harness(path).trail
    trail.opened(b"c", call(1, "mcp_a_" + "t" * 5000, principal="p" * 5000, session="s" * 5000))
    trail.replied(b"c", ErrorReply(id=1, code="BAD_REQUEST", message="too long"))
    trail.close()
    (record,) = [json.loads(raw) for raw in path.read_bytes().splitlines()]
    assert record["identity"] == "p" * 1024 and record["session"] == "s" * 1024
    assert len(record["tool"]) == 1024 and record["outcome"] == "BAD_REQUEST"
