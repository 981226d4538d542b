"""The operator console in headless Chromium (Debian's chromium and chromedriver, driven by Selenium), with every
host but 127.0.0.1 unresolvable: sign in with the link `lethe console` prints, read the overview of a seeded
installation, find a held file from its hold and read why it stays, ask the explainer's box, watch the overview
refresh in place, sign out, and see the link refused a second time. No page holds the canary name, and the
browser reports no Content-Security-Policy violation (a script injected on purpose is reported: the check can
fail).

With LETHE_SCREENSHOTS=DIR it saves the overview and the explainer there (docs/images/ holds the ones the docs
show)."""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from app.lifecycle.cleanup import run_cleanup
from tests.support import zygote
from tests.support.chromium import webdriver
from tests.support.lethe import ALEX, OWNER
from tests.support.servers import serve_in_thread

pytestmark = [pytest.mark.e2e, pytest.mark.one_store]
CANARY = "Canary-Console-Browser-payslip"
# Run in each page before its own scripts: an interval a page sets is recorded, not started.
RECORDED_INTERVALS = """
window.recordedIntervals = [];
window.setInterval = function (callback, ms) {
  window.recordedIntervals.push({ run: callback, ms: ms });
  return window.recordedIntervals.length;
};
"""


@pytest.fixture
def served(lethe):
    server = make_server("127.0.0.1", 0, lethe.app, threaded=True)
    serve_in_thread(server, "console")
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.fixture
def browser():
    with webdriver("--window-size=1280,900") as driver:
        yield driver


def seed(lethe):
    """A small installation: live files, one held and deleted, one purged, an attached one, a pending scan."""
    for n in range(3):
        lethe.upload(ALEX, b"live %d" % n, name=f"{CANARY}-{n}.txt")
    attached = lethe.upload(ALEX, b"attached", name=f"{CANARY}-a.txt")
    assert lethe.call("PUT", "/api/v1/messages/m-1", ALEX, json={"file_ids": [attached]}).status_code == 200
    held = lethe.upload(ALEX, b"held", name=f"{CANARY}-held.txt")
    hold = lethe.call("POST", "/api/v1/holds", OWNER, json={"case_ref": "CASE-77", "file_id": held}).json
    purged = lethe.upload(ALEX, b"purged", name=f"{CANARY}-purged.txt")
    for file_id in (held, purged):
        assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    lethe.run_jobs()
    lethe.upload(ALEX, b"waiting for its scan", name=f"{CANARY}.bin", scan=False)
    run_cleanup(lethe.rt)
    return held, hold["id"]


def printed_link(database_url: str, base: str, tmp_path: Path) -> str:
    env = {"PATH": "/usr/bin:/bin", "LETHE_DATABASE_URL": database_url, "LETHE_FILE_FS_ROOT": str(tmp_path / "o")}
    shown = zygote.run(
        [sys.executable, "-m", "app.entry", "console", "--url", base],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    (link,) = re.findall(re.escape(base) + r"/console/sign-in/\S+", shown.stdout)
    return link


def test_an_operator_signs_in_finds_a_held_file_and_signs_out(lethe, served, browser, database_url, tmp_path, caplog):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    caplog.set_level(logging.INFO, logger="lethe.console")
    held, hold_id = seed(lethe)
    link = printed_link(database_url, served, tmp_path)
    shots = os.environ.get("LETHE_SCREENSHOTS")
    pages: list[str] = []

    def seen() -> str:
        source = browser.page_source
        pages.append(source)
        return source

    # The pages' clock is the test's: console.js refreshes a page by window.setInterval, and here an interval
    # is only recorded, to run when the test says (each new page starts with none)
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORDED_INTERVALS})

    # Given the printed link: its page asks for one click, which signs in and lands on the overview
    browser.get(link)
    browser.find_element(By.ID, "sign-in").click()
    WebDriverWait(browser, 10).until(lambda d: d.current_url == served + "/console/")
    overview = seen()
    assert "Deletion" in overview and "Cleanup, by step (last run)" in overview
    assert browser.find_element(By.ID, "holds-active").text == "1"
    assert browser.find_element(By.ID, "files-held").text == "1"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#steps tbody tr")) >= 18
    if shots:
        browser.save_screenshot(str(Path(shots) / "console-overview.png"))

    # The overview refreshes in place: a file deleted meanwhile shows in the backlog, the page is not reloaded
    browser.execute_script("window.lethe_marker = 'same page';")
    live = lethe.upload(ALEX, b"deleted while watching", name=f"{CANARY}-w.txt")
    assert lethe.call("DELETE", f"/api/v1/files/{live}", ALEX).status_code == 204
    assert browser.execute_script("return window.recordedIntervals.map(function (i) { return i.ms; });") == [10_000]
    browser.execute_script("window.recordedIntervals.forEach(function (i) { i.run(); });")  # ten seconds pass
    WebDriverWait(browser, 10).until(lambda d: d.find_element(By.ID, "main").get_attribute("data-refreshed"))
    assert browser.find_element(By.ID, "backlog").text == "1"
    assert browser.execute_script("return window.lethe_marker;") == "same page"

    # When the operator looks for the held file: holds, the hold, its files, why it stays
    browser.find_element(By.LINK_TEXT, "Holds").click()
    assert "CASE-77" in seen()
    browser.find_element(By.LINK_TEXT, hold_id).click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "held-files"))
    seen()
    browser.find_element(By.CSS_SELECTOR, "#held-files a.why").click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "kept-by"))
    why = seen()
    assert browser.find_element(By.ID, "state").text == "deleted"
    assert [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#kept-by .rule")] == ["hold"]
    assert "CASE-77" in why and "the release of its legal holds" in browser.find_element(By.ID, "ends").text
    if shots:
        browser.save_screenshot(str(Path(shots) / "console-explain.png"))
    # The box takes a person's id as well
    box = browser.find_element(By.ID, "id")
    box.clear()
    box.send_keys(str(ALEX.id))
    browser.find_element(By.ID, "explain").click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "subject"))
    assert f"Person {ALEX.id}" in seen()
    for name in ("Erasures", "Receipts", "Webhooks"):
        browser.find_element(By.LINK_TEXT, name).click()
        seen()

    # Then sign out: the console asks for a sign-in, and the link is refused a second time
    browser.find_element(By.ID, "sign-out").click()
    WebDriverWait(browser, 10).until(lambda d: d.current_url == served + "/console/signed-out")
    browser.get(served + "/console/")
    assert browser.find_elements(By.ID, "sign-in-needed")
    browser.get(link)
    assert browser.find_elements(By.ID, "refused") and not browser.find_elements(By.ID, "sign-in")
    seen()

    # No page held the canary name, and the browser reported no violation of the content policy
    assert len(pages) >= 9 and not [page for page in pages if CANARY in page]
    logged = browser.get_log("browser")
    assert not [entry for entry in logged if "Content Security Policy" in entry["message"]], logged
    assert not [r for r in caplog.records if getattr(r, "event", "") == "console.csp_violation"]

    # A script injected into a console page is refused and reported: the check above can fail
    browser.get(served + "/console/signed-out")
    browser.execute_script(
        "var s = document.createElement('script'); s.textContent = 'window.injected = 1'; document.body.appendChild(s);"
    )
    assert browser.execute_script("return window.injected;") is None
    WebDriverWait(browser, 10).until(
        lambda d: [r for r in caplog.records if getattr(r, "event", "") == "console.csp_violation"]
    )
    assert any("Content Security Policy" in entry["message"] for entry in browser.get_log("browser"))
