"""Direct uploads (issue 26) on moto and SeaweedFS, plain and versioned buckets: the parts go straight to the
store through presigned URLs by plain HTTP PUTs (no credentials on the client side), the completion trusts
only the store's own list, and no path (complete, mismatch, abandon, a PUT racing the abort, erasure) leaves
a version, a delete marker or a multipart upload."""

from __future__ import annotations

import hashlib
import os
import uuid
from datetime import UTC, timedelta
from typing import Any

import pytest
import requests

from app.domain.keys import original_key
from app.lifecycle.audit import run_audit
from app.lifecycle.cleanup import run_cleanup
from tests.support.helpers import problem, rows
from tests.support.lethe import ALEX, OWNER, SAM
from tests.support.stores import all_versions, uploads_left

pytestmark = pytest.mark.s3_only


@pytest.fixture
def make_lethe(make_lethe):
    """A direct upload's bytes reach the store as the client sent them: this module runs with file.encryption
    off (with it on, a direct upload is refused: test_a_direct_upload_is_refused_while_files_are_sealed)."""
    return lambda **settings: make_lethe(**{"file.encryption": "off", **settings})


def create(lethe, data: bytes, person=ALEX, **fields):
    body = {
        "name": "Scan of a passport.pdf",
        "size_bytes": len(data),
        "mime_type": "application/pdf",
        "transfer": "direct",
        **fields,
    }
    return lethe.call("POST", "/api/v1/uploads", person, json=body)


def put(url: str, data: bytes) -> requests.Response:
    """A client's plain PUT to a presigned URL: no token, no credentials."""
    return requests.put(url, data=data, timeout=30)


def send_all(created: dict[str, Any], data: bytes) -> None:
    size = created["upload"]["part_size"]
    for part in created["upload"]["parts"]:
        n = part["number"]
        response = put(part["url"], data[(n - 1) * size : n * size])
        assert response.status_code == 200, response.text


def residue(lethe, file_id: str) -> list[Any]:
    """Every version and delete marker under the file's keys, and its multipart uploads."""
    store = lethe.raw_store
    found = [(item.object_name, item.version_id) for item in all_versions(store) if file_id in item.object_name]
    listed = store.client._list_multipart_uploads(store.bucket).uploads
    return found + [("multipart", upload.object_name) for upload in listed if file_id in upload.object_name]


def three_parts(lethe) -> bytes:
    return os.urandom(lethe.part_size * 2 + lethe.part_size // 3)  # two whole parts and a third, shorter


def test_fs_has_no_direct_uploads(tmp_path, database_url, clock):
    from app.storage.fs import FsStore
    from tests.support.database import truncate_all
    from tests.support.lethe import Lethe

    truncate_all(database_url)
    lethe = Lethe(database_url, FsStore(str(tmp_path / "fs")), clock)
    try:
        response = create(lethe, b"hello")
        problem(response, 422, "invalid_request", "direct_transfer_unavailable")
        assert rows(lethe, "files") == []
    finally:
        lethe.close()


def test_a_direct_upload_is_refused_while_files_are_sealed(make_lethe):
    sealed = make_lethe(**{"file.encryption": "on"})
    response = create(sealed, b"hello")
    problem(response, 422, "invalid_request", "direct_transfer_unsealed")
    assert "file.encryption" in response.json["detail"]
    assert rows(sealed, "files") == [] and residue(sealed, "") == []  # nothing begun in the store either


def test_a_three_part_direct_upload_completes_and_reads_back_equal(lethe, clock):
    data = three_parts(lethe)
    response = create(lethe, data, sha256=hashlib.sha256(data).hexdigest())
    assert response.status_code == 201, response.get_data(as_text=True)
    created = response.json
    upload = created["upload"]
    assert upload["transfer"] == "direct" and upload["part_count"] == 3
    assert [part["number"] for part in upload["parts"]] == [1, 2, 3]
    # The session and its multipart upload exist before any URL is given out.
    (session,) = rows(lethe, "upload_sessions", file_id=created["file"]["id"])
    assert session.protocol == "direct" and session.storage_upload_id
    assert uploads_left(lethe.raw_store, lethe.row(created["file"]["id"]).object_key) == [session.storage_upload_id]
    expires = min(session.expires_at, clock.now() + lethe.cfg.file.direct_url_ttl)
    assert {part["expires_at"] for part in upload["parts"]} == {expires.isoformat()}
    send_all(created, data)
    file_id = created["file"]["id"]
    shown = lethe.call("GET", f"/api/v1/uploads/{file_id}", ALEX).json
    assert shown["upload"]["transfer"] == "direct" and "parts" not in shown["upload"]
    completed = lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX, json={})
    assert completed.status_code == 200, completed.get_data(as_text=True)
    assert completed.json["upload_state"] == "complete" and completed.json["sha256"] == hashlib.sha256(data).hexdigest()
    assert lethe.store.get(lethe.row(file_id).object_key) == data
    assert [entry for entry in residue(lethe, file_id) if entry[0] != original_key(file_id)] == []
    lethe.run_jobs("scan_file")
    assert lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX).data == data


