"""The console in a real headless Chromium against a real supervisor, workers and test servers: the
hour's sparklines after some calls, the timeline following a killed worker with its reason, a
server's tools and log lines on a click, the audit view of two principals' calls newest first and
filtered as ``/api/audit`` filters them, the identities, "no audit trail" with ``"audit": false``,
the layout at 1280 and at 800 px wide; and each JSON path's answers, 404s, 400s and Host checks.
The docs' screenshots are taken by ``tests/e2e/test_console_tour.py``."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
import trio

from supervisor.client import AsyncSupervisorClient
from supervisor.client.errors import SupervisorError, ToolExecutionError
from tests.e2e.browser import (
    CHROMEDRIVER,
    NARROW,
    chromium,
    needs_chromium,
    open_page,
    scrolls_sideways,
    wait_for,
)
from tests.e2e.harness import SupervisorProcess, poll, stdio_test_server
from tests.e2e.web import listening, request, request_json

pytestmark = pytest.mark.e2e

if CHROMEDRIVER.exists():
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

Start = Callable[..., SupervisorProcess]
METRICS = {"metrics": "127.0.0.1:0"}
HELLO = "console test server says hello"  # a line the servers write to stderr at start
ALICE = "alice@example.com"
BOB = "bob@example.com"


def servers() -> dict[str, Any]:
    return {
        "alpha": stdio_test_server(TEST_SERVER_STARTUP_STDERR=HELLO),
        "beta": {**stdio_test_server(), "sandbox": {"memory": "256M"}},
    }


@pytest.fixture(scope="module")
def console(start_module_supervisor: Start) -> tuple[SupervisorProcess, int]:
    """A supervisor with the listener on, for the tests that read its JSON paths."""
    sup = start_module_supervisor(servers(), settings=METRICS)
    return sup, listening(sup)


def calls(sup: SupervisorProcess, server: str, ok: int, failed: int) -> None:
    for n in range(ok):
        assert sup.client.call_tool(f"mcp_{server}_echo", {"text": f"call {n}"}).text == f"call {n}"
    for n in range(failed):
        with pytest.raises(ToolExecutionError):
            sup.client.call_tool(f"mcp_{server}_fail", {"message": f"no {n}"})


def svg_titles(driver: WebDriver, server: str, kind: str) -> list[str]:
    script = """
        const row = `tr[data-server="${arguments[0]}"]`;
        const svg = document.querySelector(`${row} svg[data-kind="${arguments[1]}"]`);
        return svg ? [...svg.querySelectorAll("rect.hit title")].map((t) => t.textContent) : [];
    """
    return list(driver.execute_script(script, server, kind))


def count(driver: WebDriver, selector: str) -> int:
    return len(driver.find_elements(By.CSS_SELECTOR, selector))


# --- the page, in Chromium ----------------------------------------------------------------------


@needs_chromium
def test_the_sparklines_show_the_calls_of_the_last_hour_with_their_values(start_supervisor: Start) -> None:
    sup = start_supervisor(servers(), settings=METRICS)
    port = listening(sup)
    calls(sup, "alpha", ok=6, failed=2)
    with chromium() as driver:
        open_page(driver, port, ["alpha", "beta"])

        def alpha_counted(d: WebDriver) -> bool:
            titles = svg_titles(d, "alpha", "calls")
            return len(titles) == 60 and sum(int(t.split(": ")[1].split(" call")[0]) for t in titles) == 8

        wait_for(driver, "alpha's 8 calls in its sparkline", alpha_counted)
        for kind in ("calls", "latency", "errors"):
            assert count(driver, f'tr[data-server="alpha"] svg[data-kind="{kind}"] rect.hit title') == 60
        assert count(driver, 'tr[data-server="alpha"] svg[data-kind="calls"] path.calls') == 1
        assert count(driver, 'tr[data-server="alpha"] svg[data-kind="latency"] path') == 2  # p50, p99
        assert count(driver, 'tr[data-server="alpha"] svg[data-kind="errors"] rect.errors') >= 1
        errors = [t for t in svg_titles(driver, "alpha", "errors") if "2 errors" in t]
        assert len(errors) == 1 and errors[0].endswith("2 errors of 8 calls"), errors
        latency = [t for t in svg_titles(driver, "alpha", "latency") if "p50" in t]
        assert len(latency) == 1 and " ms" in latency[0], latency
        assert count(driver, 'tr[data-server="beta"] svg[data-kind="errors"] rect.errors') == 0
        assert all(t.endswith(": 0 calls, 0.00/s") for t in svg_titles(driver, "beta", "calls"))
        wait_for(driver, "the errors total", lambda d: d.find_element(By.ID, "total-errors").text == "2")
        chips = {c.text for c in driver.find_elements(By.CSS_SELECTOR, "#by-state .chip")}
        assert chips == {"2 ready"}
        light = driver.execute_script("return getComputedStyle(document.body).backgroundColor;")
        dark = [{"name": "prefers-color-scheme", "value": "dark"}]
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": dark})
        wait_for(
            driver,
            "the dark colours",
            lambda d: d.execute_script("return getComputedStyle(document.body).backgroundColor;") != light,
        )


@needs_chromium
def test_the_timeline_shows_a_killed_worker_with_its_reason_live(start_supervisor: Start) -> None:
    sup = start_supervisor(servers(), settings=METRICS)
    port = listening(sup)
    calls(sup, "beta", ok=3, failed=1)
    with chromium() as driver:
        open_page(driver, port, ["alpha", "beta"])
        assert count(driver, '#timeline li[data-kind="ready"]') == 2  # both servers' first start
        worker = sup.status()["alpha"].worker_pid
        assert worker is not None
        os.kill(worker, signal.SIGKILL)
        crash = '#timeline li[data-kind="crash"]'
        wait_for(driver, "alpha's crash", lambda d: count(d, crash) == 1)
        sup.wait_states(alpha="ready", beta="ready")
        reason = sup.status()["alpha"].last_error
        assert reason and "SIGKILL" in reason, reason
        item = driver.find_element(By.CSS_SELECTOR, crash)
        assert item.find_element(By.CSS_SELECTOR, ".who").text == "alpha"
        assert item.find_element(By.CSS_SELECTOR, ".detail").text == reason
        wait_for(driver, "alpha ready again", lambda d: count(d, '#timeline li[data-kind="ready"]') == 3)
        newest = driver.find_element(By.CSS_SELECTOR, "#timeline li").find_element(By.CSS_SELECTOR, ".detail")
        assert newest.text == "after 1 restart"
        assert count(driver, '#timeline-axis circle[data-kind="crash"]') == 1
        assert driver.execute_script("return window.notReloaded === true;")  # all of it from the feed
        status, timeline = request_json(port, "GET", "/api/timeline")
        assert status == 200
        crashes = [e for e in timeline["events"] if e["kind"] == "crash"]
        assert [(e["server"], e["detail"]) for e in crashes] == [("alpha", reason)]


@needs_chromium
def test_clicking_a_server_shows_its_tools_and_its_log_lines(start_supervisor: Start) -> None:
    sup = start_supervisor(servers(), settings=METRICS)
    port = listening(sup)
    with chromium() as driver:
        open_page(driver, port, ["alpha", "beta"])
        assert not driver.find_element(By.ID, "detail").is_displayed()
        driver.find_element(By.CSS_SELECTOR, 'tr[data-server="alpha"] td.server').click()
        echo = '#detail-tools tr[data-tool="mcp_alpha_echo"]'
        wait_for(driver, "alpha's tools", lambda d: count(d, echo) == 1)
        assert driver.find_element(By.ID, "detail-title").text == "alpha"
        assert count(driver, "#detail-tools tbody tr") == sup.status()["alpha"].tools
        row = driver.find_element(By.CSS_SELECTOR, echo)
        assert row.find_element(By.CSS_SELECTOR, "td.params").text == "text: string *"
        add = driver.find_element(By.CSS_SELECTOR, '#detail-tools tr[data-tool="mcp_alpha_add"] td.params')
        assert add.text.split("\n") == ["a: number *", "b: number *"]
        wait_for(driver, "alpha's log", lambda d: HELLO in d.find_element(By.ID, "detail-logs").text)
        sup.client.call_tool("mcp_alpha_stderr", {"lines": 2, "text": "written after the click"})
        wait_for(  # the open panel follows the log
            driver,
            "the new lines",
            lambda d: d.find_element(By.ID, "detail-logs").text.count("written after the click") == 2,
        )
        driver.find_element(By.ID, "detail-close").click()
        wait_for(driver, "the panel closed", lambda d: not d.find_element(By.ID, "detail").is_displayed())
        driver.find_element(By.CSS_SELECTOR, 'tr[data-server="beta"]').click()
        beta = '#detail-tools tr[data-tool="mcp_beta_echo"]'
        wait_for(driver, "beta's tools", lambda d: count(d, beta) == 1)
        assert HELLO not in driver.find_element(By.ID, "detail-logs").text
        assert "256 MB" in driver.find_element(By.ID, "detail-status").text


async def principal_calls(endpoint: str) -> None:
    """Five calls over one connection by two principals (``as_client``), the fourth failing, in order."""
    async with AsyncSupervisorClient(endpoint, request_timeout=30) as client:
        alice = client.as_client("agent-a", principal=ALICE, session="host-1")
        bob = client.as_client("agent-b", principal=BOB, session="host-2")
        assert (await alice.call_tool("mcp_alpha_echo", {"text": "a1"})).text == "a1"
        assert (await bob.call_tool("mcp_beta_echo", {"text": "b1"})).text == "b1"
        assert (await alice.call_tool("mcp_beta_add", {"a": 1, "b": 2})).text == "3"
        with pytest.raises(ToolExecutionError):
            await bob.call_tool("mcp_alpha_fail", {"message": "refused"})
        assert (await alice.call_tool("mcp_alpha_echo", {"text": "a2"})).text == "a2"


def audit_api(port: int, **query: str) -> list[dict[str, Any]]:
    """``/api/audit`` with the query the page sends (its default age, an hour, and 200 records)."""
    status, body = request_json(
        port, "GET", "/api/audit?" + urlencode({**query, "since": 3600, "limit": 200})
    )
    assert status == 200, body
    records: list[dict[str, Any]] = body["records"]
    return records


def audit_rows(driver: WebDriver) -> list[tuple[str, str, str, str, float]]:
    """The audit table's rows, top to bottom: identity, kind, tool, outcome, ms (exact, from its title)."""
    script = """
        return [...document.querySelectorAll("#audit tbody tr")].map((tr) =>
            ["identity", "kind", "tool", "outcome"].map((c) => tr.querySelector("td." + c).textContent)
                .concat([tr.querySelector("td.ms").title]));
    """
    return [(i, k, t, o, float(ms.removesuffix(" ms"))) for i, k, t, o, ms in driver.execute_script(script)]


