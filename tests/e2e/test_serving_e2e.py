"""Serving through the api role (gunicorn), proven with clients no one here wrote: curl -C - and wget -c resume
a cut download byte-exact; headless Chromium shows an <img> from a link, plays and seeks a <video> from a link
(its media stack's own Range requests), and shows the image broken on the same page right after deleteFile;
an HTML file uploaded as image/png is never rendered. On S3 with file.s3.download redirect, the bytes come
from a presigned GET the api handed out."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import requests
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from app.entry.token import mint_token
from tests.support.chromium import HEADLESS, webdriver
from tests.support.ports import free_port
from tests.support.roles import start_api_and_worker, stop_roles, with_driver
from tests.support.servers import serve_in_thread
from tests.support.services import service_missing

pytestmark = pytest.mark.e2e
SECRET = "e2e-secret-of-sufficient-length-0123456789"
LINK_SECRET = "e2e-link-secret-of-sufficient-length-0123456789"
CANARY = "Canary-Serve-9Kd-holiday"
MIB = 1024 * 1024


class Api:
    def __init__(self, base: str, token: str, api, worker):
        self.base, self.api, self.worker = base, api, worker
        self.store_cut: Any = None  # the cut in front of the store, for redirects
        self.fs_root = ""
        self.headers = {"Authorization": f"Bearer {token}"}

    def upload(self, data: bytes, name: str, mime_type: str) -> str:
        created = requests.post(
            f"{self.base}/api/v1/uploads",
            headers=self.headers,
            timeout=10,
            json={"name": name, "size_bytes": len(data), "mime_type": mime_type},
        ).json()
        file_id, part_size = created["file"]["id"], created["upload"]["part_size"]
        for number, start in enumerate(range(0, max(len(data), 1), part_size), start=1):
            sent = requests.put(
                f"{self.base}/api/v1/uploads/{file_id}/parts/{number}",
                headers=self.headers,
                data=data[start : start + part_size],
                timeout=30,
            )
            assert sent.status_code == 200, sent.text
        done = requests.post(f"{self.base}/api/v1/uploads/{file_id}/complete", headers=self.headers, timeout=30)
        assert done.status_code == 200, done.text
        deadline = time.monotonic() + 30
        while (
            requests.get(f"{self.base}/api/v1/files/{file_id}", headers=self.headers, timeout=10).json()["scan_status"]
            == "pending"
        ):
            assert time.monotonic() < deadline, self.worker.tail()
            time.sleep(0.1)
        return file_id

    def thumbnails(self, file_id: str, count: int) -> list[dict[str, Any]]:
        """The file's thumbnails once the worker has made `count` of them (an image's inline display is its
        preview: image.strip_original)."""
        deadline = time.monotonic() + 30
        while True:
            shown = requests.get(f"{self.base}/api/v1/files/{file_id}", headers=self.headers, timeout=10).json()[
                "thumbnails"
            ]
            if len(shown) >= count:
                return shown
            assert time.monotonic() < deadline, self.worker.tail()
            time.sleep(0.1)

    def link(self, file_id: str, disposition: str = "attachment", variant: str | None = None) -> str:
        made = requests.post(
            f"{self.base}/api/v1/files/{file_id}/links",
            headers=self.headers,
            timeout=10,
            json={"disposition": disposition, **({"variant": variant} if variant else {})},
        )
        assert made.status_code == 201, made.text
        return made.json()["url"]

    def cut_proxy(self, download: str, limit: int) -> CutProxy:
        """A fresh cut in front of the api, or, for redirects, the one in front of the store (re-armed)."""
        if download == "redirect":
            self.store_cut.cuts, self.store_cut.limit = 0, limit
            return self.store_cut
        host, port = self.base.removeprefix("http://").split(":")
        return CutProxy((host, int(port)), limit)

    def delete(self, file_id: str) -> None:
        assert (
            requests.delete(f"{self.base}/api/v1/files/{file_id}", headers=self.headers, timeout=10).status_code == 204
        )


@pytest.fixture
def served(role_env, start_role, tmp_path, request):
    params = getattr(request.node, "callspec", None)
    params = params.params if params is not None else {}
    driver = params.get("driver", "fs")
    env, _ = with_driver(
        dict(role_env, LETHE_AUTH_JWT_SECRET=SECRET, LETHE_FILE_LINK_SECRET=LINK_SECRET), driver, request
    )
    store_cut = None
    if params.get("download") == "redirect":
        # Presigned URLs name a proxy of ours in front of the store, so that a test can cut a download there.
        host, port = env["LETHE_FILE_S3_ENDPOINT"].split(":")
        store_cut = CutProxy((host, int(port)), limit=MIB)
        # Only files stored as they are are redirected (a sealed one's bytes leave opened, through the api).
        env.update(
            LETHE_FILE_S3_DOWNLOAD="redirect",
            LETHE_FILE_S3_PUBLIC_ENDPOINT=store_cut.address,
            LETHE_FILE_ENCRYPTION="off",
        )
    api, worker, base = start_api_and_worker(start_role, env, tmp_path)
    served = Api(base, mint_token(SECRET, uuid.uuid4()), api, worker)
    served.store_cut = store_cut
    served.fs_root = env.get("LETHE_FILE_FS_ROOT", "")
    yield served
    stop_roles([api, worker])
    for role in (api, worker):
        assert CANARY not in role.output(), "a file name reached a log"
    if store_cut is not None:
        store_cut.close()


class CutProxy:
    """A TCP proxy of our own that cuts its first connection after `limit` bytes of the answer (a download
    that breaks part-way) and passes every later one whole."""

    def __init__(self, upstream: tuple[str, int], limit: int):
        self.upstream, self.limit, self.cuts = upstream, limit, 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            limit = self.limit if self.cuts == 0 else None
            self.cuts += 1
            threading.Thread(target=self._serve, args=(client, limit), daemon=True).start()

    def _serve(self, client: socket.socket, limit: int | None) -> None:
        upstream = socket.create_connection(self.upstream)

        def up() -> None:
            try:
                while data := client.recv(65536):
                    upstream.sendall(data)
            except OSError:
                pass

        threading.Thread(target=up, daemon=True).start()
        sent = 0
        try:
            while data := upstream.recv(65536):
                if limit is not None and sent + len(data) >= limit:
                    client.sendall(data[: limit - sent])
                    break
                client.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            for end in (client, upstream):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                end.close()

    def close(self) -> None:
        self.listener.close()


def _cut_then_resume(first: list[str], resume: list[str], out: Path, data: bytes) -> None:
    """Run a client whose download is cut part-way, then the same client resuming it."""
    subprocess.run(first, capture_output=True, timeout=60)
    kept = out.stat().st_size if out.exists() else 0
    assert 0 < kept < len(data), f"the first run was not cut part-way ({kept} of {len(data)} bytes)"
    assert out.read_bytes() == data[:kept]
    resumed = subprocess.run(resume, capture_output=True, text=True, timeout=60)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert hashlib.sha256(out.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest(), "not byte-exact"


@pytest.mark.parametrize("driver, download", [("fs", "proxy"), ("s3", "proxy"), ("s3", "redirect")])
def test_curl_and_wget_resume_a_cut_download_byte_exact(served, driver, download, tmp_path):
    for tool in ("curl", "wget"):
        if shutil.which(tool) is None:
            service_missing(f"{tool} (Debian package {tool})", "not installed; .ci/run installs it")
    data = os.urandom(2 * MIB + 12345)
    file_id = served.upload(data, f"{CANARY}.bin", "application/octet-stream")
    bearer = f"Authorization: {served.headers['Authorization']}"
    for tool in ("curl", "wget"):
        # The cut is on the way of the bytes: in front of the api, or (redirect) in front of the store, whose
        # presigned URLs name the proxy (file.s3.public_endpoint).
        cut = served.cut_proxy(download, limit=MIB)
        url = f"{served.base}/api/v1/files/{file_id}/content"
        link = served.link(file_id)
        through = (lambda u: u.replace(served.base, f"http://{cut.address}")) if download == "proxy" else (lambda u: u)
        out = tmp_path / f"by-{tool}.bin"
        if tool == "curl":
            _cut_then_resume(
                ["curl", "-sfL", "-H", bearer, "-o", str(out), through(url)],
                ["curl", "-sfL", "-H", bearer, "-C", "-", "-o", str(out), through(url)],
                out,
                data,
            )
        else:
            _cut_then_resume(
                ["wget", "-q", "-t", "1", "-O", str(out), through(link)],
                ["wget", "-nv", "-c", "-t", "1", "-O", str(out), through(link)],
                out,
                data,
            )
        assert cut.cuts >= 2  # the cut run, and the resuming one through the same way
        if cut is not served.store_cut:
            cut.close()


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>Lethe links</title></head><body>
<img id="picture" src="__IMAGE__">
<video id="clip" src="__VIDEO__" muted preload="auto" playsinline></video>
<img id="disguised" src="__HTML_AS_IMAGE__">
<iframe src="__HTML_AS_IMAGE__" sandbox="allow-scripts"></iframe>
<script>
const report = (result) => fetch('/result', { method: 'POST', body: JSON.stringify(result) });
const loaded = (img) => new Promise((resolve) => {
  if (img.complete) { resolve(img.naturalWidth > 0); return; }
  img.onload = () => resolve(img.naturalWidth > 0); img.onerror = () => resolve(false);
});
const once = (target, name) => new Promise((resolve) => target.addEventListener(name, resolve, { once: true }));
async function run () {
  if (sessionStorage.getItem('deleted')) {  // the same page, loaded again after deleteFile
    await report({ after_delete: await loaded(document.getElementById('picture')) });
    return;
  }
  const result = {};
  result.image = await loaded(document.getElementById('picture'));
  result.disguised = await loaded(document.getElementById('disguised'));
  const clip = document.getElementById('clip');
  if (clip.readyState < 1) await once(clip, 'loadedmetadata');
  result.duration = clip.duration;
  await clip.play();
  while (clip.currentTime < 0.5) await new Promise((r) => setTimeout(r, 50));
  result.played = clip.currentTime;
  clip.pause();
  clip.currentTime = 4.2;
  await once(clip, 'seeked');
  result.seeked = clip.currentTime;
  await report(result);
  // The test deletes the file now; the same page is then loaded again, as a reader's next visit (a document
  // keeps the images it decoded for as long as it lives, whatever their headers say).
  while ((await (await fetch('/step')).text()) !== 'deleted') await new Promise((r) => setTimeout(r, 100));
  sessionStorage.setItem('deleted', '1');
  location.reload();
}
run().catch((error) => report({ error: String(error) }));
</script></body></html>"""


