"""The wire protocol's specification, ``docs/protocol.md``, held to the code.

Its generated tables (messages, payloads, error codes, topics, enums) must be what
``python -m supervisor.protocol.spec`` writes, and must agree with the structs as ``msgspec`` sees
them: read here from the spec's own text, independently of the renderer where that can be done
(field names, required fields, defaults, unions, codes). Its hand-written tables of limits and of
the client stubs' waits must give the constants the code uses. The checks are shown to fail on a
modified model of the code (a field added, removed, retyped; a message moved) and on a damaged spec.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.client import exchanges
from supervisor.client import watch as event_watch
from supervisor.config.model import DEFAULT_TOOL_TIMEOUT, SupervisorSettings
from supervisor.daemon.call_table import DEADLINE_MARGIN
from supervisor.daemon.core import FRONT_RCVHWM
from supervisor.daemon.publisher import BEACON_INTERVAL
from supervisor.daemon.servers.worker_log import RING_LINES
from supervisor.protocol import (
    ASKABLE,
    ERROR_CODES,
    EVENT_TOPICS,
    LOG_LIMIT,
    MAX_GRACE,
    MAX_IDENTITY,
    CallTool,
    Done,
    ErrorCode,
    Event,
    FrontReply,
    FrontRequest,
    Ping,
    RegistryVersion,
    WorkerCommand,
    WorkerEvent,
    decode_event,
    decode_front_request,
    encode,
)
from supervisor.protocol.codec import _Message
from supervisor.protocol.spec import Model, Table, check, hex_examples, main, parse, update
from supervisor.shared import trace_context
from supervisor.shared.names import MAX_NAME_LENGTH
from supervisor.shared.sockets import EVENTS_HWM, MAX_MESSAGE_SIZE
from workers.progress import PROGRESS_BURST, PROGRESS_INTERVAL
from workers.values import MAX_ARGUMENT_DEPTH

SPEC_PATH = Path(__file__).parents[2] / "docs" / "protocol.md"
SPEC = SPEC_PATH.read_text(encoding="utf-8")
CODE = Model.of_code()

SETTINGS = SupervisorSettings()
LIMITS: dict[str, float] = {
    "message size": MAX_MESSAGE_SIZE,
    "client identity": MAX_IDENTITY,
    "argument depth": MAX_ARGUMENT_DEPTH,
    "`maxCallsPerClient`": SETTINGS.max_calls_per_client,
    "`maxCallsInFlight`": SETTINGS.max_calls_in_flight,
    "`maxQueuedReplies`": SETTINGS.max_queued_replies,
    "read ahead": FRONT_RCVHWM,
    "events queued": EVENTS_HWM,
    "beacon interval": BEACON_INTERVAL,
    "deadline margin": DEADLINE_MARGIN,
    "default budget": DEFAULT_TOOL_TIMEOUT,
    "progress interval": PROGRESS_INTERVAL,
    "progress burst": PROGRESS_BURST,
    "log lines": LOG_LIMIT,
    "shutdown grace": MAX_GRACE,
    "traceparent": trace_context.MAX_TRACEPARENT,
    "tracestate": trace_context.MAX_TRACESTATE,
    "tool name": MAX_NAME_LENGTH,
}
CLIENT_WAITS: dict[str, float] = {
    "reply margin": exchanges.REPLY_MARGIN,
    "without a timeout": exchanges.CALL_WAIT_WITHOUT_TIMEOUT,
    "other requests": exchanges.REQUEST_TIMEOUT,
    "reload": exchanges.RELOAD_WAIT,
    "events join": event_watch.JOIN_TIMEOUT,
    "liveness": exchanges.LIVENESS_AFTER,
    "liveness ping": exchanges.LIVENESS_WAIT,
}


def table(key: str, text: str = SPEC) -> Table:
    (found,) = parse(text)[key]
    return found


def unquoted(cell: str) -> str:
    assert cell.startswith("`") and cell.endswith("`"), f"{cell!r} is not in code font"
    return cell[1:-1]


def tag_of(cls: type) -> str:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType) and isinstance(info.tag, str)
    return info.tag


def fields_of(cls: type[msgspec.Struct]) -> dict[str, tuple[str, Any, Any]]:
    """``cls``'s fields as ``msgspec.defstruct`` takes them, by name."""
    return {
        f.name: (
            f.name,
            f.type,
            f.default
            if f.default_factory is msgspec.NODEFAULT
            else msgspec.field(default_factory=f.default_factory),
        )
        for f in msgspec.structs.fields(cls)
    }


