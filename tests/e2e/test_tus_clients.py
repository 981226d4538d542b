"""tus 1.0 with clients no one here wrote (issue 25): tuspy (PyPI), tus-js-client under Node and Uppy with its
Tus plugin in headless Chromium (npm, installed by .ci/run from tests/js/package-lock.json), against the api and
worker roles on RabbitMQ, with each driver. Each client uploads, stops half-way and resumes at the server's
offset, terminates, and reads back; a terminated upload leaves no byte, and no file name reaches a log."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from app.entry.token import mint_token
from tests.support.chromium import webdriver
from tests.support.ports import free_port
from tests.support.roles import start_api_and_worker, with_driver
from tests.support.servers import serve_in_thread
from tests.support.services import service_missing

pytestmark = pytest.mark.e2e
SECRET = "e2e-secret-of-sufficient-length-0123456789"
CANARY = "Canary-Tus-7Qx-diagnosis"
MIB = 1024 * 1024
JS = Path(__file__).resolve().parents[1] / "js"
TUS = {"Tus-Resumable": "1.0.0"}
DRIVERS = ["fs", "s3"]


@pytest.fixture
def served(role_env, start_role, tmp_path, request):
    """The api and a worker on the driver of the test's `driver` parameter, with 5 MiB parts (the S3 minimum,
    so that chunks of 1 MiB leave a tail and chunks of 6 MiB cut a part in two)."""
    driver = request.node.callspec.params["driver"]
    page_port = free_port()
    env, store = with_driver(
        dict(
            role_env,
            LETHE_AUTH_JWT_SECRET=SECRET,
            LETHE_FILE_PART_SIZE="5MiB",
            LETHE_API_CORS_ORIGINS=f"http://127.0.0.1:{page_port}",
        ),
        driver,
        request,
    )
    api, worker, base = start_api_and_worker(start_role, env, tmp_path)
    person = uuid.uuid4()
    token = mint_token(SECRET, person)
    yield Served(driver, store, env, api, worker, base, token, page_port)
    for role in (api, worker):  # both stop at once: the suite waits for the slower only
        role.proc.send_signal(signal.SIGTERM)
    for role in (api, worker):
        role.proc.wait(30)
        role.log.close()
        for text in (CANARY, base64.b64encode(CANARY.encode()).decode()):
            assert text not in role.output(), "a file name reached a log"


class Served:
    def __init__(self, driver, store, env, api, worker, base, token, page_port):
        self.driver, self.store, self.env, self.api, self.worker = driver, store, env, api, worker
        self.base, self.token, self.page_port = base, token, page_port
        self.endpoint = base + "/api/v1/tus"
        self.headers = {"Authorization": f"Bearer {token}"}

    def offset(self, url: str) -> int:
        response = requests.head(url, headers={**self.headers, **TUS}, timeout=10)
        assert response.status_code == 200, response.status_code
        return int(response.headers["Upload-Offset"])

    def content(self, url: str) -> bytes:
        """The finished file's bytes, once the worker settled its scan (skipped: no clamd here)."""
        file_id = url.rstrip("/").rsplit("/", 1)[1]
        deadline = time.monotonic() + 30
        while True:
            shown = requests.get(f"{self.base}/api/v1/files/{file_id}", headers=self.headers, timeout=10).json()
            if shown["scan_status"] != "pending":
                break
            assert time.monotonic() < deadline, self.worker.tail()
            time.sleep(0.1)
        response = requests.get(f"{self.base}/api/v1/files/{file_id}/content", headers=self.headers, timeout=30)
        assert response.status_code == 200, response.text
        return response.content

    def residue(self, file_id: str) -> list[str]:
        """Every object and multipart upload of the file (a test may list; the service never does)."""
        if self.driver == "fs":
            root = self.env["LETHE_FILE_FS_ROOT"]
            return [os.path.join(d, n) for d, _, names in os.walk(root) for n in names if file_id in os.path.join(d, n)]
        store = self.store
        found = [
            item.object_name for item in store.client.list_objects(store.bucket, recursive=True, include_version=True)
        ]
        found += [u.object_name for u in store.client._list_multipart_uploads(store.bucket).uploads]
        return [key for key in found if file_id in key]

    def gone(self, url: str) -> None:
        """A terminated upload answers 410 and, once the worker ran its purge, leaves nothing."""
        assert requests.head(url, headers={**self.headers, **TUS}, timeout=10).status_code == 410
        file_id = url.rstrip("/").rsplit("/", 1)[1]
        deadline = time.monotonic() + 20
        while left := self.residue(file_id):
            assert time.monotonic() < deadline, (left, self.worker.tail())
            time.sleep(0.1)