def as_rows(records: list[dict[str, Any]]) -> list[tuple[str, str, str, str, float]]:
    return [(r["identity"], r["kind"], r["tool"], r["outcome"], r["ms"]) for r in records]


def filter_audit(driver: WebDriver, identity: str, tool: str) -> None:
    for field, value in (("audit-identity", identity), ("audit-tool", tool)):
        box = driver.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    driver.find_element(By.CSS_SELECTOR, "#audit-form button").click()


@needs_chromium
def test_the_audit_view_lists_each_principals_calls_newest_first_and_filters_them_as_the_api_does(
    start_supervisor: Start,
) -> None:
    sup = start_supervisor(servers(), settings=METRICS)
    port = listening(sup)
    trio.run(principal_calls, sup.endpoint)
    expected = [
        (ALICE, "call", "mcp_alpha_echo", "ok"),
        (BOB, "call", "mcp_alpha_fail", "tool_error"),
        (ALICE, "call", "mcp_beta_add", "ok"),
        (BOB, "call", "mcp_beta_echo", "ok"),
        (ALICE, "call", "mcp_alpha_echo", "ok"),
    ]
    records = poll("the five calls in /api/audit", lambda: len(r := audit_api(port)) == 5 and r, 30)
    assert [row[:4] for row in as_rows(records)] == expected  # newest first
    times = [record["time"] for record in records]
    assert times == sorted(times, reverse=True) and all(record["ms"] > 0 for record in records)
    with chromium() as driver:
        open_page(driver, port, ["alpha", "beta"])
        wait_for(driver, "the five records", lambda d: count(d, "#audit tbody tr") == 5)
        assert audit_rows(driver) == as_rows(records)
        for query, shown in [
            ({"identity": BOB}, 2),
            ({"tool": "mcp_alpha_*"}, 3),
            ({"identity": ALICE, "tool": "*_echo"}, 2),
            ({"identity": "carol@example.com"}, 0),
            ({}, 5),
        ]:
            filtered = audit_api(port, **query)
            assert len(filtered) == shown, (query, filtered)
            filter_audit(driver, query.get("identity", ""), query.get("tool", ""))
            wait_for(driver, f"the records of {query}", lambda d, f=filtered: audit_rows(d) == as_rows(f))
            says = driver.find_element(By.ID, "audit-state").text
            assert says.startswith(f"{shown} record{'' if shown == 1 else 's'} shown · "), says
        status, identities = request_json(port, "GET", "/api/identities")
        assert status == 200
        assert [(i["identity"], i["calls"], i["errors"], i["active"]) for i in identities["identities"]] == [
            (ALICE, 3, 0, True),  # seen last first
            (BOB, 2, 1, True),
        ]
        wait_for(driver, "both identities", lambda d: count(d, "#identities tbody tr") == 2)
        shown_identities = driver.execute_script("""
            return [...document.querySelectorAll("#identities tbody tr")].map((tr) =>
                [tr.dataset.identity, tr.querySelector("td.identity").className,
                 tr.querySelector("td.sessions").title,
                 ...[...tr.querySelectorAll("td.num")].map((td) => td.textContent)]);
        """)
        assert shown_identities == [  # sessions: how many, named in the title; calls; errors
            [ALICE, "identity active", "host-1", "1", "3", "0"],
            [BOB, "identity active", "host-2", "1", "2", "1"],
        ]
        assert driver.find_element(By.ID, "identities-state").text == "2 identities, 2 active"