def message(name: str, fields: Any) -> type[msgspec.Struct]:
    """A front message as the code could declare it (tagged by its name)."""
    return msgspec.defstruct(name, list(fields), bases=(_Message,), kw_only=True)


def with_field(cls: type[msgspec.Struct], name: str, kind: Any, default: Any) -> type[msgspec.Struct]:
    """``cls`` as the code would have it with one more field: same tag, same fields otherwise."""
    return message(cls.__name__, [*fields_of(cls).values(), (name, kind, default)])


def replaced(model: Model, union: str, old: type, new: type) -> Model:
    members = tuple(new if member is old else member for member in model.unions[union])
    return dataclasses.replace(model, unions={**model.unions, union: members})


# ------------------------------------------------------------------ the spec agrees with the code


def test_the_spec_agrees_with_the_code() -> None:
    assert check(SPEC, CODE) == []


def test_the_committed_spec_is_what_the_script_writes() -> None:
    assert update(SPEC, CODE) == SPEC


@pytest.mark.parametrize(
    ("union", "members"), [("request", FrontRequest), ("reply", FrontReply), ("event", Event)]
)
def test_every_message_of_a_union_has_a_table_under_that_union_and_no_other(union: str, members: Any) -> None:
    tags = [tag_of(cls) for cls in typing.get_args(members)]
    marked = [key.split(" ")[1] for key in parse(SPEC) if key.split(" ")[0] == union]
    assert sorted(marked) == sorted(tags)
    assert all(tag == cls.__name__ for tag, cls in zip(tags, typing.get_args(members), strict=True))


def test_field_names_required_fields_and_defaults_read_from_the_spec_are_those_of_msgspec() -> None:
    structs = [
        (f"{union} {tag_of(cls)}", cls)
        for union in ("request", "reply", "event")
        for cls in CODE.unions[union]
    ]
    structs += [(f"payload {cls.__name__}", cls) for cls in CODE.payloads()]
    assert len(structs) == 54  # every message and payload: each new one needs its table
    for key, cls in structs:
        rows = table(key).rows
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        if info.tag_field is not None:  # the tag comes first, always required
            assert (rows[0].key, rows[0].cells[1]) == (f"`{info.tag_field}`", "required"), key
            assert f'`"{info.tag}"`' in rows[0].meaning
            rows = rows[1:]
        fields = msgspec.structs.fields(cls)
        assert [unquoted(row.key) for row in rows] == [field.encode_name for field in fields], key
        for row, field in zip(rows, fields, strict=True):
            default = row.cells[1]
            assert (default == "required") == field.required, f"{key}.{field.name}"
            if not field.required:
                value = field.default_factory() if field.default is msgspec.NODEFAULT else field.default
                if isinstance(value, msgspec.Raw):
                    value = msgspec.msgpack.decode(value)
                written = unquoted(default)
                assert (None if written == "nil" else json.loads(written)) == value, f"{key}.{field.name}"
            assert row.meaning, f"{key}.{field.name} has no meaning"


def test_the_payloads_are_every_struct_the_messages_carry_and_the_relayed_results() -> None:
    payloads = {key.split(" ")[1] for key in parse(SPEC) if key.startswith("payload ")}
    assert payloads == {cls.__name__ for cls in CODE.payloads()}
    assert {"ToolInfo", "ServerStatus", "WorkerStatus", "FrontStats", "LogLine", "ToolResult"} <= payloads
    assert "WorkerTool" not in payloads  # the worker link's: not public


def test_the_error_codes_are_those_of_the_code_in_its_order() -> None:
    codes = [unquoted(row.key) for row in table("errors").rows]
    assert codes == list(typing.get_args(ErrorCode))
    assert set(codes) == ERROR_CODES
    assert all(row.meaning for row in table("errors").rows)


def test_the_topics_are_those_the_publisher_uses() -> None:
    rows = {unquoted(row.key): row.cells[0] for row in table("topics").rows}
    assert rows == {
        topic.decode(): f"[{cls.__name__}](#{cls.__name__.lower()})" for cls, topic in EVENT_TOPICS.items()
    }


def test_the_limits_are_the_constants_of_the_code() -> None:
    rows = table("limits").rows
    assert [row.key for row in rows] == list(LIMITS)
    for row in rows:
        assert float(row.cells[0]) == LIMITS[row.key], row.key
    assert RING_LINES == LOG_LIMIT  # "the most lines one GetLogs answers with, and the lines kept per server"


