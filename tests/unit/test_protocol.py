"""Behaviour of supervisor.protocol: round trips, relayed Raw payloads, direction checks, compatibility."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from supervisor.config.load import ServerSpec
from supervisor.protocol import (
    ERROR_CODES,
    Abort,
    CallProgress,
    CallResult,
    CallTool,
    Cancel,
    Done,
    ErrorReply,
    Fetch,
    GetPrompt,
    GetStatus,
    Heartbeat,
    Invoke,
    InvokeFailed,
    InvokeProgress,
    InvokeResult,
    Listing,
    ListPrompts,
    ListResources,
    ListResourceTemplates,
    ListTools,
    Ping,
    PromptInfo,
    ReadResource,
    Ready,
    ResourceInfo,
    Restart,
    ServerFailure,
    ServerStatus,
    Start,
    Started,
    StateChanged,
    StatusReply,
    Stop,
    ToolInfo,
    ToolList,
    ToolResult,
    WorkerTool,
    decode_event,
    decode_front_reply,
    decode_front_request,
    decode_worker_command,
    decode_worker_event,
    encode,
)
from supervisor.shared.boot import WorkerBoot

Decoder = Callable[[bytes], Any]

ARGS = {"text": "héllo", "n": 3, "nested": {"list": [1, 2.5, None, True]}}
RESULT = ToolResult(content=[{"type": "text", "text": "hi"}], structured_content={"a": 1}, text="hi")

FRONT_REQUESTS: list[Any] = [
    ListTools(id=1),
    CallTool(id=2, name="mcp_s_echo", arguments=msgspec.Raw(encode(ARGS)), timeout=2.5),
    CallTool(id=3, name="mcp_s_echo"),
    CallTool(id=9, name="mcp_s_long", timeout=60.0, progress=True),
    GetStatus(id=4),
    Restart(id=5, server="git"),
    Stop(id=7, server="git"),
    Start(id=8, server="git"),
    Ping(id=6),
    ListResources(id=9),
    ListResourceTemplates(id=10, server="files", timeout=3.0),
    ListPrompts(id=11, server="files"),
    ReadResource(id=12, server="files", uri="file:///notes/todo.md", timeout=2.0),
    GetPrompt(id=13, name="mcp_files_summarize", arguments=msgspec.Raw(encode({"topic": "x"}))),
    GetPrompt(id=14, name="summarize", server="files"),
    Cancel(id=2),
]
FRONT_REPLIES: list[Any] = [
    ToolList(
        id=1,
        tools=[
            ToolInfo(
                name="mcp_s_echo",
                server="s",
                original_name="echo",
                description="Echo",
                input_schema={"type": "object"},
                title="Echo",
                output_schema={"type": "object"},
                annotations={"readOnlyHint": True},
            ),
            ToolInfo(name="mcp_s_x", server="s", original_name="x"),
        ],
        version=7,
    ),
    CallResult(id=2, result=msgspec.Raw(encode(RESULT))),
    StatusReply(
        id=3,
        servers=[
            ServerStatus(
                server="s",
                state="ready",
                worker_pid=10,
                server_pid=11,
                restarts=2,
                tools=3,
                last_error="boom",
                transport="stdio",
                next_restart_in=1.5,
            ),
            ServerStatus(server="t", state="failed"),
        ],
    ),
    Done(id=4),
    ErrorReply(id=5, code="UNKNOWN_TOOL", message="no tool 'x'"),
    CallProgress(id=6, progress=2.5, total=5.0, message="half way"),
    CallProgress(id=6, progress=3.0),
    Listing(
        id=6,
        parts=[
            msgspec.Raw(
                encode([ResourceInfo(server="s", uri="test://doc/1", name="doc", mime_type="text/plain")])
            ),
            msgspec.Raw(encode([PromptInfo(name="mcp_t_p", server="t", original_name="p")])),
        ],
        failures=[ServerFailure(server="u", code="TIMEOUT", message="too slow")],
    ),
    Listing(id=7),
]
WORKER_COMMANDS: list[Any] = [
    Invoke(call=1, tool="echo", arguments=msgspec.Raw(encode(ARGS)), budget=30.0),
    Invoke(call=2, tool="long", arguments=msgspec.Raw(encode({})), budget=5.0, progress=True),
    Heartbeat(),
    Fetch(call=2, method="resources/list", budget=5.0),
    Fetch(call=3, method="resources/read", budget=5.0, target="test://doc/1"),
    Fetch(
        call=4,
        method="prompts/get",
        budget=5.0,
        target="mcp_s_p",
        prefixed=True,
        arguments=msgspec.Raw(encode({"a": "b"})),
    ),
    Abort(call=1),
]
WORKER_EVENTS: list[Any] = [
    Started(server_pid=42),
    Ready(
        tools=[
            WorkerTool(name="echo", description="Echo", input_schema={"type": "object"}),
            WorkerTool(name="bad", input_schema="not a schema"),
            WorkerTool(name="bare"),
        ],
        server_pid=42,
        server_name="test",
        server_version="1.0",
    ),
    Ready(tools=[]),
    InvokeResult(call=1, result=msgspec.Raw(encode(RESULT))),
    InvokeFailed(call=2, code="SERVER_ERROR", message="bad"),
    InvokeProgress(call=3, progress=1.0, total=10.0, message="step 1"),
    InvokeProgress(call=3, progress=2.0),
    Heartbeat(),
]

DIRECTIONS: list[tuple[str, list[Any], Decoder]] = [
    ("front request", FRONT_REQUESTS, decode_front_request),
    ("front reply", FRONT_REPLIES, decode_front_reply),
    ("worker command", WORKER_COMMANDS, decode_worker_command),
    ("worker event", WORKER_EVENTS, decode_worker_event),
]
CASES = [
    pytest.param(message, decoder, id=f"{kind}-{type(message).__name__}-{i}")
    for kind, messages, decoder in DIRECTIONS
    for i, message in enumerate(messages)
]


def _tag(message: Any) -> str:
    return str(msgspec.msgpack.decode(encode(message))["type"])


# --- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize(("message", "decoder"), CASES)
def test_every_message_round_trips_through_its_decoder(message: Any, decoder: Decoder) -> None:
    decoded = decoder(encode(message))
    assert type(decoded) is type(message)
    assert decoded == message  # Raw payloads compare by their bytes
    assert encode(decoded) == encode(message)


def test_messages_are_tagged_by_class_name_in_a_type_field() -> None:
    assert msgspec.msgpack.decode(encode(Ping(id=1))) == {"type": "Ping", "id": 1}
    assert msgspec.msgpack.decode(encode(Heartbeat())) == {"type": "Heartbeat"}


def test_every_message_carries_its_class_name_as_tag() -> None:
    for _, messages, _ in DIRECTIONS:
        for message in messages:
            assert _tag(message) == type(message).__name__


def test_call_tool_arguments_are_relayed_byte_identical_to_the_worker() -> None:
    argument_bytes = encode(ARGS)
    front = decode_front_request(
        encode(CallTool(id=9, name="mcp_s_echo", arguments=msgspec.Raw(argument_bytes)))
    )
    assert isinstance(front, CallTool)
    assert bytes(front.arguments) == argument_bytes
    command = decode_worker_command(
        encode(Invoke(call=1, tool="echo", arguments=front.arguments, budget=5.0))
    )
    assert isinstance(command, Invoke)
    assert bytes(command.arguments) == argument_bytes
    assert msgspec.msgpack.decode(command.arguments) == ARGS


def test_arguments_the_supervisor_cannot_type_are_still_relayed_untouched() -> None:
    # the supervisor never decodes arguments, so even a non-object payload passes through as is
    payload = encode([1, "two", {"three": 3}])
    front = decode_front_request(encode(CallTool(id=1, name="t", arguments=msgspec.Raw(payload))))
    assert isinstance(front, CallTool)
    assert bytes(front.arguments) == payload


def test_tool_result_is_relayed_byte_identical_from_worker_to_client() -> None:
    result_bytes = encode(RESULT)
    event = decode_worker_event(encode(InvokeResult(call=3, result=msgspec.Raw(result_bytes))))
    assert isinstance(event, InvokeResult)
    reply = decode_front_reply(encode(CallResult(id=8, result=event.result)))
    assert isinstance(reply, CallResult)
    assert bytes(reply.result) == result_bytes
    assert msgspec.msgpack.decode(reply.result, type=ToolResult) == RESULT


def test_tool_result_round_trips_with_every_field() -> None:
    result = ToolResult(
        content=[{"type": "image", "data": "AAAA", "mimeType": "image/png"}],
        structured_content=[1, 2],
        is_error=True,
        text="[image]",
    )
    assert msgspec.msgpack.decode(encode(result), type=ToolResult) == result


def test_worker_boot_round_trips_as_a_json_line() -> None:
    spec = ServerSpec(
        name="git",
        transport="stdio",
        command="uvx",
        args=("mcp-server-git", "--repository", "."),
        env={"TOKEN": "secret"},
        cwd="/tmp",
        url=None,
        headers={},
        tool_timeout=12.5,
        disabled=False,
    )
    boot = WorkerBoot(server="git", endpoint="ipc:///tmp/w", identity="git/1/ab", spec=spec, log_level=10)
    line = msgspec.json.encode(boot)
    assert b"\n" not in line
    assert msgspec.json.decode(line, type=WorkerBoot) == boot


# --- defaults and compatibility --------------------------------------------------------------


def test_omitted_call_arguments_default_to_an_empty_object() -> None:
    decoded = decode_front_request(msgspec.msgpack.encode({"type": "CallTool", "id": 1, "name": "t"}))
    assert isinstance(decoded, CallTool)
    assert msgspec.msgpack.decode(decoded.arguments) == {}
    assert decoded.timeout is None


def test_default_fields_are_left_off_the_wire() -> None:
    assert msgspec.msgpack.decode(encode(CallTool(id=1, name="t"))) == {
        "type": "CallTool",
        "id": 1,
        "name": "t",
    }
    assert msgspec.msgpack.decode(encode(Ready(tools=[]))) == {"type": "Ready", "tools": []}


def test_omitted_optional_fields_take_their_defaults() -> None:
    ready = decode_worker_event(msgspec.msgpack.encode({"type": "Ready", "tools": [{"name": "t"}]}))
    assert ready == Ready(tools=[WorkerTool(name="t")])
    assert isinstance(ready, Ready)
    assert ready.server_pid is None
    assert ready.server_name == ""
    (worker_tool,) = ready.tools
    assert worker_tool.description == ""
    assert worker_tool.input_schema is None
    assert worker_tool.title is None

    tool_list = decode_front_reply(
        msgspec.msgpack.encode(
            {"type": "ToolList", "id": 1, "tools": [{"name": "n", "server": "s", "original_name": "o"}]}
        )
    )
    assert isinstance(tool_list, ToolList)
    assert tool_list.version == 0
    assert tool_list.tools[0].input_schema == {}
    assert tool_list.tools[0].description == ""

    status = decode_front_reply(
        msgspec.msgpack.encode(
            {"type": "StatusReply", "id": 1, "servers": [{"server": "s", "state": "starting"}]}
        )
    )
    assert isinstance(status, StatusReply)
    assert status.servers == [ServerStatus(server="s", state="starting")]
    assert status.servers[0].transport == "stdio"
    assert status.servers[0].restarts == 0

    assert msgspec.msgpack.decode(msgspec.msgpack.encode({}), type=ToolResult) == ToolResult()
    assert ToolResult().text == "" and ToolResult().content == [] and ToolResult().is_error is False


def test_calls_ask_for_no_progress_unless_they_say_so() -> None:
    old_call = decode_front_request(msgspec.msgpack.encode({"type": "CallTool", "id": 1, "name": "t"}))
    assert isinstance(old_call, CallTool) and old_call.progress is False
    old_invoke = decode_worker_command(
        msgspec.msgpack.encode({"type": "Invoke", "call": 1, "tool": "t", "arguments": {}, "budget": 1.0})
    )
    assert isinstance(old_invoke, Invoke) and old_invoke.progress is False
    assert msgspec.msgpack.decode(encode(CallTool(id=1, name="t", progress=True)))["progress"] is True


def test_progress_without_total_or_message_leaves_them_off_the_wire() -> None:
    assert msgspec.msgpack.decode(encode(CallProgress(id=4, progress=1))) == {
        "type": "CallProgress",
        "id": 4,
        "progress": 1,
    }
    event = decode_worker_event(msgspec.msgpack.encode({"type": "InvokeProgress", "call": 2, "progress": 7}))
    assert event == InvokeProgress(call=2, progress=7.0)
    assert isinstance(event, InvokeProgress) and event.total is None and event.message is None


def test_progress_reply_carries_the_callers_id_like_every_reply() -> None:
    reply = decode_front_reply(encode(CallProgress(id=42, progress=1.5, total=3, message="m")))
    assert isinstance(reply, CallProgress)
    assert (reply.id, reply.progress, reply.total, reply.message) == (42, 1.5, 3.0, "m")


def test_cancel_and_abort_carry_only_the_id_they_cancel() -> None:
    assert msgspec.msgpack.decode(encode(Cancel(id=7))) == {"type": "Cancel", "id": 7}
    assert msgspec.msgpack.decode(encode(Abort(call=9))) == {"type": "Abort", "call": 9}
    assert decode_front_request(msgspec.msgpack.encode({"type": "Cancel", "id": 7})) == Cancel(id=7)
    assert decode_worker_command(msgspec.msgpack.encode({"type": "Abort", "call": 9})) == Abort(call=9)
    for data, decoder in (
        ({"type": "Cancel"}, decode_front_request),
        ({"type": "Abort"}, decode_worker_command),
    ):
        with pytest.raises(msgspec.ValidationError):
            decoder(msgspec.msgpack.encode(data))


def test_message_with_an_unknown_extra_field_still_decodes() -> None:
    data = msgspec.msgpack.encode({"type": "Ping", "id": 1, "future_field": 3})
    assert decode_front_request(data) == Ping(id=1)


@pytest.mark.parametrize(
    ("data", "decoder", "expected"),
    [
        ({"type": "Heartbeat", "load": 0.5}, decode_worker_command, Heartbeat()),
        ({"type": "Heartbeat", "load": 0.5}, decode_worker_event, Heartbeat()),
        ({"type": "Done", "id": 3, "extra": {"x": [1]}}, decode_front_reply, Done(id=3)),
        ({"type": "Started", "server_pid": 5, "cmd": "x"}, decode_worker_event, Started(server_pid=5)),
    ],
)
def test_unknown_fields_are_skipped_in_every_direction(
    data: dict[str, Any], decoder: Decoder, expected: Any
) -> None:
    assert decoder(msgspec.msgpack.encode(data)) == expected


def test_unknown_fields_inside_nested_structs_are_skipped() -> None:
    data = msgspec.msgpack.encode(
        {"type": "Ready", "tools": [{"name": "t", "icons": ["x"]}], "protocol": "2099-01-01"}
    )
    assert decode_worker_event(data) == Ready(tools=[WorkerTool(name="t")])


def test_error_reply_with_a_code_from_a_newer_supervisor_still_decodes() -> None:
    data = encode(ErrorReply(id=1, code="BRAND_NEW", message="m"))
    decoded = decode_front_reply(data)
    assert isinstance(decoded, ErrorReply)
    assert decoded.code == "BRAND_NEW"


# --- rejects ---------------------------------------------------------------------------------


def _others(decoder: Decoder) -> list[Any]:
    own = {type(m) for _, messages, d in DIRECTIONS if d is decoder for m in messages}
    return [m for _, messages, d in DIRECTIONS if d is not decoder for m in messages if type(m) not in own]


@pytest.mark.parametrize(
    ("decoder", "message"),
    [
        pytest.param(decoder, message, id=f"{kind}-rejects-{type(message).__name__}")
        for kind, _, decoder in DIRECTIONS
        for message in _others(decoder)
    ],
)
def test_decoder_rejects_messages_meant_for_another_direction(decoder: Decoder, message: Any) -> None:
    with pytest.raises(msgspec.ValidationError):
        decoder(encode(message))


def test_heartbeat_is_valid_in_both_worker_directions_only() -> None:
    data = encode(Heartbeat())
    assert decode_worker_command(data) == Heartbeat()
    assert decode_worker_event(data) == Heartbeat()
    for decoder in (decode_front_request, decode_front_reply):
        with pytest.raises(msgspec.ValidationError):
            decoder(data)


@pytest.mark.parametrize("decoder", [d for _, _, d in DIRECTIONS])
@pytest.mark.parametrize(
    "garbage",
    [b"", b"\xc1", b"\x81\xa4ty", b"\xff\xfe\xfd"],
    ids=["empty", "never-used", "truncated", "junk"],
)
def test_garbage_bytes_raise_decode_error(decoder: Decoder, garbage: bytes) -> None:
    with pytest.raises(msgspec.DecodeError):
        decoder(garbage)


@pytest.mark.parametrize(
    ("data", "decoder"),
    [
        ({"type": "NoSuchMessage", "id": 1}, decode_front_request),
        ({"id": 1}, decode_front_request),
        ({"type": "Ping"}, decode_front_request),
        ({"type": "Ping", "id": "one"}, decode_front_request),
        ({"type": "CallTool", "id": 1}, decode_front_request),
        ({"type": "Invoke", "call": 1, "tool": "t", "arguments": {}}, decode_worker_command),
        (
            {"type": "StatusReply", "id": 1, "servers": [{"server": "s", "state": 3}]},
            decode_front_reply,
        ),
        ([1, 2, 3], decode_worker_event),
    ],
    ids=[
        "unknown-tag",
        "no-tag",
        "missing-id",
        "wrong-type",
        "missing-name",
        "missing-budget",
        "bad-state",
        "array",
    ],
)
def test_well_formed_but_invalid_messages_raise_validation_error(data: Any, decoder: Decoder) -> None:
    with pytest.raises(msgspec.ValidationError):
        decoder(msgspec.msgpack.encode(data))


def test_a_state_this_version_does_not_know_decodes_as_it_is() -> None:
    """A newer supervisor may add a state: an older client still reads the status and the events."""
    reply = decode_front_reply(
        msgspec.msgpack.encode(
            {
                "type": "StatusReply",
                "id": 1,
                "servers": [
                    {"server": "s", "state": "dozing", "workers": [{"name": "s#2", "state": "dozing"}]}
                ],
            }
        )
    )
    assert isinstance(reply, StatusReply)
    assert reply.servers[0].state == "dozing" and reply.servers[0].workers[0].state == "dozing"
    event = decode_event(
        msgspec.msgpack.encode(
            {"type": "StateChanged", "server": "s", "state": "dozing", "previous": "ready"}
        )
    )
    assert isinstance(event, StateChanged) and event.state == "dozing"


def test_validation_error_is_a_decode_error() -> None:
    # callers may catch DecodeError alone for "frame does not decode"
    assert issubclass(msgspec.ValidationError, msgspec.DecodeError)


# --- error codes -----------------------------------------------------------------------------


def test_error_codes_are_the_fixed_set_of_eleven() -> None:
    expected = {
        "UNKNOWN_TOOL",
        "UNAVAILABLE",
        "TIMEOUT",
        "TOOL_ERROR",
        "SERVER_ERROR",
        "WORKER_CRASHED",
        "INVALID_ARGUMENTS",
        "OVERLOADED",
        "BAD_REQUEST",
        "INTERNAL",
        "CANCELLED",
    }
    assert set(ERROR_CODES) == expected
    assert len(ERROR_CODES) == 11
    assert isinstance(ERROR_CODES, frozenset)
