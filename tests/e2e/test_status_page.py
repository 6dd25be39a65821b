"""The status page in a real headless Chromium against a real supervisor: its rows, live updates
from the event stream when a worker is killed, and the controls (present only when on)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import SupervisorProcess, stdio_test_server
from tests.e2e.web import listening

CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not CHROMEDRIVER.exists(),
        reason="no /usr/bin/chromedriver (tests/run.sh installs Debian's chromium and chromium-driver)",
    ),
]

Start = Callable[..., SupervisorProcess]
PAGE_TIMEOUT = 30.0  # seconds for any one thing the page should show


if CHROMEDRIVER.exists():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.set_page_load_timeout(PAGE_TIMEOUT)
        yield driver
    finally:
        driver.quit()


def cell(driver: WebDriver, server: str, column: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, f'tr[data-server="{server}"] td.{column}').text)


def wait_for(driver: WebDriver, what: str, check: Callable[[WebDriver], object]) -> None:
    WebDriverWait(driver, PAGE_TIMEOUT, poll_frequency=0.05).until(check, f"the page to show {what}")


def open_page(driver: WebDriver, port: int, servers: list[str]) -> None:
    driver.get(f"http://127.0.0.1:{port}/")
    for server in servers:
        wait_for(driver, f"{server} ready", lambda d, s=server: cell(d, s, "state") == "ready")
    rows = driver.find_elements(By.CSS_SELECTOR, "#servers tr")
    assert [row.get_attribute("data-server") for row in rows] == servers
    wait_for(driver, "the event stream live", lambda d: d.find_element(By.ID, "live").text == "live")
    driver.execute_script("window.notReloaded = true;")


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
