"""A real headless Chromium for the console's end-to-end tests (Debian's chromium and chromium-driver,
driven by selenium): start one at a window size, wait for what the page should show, read a server's
row, and save screenshots (to ``$MCPS_SCREENSHOTS`` when set, else the test's own directory)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM = Path("/usr/bin/chromium")
PAGE_TIMEOUT = 30.0  # seconds for any one thing the page should show
WIDE = (1280, 800)  # the window: an operator's laptop
NARROW = (800, 900)  # and half a screen

needs_chromium = pytest.mark.skipif(
    not CHROMEDRIVER.exists(),
    reason="no /usr/bin/chromedriver (tests/run.sh installs Debian's chromium and chromium-driver)",
)

if TYPE_CHECKING or CHROMEDRIVER.exists():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait


@contextmanager
def chromium(size: tuple[int, int] = WIDE) -> Iterator[WebDriver]:
    options = Options()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(argument)
    options.add_argument(f"--window-size={size[0]},{size[1]}")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.set_page_load_timeout(PAGE_TIMEOUT)
        driver.set_window_size(*size)
        yield driver
    finally:
        driver.quit()


def cell(driver: WebDriver, server: str, column: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, f'tr[data-server="{server}"] td.{column}').text)


def wait_for(driver: WebDriver, what: str, check: Callable[[WebDriver], Any]) -> Any:
    return WebDriverWait(driver, PAGE_TIMEOUT, poll_frequency=0.05).until(check, f"the page to show {what}")


def open_page(driver: WebDriver, port: int, servers: list[str]) -> None:
    driver.get(f"http://127.0.0.1:{port}/")
    for server in servers:
        wait_for(driver, f"{server} ready", lambda d, s=server: cell(d, s, "state") == "ready")
    rows = driver.find_elements(By.CSS_SELECTOR, "#servers tr")
    assert [row.get_attribute("data-server") for row in rows] == servers
    wait_for(driver, "the event stream live", lambda d: d.find_element(By.ID, "live").text == "live")
    driver.execute_script("window.notReloaded = true;")


def scrolls_sideways(driver: WebDriver, selector: str) -> bool:
    """Whether the element ``selector`` is wider inside than it shows (a scroll bar at its foot)."""
    script = "const box = document.querySelector(arguments[0]); return box.scrollWidth > box.clientWidth;"
    return bool(driver.execute_script(script, selector))


def screenshot(driver: WebDriver, tmp_path: Path, name: str, element: str | None = None) -> Path:
    """Save the window (or only the element with the id ``element``) as ``NAME.png`` in
    ``$MCPS_SCREENSHOTS`` (made if missing), else in ``tmp_path``."""
    directory = Path(os.environ.get("MCPS_SCREENSHOTS") or tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    if element is None:
        saved = driver.save_screenshot(str(path))
    else:
        saved = driver.find_element(By.ID, element).screenshot(str(path))
    assert saved, f"no screenshot saved at {path}"
    return path
