"""The gateway file's parsing, and what each principal is granted: pure logic, no processes."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.config.gateway import GatewayError, Limits, parse_gateway
from supervisor.facade.access import Access, Limiter
from supervisor.facade.admission import _calls
from supervisor.facade.cors import Cors
from supervisor.facade.principal import Principal
from supervisor.facade.views import View
from supervisor.protocol import ToolInfo


def gateway(data: Any, environ: dict[str, str] | None = None) -> Any:
    return parse_gateway(json.dumps(data).encode(), "gw.json", environ or {})


def tool(server: str, name: str) -> ToolInfo:
    return ToolInfo(name=f"mcp_{server}_{name}", server=server, original_name=name)


def test_a_file_without_clients_grants_everyone_the_facades_view() -> None:
    facade = View(servers=frozenset({"a", "b"}))
    access = Access(facade, gateway({}))
    grant = access.grant(Principal("token-1", "token"))
    assert grant is not None and grant.view is facade and grant.limiter is None and grant.identity is None
    assert grant.principal == "token-1"


def test_entries_match_in_order_by_token_subject_group_or_anyone() -> None:
    access = Access(
        View(),
        gateway(
            {
                "groupsClaim": "roles",
                "clients": [
                    {"name": "ci", "token": "${CI}", "servers": ["github"]},
                    {"name": "alice", "subject": "alice@example.com", "identity": "entry"},
                    {"name": "eng", "group": "engineering", "tools": ["mcp_fs_read_*"]},
                    {"name": "rest", "anyone": True, "servers": []},
                ],
            },
            {"CI": "secret-ci"},
        ),
    )
    ci = access.grant(Principal("ci", "token"))
    assert ci is not None and ci.entry == "ci" and ci.view.shows_server("github")
    assert not ci.view.shows_server("fs")
    alice = access.grant(Principal("alice@example.com", "jwt", {"roles": ["engineering"]}))
    assert alice is not None and alice.entry == "alice" and alice.identity == "alice"
    bob = access.grant(Principal("bob", "jwt", {"roles": "staff engineering"}))
    assert bob is not None and bob.entry == "eng" and bob.identity == "bob"
    assert bob.view.shows(tool("fs", "read_file")) and not bob.view.shows(tool("fs", "write_file"))
    # a token's name is no subject: a token named like a subject does not match the subject entry
    assert access.grant(Principal("alice@example.com", "token")).entry == "rest"  # type: ignore[union-attr]
    rest = access.grant(Principal("zed", "introspection", {"roles": 7}))
    assert rest is not None and rest.entry == "rest" and not rest.view.shows(tool("github", "x"))


def test_without_an_anyone_entry_an_unmatched_principal_has_no_grant() -> None:
    access = Access(View(), gateway({"clients": [{"name": "a", "subject": "a"}]}))
    assert access.grant(Principal("b", "jwt")) is None
    assert access.grant(Principal("a", "token")) is None


def test_a_clients_view_is_within_the_facades() -> None:
    facade = View(servers=frozenset({"a"}), tools=("mcp_a_*", "mcp_b_*"))
    access = Access(facade, gateway({"clients": [{"name": "x", "anyone": True, "servers": ["a", "b"]}]}))
    grant = access.grant(Principal("p", "token"))
    assert grant is not None
    assert grant.view.shows(tool("a", "t")) and not grant.view.shows(tool("b", "t"))
    assert grant.view.may_call("mcp_a_gone", None) and not grant.view.may_call("mcp_b_gone", None)


def test_session_identity_leaves_each_host_session_its_own() -> None:
    access = Access(View(), gateway({"clients": [{"name": "x", "anyone": True, "identity": "session"}]}))
    grant = access.grant(Principal("p", "token"))
    assert grant is not None and grant.identity is None


def test_grants_and_their_limiters_are_kept_per_principal() -> None:
    access = Access(
        View(), gateway({"clients": [{"name": "x", "anyone": True, "limits": {"concurrent": 1}}]})
    )
    one, again, other = (access.grant(Principal(n, "jwt")) for n in ("p", "p", "q"))
    assert one is again and one is not other
    assert one is not None and other is not None and one.limiter is not other.limiter


def test_calls_per_minute_is_a_sliding_window() -> None:
    now = [0.0]
    limiter = Limiter(Limits(calls_per_minute=3), clock=lambda: now[0])
    for at in (0.0, 10.0, 20.0):
        now[0] = at
        assert limiter.admit() is None
        limiter.release()
    now[0] = 30.0
    assert limiter.admit() == pytest.approx(30.0)  # the first call leaves the window at 60
    now[0] = 60.0
    assert limiter.admit() is None
    limiter.release()
    assert limiter.admit() == pytest.approx(10.0)
    assert "3 calls in the last minute" in limiter.why(10.0)


def test_concurrent_calls_are_counted_until_released() -> None:
    limiter = Limiter(Limits(concurrent=2))
    assert limiter.admit() is None and limiter.admit() is None
    assert limiter.admit() == 1.0 and "2 calls in flight" in limiter.why(1.0)
    limiter.release()
    assert limiter.admit() is None


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"clients": [{"name": ""}]}, "name must be 1 to 128 printable characters"),
        ({"clients": [{"name": "x", "token": "a", "subject": "b"}]}, "given: token, subject"),
        ({"clients": [{"name": "x", "anyone": True, "identity": "who"}]}, "identity 'who' is none of"),
        ({"clients": [{"name": "x", "anyone": True, "limits": {"concurrent": 0}}]}, "limits.concurrent"),
        ({"clients": [{"name": "x", "anyone": True, "tools": [""]}]}, "tools has an empty pattern"),
        ({"clients": [{"name": "x", "token": "a b"}]}, "token is empty or has spaces"),
        ({"clients": [{"name": "x", "token": "${NOPE}"}]}, "client 'x': token: "),
        (
            {"clients": [{"name": "x", "anyone": True}, {"name": "x", "anyone": True}]},
            "two clients are named 'x'",
        ),
        (
            {"clients": [{"name": "x", "token": "t"}, {"name": "y", "token": "t"}]},
            "the token of an entry before it",
        ),
        ({"cors": {"origins": ["https://a.example/path"]}}, "is not scheme://host[:port]"),
        ({"groupsClaim": ""}, "groupsClaim is empty"),
        ({"clients": {}}, "got `object` - at `$.clients`"),
        ({"unknown": 1}, "unknown"),
    ],
)
def test_what_is_wrong_with_a_gateway_file_is_said_naming_it(data: Any, said: str) -> None:
    with pytest.raises(GatewayError, match=r"^gw\.json: ") as raised:
        gateway(data)
    assert said in str(raised.value)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_parse_or_fail_with_a_gateway_error(data: bytes) -> None:
    try:
        parse_gateway(data, "gw.json", {})
    except GatewayError as exc:
        assert str(exc).startswith("gw.json: ")


def test_deep_nesting_and_invalid_utf8_are_gateway_errors() -> None:
    for data in (b"[" * 5000, b'{"clients": [{"name": "\xff"}]}'):
        with pytest.raises(GatewayError):
            parse_gateway(data, "gw.json", {})


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_body_gives_a_call_count(data: bytes) -> None:
    count, _ = _calls(data)
    assert count >= 0


def test_calls_counts_tools_call_requests() -> None:
    call = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {}}
    assert _calls(json.dumps(call).encode()) == (1, 4)
    assert _calls(json.dumps([call, {**call, "id": 5}, {"method": "tools/list"}]).encode()) == (2, 4)
    assert _calls(b'{"method": "tools/list", "id": 1}') == (0, None)
    assert _calls(None) == (1, None)  # a body too large to read counts as a call


async def test_cors_preflight_names_what_a_page_may_send() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    cors = Cors(["https://Console.example.com"])
    assert cors.allows(b"https://console.example.com") and not cors.allows(b"https://other.example")
    assert not Cors([]) and not cors.allows(None)
    origin = b"https://console.example.com"
    await cors.preflight(
        {b"origin": origin, b"access-control-request-headers": b"Authorization, Mcp-Name"}, send
    )
    head = dict(sent[0]["headers"])
    assert sent[0]["status"] == 204 and head[b"access-control-allow-origin"] == origin
    assert head[b"access-control-allow-headers"] == b"authorization, mcp-name"
    sent.clear()
    await cors.preflight({b"origin": origin, b"access-control-request-headers": b"x-evil"}, send)
    assert sent[0]["status"] == 403 and b"x-evil" in sent[1]["body"]
    sent.clear()
    await cors.sending(origin, send)({"type": "http.response.start", "status": 200, "headers": []})
    assert (b"vary", b"Origin") in sent[0]["headers"]
    await trio.lowlevel.checkpoint()
