"""The status page in a real headless Chromium against a real supervisor: its rows, live updates
from the event stream when a worker is killed, and the controls (present only when on)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.browser import CHROMEDRIVER, cell, chromium, needs_chromium, open_page, wait_for
from tests.e2e.harness import SupervisorProcess, stdio_test_server
from tests.e2e.web import listening

pytestmark = [pytest.mark.e2e, needs_chromium]

Start = Callable[..., SupervisorProcess]

if CHROMEDRIVER.exists():
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


def test_the_page_shows_every_server_and_follows_a_killed_worker_live(
    start_supervisor: Start, browser: WebDriver
) -> None:
    sup = start_supervisor(
        {"alpha": stdio_test_server(), "beta": {**stdio_test_server(), "sandbox": {"memory": "256M"}}},
        settings={"metrics": "127.0.0.1:0"},
    )
    port = listening(sup)
    open_page(browser, port, ["alpha", "beta"])
    assert cell(browser, "alpha", "tools") == str(sup.status()["alpha"].tools)
    assert cell(browser, "alpha", "sandbox") == "none"  # each server's confinement, as status says it
    assert cell(browser, "beta", "sandbox") == "no network; sees the system, its cwd; memory 256 MB"
    assert browser.find_elements(By.CSS_SELECTOR, "td.actions button") == []  # controls off
    sup.client.call_tool("mcp_beta_echo", {"text": "x"})

    worker = sup.status()["alpha"].worker_pid
    assert worker is not None
    os.kill(worker, signal.SIGKILL)
    wait_for(browser, "alpha not ready", lambda d: cell(d, "alpha", "state") in ("restarting", "starting"))
    wait_for(browser, "alpha ready again", lambda d: cell(d, "alpha", "state") == "ready")
    wait_for(browser, "alpha's restart counted", lambda d: cell(d, "alpha", "restarts") == "1")
    wait_for(browser, "beta's calls per second", lambda d: cell(d, "beta", "per_second") != "0.0")
    assert cell(browser, "beta", "state") == "ready" and cell(browser, "beta", "restarts") == "0"
    assert browser.execute_script("return window.notReloaded === true;")


def test_the_controls_stop_and_start_a_server_from_the_page(
    start_supervisor: Start, browser: WebDriver
) -> None:
    settings = {"metrics": "127.0.0.1:0", "statusControls": True}
    sup = start_supervisor({"alpha": stdio_test_server(), "beta": stdio_test_server()}, settings=settings)
    port = listening(sup)
    open_page(browser, port, ["alpha", "beta"])

    def click(server: str, action: str) -> None:
        selector = f'tr[data-server="{server}"] td.actions button[data-action="{action}"]'
        browser.find_element(By.CSS_SELECTOR, selector).click()

    click("beta", "stop")
    sup.wait_states(beta="stopped", alpha="ready")
    wait_for(browser, "beta stopped", lambda d: cell(d, "beta", "state") == "stopped")
    assert "stop beta: done" in browser.find_element(By.ID, "message").text
    click("beta", "start")
    sup.wait_states(beta="ready", alpha="ready")
    wait_for(browser, "beta ready", lambda d: cell(d, "beta", "state") == "ready")
    assert browser.execute_script("return window.notReloaded === true;")