def payload(size: int) -> bytes:
    return os.urandom(size)


# -- tuspy ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("driver", DRIVERS)
def test_three_clients_upload_resume_terminate_and_read_back(served, driver, tmp_path):
    """One api and worker per driver for every client (each pair of roles costs seconds to start and stop):
    tuspy, tus-js-client, Uppy in Chromium, and a PATCH cut off by a raw socket."""
    tuspy_flows(served, tmp_path)
    tus_js_client_flows(served, tmp_path)
    uppy_flow(served)
    cut_off_patch(served)


def tuspy_flows(served, tmp_path):
    from tusclient import client as tus_client

    data = payload(12 * MIB + 123)
    metadata = {
        "filename": f"{CANARY}.bin",
        "filetype": "application/octet-stream",
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    first = tus_client.TusClient(served.endpoint, headers=served.headers)
    uploader = first.uploader(file_stream=_stream(data), chunk_size=MIB, metadata=metadata, upload_checksum=True)
    for _ in range(6):  # stop half-way: one whole part and a tail of 1 MiB
        uploader.upload_chunk()
    url = uploader.url
    assert served.offset(url) == 6 * MIB

    # A new uploader (a new process, say) resumes at the server's offset.
    second = tus_client.TusClient(served.endpoint, headers=served.headers)
    resumed = second.uploader(file_stream=_stream(data), url=url, chunk_size=MIB, upload_checksum=True)
    assert resumed.offset == 6 * MIB
    resumed.upload()
    assert served.offset(url) == len(data)
    assert served.content(url) == data

    # Termination: tuspy has no call of its own, so the client sends tus's DELETE to the URL tuspy made.
    doomed = first.uploader(file_stream=_stream(data), chunk_size=MIB, metadata=metadata, upload_checksum=True)
    for _ in range(6):
        doomed.upload_chunk()
    response = requests.delete(str(doomed.url), headers={**served.headers, **TUS}, timeout=10)
    assert response.status_code == 204
    served.gone(doomed.url)


def _stream(data: bytes):
    import io

    return io.BytesIO(data)


# -- tus-js-client -------------------------------------------------------------------------------------------


def node_client(served, tmp_path, **config) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None or not (JS / "node_modules" / "tus-js-client").is_dir():
        service_missing("tus-js-client under Node (tests/js, npm ci)", "not installed; .ci/run installs it")
    config = {
        "endpoint": served.endpoint,
        "token": served.token,
        "metadata": {"filename": f"{CANARY}.bin", "filetype": "application/octet-stream"},
        **config,
    }
    result = subprocess.run(
        [node, str(JS / "tus_client.js"), json.dumps(config)], capture_output=True, text=True, timeout=120, cwd=JS
    )
    assert result.stdout.strip(), result.stderr[-2000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.returncode == 0 and "error" not in answer, (answer, result.stderr[-2000:])
    return answer


def tus_js_client_flows(served, tmp_path):
    """1 MiB chunks stopped and resumed by a new process, 6 MiB chunks, one body, and a termination."""
    data = payload(12 * MIB + 321)
    path = tmp_path / "data.bin"
    path.write_bytes(data)

    # 1 MiB chunks (below the 5 MiB part), stopped past 6 MiB, then resumed by a new process at the server's
    # offset.
    stopped = node_client(served, tmp_path, mode="stop", path=str(path), chunkSize=MIB, stopAt=6 * MIB)
    offset = served.offset(stopped["url"])
    assert offset == stopped["accepted"] >= 6 * MIB
    resumed = node_client(served, tmp_path, mode="upload", path=str(path), chunkSize=MIB, uploadUrl=stopped["url"])
    assert resumed["url"] == stopped["url"] and resumed["offsetAtStart"] == offset
    assert served.content(resumed["url"]) == data

    # 6 MiB chunks (each cuts a part and leaves a tail), and tus-js-client's default: the file in one PATCH.
    for chunk_size in (6 * MIB, None):
        uploaded = node_client(served, tmp_path, mode="upload", path=str(path), chunkSize=chunk_size)
        assert served.content(uploaded["url"]) == data

    # Termination of an upload stopped half-way.
    stopped = node_client(served, tmp_path, mode="stop", path=str(path), chunkSize=MIB, stopAt=2 * MIB)
    assert node_client(served, tmp_path, mode="terminate", uploadUrl=stopped["url"]) == {"terminated": True}
    served.gone(stopped["url"])


# -- Uppy in headless Chromium -------------------------------------------------------------------------------

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Lethe tus</title><link rel="stylesheet" href="/uppy.min.css"></head>
<body style="margin:0;background:#fff"><div id="uppy"></div>
<script src="/uppy.min.js"></script>
<script>
const CONFIG = __CONFIG__;
const { Uppy, Dashboard, Tus } = window.Uppy;
const uppy = new Uppy({ autoProceed: false })
  .use(Dashboard, { inline: true, target: '#uppy', width: 800, height: 450, proudlyDisplayPoweredByUppy: false,
                    hideProgressDetails: true })
  .use(Tus, { endpoint: CONFIG.endpoint, headers: { Authorization: 'Bearer ' + CONFIG.token },
              chunkSize: CONFIG.chunkSize, retryDelays: [0, 500, 1000, 2000], removeFingerprintOnSuccess: true });
function report (result) { return fetch('/result', { method: 'POST', body: JSON.stringify(result) }); }
async function run () {
  const data = await (await fetch('/data.bin')).blob();
  // A first file is paused once past half of it and resumed; a second is removed while it uploads, which
  // makes the Tus plugin terminate its upload (DELETE).
  const kept = uppy.addFile({ name: CONFIG.name, type: 'application/octet-stream', data });
  const doomed = uppy.addFile({ name: 'second-' + CONFIG.name, type: 'application/octet-stream', data });
  let paused = false, removed = null;
  uppy.on('upload-progress', (file, progress) => {
    if (file.id === kept && !paused && progress.bytesUploaded >= progress.bytesTotal / 2) {
      paused = true;
      uppy.pauseResume(kept);
      setTimeout(() => uppy.pauseResume(kept), 200);
    }
    if (file.id === doomed && removed === null && progress.bytesUploaded > 0) {
      removed = uppy.getFile(doomed).tus.uploadUrl;
      uppy.removeFile(doomed);
    }
  });
  uppy.on('complete', (result) => setTimeout(() => {
    const status = document.querySelector('.uppy-StatusBar-statusPrimary');
    report({ successful: result.successful.map((f) => f.response.uploadURL), failed: result.failed.length,
             status: status ? status.textContent : null, paused, removed });
  }, 500));
  uppy.upload();
}
run().catch((error) => report({ error: String(error) }));
</script></body></html>"""


def uppy_flow(served):
    """Uppy in a real browser: CORS and the preflight, a pause and resume, a removal that terminates, and a
    screenshot of its Complete state."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    if not (JS / "node_modules" / "uppy" / "dist" / "uppy.min.js").is_file():
        service_missing("Uppy (tests/js, npm ci)", "not installed; .ci/run installs it")
    data = payload(11 * MIB + 5)
    results: list[dict[str, Any]] = []
    config = {"endpoint": served.endpoint, "token": served.token, "name": f"{CANARY}.bin", "chunkSize": 2 * MIB}

    @Request.application
    def page(request: Request) -> Response:
        dist = JS / "node_modules" / "uppy" / "dist"
        if request.path == "/":
            return Response(PAGE.replace("__CONFIG__", json.dumps(config)), mimetype="text/html")
        if request.path in ("/uppy.min.js", "/uppy.min.css"):
            kind = "text/javascript" if request.path.endswith(".js") else "text/css"
            return Response((dist / request.path[1:]).read_bytes(), mimetype=kind)
        if request.path == "/data.bin":
            return Response(data, mimetype="application/octet-stream")
        if request.path == "/result" and request.method == "POST":
            results.append(json.loads(request.get_data()))
            return Response("{}", mimetype="application/json")
        return Response("not found", status=404)

    server = make_server("127.0.0.1", served.page_port, page, threaded=True)
    serve_in_thread(server, "page")
    try:
        with webdriver() as driver:
            # The page's own size, as `--window-size` gave a screenshot (a window's size here includes its frame)
            metrics = {"width": 800, "height": 500, "deviceScaleFactor": 1, "mobile": False}
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
            driver.get(f"http://127.0.0.1:{served.page_port}/")
            try:  # in real time: under load a virtual time budget ran out before the uploads came back
                WebDriverWait(driver, 150, poll_frequency=0.2).until(lambda _: results)
            except TimeoutException:
                pass
            console = driver.get_log("browser")
            shot = driver.get_screenshot_as_png()  # the page reports 0.5 s after Uppy's complete
    finally:
        server.shutdown()
    assert results, f"the page reported nothing:\n{console[-20:]}\n{served.api.tail()}"
    (report,) = results
    assert "error" not in report, report
    assert report["failed"] == 0 and len(report["successful"]) == 1 and report["status"] == "Complete", report
    assert report["paused"] is True
    (url,) = report["successful"]
    assert served.content(url) == data
    # The removed file's upload was terminated by the plugin: it answers 410 and leaves nothing.
    assert report["removed"], report
    served.gone(report["removed"])
    # The screenshot shows Uppy's complete state: the status bar's line across the whole window (800 px wide, 2
    # px high) and the check marks in Uppy's "complete" green (#1bb240); while uploading that line is blue.
    assert green_pixels(shot) > 1200, "the screenshot does not show Uppy's Complete state"


def green_pixels(png: bytes) -> int:
    """Pixels of Uppy's complete colour (#1bb240, give or take antialiasing) in a PNG screenshot: an 8-bit RGB
    or RGBA image as Chromium writes it, decoded with the standard library."""
    import struct
    import zlib

    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos : pos + 8])
        chunk = png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", chunk[:10])
            assert depth == 8 and color in (2, 6) and chunk[12] == 0, "an 8-bit, not interlaced RGB(A) PNG"
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    previous = bytearray(stride)
    count = 0
    for row in range(height):
        kind = raw[row * (stride + 1)]
        line = bytearray(raw[row * (stride + 1) + 1 : (row + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        for x in range(0, stride, channels):
            r, g, b = line[x], line[x + 1], line[x + 2]
            if abs(r - 0x1B) < 24 and abs(g - 0xB2) < 24 and abs(b - 0x40) < 24:
                count += 1
        previous = line
    return count


def cut_off_patch(served):
    """tus: the server keeps as much of an interrupted PATCH as it received. A raw socket sends half of its
    body to gunicorn and closes; the offset counts every byte that arrived, and the upload finishes from it."""
    import socket
    from urllib.parse import urlsplit

    data = payload(7 * MIB + 9)
    created = requests.post(
        served.endpoint,
        headers={
            **served.headers,
            **TUS,
            "Upload-Length": str(len(data)),
            "Upload-Metadata": "filename " + base64.b64encode(f"{CANARY}.bin".encode()).decode(),
        },
        timeout=10,
    )
    assert created.status_code == 201
    url = served.base + created.headers["Location"]
    sent = 6 * MIB + 3  # a whole part and a tail
    target = urlsplit(url)
    with socket.create_connection((target.hostname, target.port), timeout=10) as conn:
        conn.sendall(
            (
                f"PATCH {target.path} HTTP/1.1\r\nHost: {target.netloc}\r\n"
                f"Authorization: {served.headers['Authorization']}\r\nTus-Resumable: 1.0.0\r\n"
                f"Content-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\n"
                f"Content-Length: {len(data)}\r\n\r\n"
            ).encode()
            + data[:sent]
        )
        conn.shutdown(socket.SHUT_WR)  # the client is gone half-way
        conn.recv(4096)
    deadline = time.monotonic() + 10
    while served.offset(url) != sent:  # the api notices the end of the body on its own time
        assert time.monotonic() < deadline, served.api.tail()
        time.sleep(0.05)
    response = requests.patch(
        url,
        headers={
            **served.headers,
            **TUS,
            "Upload-Offset": str(sent),
            "Content-Type": "application/offset+octet-stream",
        },
        data=data[sent:],
        timeout=30,
    )
    assert response.status_code == 204 and response.headers["Upload-Offset"] == str(len(data))
    assert served.content(url) == data