def test_the_api_takes_no_byte_of_a_direct_upload(lethe):
    created = create(lethe, b"12345").json
    file_id = created["file"]["id"]
    problem(
        lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/1", ALEX, data=b"12345"), 409, "conflict", "direct_upload"
    )


@pytest.mark.parametrize("how", ["other_bytes", "short_part", "extra_part"])
def test_a_part_that_breaks_the_plan_fails_the_file_and_leaves_nothing(lethe, how):
    data = three_parts(lethe)
    created = create(lethe, data, sha256=hashlib.sha256(data).hexdigest()).json
    file_id = created["file"]["id"]
    size = created["upload"]["part_size"]
    send_all(created, data)
    if how == "other_bytes":  # the same size, other bytes: only the digest can tell
        assert put(created["upload"]["parts"][1]["url"], os.urandom(size)).status_code == 200
        reason = "checksum_mismatch"
    elif how == "short_part":
        assert put(created["upload"]["parts"][1]["url"], data[size : 2 * size - 1]).status_code == 200
        reason = "size_mismatch"
    else:  # a part past the plan, signed by hand with the store's own credentials
        from app.storage.base import MultipartRef

        session = rows(lethe, "upload_sessions", file_id=file_id)[0]
        ref = MultipartRef(file_id, lethe.row(file_id).object_key, session.storage_upload_id)
        assert put(lethe.raw_store.presign_part(ref, 4, timedelta(minutes=1)), b"extra").status_code == 200
        reason = "size_mismatch"
    problem(lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX, json={}), 409, "conflict", reason)
    assert lethe.row(file_id).upload_state == "failed"
    lethe.run_jobs("purge_objects")
    assert residue(lethe, file_id) == []


def test_missing_parts_are_409_and_the_upload_stays_open(lethe):
    data = three_parts(lethe)
    created = create(lethe, data).json
    file_id = created["file"]["id"]
    size = created["upload"]["part_size"]
    assert put(created["upload"]["parts"][0]["url"], data[:size]).status_code == 200
    problem(lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX, json={}), 409, "conflict", "parts_missing")
    assert rows(lethe, "upload_sessions", file_id=file_id)[0].completing_since is None  # the claim was given back
    send_all(created, data)
    assert lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX, json={}).status_code == 200


def test_a_fresh_url_for_an_open_upload_only_and_only_its_uploader(lethe, clock):
    data = three_parts(lethe)
    created = create(lethe, data).json
    file_id = created["file"]["id"]
    response = lethe.call("POST", f"/api/v1/uploads/{file_id}/parts/2/url", ALEX)
    assert response.status_code == 200 and response.json["number"] == 2
    size = created["upload"]["part_size"]
    assert put(response.json["url"], data[size : 2 * size]).status_code == 200
    assert lethe.call("POST", f"/api/v1/uploads/{file_id}/parts/2/url", SAM).status_code == 404
    problem(
        lethe.call("POST", f"/api/v1/uploads/{file_id}/parts/4/url", ALEX), 409, "conflict", "part_number_out_of_range"
    )
    native = lethe.start_upload(ALEX, b"hello")["file"]["id"]
    problem(lethe.call("POST", f"/api/v1/uploads/{native}/parts/1/url", ALEX), 409, "conflict", "not_a_direct_upload")
    send_all(created, data)
    assert lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX, json={}).status_code == 200
    problem(lethe.call("POST", f"/api/v1/uploads/{file_id}/parts/2/url", ALEX), 409, "conflict", "upload_not_open")
    other = create(lethe, data).json["file"]["id"]
    clock.advance(lethe.cfg.file.upload_session_ttl)
    problem(lethe.call("POST", f"/api/v1/uploads/{other}/parts/1/url", ALEX), 410, "gone", "upload_expired")


