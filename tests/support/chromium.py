"""Debian's Chromium as the e2e tests start it: headless, offline but for 127.0.0.1 (any other host does not
resolve, so a page that reaches out fails rather than waits), and no background traffic of its own."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tests.support.services import service_missing

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

HEADLESS = (
    "--headless=new",
    "--no-sandbox",  # as root (a container, CI), Chromium refuses to start without it
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
)


@contextmanager
def webdriver(*arguments: str) -> Iterator[WebDriver]:
    """Chromium driven by Selenium through Debian's chromedriver, with HEADLESS and the browser's console kept
    (`get_log("browser")`). A page's wait is then in real time (WebDriverWait), which `--virtual-time-budget`
    is not: under load its virtual clock runs a page's timers out before the page's requests come back."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        service_missing("Chromium and ChromeDriver (Debian packages chromium, chromium-driver)", "not installed")
    from selenium import webdriver as selenium
    from selenium.webdriver.chrome.service import Service

    options = selenium.ChromeOptions()
    options.binary_location = str(chromium)
    for argument in (*HEADLESS, *arguments):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = selenium.Chrome(options=options, service=Service(str(driver_path)))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
