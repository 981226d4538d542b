"""/docs works with no network (issue 14, point 4): Swagger UI's assets come from a pinned package installed
with Lethe, and headless Chromium, with every host but 127.0.0.1 unresolvable, renders the operations."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from werkzeug.serving import make_server

from tests.support.chromium import webdriver
from tests.support.servers import serve_in_thread
from tests.support.services import service_missing

pytestmark = [pytest.mark.e2e, pytest.mark.one_store]


@pytest.fixture
def served(lethe):
    server = make_server("127.0.0.1", 0, lethe.app, threaded=True)
    serve_in_thread(server, "docs")
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_the_docs_page_names_no_outside_host(lethe):
    page = lethe.client.get("/docs").get_data(as_text=True)
    assert "/docs/assets/swagger-ui-bundle.js" in page
    assert not re.findall(r"(?:src|href)=[\"']https?://", page)
    asset = lethe.client.get("/docs/assets/swagger-ui-bundle.js")
    assert asset.status_code == 200 and len(asset.get_data()) > 100_000
    assert lethe.client.get("/docs/assets/../../../../etc/passwd").status_code == 404


def test_headless_chromium_renders_the_operations_offline(served):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with webdriver() as driver:
        driver.get(served + "/docs")
        try:  # in real time: under load a virtual time budget ran out before Swagger UI rendered
            WebDriverWait(driver, 60, poll_frequency=0.2).until(
                lambda _: len(driver.find_elements(By.CSS_SELECTOR, ".opblock")) >= 20
            )
        except TimeoutException:
            pass
        dom = driver.page_source
    assert "swagger-ui" in dom
    operations = re.findall(r'class="opblock opblock-(?:get|put|post|delete)', dom)
    assert len(operations) >= 20, dom[-3000:]
    for path in ("/api/v1/files/{file_id}", "/api/v1/uploads", "/api/v1/erasures"):
        assert path in dom.replace("&ZeroWidthSpace;", "").replace("\u200b", "")


def test_the_screenshot_command_of_the_api_doc_captures_the_operations_not_the_spinner(served, tmp_path):
    """Issue 21, point 11: the documented command captured Swagger UI's loading spinner."""
    from pathlib import Path

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        service_missing("Chromium (Debian package chromium)", "not installed; .ci/run installs it")
    doc = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    (command,) = re.findall(r"```bash\n(chromium .*?--screenshot=.*?)\n```", doc, re.S)
    argv = command.replace("\\\n", " ").split()
    argv[0] = browser
    argv = [a.replace("http://127.0.0.1:8080", served) for a in argv]
    offline = [
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
    ]

    def shot(args, name):
        args = [a.replace("lethe-docs.png", str(tmp_path / name)) for a in args]
        result = subprocess.run(
            [args[0], *offline, *args[1:]], capture_output=True, text=True, timeout=120, cwd=tmp_path
        )
        assert result.returncode == 0, result.stderr[-2000:]
        return (tmp_path / name).read_bytes()

    assert any(a.startswith("--virtual-time-budget=") for a in argv)  # the wait for Swagger UI to render
    documented = shot(argv, "lethe-docs.png")
    # What a capture before Swagger UI rendered shows (a spinner on an empty page), at the same size.
    unrendered = shot(
        [a if a != served + "/docs" else "data:text/html,<title>Swagger UI</title>" for a in argv], "unrendered.png"
    )
    # A rendered list of operations is a busy picture; the empty page compresses to little.
    assert documented.startswith(b"\x89PNG") and len(documented) > 5 * len(unrendered), (
        len(documented),
        len(unrendered),
    )