@needs_chromium
def test_without_an_audit_trail_the_views_and_paths_say_so(start_supervisor: Start) -> None:
    sup = start_supervisor(servers(), settings={**METRICS, "audit": False})
    port = listening(sup)
    calls(sup, "alpha", ok=2, failed=1)
    for path in ("/api/audit?since=3600&identity=me&tool=mcp_*&limit=5", "/api/identities"):
        assert request_json(port, "GET", path) == (404, {"error": "no audit trail"}), path
    with chromium() as driver:
        open_page(driver, port, ["alpha", "beta"])
        for view in ("audit-state", "identities-state"):
            wait_for(
                driver,
                f"{view} saying so",
                lambda d, v=view: d.find_element(By.ID, v).text == "no audit trail",
            )
        assert not driver.find_element(By.ID, "audit").is_displayed()
        assert not driver.find_element(By.ID, "identities").is_displayed()


@needs_chromium
def test_the_page_fits_800_pixels_and_its_panel_covers_it(start_supervisor: Start) -> None:
    sup = start_supervisor(servers(), settings=METRICS)
    port = listening(sup)
    calls(sup, "alpha", ok=2, failed=0)
    with chromium(NARROW) as driver:
        open_page(driver, port, ["alpha", "beta"])
        wait_for(driver, "the sparklines", lambda d: len(svg_titles(d, "alpha", "calls")) == 60)
        width = driver.execute_script("return document.documentElement.clientWidth;")
        assert driver.execute_script("return document.documentElement.scrollWidth;") <= width
        table = driver.find_element(By.ID, "server-table")
        assert table.rect["x"] + table.rect["width"] <= width  # every column on the screen
        assert not scrolls_sideways(driver, "#servers-section .scroll")
        timeline, audit = (driver.find_element(By.ID, name) for name in ("timeline-section", "audit-section"))
        assert audit.rect["y"] >= timeline.rect["y"] + timeline.rect["height"]  # one column
        driver.find_element(By.CSS_SELECTOR, 'tr[data-server="alpha"]').click()
        wait_for(driver, "alpha's tools", lambda d: count(d, "#detail-tools tbody tr") > 0)
        panel = driver.find_element(By.ID, "detail")
        assert panel.rect["x"] == 0 and panel.rect["width"] == width


