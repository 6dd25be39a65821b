"""The HTTP listener's pure parts: the address setting, the Host check, the paths and their
protections (with a fake backend), and the live feed's bounds."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from supervisor.config.load import ConfigError, parse_config
from supervisor.ops.web.app import Action, App
from supervisor.ops.web.feed import Feed, Subscription
from supervisor.ops.web.http import Request, Response, Streaming
from supervisor.shared.address import HostCheck, ListenAddress, parse_address, split_host

# --- the address -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "host", "port"),
    [
        ("127.0.0.1:9464", "127.0.0.1", 9464),
        (":9464", "127.0.0.1", 9464),
        ("localhost:0", "localhost", 0),
        ("[::1]:80", "::1", 80),
        ("0.0.0.0:65535", "0.0.0.0", 65535),
        ("metrics.example.com:9464", "metrics.example.com", 9464),
    ],
)
def test_addresses_that_parse(value: str, host: str, port: int) -> None:
    assert parse_address(value) == ListenAddress(host, port)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("abc", "'abc' is not HOST:PORT (e.g. 127.0.0.1:9464)"),
        ("127.0.0.1:99999", "port 99999 is out of range"),
        ("127.0.0.1:", "is not HOST:PORT"),
        ("127.0.0.1:http", "is not HOST:PORT"),
        ("127.0.0.1:٣", "is not HOST:PORT"),
        ("::1:80", "an IPv6 address goes in brackets"),
        ("[nope]:80", "in brackets is not an IPv6 address"),
        ("bad host:80", "is not a host name or an IP address"),
        ("-x.example:80", "is not a host name or an IP address"),
        ("a\nb:80", "is not a host name or an IP address"),
    ],
)
def test_addresses_that_do_not_parse_say_why(value: str, says: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_address(value)
    assert says in str(info.value)


@given(st.text(max_size=40))
def test_any_text_is_an_address_or_a_value_error(value: str) -> None:
    try:
        address = parse_address(value)
    except ValueError:
        return
    assert 0 <= address.port <= 65535


@pytest.mark.parametrize(
    ("value", "says"),
    [("abc", "'abc' is not HOST:PORT"), ("127.0.0.1:99999", "port 99999 is out of range")],
)
def test_a_bad_metrics_setting_rejects_the_config_naming_the_field(value: str, says: str) -> None:
    text = json.dumps({"mcpServers": {}, "supervisor": {"metrics": value, "statusControls": True}})
    with pytest.raises(ConfigError) as info:
        parse_config(text.encode(), environ={})
    assert "\"supervisor\": field 'metrics': " in str(info.value)
    assert says in str(info.value)


def test_the_metrics_settings_load() -> None:
    text = json.dumps({"mcpServers": {}, "supervisor": {"metrics": "[::1]:9464", "statusControls": True}})
    settings = parse_config(text.encode(), environ={}).settings
    assert (settings.metrics, settings.status_controls) == ("[::1]:9464", True)


def test_the_url_brackets_ipv6_and_names_the_port_bound() -> None:
    assert ListenAddress("::1", 0).url(4321) == "http://[::1]:4321/"
    assert ListenAddress("127.0.0.1", 9464).url() == "http://127.0.0.1:9464/"


# --- the Host check ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "split"),
    [
        ("Example.COM:80", ("example.com", 80)),
        ("[::1]:9464", ("::1", 9464)),
        ("[::1]", ("::1", None)),
        ("host", ("host", None)),
        ("[::1", None),
        ("[::1]x", None),
        ("host:port", None),
        ("host:123456", None),
    ],
)
def test_split_host(header: str, split: tuple[str, int | None] | None) -> None:
    assert split_host(header) == split


def test_a_loopback_listener_is_named_by_loopback_names_and_its_port_only() -> None:
    check = HostCheck(ListenAddress("127.0.0.1", 0), 9464)
    for good in ("127.0.0.1:9464", "localhost:9464", "LOCALHOST:9464", "[::1]:9464"):
        assert check.allows(good), good
    for bad in ("127.0.0.1:80", "127.0.0.1", "evil.example:9464", "10.0.0.1:9464", "", "localhost:9464, x"):
        assert not check.allows(bad), bad


def test_a_listener_on_every_interface_takes_any_ip_address_but_no_other_name() -> None:
    check = HostCheck(ListenAddress("0.0.0.0", 9464), 9464)
    assert check.allows("192.168.1.7:9464") and check.allows("localhost:9464")
    assert not check.allows("rebind.evil.example:9464")


def test_a_named_listener_takes_its_name() -> None:
    check = HostCheck(ListenAddress("metrics.internal", 80), 80)
    assert check.allows("metrics.internal") and check.allows("metrics.internal:80")
    assert not check.allows("localhost:80")


# --- the paths ----------------------------------------------------------------------------------

HOST = "127.0.0.1:9464"
GOOD = {"host": HOST, "origin": f"http://{HOST}", "x-requested-by": "mcp-supervisor"}


class FakeBackend:
    def __init__(self, controls: bool = True) -> None:
        self.hosts = HostCheck(ListenAddress("127.0.0.1", 9464), 9464)
        self.on = controls
        self.done: list[tuple[Action, str]] = []
        self.feed = Feed(max_clients=1)
        self.not_ready: dict[str, Any] | None = None

    def status(self) -> bytes:
        return b'{"servers": []}'

    def metrics(self, accept: str) -> tuple[bytes, str]:
        return b"# metrics\n", "text/plain; version=0.0.4"

    def unready(self) -> dict[str, Any] | None:
        return self.not_ready

    def controls(self) -> bool:
        return self.on

    def operate(self, action: Action, server: str) -> str | None:
        if server != "time":
            return f"no server named {server!r} (servers: time)"
        self.done.append((action, server))
        return None

    def subscribe(self) -> Subscription | None:
        return self.feed.subscribe()


def _request(method: str, path: str, **headers: str) -> Request:
    return Request(method, path, {"host": HOST, **headers}, b"")


def _answer(app: App, request: Request) -> tuple[int, dict[str, object]]:
    reply = app.handle(request)
    assert isinstance(reply, Response)
    return reply.status, json.loads(reply.body) if reply.content_type == "application/json" else {}


def test_gets_answer_the_page_metrics_and_status() -> None:
    app = App(FakeBackend())
    page = app.handle(_request("GET", "/"))
    assert isinstance(page, Response) and page.status == 200 and b"<table" in page.body
    assert "frame-ancestors 'none'" in dict(page.headers)["content-security-policy"]
    metrics = app.handle(_request("GET", "/metrics"))
    assert isinstance(metrics, Response) and metrics.body == b"# metrics\n"
    assert _answer(app, _request("GET", "/api/status"))[0] == 200


def test_healthz_is_ok_while_anything_answers_and_readyz_says_what_is_not_ready() -> None:
    backend = FakeBackend()
    backend.not_ready = {"ready": False, "reason": "servers starting", "starting": ["slow", "other"]}
    app = App(backend)
    for method in ("GET", "HEAD"):
        health = app.handle(_request(method, "/healthz"))
        assert isinstance(health, Response) and (health.status, health.body) == (200, b"ok\n")
    ready = app.handle(_request("GET", "/readyz"))
    assert isinstance(ready, Response) and ready.status == 503 and ready.body.count(b"\n") == 1
    assert json.loads(ready.body) == backend.not_ready
    backend.not_ready = None
    ready = app.handle(_request("GET", "/readyz"))
    assert isinstance(ready, Response) and (ready.status, ready.body) == (200, b"ok\n")
    assert ready.content_type.startswith("text/plain")
    assert _answer(app, _request("POST", "/readyz"))[0] == 405
    assert _answer(app, _request("PUT", "/healthz"))[0] == 405


def test_kubernetes_probes_pass_the_host_check_of_a_listener_on_every_interface() -> None:
    """The kubelet sends ``Host: POD_IP:PORT``; a pod's DNS name passes only when in statusHosts."""
    plain = HostCheck(ListenAddress("0.0.0.0", 9100), 9100)
    assert plain.allows("10.244.1.7:9100") and plain.allows("[fd00::7]:9100")
    assert not plain.allows("10.244.1.7:9464")  # another port: not this listener
    assert not plain.allows("supervisor-0.supervisors.mcp.svc:9100")
    named = HostCheck(ListenAddress("0.0.0.0", 9100), 9100, ["supervisor-0.supervisors.mcp.svc"])
    assert named.allows("supervisor-0.supervisors.mcp.svc:9100") and named.allows("10.244.1.7:9100")


