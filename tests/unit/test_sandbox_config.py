"""The ``sandbox`` block: parsed, laid over the default, checked, and described for ``status``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.config.load import parse_config
from supervisor.config.sandbox_entry import NO_ALLOW_LISTS, SandboxSpec, describe, parse_memory

ENV = {"HOME": "/home/ada", "DATA": "/srv/data"}


def _load(server: dict[str, Any], default: Any = None) -> tuple[SandboxSpec | None, list[str]]:
    top: dict[str, Any] = {"mcpServers": {"s": {"command": "server", **server}}}
    if default is not None:
        top["supervisor"] = {"sandbox": default}
    config = parse_config(json.dumps(top).encode(), environ=ENV)
    spec = config.servers["s"].sandbox if "s" in config.servers else None
    return spec, [problem.message for problem in config.problems]


def test_no_block_and_no_default_is_not_sandboxed() -> None:
    assert _load({}) == (None, [])


def test_true_is_every_default_no_network_no_paths_no_limits() -> None:
    spec, problems = _load({"sandbox": True})
    assert problems == [] and spec == SandboxSpec()
    assert spec is not None and spec.network is False


def test_a_full_block_is_read_with_paths_expanded_and_sizes_in_bytes() -> None:
    block = {
        "network": True,
        "filesystem": {"read": ["~/notes", "${DATA}/in/"], "write": ["/srv/repo"]},
        "memory": "512M",
        "cpu": 60,
        "processes": 64,
        "files": 256,
    }
    spec, problems = _load({"sandbox": block})
    assert problems == []
    assert spec == SandboxSpec(
        network=True,
        read=("/home/ada/notes", "/srv/data/in"),
        write=("/srv/repo",),
        memory=512 << 20,
        cpu=60,
        processes=64,
        files=256,
    )


def test_the_default_applies_to_every_server_and_a_server_overrides_it_key_by_key() -> None:
    default = {"memory": "1G", "processes": 32}
    spec, _ = _load({}, default)
    assert spec == SandboxSpec(memory=1 << 30, processes=32)
    spec, _ = _load({"sandbox": {"network": True, "processes": 8}}, default)
    assert spec == SandboxSpec(network=True, memory=1 << 30, processes=8)
    spec, _ = _load({"sandbox": False}, default)
    assert spec is None


@pytest.mark.parametrize(
    ("block", "says"),
    [
        ({"network": ["api.github.com:443"]}, NO_ALLOW_LISTS),
        ({"filesystem": {"read": ["relative/path"]}}, "sandbox.filesystem.read[0] must be an absolute path"),
        ({"filesystem": {"write": ["${NOPE}"]}}, "variable NOPE in sandbox.filesystem.write[0] is not set"),
        ({"memory": "lots"}, "sandbox.memory: memory must be bytes or a size"),
        ({"memory": 1024}, "memory must be at least 16 MB"),
        ({"cpu": 0}, "sandbox.cpu (seconds) must be a whole number of at least 1, got 0"),
        ({"processes": True}, "sandbox.processes must be a whole number of at least 1, got True"),
        ({"files": 3}, "sandbox.files must be a whole number of at least 16, got 3"),
        ({"filesystem": {"exec": []}}, "exec"),
        ({"network": "no"}, "network"),
    ],
)
def test_what_cannot_be_used_is_a_problem_naming_the_field(block: dict[str, Any], says: str) -> None:
    spec, problems = _load({"sandbox": block})
    assert spec is None
    assert len(problems) == 1 and problems[0].startswith("server 's': ") and says in problems[0], problems


@given(st.integers(min_value=16, max_value=1 << 20), st.sampled_from(["M", "MB", "MiB", "m"]))
def test_sizes_in_megabytes_read_back_as_bytes(count: int, unit: str) -> None:
    assert parse_memory(f"{count}{unit}") == count << 20


@given(st.text(max_size=20))
def test_any_memory_text_is_bytes_or_a_value_error(text: str) -> None:
    try:
        assert parse_memory(text) >= 16 << 20
    except ValueError as exc:
        assert "memory" in str(exc)


def test_a_remote_server_takes_no_sandbox_and_the_default_leaves_it_alone() -> None:
    remote = {"url": "https://example.com/mcp"}
    top = {"mcpServers": {"r": {**remote, "sandbox": True}, "q": remote}, "supervisor": {"sandbox": True}}
    config = parse_config(json.dumps(top).encode(), environ=ENV)
    assert [problem.message for problem in config.problems] == [
        "server 'r': sandbox applies to stdio servers; a remote server runs on another machine"
    ]
    assert config.servers["q"].sandbox is None


def test_describe_says_what_status_shows() -> None:
    assert describe(None) == "not sandboxed"
    assert describe(SandboxSpec()) == "sandboxed: no network; sees the system, its cwd; no limits"
    spec = SandboxSpec(network=True, read=("/a",), write=("/b", "/c"), memory=512 << 20, cpu=60, files=256)
    assert describe(spec) == (
        "sandboxed: host network; sees the system, its cwd, 1 read, 2 write; "
        "memory 512 MB, cpu 60 s, files 256"
    )
