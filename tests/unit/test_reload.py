"""Behaviour of supervisor.daemon.reload_plan: what a reload adds, removes, restarts and leaves alone."""

import json
from typing import Any

from supervisor.config.load import Config, parse_config
from supervisor.daemon.reload_plan import plan_reload
from supervisor.protocol import Reloaded, ReloadSummary, decode_front_reply, encode


def parse(servers: dict[str, Any], supervisor: dict[str, Any] | None = None, **environ: str) -> Config:
    top: dict[str, Any] = {"mcpServers": servers}
    if supervisor is not None:
        top["supervisor"] = supervisor
    return parse_config(json.dumps(top).encode(), environ=environ)


BASE = {
    "keep": {"command": "keep-server", "args": ["--a"]},
    "gone": {"command": "gone-server"},
    "edit": {"command": "edit-server", "env": {"MODE": "old"}},
}


def test_identical_configs_change_nothing() -> None:
    plan = plan_reload(parse(BASE), parse(BASE))
    assert (plan.added, plan.removed, plan.changed) == ([], [], [])
    assert plan.unchanged == ["keep", "gone", "edit"]
    assert plan.settings == [] and plan.problems == []


def test_added_removed_changed_and_unchanged_servers_in_file_order() -> None:
    new = {
        "fresh": {"command": "fresh-server"},
        "edit": {"command": "edit-server", "env": {"MODE": "new"}},
        "keep": {"command": "keep-server", "args": ["--a"]},
    }
    plan = plan_reload(parse(BASE), parse(new))
    assert plan.added == ["fresh"]
    assert plan.removed == ["gone"]
    assert plan.changed == ["edit"]
    assert plan.unchanged == ["keep"]


def test_any_field_of_the_spec_is_a_change() -> None:
    edits: list[dict[str, Any]] = [
        {"args": ["--b"]},
        {"env": {"X": "1"}},
        {"cwd": "/tmp"},
        {"toolTimeout": 5},
        {"disabled": True},
        {"restart": "transient"},
        {"startTimeout": 9},
        {"roots": ["/srv"]},
        {"elicitation": "defaults"},
        {"sampling": {"command": "llm"}},
    ]
    for edit in edits:
        plan = plan_reload(parse(BASE), parse({**BASE, "keep": {**BASE["keep"], **edit}}))
        assert plan.changed == ["keep"], edit
        assert plan.unchanged == ["gone", "edit"], edit


def test_an_expanded_variable_that_changed_is_a_change() -> None:
    servers = {"s": {"command": "server", "env": {"TOKEN": "${TOKEN}"}}}
    assert plan_reload(parse(servers, TOKEN="a"), parse(servers, TOKEN="a")).unchanged == ["s"]
    assert plan_reload(parse(servers, TOKEN="a"), parse(servers, TOKEN="b")).changed == ["s"]


def test_changed_policy_defaults_change_the_servers_that_inherit_them() -> None:
    servers = {"inherits": {"command": "a"}, "own": {"command": "b", "maxRestarts": 3}}
    plan = plan_reload(parse(servers), parse(servers, {"maxRestarts": 9}))
    assert plan.changed == ["inherits"]
    assert plan.unchanged == ["own"]
    assert plan.settings == ["maxRestarts"]


def test_supervisor_wide_settings_are_reported_by_their_file_names() -> None:
    plan = plan_reload(parse(BASE), parse(BASE, {"shutdownGrace": 1, "heartbeatTimeout": 9}))
    assert plan.settings == ["shutdownGrace", "heartbeatTimeout"]
    assert plan.unchanged == ["keep", "gone", "edit"]


def test_every_problem_of_the_new_file_is_listed() -> None:
    new = {**BASE, "typo": {"comand": "x"}, "empty": {}, "var": {"command": "${UNSET}"}}
    plan = plan_reload(parse(BASE), parse(new))
    assert len(plan.problems) == 3
    assert "server 'typo': unknown field 'comand'" in plan.problems[0]
    assert "server 'empty'" in plan.problems[1]
    assert "variable UNSET" in plan.problems[2]


def test_the_summary_travels_in_a_reply() -> None:
    plan = plan_reload(parse(BASE), parse({"fresh": {"command": "f"}}))
    summary = plan.summary("/etc/mcp.json")
    assert summary == ReloadSummary(config="/etc/mcp.json", added=["fresh"], removed=["keep", "gone", "edit"])
    assert decode_front_reply(encode(Reloaded(id=7, summary=summary))) == Reloaded(id=7, summary=summary)
