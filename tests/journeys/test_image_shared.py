"""A phone's photo, shared by link and then deleted, as people meet it: on fs with sealed files, and on SeaweedFS
with a versioned bucket and downloads redirected to it. The photo (GPS, XMP with a city, a maker note, serial
numbers, an EXIF thumbnail, a trailer) is sent by tuspy, a tus client no one here wrote, to the api and worker
roles. Every way a reader gets it (an inline link, an attachment link, a thumbnail's link, getFileContent and
its redirect) serves no position, the pixels and orientation as sent; then deleteFile, and every one of those
tried again finds nothing, in Lethe and in the store, and no name reached a log."""

from __future__ import annotations

import io
import time
import uuid

import pytest
import requests
from tusclient import client as tus_client

from app.domain.keys import original_key
from app.entry.token import mint_token
from tests.journeys.test_stop_and_restore import store_env
from tests.support import images
from tests.support.roles import start_api_and_worker, stop_roles
from tests.support.stores import versions_of

pytestmark = [pytest.mark.e2e, pytest.mark.journey]
SECRET = "shared-secret-of-sufficient-length-0123456789"
LINK_SECRET = "shared-link-secret-of-sufficient-length-0123456789"
CANARY = "Shared-Canary-7Qp-beach"


def wait_until(check, role, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, role.tail()
        time.sleep(0.1)
    return found


@pytest.mark.parametrize("driver", ["fs", "seaweed"])
def test_a_photo_shared_by_link_then_deleted(driver, role_env, start_role, tmp_path, request):
    env, store = store_env(driver, request, tmp_path)
    env = dict(role_env, **env, LETHE_AUTH_JWT_SECRET=SECRET, LETHE_FILE_LINK_SECRET=LINK_SECRET)
    if driver == "seaweed":  # a plaintext bucket whose reads are redirected to the store
        env.update(LETHE_FILE_S3_DOWNLOAD="redirect", LETHE_FILE_ENCRYPTION="off")
    api, worker, base = start_api_and_worker(start_role, env, tmp_path)
    auth = {"Authorization": "Bearer " + mint_token(SECRET, uuid.uuid4())}
    sent = images.tagged("jpeg")
    try:
        # Given a photo sent with a tus client, with its name and type in the tus metadata
        uploader = tus_client.TusClient(f"{base}/api/v1/tus", headers={**auth})
        url = uploader.uploader(
            file_stream=io.BytesIO(sent),
            chunk_size=len(sent),
            metadata={"filename": f"{CANARY}.jpg", "filetype": "image/jpeg"},
        ).create_url()
        upload = uploader.uploader(file_stream=io.BytesIO(sent), chunk_size=len(sent), url=url)
        upload.upload()
        file_id = url.rstrip("/").rsplit("/", 1)[1]

        def document():
            return requests.get(f"{base}/api/v1/files/{file_id}", headers=auth, timeout=10).json()

        wait_until(lambda: document()["scan_status"] != "pending" and len(document()["thumbnails"]) >= 3, worker)
        shown = document()

        def link(disposition: str, variant: str | None = None) -> str:
            made = requests.post(
                f"{base}/api/v1/files/{file_id}/links",
                headers=auth,
                timeout=10,
                json={"disposition": disposition, **({"variant": variant} if variant else {})},
            )
            assert made.status_code == 201, made.text
            assert CANARY not in made.text
            return made.json()["url"]

        links = {"inline": link("inline"), "attachment": link("attachment"), "thumbnail": link("inline", "thumb-small")}
        # When a reader opens each of them, and the uploader downloads the file
        answers = {name: requests.get(url, timeout=10) for name, url in links.items()}
        download = requests.get(
            f"{base}/api/v1/files/{file_id}/content", headers=auth, timeout=10, allow_redirects=False
        )
        if driver == "seaweed":
            assert download.status_code == 302 and CANARY not in download.headers["Location"]
            redirect = download.headers["Location"]
            download = requests.get(redirect, timeout=10)
        # Then none of them carries a position, a serial number, XMP, a maker note or the place's name
        originals = [answers["inline"].content, answers["attachment"].content, download.content]
        assert originals[0] == originals[1] == originals[2]
        assert answers["inline"].headers["Content-Type"] == "image/jpeg"
        assert answers["inline"].headers["Content-Disposition"] == "inline"
        assert images.leaked(originals[0]) == [] and images.metadata_of(answers["thumbnail"].content) == {}
        assert images.opened(originals[0]).tobytes() == images.opened(sent).tobytes()
        assert images.opened(originals[0]).getexif()[0x0112] == 6
        # the document describes the stored bytes, and the store holds no copy of what was sent
        assert shown["size_bytes"] == len(originals[0]) and shown["size_bytes"] < len(sent)
        assert versions_of(store, [original_key(file_id, 1)]) == []
        # When the uploader deletes it, every link, the thumbnail and the redirect find nothing
        assert requests.delete(f"{base}/api/v1/files/{file_id}", headers=auth, timeout=10).status_code == 204
        for name, url in links.items():
            again = requests.get(url, timeout=10)
            assert again.status_code == 404, (name, again.status_code)
        assert (
            requests.get(
                f"{base}/api/v1/files/{file_id}/content", headers=auth, timeout=10, allow_redirects=False
            ).status_code
            == 404
        )
        keys = [original_key(file_id, 1), original_key(file_id, 2)] + [
            f"{original_key(file_id, 1).rsplit('/', 1)[0]}/v-{name}"
            for name in ("thumb-small", "thumb-large", "preview", "poster")
        ]
        wait_until(lambda: versions_of(store, keys) == [], worker)
        if driver == "seaweed":
            assert requests.get(redirect, timeout=10).status_code in (403, 404)  # the handed-out URL, too
    finally:
        stop_roles([api, worker])
    for role in (api, worker):
        assert CANARY not in role.output(), "a file name reached a log"