def test_the_client_waits_are_those_of_the_python_stubs() -> None:
    rows = table("client").rows
    assert [row.key for row in rows] == list(CLIENT_WAITS)
    for row in rows:
        assert float(row.cells[0]) == CLIENT_WAITS[row.key], row.key


def test_the_exchanges_name_every_request_and_only_real_replies_and_codes() -> None:
    rows = table("exchanges").rows
    assert [unquoted(row.key) for row in rows] == [tag_of(cls) for cls in typing.get_args(FrontRequest)]
    replies = {tag_of(cls) for cls in typing.get_args(FrontReply)}
    for row in rows:
        terminal, before, codes = row.cells[0], row.cells[1], row.meaning
        assert terminal == "none" or unquoted(terminal.split(" ")[0]) in replies, row.key
        assert set(re.findall(r"`(\w+)`", before)) <= replies, row.key
        assert set(re.findall(r"`(\w+)`", codes)) <= ERROR_CODES, row.key
    no_reply = {unquoted(row.key) for row in rows if row.cells[0] == "none"}
    assert no_reply == {"Cancel", "Answer"}


def test_the_methods_a_caller_may_answer_are_named() -> None:
    answers = next(row for row in table("request CallTool").rows if row.key == "`answers`")
    assert all(f'`"{method}"`' in answers.meaning for method in ASKABLE)


def test_the_hex_examples_are_the_bytes_of_the_messages_they_show() -> None:
    examples = hex_examples(SPEC)
    assert examples["ping"] == [encode(Ping(id=1))]
    assert decode_front_request(examples["ping"][0]) == Ping(id=1)
    assert examples["done"] == [encode(Done(id=1))]
    arguments = msgspec.Raw(msgspec.msgpack.encode({"text": "hi"}))
    call = CallTool(id=7, name="mcp_test_echo", arguments=arguments, timeout=5.0)
    assert examples["call"] == [encode(call)]
    assert msgspec.msgpack.decode(examples["call"][0]) == {
        "type": "CallTool",
        "id": 7,
        "name": "mcp_test_echo",
        "arguments": {"text": "hi"},
        "timeout": 5.0,
    }
    topic, event = examples["beacon"]
    assert (topic, decode_event(event)) == (EVENT_TOPICS[RegistryVersion], RegistryVersion(version=1))
    assert event == encode(RegistryVersion(version=1))


def test_every_link_within_the_spec_goes_to_one_of_its_headings() -> None:
    def slug(heading: str) -> str:
        return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")

    headings = {slug(line.lstrip("#")) for line in SPEC.splitlines() if line.startswith("#")}
    links = set(re.findall(r"\]\(#([^)]+)\)", SPEC))
    assert links and links <= headings, links - headings


def test_the_internal_worker_link_is_named_with_its_messages_and_nothing_of_it_is_specified() -> None:
    section = SPEC.split("## The worker link (internal)", 1)[1]
    named = set(re.findall(r"`([A-Z]\w+)`", section))
    link = {tag_of(cls) for union in (WorkerCommand, WorkerEvent) for cls in typing.get_args(union)}
    assert named == link
    assert not {key.split(" ")[-1] for key in parse(SPEC)} & link  # no table: not a public interface


# ------------------------------------------------------------------ the checks can fail


def test_a_field_added_in_the_code_and_not_in_the_spec_fails_the_check_until_written() -> None:
    model = replaced(CODE, "request", CallTool, with_field(CallTool, "priority", int, 0))
    assert check(SPEC, model) == ["request CallTool: `priority` is in the code, not in the spec"]

    rewritten = update(SPEC, model)  # the script adds the row, with its meaning left to a hand
    assert "| `priority` | int | `0` |  |" in rewritten
    assert check(rewritten, model) == ["request CallTool: `priority`: no meaning written"]
    written = rewritten.replace(
        "| `priority` | int | `0` |  |", "| `priority` | int | `0` | who goes first |"
    )
    assert check(written, model) == []
    assert check(written, CODE) == ["request CallTool: `priority` is in the spec, not in the code"]


def test_a_field_removed_retyped_or_given_another_default_fails_the_check() -> None:
    fields = fields_of(CallTool)
    del fields["tracestate"]
    fields["timeout"] = ("timeout", float, 30.0)
    fields["progress"] = ("progress", bool, True)
    changed = message("CallTool", fields.values())
    problems = check(SPEC, replaced(CODE, "request", CallTool, changed))
    assert problems == [
        "request CallTool: `tracestate` is in the spec, not in the code",
        "request CallTool: `timeout`: type is float in the code, float or nil in the spec",
        "request CallTool: `timeout`: default is `30.0` in the code, `nil` in the spec",
        "request CallTool: `progress`: default is `true` in the code, `false` in the spec",
    ]


