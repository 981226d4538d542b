"""The TypeScript client (clients/js) against a running `lethe dev`, on fs and on SeaweedFS: in Node, every
operation of /openapi.json has a method, a native upload cut at a part is resumed from what the server has, tus
through tus-js-client, a 5 MiB range, links, attachments, drafts, events, holds, quotas, a problem's code, and every
webhook type Lethe sent verified by the client's `verifyWebhook`; in headless Chromium, a page uploads a file by
native parts and over tus with the client and reads it back. The types it ships are those openapi-typescript
makes of the running server's /openapi.json."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from app.domain.webhooks import EVENTS
from app.entry.token import mint_token
from tests.e2e.conftest import CLIENT_HOOK_KEY, CLIENT_SECRET, ClientDev
from tests.support import images
from tests.support.chromium import webdriver
from tests.support.clamd import EICAR
from tests.support.servers import serve_in_thread
from tests.support.services import service_missing

pytestmark = pytest.mark.e2e
JS = Path(__file__).resolve().parents[2] / "clients" / "js"


def node() -> str:
    found = shutil.which("node")
    if found is None or not (JS / "node_modules" / "openapi-fetch").is_dir():
        service_missing("the JavaScript client's packages (clients/js, npm ci)", "not installed; .ci/run installs them")
    assert found is not None
    return found


def run_node(config: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [node(), "test/node.mjs", json.dumps(config)], capture_output=True, text=True, timeout=300, cwd=JS
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    answer: dict[str, Any] = json.loads(lines[-1])
    assert done.returncode == 0 and "error" not in answer, (answer, done.stderr[-3000:])
    return answer


def test_every_operation_and_webhook_type_through_the_js_client_in_node(client_dev: ClientDev, tmp_path):
    spec = httpx.get(client_dev.base + "/openapi.json").json()
    person, subject = uuid.uuid4(), uuid.uuid4()
    token = mint_token(CLIENT_SECRET, person)
    theirs = mint_token(CLIENT_SECRET, subject)
    # the subject owns a file, so that its erasure has something to remove
    created = httpx.post(
        client_dev.base + "/api/v1/uploads",
        headers={"Authorization": f"Bearer {theirs}"},
        json={"name": "x.txt", "size_bytes": 1, "mime_type": "text/plain"},
    )
    assert created.status_code == 201, created.text
    file_id = created.json()["file"]["id"]
    part = httpx.put(
        f"{client_dev.base}/api/v1/uploads/{file_id}/parts/1",
        headers={"Authorization": f"Bearer {theirs}", "Content-Type": "application/octet-stream"},
        content=b"x",
    )
    assert part.status_code == 200, part.text
    done = httpx.post(
        f"{client_dev.base}/api/v1/uploads/{file_id}/complete", headers={"Authorization": f"Bearer {theirs}"}
    )
    assert done.status_code == 200, done.text
    manager = mint_token(CLIENT_SECRET, uuid.uuid4(), ("files:read", "files:write", "manage"))
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(images.photo())
    result = run_node(
        {
            "base": client_dev.base,
            "token": token,
            "manager": manager,
            "subject": str(subject),
            "eicar": EICAR.decode(),
            "photo": str(photo),
            "store": client_dev.store,
            "mode": "flow",
        }
    )
    operations = {op["operationId"] for path in spec["paths"].values() for op in path.values() if "operationId" in op}
    assert set(result["operations"]) == operations  # a new operation without its method fails here
    assert set(result["webhookTypes"]) == set(EVENTS)

    if client_dev.store == "fs":  # the types shipped are the running server's (a fs installation's contract)
        schema = tmp_path / "schema.d.ts"
        (tmp_path / "openapi.json").write_text(json.dumps(spec))
        generated = subprocess.run(
            [
                str(JS / "node_modules" / ".bin" / "openapi-typescript"),
                str(tmp_path / "openapi.json"),
                "-o",
                str(schema),
            ],
            capture_output=True,
            text=True,
            cwd=JS,
            timeout=120,
        )
        assert generated.returncode == 0, generated.stderr
        assert schema.read_text() == (JS / "src" / "schema.d.ts").read_text(), "regenerate: npm run generate"

    wanted = set(EVENTS)  # every type: the flow caused each
    deadline = time.monotonic() + 60
    while {json.loads(got.body)["type"] for got in client_dev.hooks.received} < wanted:
        assert time.monotonic() < deadline, client_dev.role.tail()
        time.sleep(0.2)
    messages = [{"body": got.body.decode(), "headers": got.headers} for got in client_dev.hooks.received]
    verified = run_node({"mode": "verify", "messages": messages, "secret": CLIENT_HOOK_KEY})
    assert verified["refused"] is True and len(verified["types"]) == len(messages)
    assert set(verified["types"]) == set(EVENTS)


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Lethe client</title>
<script type="importmap">{"imports": {"openapi-fetch": "/node_modules/openapi-fetch/dist/index.mjs"}}</script>
<script src="/node_modules/tus-js-client/dist/tus.min.js"></script></head>
<body><script type="module">
import { Client } from '/src/index.js'
const CONFIG = __CONFIG__
const report = (result) => fetch('/result', { method: 'POST', body: JSON.stringify(result) })
async function run () {
  const lethe = new Client(CONFIG.base, CONFIG.token, { backoffMs: 50 })
  const bytes = new Uint8Array(6 * 1024 * 1024 + 5).map((_, i) => (i * 31) % 251)
  const native = await lethe.upload(new Blob([bytes]), { name: 'page.bin' })
  const viaTus = await lethe.upload('from a page over tus', { name: 'tus.txt', mimeType: 'text/plain', transfer: 'tus' })
  const ready = await lethe.waitReady(native.id)
  const back = new Uint8Array(await (await lethe.download(native.id)).arrayBuffer())
  const same = back.length === bytes.length && back.every((b, i) => b === bytes[i])
  const tail = new Uint8Array(await (await lethe.download(native.id, { range: [6 * 1024 * 1024, null] })).arrayBuffer())
  report({ native: native.id, tus: viaTus.id, scan: ready.scan_status, same, tail: Array.from(tail) })
}
run().catch((error) => report({ error: String(error && error.stack || error) }))
</script></body></html>"""