def test_a_url_of_an_ended_session_takes_no_byte(lethe, request):
    data = three_parts(lethe)
    created = create(lethe, data).json
    file_id = created["file"]["id"]
    assert lethe.call("DELETE", f"/api/v1/uploads/{file_id}", ALEX).status_code == 204
    response = put(created["upload"]["parts"][0]["url"], data[: created["upload"]["part_size"]])
    # The store itself refuses it: the upload id no longer exists. SeaweedFS answers as S3 does (404
    # NoSuchUpload); moto's server fails on the unknown id with a 500 of its own.
    if request.node.callspec.params["raw_store"].startswith("seaweed"):
        assert response.status_code == 404 and "NoSuchUpload" in response.text, response.text
    else:
        assert response.status_code >= 400
    lethe.run_jobs("purge_objects")
    assert residue(lethe, file_id) == []


def test_an_abandoned_direct_upload_is_aborted_twice_and_confirmed_gone(lethe, clock):
    data = three_parts(lethe)
    created = create(lethe, data).json
    file_id = created["file"]["id"]
    assert put(created["upload"]["parts"][0]["url"], data[: created["upload"]["part_size"]]).status_code == 200
    clock.advance(lethe.cfg.file.upload_session_ttl)
    run_cleanup(lethe.rt)  # a: expired, its purge job committed
    lethe.run_jobs("purge_objects")
    assert residue(lethe, file_id) == []
    (abort,) = rows(lethe, "multipart_aborts", file_id=file_id)
    report = run_cleanup(lethe.rt)
    assert report.step("m").candidates == 0  # not due before file.direct_abort_delay
    clock.advance(lethe.cfg.file.direct_abort_delay + timedelta(seconds=1))
    report = run_cleanup(lethe.rt)
    assert (report.step("m").candidates, report.step("m").acted) == (1, 1)
    assert rows(lethe, "multipart_aborts", file_id=file_id) == []
    assert residue(lethe, file_id) == []


def test_a_part_that_lands_after_the_abort_is_aborted_again(lethe, clock, swap_store):
    """AWS: a part upload in progress while AbortMultipartUpload runs may still succeed, so abort again. The
    store here loses the purge's abort (what such a late part amounts to: the upload still listed after it);
    the cleanup's second abort, listing the key, takes it."""
    data = three_parts(lethe)
    created = create(lethe, data).json
    file_id = created["file"]["id"]
    assert put(created["upload"]["parts"][0]["url"], data[: created["upload"]["part_size"]]).status_code == 200
    original = lethe.store
    lost: list[Any] = []

    class LateParts:
        def __getattr__(self, name):
            return getattr(original, name)

        def abort_upload(self, ref, part_count):
            if not lost:
                lost.append(ref.upload_id)  # the abort ran, and a part in flight kept the upload alive
                return None
            return original.abort_upload(ref, part_count)

    swap_store(lethe, LateParts())
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    lethe.run_jobs("purge_objects")
    assert lethe.row(file_id) is None  # the row went with the purge
    key = original_key(file_id)
    assert uploads_left(lethe.raw_store, key) == lost  # still listed
    clock.advance(lethe.cfg.file.direct_abort_delay + timedelta(seconds=1))
    report = run_cleanup(lethe.rt)
    assert report.step("m").acted + report.step("m").kept == 1
    assert uploads_left(lethe.raw_store, key) == []
    run_cleanup(lethe.rt)
    assert rows(lethe, "multipart_aborts", file_id=file_id) == []
    assert residue(lethe, file_id) == []