def test_a_message_moved_to_another_union_or_added_fails_the_check() -> None:
    requests = tuple(kind for kind in CODE.unions["request"] if kind is not Ping)
    replies = (*CODE.unions["reply"], Ping)
    moved = dataclasses.replace(CODE, unions={**CODE.unions, "request": requests, "reply": replies})
    problems = check(SPEC, moved)
    assert any(problem.startswith("reply Ping: no table in the spec") for problem in problems)
    assert "request Ping: the spec has a table of it, the code has no such request" in problems

    hello = message("Hello", [("id", int)])
    added = dataclasses.replace(CODE, unions={**CODE.unions, "request": (*CODE.unions["request"], hello)})
    assert [problem.split(":")[0] for problem in check(SPEC, added)] == ["request Hello"]


def test_an_error_code_topic_or_state_in_the_code_and_not_in_the_spec_fails_the_check() -> None:
    coded = dataclasses.replace(CODE, error_codes=(*CODE.error_codes, "RATE_LIMITED"))
    assert check(SPEC, coded) == ["errors: `RATE_LIMITED` is in the code, not in the spec"]
    beacon = {**CODE.topics, RegistryVersion: b"beacon"}
    assert len(check(SPEC, dataclasses.replace(CODE, topics=beacon))) == 2  # `beacon` added, `version` gone
    login = next(row for row in table("enum WorkerState").rows if row.key == '`"needs-login"`')
    unwritten = SPEC.replace(f"| {login.key} | {login.meaning} |\n", "")
    assert check(unwritten, CODE) == ['enum WorkerState: `"needs-login"` is in the code, not in the spec']


def test_a_damaged_spec_is_reported_not_raised() -> None:
    row = "| `timeout` | float or nil | `nil` |"
    assert row in SPEC
    lost_cell = SPEC.replace(row, "| `timeout` | float or nil |", 1)
    assert check(lost_cell, CODE) == ["request CallTool: `timeout`: the row has 3 cells, not 4"]
    row = next(line for line in SPEC.splitlines() if line.startswith("| `timeout` | float or nil |"))
    doubled = SPEC.replace(row, f"{row}\n{row}", 1)
    assert check(doubled, CODE) == ["request CallTool: a row is in the table twice"]
    block = re.search(r"<!-- spec:request Ping -->.*?<!-- /spec -->\n", SPEC, re.DOTALL)
    assert block is not None
    twice = SPEC + "\n" + block[0]
    assert check(twice, CODE) == ["the spec marks 'request Ping' 2 times"]
    gone = SPEC.replace(block[0], "")
    assert [problem.split(":")[0] for problem in check(gone, CODE)] == ["request Ping"]
    headerless = SPEC.replace(
        "<!-- spec:request Ping -->\n| field | type | default | meaning |", "<!-- spec:request Ping -->"
    )
    assert check(headerless, CODE)[0].startswith("request Ping: the table's columns are")


@given(
    st.lists(
        st.sampled_from(
            ["<!-- spec:request Ping -->\n", "<!-- /spec -->", "\n", "|", "| `id` |", "---", "`x`", "é"]
        )
        | st.text(max_size=20),
        max_size=30,
    )
)
def test_any_text_at_all_is_checked_without_an_exception(pieces: list[str]) -> None:
    problems = check("".join(pieces), CODE)
    assert problems and all(isinstance(problem, str) for problem in problems)
    update("".join(pieces), CODE)


def test_a_type_the_spec_cannot_write_is_an_error_naming_it() -> None:
    odd = message("Odd", [("id", int), ("blob", bytes)])
    with pytest.raises(TypeError, match="no way to write the type BytesType"):
        check(SPEC, dataclasses.replace(CODE, unions={**CODE.unions, "reply": (odd,)}))


def test_the_script_rewrites_a_stale_spec_and_check_reports_without_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "protocol.md"
    stale.write_text(SPEC.replace("| `timeout` | float or nil | `nil` |", "| `timeout` | float | `5` |", 1))
    assert main(["--check", str(stale)]) == 1
    assert (
        "request CallTool: `timeout`: type is float or nil in the code, float in the spec"
        in capsys.readouterr().err
    )
    assert stale.read_text() != SPEC
    assert main([str(stale)]) == 0
    assert stale.read_text() == SPEC
    assert main(["--check", str(stale)]) == 0
    assert main([str(tmp_path / "missing.md")]) == 2
    assert "cannot read" in capsys.readouterr().err