def test_the_page_makes_no_external_requests() -> None:
    page = App(FakeBackend()).handle(_request("GET", "/"))
    assert isinstance(page, Response)
    assert b"http://" not in page.body and b"https://" not in page.body and b"//cdn" not in page.body


def test_unknown_paths_are_404_and_other_methods_405() -> None:
    app = App(FakeBackend())
    assert _answer(app, _request("GET", "/nope")) == (404, {"error": "nothing at /nope"})
    assert _answer(app, _request("PUT", "/metrics"))[0] == 405
    assert _answer(app, _request("DELETE", "/nope"))[0] == 404
    assert _answer(app, _request("POST", "/metrics"))[0] == 405
    assert _answer(app, _request("GET", "/api/servers/time/stop"))[0] == 405
    assert _answer(app, _request("POST", "/api/servers/time/explode"))[0] == 404


def test_controls_off_refuse_every_post_naming_the_setting() -> None:
    backend = FakeBackend(controls=False)
    status, body = _answer(App(backend), _request("POST", "/api/servers/time/stop", **GOOD))
    assert status == 403 and "statusControls" in str(body["error"])
    assert backend.done == []


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({"origin": "http://evil.example"}, "cross-origin request refused"),
        ({"origin": "null"}, "cross-origin request refused"),
        ({"x-requested-by": "someone"}, "X-Requested-By: mcp-supervisor"),
    ],
)
def test_controls_refuse_requests_not_from_their_own_page(headers: dict[str, str], says: str) -> None:
    backend = FakeBackend()
    request = Request("POST", "/api/servers/time/stop", {**GOOD, **headers}, b"")
    status, body = _answer(App(backend), request)
    assert status == 403 and says in str(body["error"])
    assert backend.done == []


