"""/docs works with no network (issue 14, point 4): Swagger UI's assets come from a pinned package installed
with Lethe, and headless Chromium, with every host but 127.0.0.1 unresolvable, renders the operations."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading

import pytest
from werkzeug.serving import make_server

from tests.conftest import service_missing

pytestmark = [pytest.mark.e2e, pytest.mark.parametrize("raw_store", ["fs"], indirect=True)]


@pytest.fixture
def served(lethe):
    server = make_server("127.0.0.1", 0, lethe.app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
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
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        service_missing("Chromium (Debian package chromium)", "not installed; .ci/run installs it")
    result = subprocess.run(
        [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
         "--virtual-time-budget=20000", "--dump-dom", served + "/docs"],
        capture_output=True, text=True, timeout=120)
    dom = result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    assert "swagger-ui" in dom
    operations = re.findall(r'class="opblock opblock-(?:get|put|post|delete)', dom)
    assert len(operations) >= 20, dom[-3000:]
    for path in ("/api/v1/files/{file_id}", "/api/v1/uploads", "/api/v1/erasures"):
        assert path in dom.replace("&ZeroWidthSpace;", "").replace("\u200b", "")