def test_an_erasure_of_a_person_with_a_direct_upload_in_progress_leaves_nothing(lethe):
    data = three_parts(lethe)
    created = create(lethe, data).json
    file_id = created["file"]["id"]
    assert put(created["upload"]["parts"][0]["url"], data[: created["upload"]["part_size"]]).status_code == 200
    response = lethe.call("POST", "/api/v1/erasures", OWNER, json={"subject_id": str(ALEX.id)})
    assert response.status_code in (201, 202), response.get_data(as_text=True)
    lethe.run_jobs()
    erasure = lethe.call("GET", f"/api/v1/erasures/{response.json['id']}", OWNER).json
    assert erasure["state"] == "complete", erasure
    assert residue(lethe, file_id) == []


def test_the_audit_reports_and_aborts_a_multipart_upload_no_session_explains(lethe, clock):
    stray = uuid.uuid4()
    key = original_key(stray)
    ref = lethe.raw_store.begin_upload(str(stray), key, "application/octet-stream")
    live = create(lethe, b"12345").json["file"]["id"]
    report = run_audit(lethe.rt)
    assert report.uploads_orphaned.count == 1 and report.uploads_orphaned.file_ids == [str(stray)]
    assert uploads_left(lethe.raw_store, key) == [ref.upload_id]
    # The store dates the upload by the real clock: the test's clock moves past it, beyond the grace.
    from datetime import datetime

    clock.advance(max(datetime.now(UTC) - clock.now(), timedelta(0)) + timedelta(hours=2))
    report = run_audit(lethe.rt, delete=True, grace=timedelta(hours=1))
    assert report.uploads_aborted == 1
    assert uploads_left(lethe.raw_store, key) == []
    assert len(uploads_left(lethe.raw_store, original_key(live))) == 1  # a live session's upload stays


def test_direct_uploads_are_counted_apart(lethe):
    from prometheus_client import REGISTRY

    def count(transfer):
        return REGISTRY.get_sample_value("lethe_uploads_created_total", {"transfer": transfer}) or 0

    before = (count("direct"), count("api"))
    create(lethe, b"12345")
    lethe.start_upload(ALEX, b"12345")
    assert (count("direct"), count("api")) == (before[0] + 1, before[1] + 1)


def test_with_a_scanner_a_direct_upload_is_read_once_and_checked_before_it_is_deliverable(
    make_lethe, clamd, swap_store
):
    """Issue 26: with a scanner the declared sha256 is checked in the scan's read, so the bytes are read once;
    until then the file is not deliverable, and a mismatch fails it and purges it."""
    lethe = make_lethe(**{"scan.clamd_address": clamd.address})
    original = lethe.store
    opened: list[str] = []

    class Counting:
        def __getattr__(self, name):
            return getattr(original, name)

        def open(self, key, first=0, length=None):
            if length is None:  # a whole read (the completion's type detection reads the first 8 KiB alone)
                opened.append(key)
            return original.open(key, first, length)

    swap_store(lethe, Counting())
    for honest in (True, False):
        data = three_parts(lethe)
        created = create(lethe, data, sha256=hashlib.sha256(data).hexdigest()).json
        file_id = created["file"]["id"]
        sent = data if honest else data[:-5] + b"other"  # the same size, other bytes
        send_all(created, sent)
        completed = lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX, json={})
        assert completed.status_code == 200 and completed.json["upload_state"] == "complete", completed.json
        assert "sha256" not in completed.json  # not checked yet
        problem(
            lethe.call("PUT", "/api/v1/messages/m1", ALEX, json={"file_ids": [file_id]}),
            409,
            "conflict",
            "file_not_attachable",
        )  # not deliverable before its scan
        assert opened == []
        lethe.run_jobs("scan_file")
        assert opened == [lethe.row(file_id).object_key]  # one read: the scan's
        opened.clear()
        row = lethe.row(file_id)
        if honest:
            assert (row.upload_state, row.scan_status, row.sha256) == (
                "complete",
                "clean",
                hashlib.sha256(data).hexdigest(),
            )
        else:
            assert row.upload_state == "failed"
            lethe.run_jobs("purge_objects")
            assert residue(lethe, file_id) == []