@pytest.mark.parametrize(
    "path", ["/", "/metrics", "/api/status", "/events", "/healthz", "/readyz", "/api/servers/time/stop"]
)
@pytest.mark.parametrize("host", ["evil.example:9464", "127.0.0.1:1", "", "[::1"])
def test_every_request_whose_host_does_not_name_the_listener_is_421(path: str, host: str) -> None:
    backend = FakeBackend()
    method = "POST" if path.startswith("/api/servers") else "GET"
    status, body = _answer(App(backend), Request(method, path, {**GOOD, "host": host}, b""))
    assert status == 421 and "does not name this listener" in str(body["error"])
    assert backend.done == []


def test_names_of_the_operators_own_are_allowed_as_hosts() -> None:
    check = HostCheck(ListenAddress("0.0.0.0", 9464), 9464, ["Metrics.Example.COM"])
    assert check.allows("metrics.example.com:9464") and not check.allows("evil.example:9464")


def test_a_control_without_origin_but_with_the_header_is_done() -> None:
    backend = FakeBackend()
    headers = {"host": HOST, "x-requested-by": "mcp-supervisor"}
    for action in ("restart", "stop", "start"):
        request = Request("POST", f"/api/servers/time/{action}", headers, b"")
        assert _answer(App(backend), request) == (200, {"ok": True, "server": "time", "action": action})
    assert backend.done == [("restart", "time"), ("stop", "time"), ("start", "time")]


def test_a_control_of_an_unknown_server_is_404_naming_it() -> None:
    status, body = _answer(App(FakeBackend()), Request("POST", "/api/servers/t%C3%AFme/stop", GOOD, b""))
    assert (status, body) == (404, {"error": "no server named 'tïme' (servers: time)"})


def test_a_server_name_that_is_not_utf8_is_400() -> None:
    status, body = _answer(App(FakeBackend()), Request("POST", "/api/servers/%ff%fe/stop", GOOD, b""))
    assert status == 400 and "UTF-8" in str(body["error"])


def test_events_stream_until_there_are_too_many_clients() -> None:
    app = App(FakeBackend())
    first = app.handle(_request("GET", "/events"))
    assert isinstance(first, Streaming) and first.content_type == "text/event-stream"
    assert _answer(app, _request("GET", "/events"))[0] == 503
    first.chunks.close()
    assert isinstance(app.handle(_request("GET", "/events")), Streaming)
    head = app.handle(_request("HEAD", "/events"))
    assert isinstance(head, Response) and head.status == 200


# --- the feed -----------------------------------------------------------------------------------


async def test_a_client_that_does_not_read_is_dropped_and_the_others_keep_their_events() -> None:
    feed = Feed(max_clients=2, queue=3)
    slow, quick = feed.subscribe(), feed.subscribe()
    assert slow is not None and quick is not None
    assert await quick.next() == b"retry: 2000\n\n"
    for i in range(5):
        feed.publish("state", b'{"n": %d}' % i)
        assert await quick.next() == b'event: state\ndata: {"n": %d}\n\n' % i
    assert slow.dropped and len(feed) == 1
    assert await slow.next() == b"retry: 2000\n\n"
    assert await slow.next() is None


async def test_a_client_waiting_for_events_ends_when_dropped(autojump_clock: trio.abc.Clock) -> None:
    feed = Feed(queue=1)
    client = feed.subscribe()
    assert client is not None
    await client.next()
    assert await client.next() == b": keep-alive\n\n"  # after KEEPALIVE seconds of nothing
    async with trio.open_nursery() as nursery:
        got: list[bytes | None] = []

        async def read() -> None:
            got.append(await client.next())

        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        client.close()
    assert got == [None] and len(feed) == 0


def test_the_config_loader_reads_the_address_without_loading_the_listener() -> None:
    heavy = "('h11', 'prometheus_client', 'trio', 'supervisor.ops.web.http')"
    script = (
        f"import sys; import supervisor.config.load; print(' '.join(m for m in {heavy} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert loaded.stdout.split() == []
