"""The adapters' pure parts: tools and results in OpenAI's and Anthropic's formats, the definitions a
registry-style tool set keeps, LangChain tools over a call function, and what importing them loads.

The shapes checked here are the APIs' documented ones: a tool name of 1 to 64 of ``[a-zA-Z0-9_-]``,
an input schema that is a JSON Schema object; Anthropic's ``tool_result`` content of text blocks
(never empty) and base64 image blocks of JPEG, PNG, GIF or WebP; OpenAI's ``tool`` message content
as text.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import jsonschema
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import ToolMessage
from langchain_core.tools import ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool

from supervisor.adapters.formats import (
    NO_OUTPUT,
    TOOL_NAME,
    anthropic_tool,
    anthropic_tool_result,
    openai_tool,
    openai_tool_message,
    result_text,
)
from supervisor.adapters.langchain import SupervisorTool, SupervisorToolkit
from supervisor.adapters.toolset import ToolDefinition, ToolRegistry, _Definitions
from supervisor.client.errors import InvalidArgumentsError, ToolExecutionError, ToolTimeoutError
from supervisor.protocol import ToolInfo, ToolResult
from supervisor.shared.names import free_name

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
NAME = r"^[a-zA-Z0-9_-]{1,64}\Z"  # as documented, with \Z: Python's $ also matches before a newline

INPUT_SCHEMA = {
    "type": "object",
    "required": ["type"],
    "properties": {
        "type": {"const": "object"},
        "properties": {"type": "object"},
        "required": {"type": "array", "items": {"type": "string"}},
    },
}
ANTHROPIC_TOOL = {
    "type": "object",
    "required": ["name", "input_schema"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": NAME},
        "description": {"type": "string", "minLength": 1},
        "input_schema": INPUT_SCHEMA,
    },
}
OPENAI_TOOL = {
    "type": "object",
    "required": ["type", "function"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "function"},
        "function": {
            "type": "object",
            "required": ["name", "description", "parameters"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": NAME},
                "description": {"type": "string"},
                "parameters": INPUT_SCHEMA,
            },
        },
    },
}
TEXT_BLOCK = {
    "type": "object",
    "required": ["type", "text"],
    "additionalProperties": False,
    "properties": {"type": {"const": "text"}, "text": {"type": "string", "pattern": r"\S"}},
}
IMAGE_BLOCK = {
    "type": "object",
    "required": ["type", "source"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "image"},
        "source": {
            "type": "object",
            "required": ["type", "media_type", "data"],
            "additionalProperties": False,
            "properties": {
                "type": {"const": "base64"},
                "media_type": {"enum": ["image/jpeg", "image/png", "image/gif", "image/webp"]},
                "data": {"type": "string", "minLength": 1},
            },
        },
    },
}
TOOL_RESULT = {
    "type": "object",
    "required": ["type", "tool_use_id", "content"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "tool_result"},
        "tool_use_id": {"type": "string", "minLength": 1},
        "content": {"type": "array", "minItems": 1, "items": {"oneOf": [TEXT_BLOCK, IMAGE_BLOCK]}},
        "is_error": {"const": True},
    },
}
OPENAI_MESSAGE = {
    "type": "object",
    "required": ["role", "tool_call_id", "content"],
    "additionalProperties": False,
    "properties": {
        "role": {"const": "tool"},
        "tool_call_id": {"type": "string", "minLength": 1},
        "content": {"type": "string", "pattern": r"\S"},
    },
}


def valid(instance: Any, schema: dict[str, Any]) -> bool:
    jsonschema.validate(instance, schema)
    msgspec.json.encode(instance)  # JSON all through
    return True


# ---------------------------------------------------------------- tools

names = st.from_regex(r"\A[a-zA-Z0-9_-]{1,64}\Z")
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
property_schemas = st.sampled_from(
    [
        {"type": "string"},
        {"type": "integer", "default": 3},
        {"type": "array", "items": {"type": "number"}},
        {},
    ]
)


@st.composite
def object_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """Input schemas as the registry has them: objects, with or without ``type``/``properties``."""
    properties = draw(st.dictionaries(st.text(min_size=1, max_size=10), property_schemas, max_size=4))
    schema: dict[str, Any] = {}
    if draw(st.booleans()):
        schema["type"] = "object"
    if properties or draw(st.booleans()):
        schema["properties"] = properties
    if properties and draw(st.booleans()):
        schema["required"] = draw(st.lists(st.sampled_from(sorted(properties)), unique=True))
    if draw(st.booleans()):
        schema["additionalProperties"] = False
    return schema


def tool_infos(name: st.SearchStrategy[str] = names) -> st.SearchStrategy[ToolInfo]:
    return st.builds(
        ToolInfo,
        name=name,
        server=st.text(max_size=10),
        original_name=st.text(max_size=10),
        description=st.text(max_size=30),
        input_schema=object_schemas(),
        title=st.none() | st.text(max_size=10),
    )


@given(tool_infos())
def test_any_registry_tool_is_a_valid_anthropic_and_openai_tool(tool: ToolInfo) -> None:
    anthropic, openai = anthropic_tool(tool), openai_tool(tool)
    assert valid(anthropic, ANTHROPIC_TOOL) and valid(openai, OPENAI_TOOL)
    assert anthropic["name"] == openai["function"]["name"] == tool.name
    assert anthropic["input_schema"] == openai["function"]["parameters"]
    assert anthropic["input_schema"] == {"type": "object", "properties": {}, **tool.input_schema}
    jsonschema.Draft202012Validator.check_schema(anthropic["input_schema"])
    assert anthropic.get("description", "") == openai["function"]["description"]
    assert openai["function"]["description"] == (tool.description or tool.title or "")


@given(st.text(max_size=70).filter(lambda name: not TOOL_NAME.fullmatch(name)))
def test_a_tool_name_neither_api_takes_is_refused_naming_it(name: str) -> None:
    tool = ToolInfo(name=name, server="s", original_name="t")
    for convert in (anthropic_tool, openai_tool):
        with pytest.raises(ValueError, match="is not 1 to 64 of") as caught:
            convert(tool)
        assert repr(name) in str(caught.value)


def test_a_name_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(ValueError, match="not 1 to 64"):
        anthropic_tool(ToolInfo(name="mcp_time_now\n", server="time", original_name="now"))


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "string"}, "has type 'string', not 'object'"),
        ({"type": ["object", "null"]}, "has type ['object', 'null'], not 'object'"),
        ({"type": "object", "properties": [1]}, "properties are not an object"),
        ({"required": "a"}, "required is not a list of names"),
        ({"required": [1]}, "required is not a list of names"),
        (5, "input_schema is int, not an object"),
    ],
)
def test_a_schema_that_is_no_object_schema_is_refused_naming_the_tool(schema: Any, problem: str) -> None:
    tool = ToolInfo(name="mcp_s_t", server="s", original_name="t", input_schema=schema)
    for convert in (anthropic_tool, openai_tool):
        with pytest.raises(ValueError, match="tool 'mcp_s_t'") as caught:
            convert(tool)
        assert problem in str(caught.value)


def test_something_that_is_not_a_tool_info_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="expected a ToolInfo, not dict"):
        anthropic_tool({"name": "x"})  # type: ignore[arg-type]


def test_a_tool_without_arguments_gets_an_empty_object_schema_and_no_anthropic_description() -> None:
    tool = ToolInfo(name="mcp_s_pid", server="s", original_name="pid")
    assert anthropic_tool(tool) == {"name": "mcp_s_pid", "input_schema": {"type": "object", "properties": {}}}
    assert openai_tool(tool)["function"]["description"] == ""
    titled = ToolInfo(name="mcp_s_pid", server="s", original_name="pid", title="Process id")
    assert anthropic_tool(titled)["description"] == "Process id"


@given(st.text(), st.text(), st.frozensets(st.text(max_size=70), max_size=5))
def test_every_prefixed_name_the_registry_makes_fits_both_apis(
    server: str, tool: str, taken: frozenset[str]
) -> None:
    assert TOOL_NAME.fullmatch(free_name(server, tool, taken))


# ---------------------------------------------------------------- results

TEXT = {"type": "text", "text": "hello"}
IMAGE = {"type": "image", "data": PNG, "mimeType": "image/png"}
SVG = {"type": "image", "data": "PHN2Zz4=", "mimeType": "image/svg+xml"}
AUDIO = {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}
LINK = {"type": "resource_link", "uri": "test://doc/1", "name": "doc-1"}
TEXT_RESOURCE = {"type": "resource", "resource": {"uri": "test://doc/2", "text": "document 2"}}
IMAGE_RESOURCE = {
    "type": "resource",
    "resource": {"uri": "test://a.png", "mimeType": "image/png", "blob": PNG},
}
PDF_RESOURCE = {
    "type": "resource",
    "resource": {"uri": "test://a.pdf", "mimeType": "application/pdf", "blob": "JVBE"},
}


def image_block(data: str) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


@pytest.mark.parametrize(
    ("item", "block", "line"),
    [
        (TEXT, text_block("hello"), "hello"),
        (IMAGE, image_block(PNG), "[image image/png, 70 bytes]"),
        (SVG, text_block("[image image/svg+xml, 5 bytes]"), "[image image/svg+xml, 5 bytes]"),
        (AUDIO, text_block("[audio audio/wav, 4 bytes]"), "[audio audio/wav, 4 bytes]"),
        (LINK, text_block("[resource link test://doc/1]"), "[resource link test://doc/1]"),
        (TEXT_RESOURCE, text_block("document 2"), "document 2"),
        (IMAGE_RESOURCE, image_block(PNG), "[resource test://a.png image/png]"),
        (
            PDF_RESOURCE,
            text_block("[resource test://a.pdf application/pdf]"),
            "[resource test://a.pdf application/pdf]",
        ),
        ({"type": "hologram"}, text_block("[hologram content]"), "[hologram content]"),
    ],
)
def test_each_content_kind_becomes_what_each_format_carries(
    item: dict[str, Any], block: dict[str, Any], line: str
) -> None:
    result = ToolResult(content=[item], text="rendered")
    anthropic = anthropic_tool_result(result, "toolu_1")
    assert valid(anthropic, TOOL_RESULT)
    assert anthropic == {"type": "tool_result", "tool_use_id": "toolu_1", "content": [block]}
    openai = openai_tool_message(result, "call_1")
    assert valid(openai, OPENAI_MESSAGE)
    assert openai == {"role": "tool", "tool_call_id": "call_1", "content": line}


def test_items_keep_their_order_and_empty_text_is_left_out_of_anthropic_blocks() -> None:
    result = ToolResult(content=[TEXT, {"type": "text", "text": ""}, IMAGE, LINK])
    blocks = anthropic_tool_result(result, "t")["content"]
    assert blocks == [text_block("hello"), image_block(PNG), text_block("[resource link test://doc/1]")]
    assert openai_tool_message(result, "c")["content"] == (
        "hello\n\n[image image/png, 70 bytes]\n[resource link test://doc/1]"
    )


def test_a_result_without_items_shows_its_text_or_says_there_was_none() -> None:
    structured = ToolResult(structured_content={"sum": 3}, text='{"sum":3}')
    assert anthropic_tool_result(structured, "t")["content"] == [text_block('{"sum":3}')]
    assert openai_tool_message(structured, "c")["content"] == '{"sum":3}'
    for empty in (ToolResult(), ToolResult(content=[{"type": "text", "text": " "}], text="\n")):
        assert anthropic_tool_result(empty, "t")["content"] == [text_block(NO_OUTPUT)]
        assert openai_tool_message(empty, "c")["content"] == NO_OUTPUT
    assert result_text(ToolResult()) == NO_OUTPUT


def test_an_error_result_or_a_failed_call_is_flagged_in_both_formats() -> None:
    failed = ToolResult(content=[{"type": "text", "text": "no such file"}], is_error=True)
    assert anthropic_tool_result(failed, "t") == {
        "type": "tool_result",
        "tool_use_id": "t",
        "content": [text_block("no such file")],
        "is_error": True,
    }
    assert openai_tool_message(failed, "c")["content"] == "Error: no such file"

    raised = ToolExecutionError("tool 'x' reported an error: no such file", failed)
    assert anthropic_tool_result(raised, "t") == anthropic_tool_result(failed, "t")
    assert openai_tool_message(raised, "c") == openai_tool_message(failed, "c")

    timeout = ToolTimeoutError("mcp_s_slow took longer than 5 s")
    assert anthropic_tool_result(timeout, "t")["content"] == [
        text_block("TIMEOUT: mcp_s_slow took longer than 5 s")
    ]
    assert anthropic_tool_result(timeout, "t")["is_error"] is True
    assert openai_tool_message(timeout, "c")["content"] == "Error: TIMEOUT: mcp_s_slow took longer than 5 s"


@pytest.mark.parametrize("bad_id", ["", None, 7])
def test_a_missing_call_id_is_refused(bad_id: Any) -> None:
    with pytest.raises(ValueError, match="tool_use_id must be a non-empty string"):
        anthropic_tool_result(ToolResult(), bad_id)
    with pytest.raises(ValueError, match="tool_call_id must be a non-empty string"):
        openai_tool_message(ToolResult(), bad_id)


def test_an_outcome_that_is_neither_a_result_nor_an_error_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not str"):
        anthropic_tool_result("done", "t")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not ValueError"):
        openai_tool_message(ValueError("x"), "c")  # type: ignore[arg-type]


content_items = st.one_of(
    st.dictionaries(st.sampled_from(["type", "text", "data", "mimeType", "uri", "resource"]), json_values),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image", "audio", "resource_link", "resource", "x"])},
        optional={
            "text": json_values,
            "data": st.text(max_size=12),
            "mimeType": st.sampled_from(["image/png", "image/gif", "image/bmp", "audio/wav"]) | json_values,
            "uri": json_values,
            "resource": json_values
            | st.fixed_dictionaries({}, optional={"blob": st.text(), "mimeType": json_values}),
        },
    ),
)
tool_results = st.builds(
    ToolResult,
    content=st.lists(content_items, max_size=5),
    structured_content=json_values,
    is_error=st.booleans(),
    text=st.text(max_size=10),
)


@given(tool_results)
def test_any_tool_result_gives_valid_blocks_and_a_valid_message(result: ToolResult) -> None:
    anthropic = anthropic_tool_result(result, "toolu_1")
    assert valid(anthropic, TOOL_RESULT)
    assert anthropic.get("is_error", False) == result.is_error
    openai = openai_tool_message(result, "call_1")
    assert valid(openai, OPENAI_MESSAGE)
    assert openai["content"].startswith("Error: ") or not result.is_error


# ---------------------------------------------------------------- definitions


def info(name: str, description: str = "Echo.") -> ToolInfo:
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    return ToolInfo(name=name, server="s", original_name=name, description=description, input_schema=schema)


def test_a_definition_is_kept_while_its_tool_is_unchanged_and_made_again_when_it_changes() -> None:
    made: list[str] = []

    def define(tool: ToolInfo) -> ToolDefinition[str]:
        made.append(tool.name)
        return ToolDefinition(
            tool.name, tool.description, dict(tool.input_schema), lambda args: tool.name, tool
        )

    definitions = _Definitions(define)
    first = definitions.update([info("a"), info("b")])
    again = definitions.update([info("a"), info("b")])
    assert [d.name for d in again] == ["a", "b"] and all(x is y for x, y in zip(first, again, strict=True))
    changed = definitions.update([info("a", "Echo, louder."), info("c")])
    assert [d.name for d in changed] == ["a", "c"] and changed[0] is not first[0]
    assert definitions.get("b") is None and definitions.get("c") is changed[1]
    assert made == ["a", "b", "a", "c"]


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "5"])
def test_a_registry_with_a_timeout_that_is_no_budget_is_refused_before_it_subscribes(timeout: Any) -> None:
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
        ToolRegistry(object(), timeout=timeout)  # type: ignore[arg-type]


# ---------------------------------------------------------------- LangChain tools over a call function

ODD = {
    "type": "object",
    "properties": {name: {"type": "string"} for name in ("config", "self", "run_manager", "callbacks")},
}


def langchain_tool(call: Any, *, asynchronous: bool = False, **options: Any) -> SupervisorTool:
    tool = ToolInfo(
        name="mcp_s_echo", server="s", original_name="echo", description="Echo.", input_schema=ODD
    )
    definition = ToolDefinition(tool.name, tool.description, dict(ODD), call, tool)
    return SupervisorTool.of(definition, asynchronous=asynchronous, **options)


def echo(arguments: dict[str, Any]) -> ToolResult:
    if arguments.get("config") == "bad":
        raise InvalidArgumentsError("config: 'bad' is not one of ['good']")
    text = ",".join(f"{key}={value}" for key, value in arguments.items())
    return ToolResult(
        content=[{"type": "text", "text": text}], text=text, structured_content={"n": len(arguments)}
    )


def test_a_langchain_tool_passes_arguments_of_any_name_and_returns_text_and_the_result() -> None:
    tool = langchain_tool(echo)
    arguments = {"config": "c", "self": "s", "run_manager": "r", "callbacks": "k"}
    assert tool.invoke(arguments) == "config=c,self=s,run_manager=r,callbacks=k"
    message = tool.invoke({"type": "tool_call", "id": "call_1", "name": tool.name, "args": {"self": "x"}})
    assert isinstance(message, ToolMessage)
    assert (message.content, message.status, message.tool_call_id) == ("self=x", "success", "call_1")
    assert message.artifact == echo({"self": "x"})
    assert tool.metadata == {"server": "s", "original_name": "echo"}


def test_a_langchain_tool_is_offered_to_models_with_the_registry_schema() -> None:
    tool = langchain_tool(echo)
    assert convert_to_openai_tool(tool) == openai_tool(tool.info)


def test_a_failed_call_is_a_tool_exception_naming_the_code_or_an_error_message() -> None:
    with pytest.raises(ToolException, match=r"^INVALID_ARGUMENTS: config: 'bad'"):
        langchain_tool(echo, handle_tool_error=False).invoke({"config": "bad"})
    handled = langchain_tool(echo).invoke(
        {"type": "tool_call", "id": "1", "name": "x", "args": {"config": "bad"}}
    )
    assert handled.status == "error" and handled.content.startswith("INVALID_ARGUMENTS: ")


def test_a_tool_over_a_blocking_call_also_runs_awaited() -> None:
    assert asyncio.run(langchain_tool(echo).ainvoke({"self": "a"})) == "self=a"


def test_a_tool_over_an_async_call_runs_awaited_and_says_so_when_invoked_blocking() -> None:
    async def aecho(arguments: dict[str, Any]) -> ToolResult:
        return echo(arguments)

    tool = langchain_tool(aecho, asynchronous=True)
    assert asyncio.run(tool.ainvoke({"config": "c"})) == "config=c"
    with pytest.raises(ToolException, match=r"^INVALID_ARGUMENTS"):
        asyncio.run(
            langchain_tool(aecho, asynchronous=True, handle_tool_error=False).ainvoke({"config": "bad"})
        )
    with pytest.raises(
        NotImplementedError, match="mcp_s_echo was made over an AsyncSupervisorClient: call it with ainvoke"
    ):
        tool.invoke({"config": "c"})


def test_a_string_input_is_refused_by_langchain() -> None:
    with pytest.raises(ValueError, match="String tool inputs are not allowed"):
        langchain_tool(echo).invoke("config=c")


def test_the_toolkit_takes_a_blocking_client_and_aopen_an_async_one() -> None:
    with pytest.raises(TypeError, match="takes a SupervisorClient, not str"):
        SupervisorToolkit("ipc:///nowhere")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="aopen takes an AsyncSupervisorClient, not str"):
        asyncio.run(SupervisorToolkit.aopen("ipc:///nowhere"))  # type: ignore[arg-type]


# ---------------------------------------------------------------- what importing loads


def loaded_after(script: str) -> set[str]:
    code = f"import sys; before = set(sys.modules); {script}; print('\\n'.join(set(sys.modules) - before))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return set(out.stdout.split())


def test_the_client_and_the_framework_free_adapters_never_load_langchain() -> None:
    loaded = loaded_after(
        "import supervisor, supervisor.client.blocking, supervisor.adapters, supervisor.adapters.toolset"
    )
    assert not {name for name in loaded if name.split(".")[0] in ("langchain_core", "pydantic")}
    assert "supervisor.adapters.formats" in loaded


def test_the_langchain_adapter_without_langchain_core_says_which_extra_to_install() -> None:
    code = "import sys; sys.modules['langchain_core'] = None; import supervisor.adapters.langchain"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "ImportError: supervisor.adapters.langchain needs langchain-core: "
        "pip install 'mcp-supervisor[langchain]'"
    )