# --- the JSON paths ------------------------------------------------------------------------------


def test_history_counts_each_call_in_the_current_bucket(console: tuple[SupervisorProcess, int]) -> None:
    sup, port = console
    status, before = request_json(port, "GET", "/api/history")
    assert status == 200 and before["bucket"] == 60 and set(before["servers"]) == {"alpha", "beta"}
    calls(sup, "alpha", ok=5, failed=2)
    status, after = request_json(port, "GET", "/api/history")
    assert status == 200
    assert 0 <= after["end"] - time.time() <= 60 and after["end"] % 60 == 0
    for name, series in after["servers"].items():
        assert {len(series[key]) for key in ("calls", "errors", "p50", "p99")} == {60}, name
    alpha, earlier = after["servers"]["alpha"], before["servers"]["alpha"]
    assert sum(alpha["calls"]) - sum(earlier["calls"]) == 7
    assert sum(alpha["errors"]) - sum(earlier["errors"]) == 2
    assert alpha["calls"][-1] >= 7 or after["end"] != before["end"]  # the minute may have turned
    for calls_in, p50, p99 in zip(alpha["calls"], alpha["p50"], alpha["p99"], strict=True):
        assert (p50 is None) == (p99 is None) == (calls_in == 0)
        assert p50 is None or 0 < p50 <= p99