def test_chromium_shows_plays_and_seeks_from_links_and_loses_the_image_after_delete(served, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        service_missing("Chromium (Debian package chromium)", "not installed; .ci/run installs it")
    if shutil.which("ffmpeg") is None:
        service_missing("ffmpeg (Debian package ffmpeg)", "not installed; .ci/run installs it")
    from tests.integration.test_serving import HTML, PNG

    video = tmp_path / "clip.webm"
    subprocess.run(
        [
            "ffmpeg",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "testsrc=duration=6:size=160x120:rate=10",
            "-c:v",
            "libvpx",
            "-b:v",
            "150k",
            "-g",
            "10",
            "-an",
            str(video),
        ],
        check=True,
        timeout=60,
    )
    image_id = served.upload(PNG, f"{CANARY}.png", "image/png")
    served.thumbnails(image_id, 3)  # shown inline through its preview
    video_id = served.upload(video.read_bytes(), f"{CANARY}.webm", "video/webm")
    ran: list[str] = []
    html = HTML.replace(b"document.title='ran'", b"fetch('http://127.0.0.1:{port}/ran')")
    page_port = free_port()
    html_id = served.upload(html.replace(b"{port}", str(page_port).encode()), f"{CANARY}.png", "image/png")
    links = {
        "__IMAGE__": served.link(image_id, "inline"),
        "__VIDEO__": served.link(video_id, "inline"),
        "__HTML_AS_IMAGE__": served.link(html_id, "inline"),
    }
    assert all(CANARY not in link for link in links.values())
    page_text = PAGE
    for marker, link in links.items():
        page_text = page_text.replace(marker, link)
    results: list[dict[str, Any]] = []
    reported = threading.Event()
    step = {"now": "wait"}

    @Request.application
    def page(request: Request) -> Response:
        if request.path == "/":
            return Response(page_text, mimetype="text/html")
        if request.path == "/result" and request.method == "POST":
            results.append(json.loads(request.get_data()))
            if len(results) == 1 and "error" not in results[0]:  # delete the image, then let the page look again
                served.delete(image_id)
                step["now"] = "deleted"
            else:
                reported.set()
            return Response("{}", mimetype="application/json")
        if request.path == "/step":
            return Response(step["now"], mimetype="text/plain")
        if request.path == "/ran":
            ran.append(request.path)
        return Response("", status=404)

    server = make_server("127.0.0.1", page_port, page, threaded=True)
    serve_in_thread(server, "page")
    # Real time, not a virtual time budget: the page waits on the media stack, which decodes in real time; a
    # budget spent by the page's polling timers ran out on a loaded machine before the video played, and the
    # browser quit with nothing reported. The browser runs until the page's second report, or two minutes.
    browser_log = tmp_path / "chromium.log"
    with browser_log.open("w") as log:
        browser_run = subprocess.Popen(
            [
                browser,
                *HEADLESS,
                "--autoplay-policy=no-user-gesture-required",
                f"--user-data-dir={tmp_path / 'profile'}",
                f"http://127.0.0.1:{page_port}/",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd=tmp_path,
        )
    try:
        reported.wait(timeout=120)
    finally:
        server.shutdown()
        browser_run.terminate()
        try:
            browser_run.wait(timeout=30)
        except subprocess.TimeoutExpired:
            browser_run.kill()
            browser_run.wait()
    if len(results) != 2:  # say what the page saw: its reports, the browser's own words, the server's log
        stderr = browser_log.read_text(errors="replace")
        raise AssertionError(f"the page reported {results}:\n{stderr[-3000:]}\n{served.api.tail()}")
    shown, after = results
    assert "error" not in shown, shown
    assert shown["image"] is True, shown
    assert 5.5 < shown["duration"] < 6.5 and shown["played"] >= 0.5, shown
    assert abs(shown["seeked"] - 4.2) < 0.3, shown
    assert shown["disguised"] is False and ran == [], "an HTML file uploaded as image/png was rendered"
    assert after == {"after_delete": False}, "the image still showed after deleteFile"
    # The video was fetched in byte ranges by Chromium's media stack, through the link
    metrics = requests.get(f"{served.base}/metrics", timeout=10).text
    ranged = [
        line
        for line in metrics.splitlines()
        if line.startswith("lethe_http_requests_total{") and "links" in line and 'status="206"' in line
    ]
    assert ranged and sum(float(line.rsplit(" ", 1)[1]) for line in ranged) >= 1, metrics[-2000:]
    # The HTML file's own answer says why it was never rendered
    answer = requests.get(links["__HTML_AS_IMAGE__"], timeout=10)
    assert answer.headers["Content-Type"] == "application/octet-stream"
    assert answer.headers["Content-Disposition"] == "attachment"
    assert (
        answer.headers["Content-Security-Policy"] == "sandbox" and answer.headers["X-Content-Type-Options"] == "nosniff"
    )
    assert re.fullmatch(r'"[0-9a-f]{24}"', answer.headers["ETag"])


VARIANT_PAGE = """<!DOCTYPE html><html><body><img id="thumb" src="__THUMB__">
<script>
const img = document.getElementById('thumb');
img.onload = () => { document.body.dataset.size = img.naturalWidth + 'x' + img.naturalHeight; };
img.onerror = () => { document.body.dataset.size = 'broken'; };
</script></body></html>"""


def _shown_size(page: Path) -> str:
    """What the page says of its image once it loaded or failed (`107x160`, `broken`), waited for in real time:
    under load a virtual time budget ran out before the image came back."""
    from selenium.webdriver.support.ui import WebDriverWait

    with webdriver() as driver:
        driver.get(page.as_uri())
        return str(
            WebDriverWait(driver, 60, poll_frequency=0.1).until(
                lambda _: driver.execute_script("return document.body.dataset.size")
            )
        )


def test_a_photos_thumbnail_loads_in_chromium_from_a_link_and_every_variant_goes_with_the_file(served, tmp_path):
    from tests.support import images

    # Given a phone's photo (GPS in its EXIF, stored sideways) uploaded through the api role
    photo = images.photo(600, 400, orientation=6)
    file_id = served.upload(photo, f"{CANARY}.jpg", "image/jpeg")
    shown = served.thumbnails(file_id, 3)
    assert [(t["name"], t["width"], t["height"]) for t in shown] == [
        ("thumb-small", 107, 160),
        ("thumb-large", 320, 480),
        ("preview", 400, 600),
    ]
    # When Chromium loads thumb-small from a link (no bearer header), it shows it upright
    page = tmp_path / "thumb.html"
    page.write_text(VARIANT_PAGE.replace("__THUMB__", served.link(file_id, "inline", "thumb-small")))
    assert _shown_size(page) == "107x160"
    fetched = requests.get(served.link(file_id, "inline", "preview"), timeout=10)
    assert fetched.headers["Content-Type"] == "image/webp" and images.metadata_of(fetched.content) == {}
    # and the original itself, shown inline or downloaded from a link, carries no position (its EXIF keeps the
    # camera and the orientation), its pixels those sent
    originals = [
        requests.get(served.link(file_id, disposition), timeout=10) for disposition in ("inline", "attachment")
    ]
    assert originals[0].headers["Content-Type"] == "image/jpeg" and originals[0].content == originals[1].content
    kept = images.metadata_of(originals[0].content)
    assert "gps" not in kept and kept["exif_tags"][0x0112] == 6 and kept["exif_tags"][0x010F] == "LetheCam"
    assert images.opened(originals[0].content).tobytes() == images.opened(photo).tobytes()
    # Then after deleteFile the same page shows it broken, and every variant leaves the store with the file
    served.delete(file_id)
    assert _shown_size(page) == "broken"
    root = Path(served.fs_root)
    assert root.is_dir(), "the roles run on fs here"
    deadline = time.monotonic() + 30
    while [path for path in root.rglob("*") if file_id in str(path)]:
        assert time.monotonic() < deadline, served.worker.tail()
        time.sleep(0.1)
    manager = {"Authorization": "Bearer " + mint_token(SECRET, uuid.uuid4(), ("files:read", "manage"))}
    deadline = time.monotonic() + 30
    while (
        receipt := requests.get(f"{served.base}/api/v1/receipts/{file_id}", headers=manager, timeout=10)
    ).status_code == 404:
        assert time.monotonic() < deadline, served.worker.tail()
        time.sleep(0.1)
    assert receipt.json()["variants_deleted"] == 3
