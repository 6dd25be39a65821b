"""A tour of the console, for its screenshots: a real supervisor with one-second chart buckets
(``statusBucket: 1``), three test servers and some 50 seconds of traffic from two principals that
varies (a ramp, a pause, a burst, failing calls, slow calls whose p99 climbs), a worker killed and a
reload; then the overview, the timeline, a server's detail, the audit view filtered by one identity,
the identities, dark colours and 800 pixels, each checked for what it should show and saved
(to ``$MCPS_SCREENSHOTS`` when set: ``MCPS_SCREENSHOTS=docs/images`` makes the docs' set).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import trio

from supervisor.client import AsyncSupervisorClient
from supervisor.client.errors import ToolExecutionError
from tests.e2e.browser import (
    CHROMEDRIVER,
    NARROW,
    chromium,
    needs_chromium,
    open_page,
    screenshot,
    scrolls_sideways,
    wait_for,
)
from tests.e2e.harness import START_TIMEOUT, SupervisorProcess, poll, stdio_test_server
from tests.e2e.web import listening, request_json

pytestmark = pytest.mark.e2e

if CHROMEDRIVER.exists():
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

Start = Callable[..., SupervisorProcess]
SERVERS = ["files", "search", "tickets"]
ALICE = "alice@example.com"
BOB = "bob@example.com"
STARTED = "files server: watching /srv/docs"  # the line files writes to stderr at start
INDEXED = "indexed {n} documents"  # the lines files writes on its stderr tool
TRAFFIC_TIMEOUT = 120.0  # seconds for the whole traffic (about 50 when nothing is slow)
CALL_TIMEOUT = 30.0  # seconds for one call
MINUS = "\N{MINUS SIGN}"  # before each tick of the timeline's axis but "now"


def tour_servers() -> dict[str, Any]:
    return {
        "files": stdio_test_server(TEST_SERVER_STARTUP_STDERR=STARTED),
        "search": {**stdio_test_server(), "sandbox": {"memory": "256M"}},
        "tickets": stdio_test_server(),
    }


class Traffic:
    """Calls paced second by second: ``second(plan)`` spreads the plan's calls over the next second,
    then waits for its end (a second that runs late is followed at once); ``meanwhile(fn, sup)`` runs
    a blocking step, and the seconds go on from its end (no catching up in a rush)."""

    def __init__(self, client: AsyncSupervisorClient) -> None:
        self.alice = client.as_client("agent-a", principal=ALICE, session="laptop-1")
        self.bob = client.as_client("agent-b", principal=BOB, session="ci-7")
        self.next = trio.current_time()  # when the next second starts
        self.failed = 0  # calls that ended in a tool error, as planned

    async def second(self, plan: list[Callable[[], Awaitable[None]]]) -> None:
        async with trio.open_nursery() as nursery:
            for index, call in enumerate(plan):
                nursery.start_soon(self._at, self.next + index / max(1, len(plan)), call)
        self.next += 1
        await trio.sleep_until(self.next)

    async def meanwhile(self, step: Callable[[SupervisorProcess], None], sup: SupervisorProcess) -> None:
        await trio.to_thread.run_sync(step, sup)
        self.next = max(self.next, trio.current_time())

    async def _at(self, when: float, call: Callable[[], Awaitable[None]]) -> None:
        await trio.sleep_until(when)
        with trio.fail_after(CALL_TIMEOUT):
            await call()

    def files(self, n: int) -> list[Callable[[], Awaitable[None]]]:
        async def echo() -> None:
            assert (await self.alice.call_tool("mcp_files_echo", {"text": "read"})).text == "read"

        return [echo] * n

    def search(self, n: int, failing: int = 0) -> list[Callable[[], Awaitable[None]]]:
        async def add() -> None:
            assert (await self.bob.call_tool("mcp_search_add", {"a": 2, "b": 3})).text == "5"

        async def fail() -> None:
            with pytest.raises(ToolExecutionError):
                await self.bob.call_tool("mcp_search_fail", {"message": "index not ready"})
            self.failed += 1

        return [add] * n + [fail] * failing

    def tickets(self, n: int, seconds: float) -> list[Callable[[], Awaitable[None]]]:
        async def slow() -> None:
            arguments = {"seconds": seconds, "tag": "t"}
            assert (await self.alice.call_tool("mcp_tickets_slow", arguments)).text == "done t"

        return [slow] * n

    def log(self, n: int) -> list[Callable[[], Awaitable[None]]]:
        async def stderr() -> None:
            arguments = {"lines": 1, "text": INDEXED.format(n=n)}
            assert (await self.bob.call_tool("mcp_files_stderr", arguments)).text == "ok"

        return [stderr]


def reload_changing_search(sup: SupervisorProcess) -> None:
    """A reload whose config gives search a new tool timeout: search is restarted with it."""
    config = json.loads(sup.config.read_text())
    config["mcpServers"]["search"]["toolTimeout"] = 20
    sup.config.write_text(json.dumps(config))
    assert sup.client.reload().changed == ["search"]
    sup.wait_states(search="ready")


def kill_tickets(sup: SupervisorProcess) -> None:
    worker = sup.status()["tickets"].worker_pid
    assert worker is not None
    os.kill(worker, signal.SIGKILL)
    poll("tickets to restart", lambda: sup.status()["tickets"].restarts == 1, START_TIMEOUT)
    sup.wait_states(tickets="ready")


async def tour_traffic(sup: SupervisorProcess) -> int:
    """About 50 seconds of traffic; the tool errors it made."""
    with trio.fail_after(TRAFFIC_TIMEOUT):
        async with AsyncSupervisorClient(sup.endpoint, request_timeout=CALL_TIMEOUT) as client:
            go = Traffic(client)
            for k in range(12):  # a ramp on files; search steady, failing now and then; tickets slowish
                plan = (
                    go.files(2 + 2 * k) + go.search(3, failing=k % 3 == 0) + go.tickets(1, 0.02 + 0.005 * k)
                )
                await go.second(plan + (go.log(k) if k % 4 == 0 else []))
            await go.meanwhile(kill_tickets, sup)  # in the pause: no call is lost
            for _ in range(5):
                await go.second([])
            for _ in range(6):  # a burst, with errors, and slow calls: p99 jumps
                await go.second(go.files(45) + go.search(20, failing=4) + go.tickets(3, 0.15))
            await go.meanwhile(reload_changing_search, sup)
            for k in range(25, 50):  # a wave; tickets slower and slower
                wave = 10 + round(8 * math.sin(k / 3))
                plan = go.files(wave) + go.search(4, failing=k % 5 == 4) + go.tickets(2, 0.01 * (k - 22))
                await go.second(plan + (go.log(k) if k % 6 == 0 else []))
            return go.failed


def history(port: int) -> dict[str, Any]:
    status, body = request_json(port, "GET", "/api/history")
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def longest_quiet(calls: list[int]) -> int:
    """The longest run of buckets without calls between two with calls."""
    busy = [index for index, count in enumerate(calls) if count]
    return max((b - a - 1 for a, b in itertools.pairwise(busy)), default=0)


def spark(driver: WebDriver, server: str, kind: str, selector: str) -> list[str]:
    """An attribute (``d`` of paths, ``height`` of rects) of each ``selector`` in a sparkline."""
    script = """
        const row = `tr[data-server="${arguments[0]}"]`;
        const svg = document.querySelector(`${row} svg[data-kind="${arguments[1]}"]`);
        const value = (e) => e.getAttribute("d") || e.getAttribute("height");
        return svg ? [...svg.querySelectorAll(arguments[2])].map(value) : [];
    """
    return list(driver.execute_script(script, server, kind, selector))


def count(driver: WebDriver, selector: str) -> int:
    return len(driver.find_elements(By.CSS_SELECTOR, selector))


def text(driver: WebDriver, selector: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, selector).text)


@needs_chromium
def test_a_tour_of_the_console_after_a_varied_minute(start_supervisor: Start, tmp_path: Path) -> None:
    sup = start_supervisor(tour_servers(), settings={"metrics": "127.0.0.1:0", "statusBucket": 1})
    port = listening(sup)
    with chromium() as driver:
        open_page(driver, port, SERVERS)
        failed = trio.run(tour_traffic, sup)

        # the overview: the last minute of each server, a point a second
        charts = history(port)
        assert charts["bucket"] == 1
        files, search, tickets = (charts["servers"][name] for name in SERVERS)
        assert sum(1 for n in files["calls"] if n) > 30 and longest_quiet(files["calls"]) >= 4  # the pause
        assert max(files["calls"]) >= 3 * min(n for n in files["calls"] if n)  # a ramp and a burst
        assert sum(1 for n in search["errors"] if n) >= 8 and sum(search["errors"]) <= failed
        p99 = [v for v in tickets["p99"] if v is not None]
        assert len(p99) > 20 and max(p99) > 4 * min(p99)  # slow calls: p99 moves

        def drawn(d: WebDriver) -> bool:
            paths = spark(d, "files", "calls", "path.calls")
            return bool(paths) and paths[0].count("L") > 25

        wait_for(driver, "files' calls drawn", drawn)
        assert len(spark(driver, "search", "errors", "rect.errors")) >= 8
        assert spark(driver, "tickets", "latency", "path.p99")[0].count("L") > 15
        assert [th.text for th in driver.find_elements(By.CSS_SELECTOR, "th.spark")] == [
            "calls · 1 min",
            "p50 / p99 · 1 min",
            "errors · 1 min",
        ]
        assert text(driver, "#timeline-title .hint") == "the last minute"
        assert "a point a second" in text(driver, "footer")
        last = 'tr[data-server="files"] svg[data-kind="calls"] rect.hit:last-of-type title'
        hover = driver.execute_script(f"return document.querySelector('{last}').textContent;")
        assert hover.count(":") >= 5 and "/s" in hover, hover  # 14:02:04-14:02:05: 3 calls, 3.00/s
        wait_for(driver, "the errors counted", lambda d: text(d, "#total-errors") != "0")
        errors_total = driver.find_element(By.ID, "total-errors").find_element(By.XPATH, "..").text
        assert errors_total.endswith(" errors in the last minute"), errors_total
        screenshot(driver, tmp_path, "console-servers")

        # the timeline: the kill and the reload, on the list and on the axis
        crash = '#timeline li[data-kind="crash"]'
        assert count(driver, crash) == 1 and text(driver, f"{crash} .who") == "tickets"
        assert "SIGKILL" in text(driver, f"{crash} .detail")
        reload = '#timeline li[data-kind="reload"]'
        assert count(driver, reload) == 1 and text(driver, f"{reload} .detail") == "applied"
        assert count(driver, '#timeline li[data-kind="restart"] .who[data-server="search"]') == 1
        for kind in ("crash", "reload", "restart"):
            assert count(driver, f'#timeline-axis circle[data-kind="{kind}"]') == 1, kind
        ticks = [t.text for t in driver.find_elements(By.CSS_SELECTOR, "#timeline-axis text")]
        assert ticks == [f"{MINUS}1 min", f"{MINUS}45 s", f"{MINUS}30 s", f"{MINUS}15 s", "now"]
        screenshot(driver, tmp_path, "console-timeline", element="timeline-section")

        # dark colours, the same overview
        light = driver.execute_script("return getComputedStyle(document.body).backgroundColor;")
        driver.execute_cdp_cmd(
            "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
        )
        wait_for(
            driver,
            "the dark colours",
            lambda d: d.execute_script("return getComputedStyle(document.body).backgroundColor;") != light,
        )
        screenshot(driver, tmp_path, "console-dark")
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})

        # a server's detail: its status, its log and its tools
        tools = sup.status()["files"].tools
        driver.find_element(By.CSS_SELECTOR, 'tr[data-server="files"] td.server').click()
        wait_for(driver, "files' tools", lambda d: count(d, "#detail-tools tbody tr") == tools)
        wait_for(
            driver, "files' log", lambda d: INDEXED.format(n=48) in d.find_element(By.ID, "detail-logs").text
        )
        log = driver.find_element(By.ID, "detail-logs").text
        assert STARTED in log and log.count("indexed ") >= 5
        assert text(driver, '#detail-tools tr[data-tool="mcp_files_echo"] td.params') == "text: string *"
        screenshot(driver, tmp_path, "console-detail")
        driver.find_element(By.ID, "detail-close").click()

        # the audit view, filtered by one identity: the same records as /api/audit
        query = {"identity": BOB, "since": 3600, "limit": 200}
        status, bobs = request_json(port, "GET", "/api/audit?" + urlencode(query))
        assert status == 200 and len(bobs["records"]) == 200
        box = driver.find_element(By.ID, "audit-identity")
        box.send_keys(BOB)
        driver.find_element(By.CSS_SELECTOR, "#audit-form button").click()

        def bobs_shown(d: WebDriver) -> list[tuple[str, str, str]]:
            rows: list[list[str]] = d.execute_script("""
                return [...document.querySelectorAll("#audit tbody tr")].map((tr) =>
                    ["identity", "tool", "outcome"].map((c) => tr.querySelector("td." + c).textContent));
            """)
            return [(i, t, o) for i, t, o in rows]

        expected = [(r["identity"], r["tool"], r["outcome"]) for r in bobs["records"]]
        wait_for(driver, "bob's records", lambda d: bobs_shown(d) == expected)
        assert {tool for _, tool, _ in expected} >= {"mcp_search_add", "mcp_search_fail"}
        assert expected[0] == (BOB, "mcp_search_fail", "tool_error")  # the last second's last call
        screenshot(driver, tmp_path, "console-audit", element="audit-section")

        # the identities: both principals, active
        status, seen = request_json(port, "GET", "/api/identities")
        assert status == 200 and {i["identity"] for i in seen["identities"]} == {ALICE, BOB}
        assert all(i["active"] for i in seen["identities"])
        wait_for(driver, "both identities", lambda d: count(d, "#identities td.identity.active") == 2)
        assert text(driver, "#identities-state") == "2 identities, 2 active"
        screenshot(driver, tmp_path, "console-identities", element="identities-panel")

        # 800 pixels: one column, and the panel over the page
        driver.set_window_size(*NARROW)
        driver.execute_script("window.scrollTo(0, 0);")
        width = driver.execute_script("return document.documentElement.clientWidth;")
        wait_for(
            driver,
            "the page in one column",
            lambda d: d.execute_script("return document.documentElement.scrollWidth;") <= width,
        )
        table = driver.find_element(By.ID, "server-table")
        assert table.rect["x"] + table.rect["width"] <= width  # every column on the screen
        assert not scrolls_sideways(driver, "#servers-section .scroll")
        screenshot(driver, tmp_path, "console-narrow")
        driver.find_element(By.CSS_SELECTOR, 'tr[data-server="tickets"]').click()
        wait_for(
            driver,
            "tickets' tools",
            lambda d: count(d, '#detail-tools tr[data-tool="mcp_tickets_slow"]') == 1,
        )
        assert "SIGKILL" in driver.find_element(By.ID, "detail-status").text  # its last error
        screenshot(driver, tmp_path, "console-narrow-detail")
        assert driver.execute_script("return window.notReloaded === true;")  # all of it without a reload
