"""Which supervisors a client federates (``--endpoint``, a federation file, the environment) and how
their registries merge: ``supervisor.shared.federation``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.protocol import ToolInfo
from supervisor.shared.federation import FederationError, Member, label, members, merge, parse_federation
from supervisor.shared.paths import default_endpoint

ENV = {"XDG_RUNTIME_DIR": "/run/user/1000"}


def test_without_anything_the_default_endpoint_alone() -> None:
    assert members(None, environ=ENV) == [Member(default_endpoint(ENV), "local")]


def test_repeated_endpoints_and_comma_lists_keep_their_order() -> None:
    found = members(["tcp://10.0.0.1:5555,tcp://10.0.0.2:5555", " tcp://b.example:7 "], environ=ENV)
    assert found == [
        Member("tcp://10.0.0.1:5555", "10.0.0.1"),
        Member("tcp://10.0.0.2:5555", "10.0.0.2"),
        Member("tcp://b.example:7", "b.example"),
    ]


def test_the_environment_is_a_comma_list_and_an_explicit_endpoint_wins() -> None:
    env = {**ENV, "MCP_SUPERVISOR_ENDPOINT": "tcp://a:1, tcp://b:2,"}
    assert [m.endpoint for m in members(None, environ=env)] == ["tcp://a:1", "tcp://b:2"]
    assert [m.endpoint for m in members(["tcp://c:3"], environ=env)] == ["tcp://c:3"]


def test_two_members_on_one_host_are_named_by_their_endpoints() -> None:
    found = members(["tcp://h:1", "tcp://h:2", "tcp://other:1"], environ=ENV)
    assert [m.name for m in found] == ["tcp://h:1", "tcp://h:2", "other"]


@pytest.mark.parametrize(
    ("endpoints", "says"),
    [
        (["tcp://a:1", "tcp://a:1"], "tcp://a:1 is named twice"),
        (["localhost:5555"], "'localhost:5555' is no endpoint"),
        ([","], "no supervisor named"),
    ],
)
def test_bad_endpoint_lists_are_refused_saying_why(endpoints: list[str], says: str) -> None:
    with pytest.raises(FederationError, match=says):
        members(endpoints, environ={**ENV, "MCP_SUPERVISOR_ENDPOINT": ""})


def test_a_federation_file_names_members_with_their_own_keys(tmp_path: Path) -> None:
    path = tmp_path / "federation.json"
    entries = ["tcp://10.0.0.1:5555", {"endpoint": "tcp://10.0.0.2:5555", "name": "gpu-1", "keys": "~/k"}]
    path.write_text(json.dumps({"supervisors": entries}))
    found = members(None, path, environ=ENV)
    assert found == [
        Member("tcp://10.0.0.1:5555", "10.0.0.1"),
        Member("tcp://10.0.0.2:5555", "gpu-1", str(Path("~/k").expanduser())),
    ]
    with pytest.raises(FederationError, match="not both"):
        members(["tcp://x:1"], path, environ=ENV)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (b"", "not a federation file"),
        (b'{"supervisors": [1]}', r"not a federation file: Expected `str \| object`"),
        (b'{"supervisors": [], "extra": 1}', "unknown field `extra`"),
        (b'{"supervisors": []}', "no supervisor named"),
        (b'{"supervisors": [{"name": "x"}]}', "missing required field `endpoint`"),
        (b"\xff\xfe", "not a federation file"),
        (b"[" * 1000 + b"]" * 1000, "not a federation file"),
    ],
)
def test_a_bad_federation_file_is_refused_naming_the_file(text: bytes, says: str) -> None:
    with pytest.raises(FederationError, match=says) as caught:
        parse_federation(text, "/etc/fed.json")
    assert "/etc/fed.json" in str(caught.value)


def test_a_missing_federation_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FederationError, match=r"cannot read the federation file .*nope\.json"):
        members(None, tmp_path / "nope.json", environ=ENV)


def test_labels() -> None:
    assert label("tcp://[::1]:5555") == "::1"
    assert label("ipc:///x/y.sock") == "local"
    assert label("tcp://supervisor-0.supervisors:5555") == "supervisor-0.supervisors"


def _tool(server: str, name: str) -> ToolInfo:
    return ToolInfo(name=f"mcp_{server}_{name}", server=server, original_name=name)


def test_a_server_two_members_list_is_the_first_members_and_the_clash_is_reported() -> None:
    first = [_tool("git", "log"), _tool("time", "now")]
    second = [_tool("git", "log"), _tool("git", "diff"), _tool("web", "fetch")]
    merged = merge([first, None, second])
    assert [t.name for t in merged.entries] == ["mcp_git_log", "mcp_time_now", "mcp_web_fetch"]
    assert merged.owners == {"git": 0, "time": 0, "web": 2}
    assert merged.clashes == [("git", 0, 2)]


servers = st.sampled_from(["a", "b", "c", "d"])
listings = st.lists(
    st.none() | st.lists(st.builds(_tool, servers, st.sampled_from(["x", "y"])), max_size=6), max_size=5
)


@given(listings)
def test_merging_keeps_each_server_from_exactly_one_member(
    given_listings: list[list[ToolInfo] | None],
) -> None:
    merged = merge(given_listings)
    for entry in merged.entries:  # every kept entry is its owner's ...
        owner = merged.owners[entry.server]
        assert entry in (given_listings[owner] or [])
    for index, listing in enumerate(given_listings):  # ... the owner is the first to list it ...
        for entry in listing or ():
            assert merged.owners[entry.server] <= index
            if merged.owners[entry.server] == index:
                assert entry in merged.entries
            else:  # ... and every other is a reported clash
                assert (entry.server, merged.owners[entry.server], index) in merged.clashes