@pytest.mark.parametrize("client_dev", ["fs"], indirect=True)  # the browser on fs; Node proves both stores
def test_a_page_in_chromium_uploads_with_the_js_client(client_dev: ClientDev, tmp_path):
    node()
    token = mint_token(CLIENT_SECRET, uuid.uuid4())
    config = {"base": client_dev.base, "token": token}
    results: list[dict[str, Any]] = []

    @Request.application
    def page(request: Request) -> Response:
        if request.path == "/":
            return Response(PAGE.replace("__CONFIG__", json.dumps(config)), mimetype="text/html")
        if request.path == "/result" and request.method == "POST":
            results.append(json.loads(request.get_data()))
            return Response("{}", mimetype="application/json")
        target = (JS / request.path.lstrip("/")).resolve()
        if target.is_file() and JS in target.parents and request.path.startswith(("/src/", "/node_modules/")):
            kind = "text/javascript" if target.suffix in (".js", ".mjs") else "application/octet-stream"
            return Response(target.read_bytes(), mimetype=kind)
        return Response("not found", status=404)

    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    server = make_server("127.0.0.1", client_dev.page_port, page, threaded=True)
    serve_in_thread(server, "page")
    console: list[dict[str, Any]] = []
    try:
        with webdriver() as browser:
            browser.get(f"http://127.0.0.1:{client_dev.page_port}/")
            try:  # in real time: the page uploads 6 MiB, waits for the scan and reads it back
                WebDriverWait(browser, 150, poll_frequency=0.2).until(lambda _: results)
            except TimeoutException:
                pass
            console = browser.get_log("browser")
    finally:
        server.shutdown()
    assert results, f"the page reported nothing:\n{console[-20:]}\n{client_dev.role.tail()}"
    (report,) = results
    assert "error" not in report, report
    assert report["same"] is True and report["scan"] == "clean"
    assert report["tail"] == [((6 * 1024 * 1024 + i) * 31) % 251 for i in range(5)]
