"""supervisor.config.load against hostile or broken files: every input is a Config or a ConfigError."""

import contextlib
import json
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.config.load import Config, ConfigError, load_config, parse_config

BIG = "1" + "0" * 400  # an integer no 64-bit field holds
DEEP = "[" * 1000 + "]" * 1000  # msgspec raises RecursionError for this


def parse_text(text: str) -> Config:
    return parse_config(text.encode(), path=Path("/etc/mcp.json"), environ={})


def only_problem(config: Config) -> str:
    assert len(config.problems) == 1, config.problems
    return config.problems[0].message


# --- whole-file errors -----------------------------------------------------------------------


def test_file_that_is_not_utf8_is_an_error_naming_file_line_column_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_bytes(b'{\n  "mcpServers": {"s": {"command": "caf\xe9"}}}\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(info.value) == f"{path}: not UTF-8 text: byte 0xe9 at line 2, column 39"


def test_utf16_file_is_an_error_at_its_first_byte() -> None:
    data = '{"mcpServers": {}}'.encode("utf-16")
    with pytest.raises(ConfigError, match=r"not UTF-8 text: byte 0xff at line 1, column 1"):
        parse_config(data)


@pytest.mark.parametrize(
    "text",
    [
        '{"mcpServers": {"s": ' + DEEP + "}}",
        '{"mcpServers": {"s": {"command": "x", "args": ' + DEEP + "}}}",
        '{"mcpServers": {}, "supervisor": ' + DEEP + "}",
        '{"x": ' + DEEP + ', "mcpServers": {}}',
    ],
    ids=["entry", "field", "supervisor", "other-key"],
)
def test_nesting_a_thousand_levels_deep_is_an_error_naming_the_file(text: str) -> None:
    with pytest.raises(
        ConfigError, match=r"^/etc/mcp\.json: nested too deeply: 10\d\d levels of arrays and "
    ):
        parse_text(text)


def test_nesting_too_deep_names_where_the_deepest_level_is() -> None:
    text = '{\n  "mcpServers": {},\n  "x": "[[[{{{", "y": ' + DEEP + "}"
    with pytest.raises(ConfigError) as info:
        parse_text(text)
    assert str(info.value).endswith(": 1001 levels of arrays and objects, the deepest at line 3, column 1022")


@pytest.mark.parametrize("value", ["1e999", "-1e999", BIG])
@pytest.mark.parametrize("field", ["shutdownGrace", "heartbeatTimeout", "maxRestarts", "backoffMax"])
def test_supervisor_setting_out_of_range_rejects_the_file_naming_the_field(value: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_text(f'{{"mcpServers": {{}}, "supervisor": {{"{field}": {value}}}}}')
    assert str(info.value) == f"/etc/mcp.json: \"supervisor\": field '{field}': number out of range"


# --- per-server problems ---------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1e999", "-1e999", BIG])
@pytest.mark.parametrize("field", ["toolTimeout", "maxRestarts", "startTimeout", "refreshInterval"])
def test_server_field_out_of_range_is_a_problem_naming_server_and_field(value: str, field: str) -> None:
    entries = {"s": f'{{"command": "x", "{field}": {value}}}', "ok": '{"command": "y"}'}
    config = parse_text('{"mcpServers": {' + ", ".join(f'"{k}": {v}' for k, v in entries.items()) + "}}")
    assert only_problem(config) == f"server 's': field '{field}': number out of range"
    assert list(config.servers) == ["ok"]


def test_integer_past_64_bits_is_out_of_range_even_where_python_could_hold_it() -> None:
    config = parse_text(f'{{"mcpServers": {{"s": {{"command": "x", "maxRestarts": {2**64}}}}}}}')
    assert only_problem(config) == "server 's': field 'maxRestarts': number out of range"
    with pytest.raises(ConfigError, match="field 'maxRestarts': number out of range"):
        parse_text(f'{{"mcpServers": {{}}, "supervisor": {{"maxRestarts": {2**63}}}}}')


def test_number_out_of_range_inside_a_nested_field_names_the_field() -> None:
    text = '{"mcpServers": {"s": {"command": "x", "sampling": {"command": "y", "timeout": 1e999}}}}'
    assert only_problem(parse_text(text)) == "server 's': field 'sampling': number out of range"


def test_largest_finite_timeout_is_accepted() -> None:
    config = parse_text('{"mcpServers": {"s": {"command": "x", "toolTimeout": 1e308}}}')
    assert config.servers["s"].tool_timeout == 1e308


@pytest.mark.parametrize(
    "name", ["a\nb", "a\rb", "red\x1b[31m", "tab\there", "nul\x00", "sep\u2028x", "\x7f"]
)
def test_server_name_with_a_control_character_is_a_problem_with_the_name_escaped(name: str) -> None:
    config = parse_config(json.dumps({"mcpServers": {name: {"command": "x"}}}).encode(), environ={})
    message = only_problem(config)
    assert message.startswith(f"server {name!r}: server name must be printable")
    assert message.isprintable()
    assert config.servers == {}


def test_problem_messages_escape_control_characters_in_values_they_quote() -> None:
    message = only_problem(
        parse_text('{"mcpServers": {"s": {"command": "x", "elicitation": "a\\u001b[2Jb"}}}')
    )
    assert message == "server 's': field 'elicitation': invalid enum value 'a\\x1b[2Jb'"


def test_setting_errors_escape_control_characters_in_values_they_quote() -> None:
    with pytest.raises(ConfigError) as info:
        parse_text('{"mcpServers": {}, "supervisor": {"workerSpawn": "fork\\nERROR fake line"}}')
    assert str(info.value).isprintable()
    assert "'fork\\nERROR fake line'" in str(info.value)


# --- any input -------------------------------------------------------------------------------

FIELDS = ["command", "args", "env", "url", "type", "toolTimeout", "disabled", "roots", "sampling"]
FIELDS += ["elicitation", "maxRestarts", "backoffMax", "startTimeout", "refreshInterval", "cwd", "headers"]
SETTINGS = ["shutdownGrace", "heartbeatInterval", "heartbeatTimeout", "workerSpawn", "maxRestarts"]

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(codec="utf-8"), max_size=12),
    st.sampled_from(
        ["stdio", "sse", "http", "/abs", "~/x", "${HOME}", "${X:-d}", "file:///r", "http://h/sse"]
    ),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
entries = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), json_values, max_size=6)
documents = st.fixed_dictionaries(
    {"mcpServers": st.dictionaries(st.text(max_size=10), entries | json_values, max_size=3)},
    optional={"supervisor": st.dictionaries(st.sampled_from(SETTINGS), json_values, max_size=3)},
)