def test_a_server_detail_has_its_row_tools_and_log(console: tuple[SupervisorProcess, int]) -> None:
    sup, port = console
    status, detail = request_json(port, "GET", "/api/servers/alpha")
    assert status == 200 and detail["server"] == "alpha"
    assert (
        detail["status"]["state"] == "ready"
        and detail["status"]["worker_pid"] == sup.status()["alpha"].worker_pid
    )
    tools = {tool["name"]: tool for tool in detail["tools"]}
    assert len(tools) == sup.status()["alpha"].tools
    assert tools["mcp_alpha_echo"]["params"] == [
        {"name": "text", "type": "string", "required": True, "description": ""}
    ]
    assert tools["mcp_alpha_echo"]["input_schema"]["type"] == "object"
    cli = sup.client.logs("alpha")  # what `mcp-supervisor logs alpha` shows
    assert [line["text"] for line in detail["logs"]][-len(cli.lines) :] == [line.text for line in cli.lines]
    assert any(HELLO in line["text"] for line in detail["logs"])


def test_an_unknown_server_is_404_naming_it(console: tuple[SupervisorProcess, int]) -> None:
    _, port = console
    status, body = request_json(port, "GET", "/api/servers/gam%C3%A9ma")
    assert (status, body) == (404, {"error": "no server named 'gaméma' (servers: alpha, beta)"})
    assert request_json(port, "GET", "/api/servers/%ff")[0] == 400
    assert request_json(port, "POST", "/api/servers/alpha")[0] == 405


def test_the_audit_paths_answer_400_naming_a_bad_query(console: tuple[SupervisorProcess, int]) -> None:
    _, port = console
    for query, says in [
        ("since=-1", "since must be a number of seconds of 0 or more"),
        ("limit=0", "limit must be from 1 to 1000"),
        ("limit=ten", "limit must be a whole number"),
        ("who=me", "unknown parameter 'who'"),
        ("tool=a&tool=b", "'tool' is given twice"),
    ]:
        status, body = request_json(port, "GET", "/api/audit?" + query)
        assert status == 400 and says in body["error"], (query, body)
    status, audit = request_json(port, "GET", "/api/audit?since=3600&identity=me&tool=mcp_*&limit=5")
    assert status == 200 and audit["records"] == [] and audit["failures"] == audit["dropped"] == 0
    assert audit["path"].endswith(".jsonl")
    status, identities = request_json(port, "GET", "/api/identities")
    assert status == 200 and isinstance(identities["identities"], list)


@pytest.mark.parametrize(
    "path",
    [
        "/page.css",
        "/page.js",
        "/views.js",
        "/api/history",
        "/api/timeline",
        "/api/servers/alpha",
        "/api/audit",
        "/api/identities",
    ],
)
def test_the_new_paths_refuse_a_host_that_does_not_name_the_listener(
    console: tuple[SupervisorProcess, int], path: str
) -> None:
    _, port = console
    status, _, body = request(port, "GET", path, {"Host": f"evil.example:{port}"})
    assert status == 421 and b"does not name this listener" in body
    status, headers, _ = request(port, "GET", path, {"Host": f"localhost:{port}"})
    assert status == 200, (path, status)
    assert "access-control-allow-origin" not in headers


def test_the_timeline_has_each_servers_first_start(console: tuple[SupervisorProcess, int]) -> None:
    sup, port = console

    def started() -> list[dict[str, Any]] | None:
        status, body = request_json(port, "GET", "/api/timeline")
        assert status == 200
        events: list[dict[str, Any]] = body["events"]
        ready = {event["server"] for event in events if event["kind"] == "ready"}
        return events if ready >= {"alpha", "beta"} else None

    events = poll("both first starts on the timeline", started, 10)
    times = [event["time"] for event in events]
    assert times == sorted(times, reverse=True)  # newest first
    assert all(set(event) == {"time", "server", "kind", "detail"} for event in events)
    assert abs(times[0] - time.time()) < 600
    assert sup.process.poll() is None


def test_a_reload_and_a_rejected_one_are_on_the_timeline(console: tuple[SupervisorProcess, int]) -> None:
    sup, port = console
    summary = sup.client.reload()  # the same file: applied, nothing changed
    assert summary.changed == [] and summary.removed == []
    text = sup.config.read_text()
    sup.config.write_text("{ not json")
    try:
        with pytest.raises(SupervisorError):
            sup.client.reload()
    finally:
        sup.config.write_text(text)
    status, body = request_json(port, "GET", "/api/timeline")
    reloads = [event for event in body["events"] if event["kind"] == "reload"]
    assert status == 200 and [event["server"] for event in reloads] == ["", ""]
    assert reloads[0]["detail"].startswith("rejected: ") and reloads[1]["detail"] == "applied"
    sup.wait_states(alpha="ready", beta="ready")