def _mangle(text: str, cut: int, junk: bytes) -> bytes:
    """A JSON text with a number blown out of range, bytes spliced in, or the tail cut off."""
    data = text.replace("1.0", "1e999").replace("0,", BIG + ",").encode()
    cut = cut % (len(data) + 1)
    return data[:cut] + junk + data[cut:]


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=200)
    | st.builds(_mangle, documents.map(json.dumps), st.integers(), st.binary(max_size=4))
)
def test_any_bytes_give_a_config_or_a_config_error(data: bytes) -> None:
    try:
        config = parse_config(data, environ={"HOME": "/home/u"})
    except ConfigError as exc:
        assert str(exc).isprintable()
    else:
        assert all(problem.message.isprintable() for problem in config.problems)


@settings(max_examples=200, deadline=None)
@given(documents)
def test_any_json_document_gives_a_config_or_a_config_error(document: dict[str, Any]) -> None:
    with contextlib.suppress(ConfigError):
        parse_config(json.dumps(document).encode(), environ={"HOME": "/home/u"})


def test_unprintable_characters_are_escaped_and_printable_ones_kept() -> None:
    config = parse_config(json.dumps({"mcpServers": {"ünïcode ✓" + string.punctuation: {}}}).encode())
    assert only_problem(config).startswith("server 'ünïcode ✓")


def test_a_queue_bound_past_what_zeromq_takes_rejects_the_file() -> None:
    with pytest.raises(ConfigError, match="field 'maxQueuedReplies': expected 'int' <= 2147483647"):
        parse_text('{"mcpServers": {}, "supervisor": {"maxQueuedReplies": 4294967296}}')
