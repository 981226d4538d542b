"""Quotas on fs, moto and SeaweedFS: a request that does not fit is refused before any row or byte (native, tus
and direct creation alike), reservations never pass the limit under concurrency, what a principal holds follows
every end of a file (completion, abort, expiry, failure, blocking, deletion, the purge, a hold and its release),
limits per purpose and by default, setQuota and getUsage with their access rules and bad input, and the drift
check of the counters against the rows."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.content import quotas
from app.lifecycle.cleanup import run_cleanup
from tests.support.helpers import problem, rows
from tests.support.lethe import ALEX, OWNER, SAM, Person, sha256

CANARY = "Canary-Q51-payroll"
TUS_METADATA = {"filename": f"{CANARY}.txt", "filetype": "text/plain"}


def set_quota(lethe, person: Person, **document: Any) -> dict[str, Any]:
    response = lethe.call("PUT", f"/api/v1/principals/{person.id}/quota", OWNER, json=document)
    assert response.status_code == 200, response.json
    return response.json


def usage(lethe, person: Person, caller: Person | None = None) -> dict[str, Any]:
    response = lethe.call("GET", f"/api/v1/principals/{person.id}/usage", caller or person)
    assert response.status_code == 200, response.json
    return response.json


def held(lethe, person: Person) -> tuple[int, int, int, int]:
    """(used bytes, used files, reserved bytes, reserved files) of all a person's files."""
    shown = usage(lethe, person)
    return shown["bytes"]["used"], shown["files"]["used"], shown["bytes"]["reserved"], shown["files"]["reserved"]


def create(lethe, person: Person, size: int, purpose: str = "attachment", **fields: Any):
    body = {"name": f"{CANARY}.pdf", "size_bytes": size, "mime_type": "application/pdf", "purpose": purpose, **fields}
    return lethe.call("POST", "/api/v1/uploads", person, json=body)


def everything(raw_store) -> set[Any]:
    """Every object (every version) and every multipart upload the store holds."""
    if raw_store.driver == "fs":
        return {listed.key for prefix in ("uploads/", "f/") for listed in raw_store.list_prefix(prefix)}
    found = {
        (item.object_name, item.version_id)
        for item in raw_store.client.list_objects(raw_store.bucket, recursive=True, include_version=True)
    }
    uploads = raw_store.client._list_multipart_uploads(raw_store.bucket).uploads
    return found | {("multipart", upload.object_name, upload.upload_id) for upload in uploads}


def no_drift(lethe) -> None:
    assert quotas.drift(lethe.rt) == []


def advance_past_the_delay(lethe) -> None:
    """Past privacy.object_delete_delay, a cleanup run, its jobs and the purges they publish."""
    lethe.clock.advance(lethe.cfg.file.gc_interval + lethe.cfg.privacy.object_delete_delay)
    report = run_cleanup(lethe.rt)
    assert report.ran and report.first_error is None
    lethe.run_jobs()


@pytest.mark.every_store
def test_an_upload_that_does_not_fit_is_refused_and_leaves_no_session_no_row_and_no_byte(lethe):
    set_quota(lethe, ALEX, max_bytes=100, max_files=10)
    lethe.upload(ALEX, b"x" * 60)
    files_before, store_before = rows(lethe, "files"), everything(lethe.raw_store)
    sessions_before = rows(lethe, "upload_sessions")
    body = problem(create(lethe, ALEX, 41), 413, "payload_too_large", "quota_exceeded")
    assert body["quota"] == {
        "purpose": None,
        "limit": {"bytes": 100, "files": 10},
        "usage": {"bytes": 60, "files": 1},
        "reservation": {"bytes": 41, "files": 1},
    }
    assert CANARY not in json.dumps(body)
    # tus creation is refused the same way (its answer carries the tus version)
    metadata = ",".join(f"{key} {base64.b64encode(value.encode()).decode()}" for key, value in TUS_METADATA.items())
    headers = {"Tus-Resumable": "1.0.0", "Upload-Length": "41", "Upload-Metadata": metadata}
    tus = lethe.call("POST", "/api/v1/tus", ALEX, headers=headers)
    assert tus.status_code == 413 and tus.json["reason"] == "quota_exceeded"
    assert tus.headers["Tus-Resumable"] == "1.0.0"
    assert rows(lethe, "files") == files_before and rows(lethe, "upload_sessions") == sessions_before
    assert everything(lethe.raw_store) == store_before  # no multipart upload begun and left on S3 either
    assert held(lethe, ALEX) == (60, 1, 0, 0)
    assert create(lethe, ALEX, 40).status_code == 201  # exactly up to the limit
    assert held(lethe, ALEX) == (60, 1, 40, 1)
    no_drift(lethe)


@pytest.mark.s3_only
def test_a_direct_upload_that_does_not_fit_is_refused_with_no_url_and_no_multipart_upload(make_lethe):
    lethe = make_lethe(**{"file.encryption": "off"})
    set_quota(lethe, ALEX, max_bytes=10)
    store_before = everything(lethe.raw_store)
    problem(create(lethe, ALEX, 11, transfer="direct"), 413, "payload_too_large", "quota_exceeded")
    assert everything(lethe.raw_store) == store_before and rows(lethe, "files") == []


@pytest.mark.every_store
def test_usage_follows_completion_deletion_the_purge_a_hold_and_its_release(lethe):
    set_quota(lethe, ALEX, max_bytes=1000)
    created = lethe.start_upload(ALEX, b"a" * 100)
    assert held(lethe, ALEX) == (0, 0, 100, 1)  # reserved before the first byte
    file_id = created["file"]["id"]
    lethe.send_parts(ALEX, file_id, b"a" * 100, created["upload"]["part_size"])
    assert lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX).status_code == 200
    assert held(lethe, ALEX) == (100, 1, 0, 0)  # the reservation became usage
    lethe.run_jobs("scan_file")
    assert held(lethe, ALEX) == (100, 1, 0, 0)
    # Deleted: gone for every reader at once, counted until its purge
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    shown = usage(lethe, ALEX)
    assert shown["bytes"]["used"] == 100 and shown["awaiting_purge"] == {"bytes": 100, "files": 1}
    advance_past_the_delay(lethe)
    assert lethe.row(file_id) is None
    shown = usage(lethe, ALEX)
    assert shown["bytes"]["used"] == 0 and shown["awaiting_purge"] == {"bytes": 0, "files": 0}
    # Held: the deleted file counts until the release lets the purge remove it
    hold = lethe.call("POST", "/api/v1/holds", OWNER, json={"case_ref": "CASE-2026-0051", "subject_id": str(ALEX.id)})
    assert hold.status_code == 201
    kept = lethe.upload(ALEX, b"b" * 70)
    assert lethe.call("DELETE", f"/api/v1/files/{kept}", ALEX).status_code == 204
    advance_past_the_delay(lethe)
    advance_past_the_delay(lethe)
    shown = usage(lethe, ALEX)
    assert shown["bytes"]["used"] == 70 and shown["held_by_holds"] == {"bytes": 70, "files": 1}
    assert lethe.call("DELETE", f"/api/v1/holds/{hold.json['id']}", OWNER).status_code == 204
    advance_past_the_delay(lethe)
    assert lethe.row(kept) is None and held(lethe, ALEX) == (0, 0, 0, 0)
    no_drift(lethe)


@pytest.mark.one_store
def test_abort_expiry_and_a_failed_completion_release_their_reservations(lethe):
    set_quota(lethe, ALEX, max_bytes=100)
    aborted = lethe.start_upload(ALEX, b"a" * 50)["file"]["id"]
    assert held(lethe, ALEX) == (0, 0, 50, 1)
    assert lethe.call("DELETE", f"/api/v1/uploads/{aborted}", ALEX).status_code == 204
    assert held(lethe, ALEX) == (0, 0, 0, 0)  # in the abort's own commit
    # A failed completion (the bytes are not the declared digest)
    created = lethe.start_upload(ALEX, b"b" * 60, sha256=sha256(b"other"))
    lethe.send_parts(ALEX, created["file"]["id"], b"b" * 60, created["upload"]["part_size"])
    problem(lethe.call("POST", f"/api/v1/uploads/{created['file']['id']}/complete", ALEX), 409, "conflict")
    assert held(lethe, ALEX) == (0, 0, 0, 0)
    # An expired session, ended by the cleanup
    lethe.start_upload(ALEX, b"c" * 100)
    problem(create(lethe, ALEX, 1), 413, "payload_too_large", "quota_exceeded")
    lethe.clock.advance(lethe.cfg.file.upload_session_ttl)
    assert run_cleanup(lethe.rt).ran
    assert held(lethe, ALEX) == (0, 0, 0, 0)
    assert create(lethe, ALEX, 100).status_code == 201
    no_drift(lethe)


@pytest.mark.one_store
def test_a_blocked_file_releases_what_it_used(make_lethe, clamd):
    lethe = make_lethe(**{"scan.clamd_address": clamd.address})
    clamd.mode = "eicar"
    set_quota(lethe, ALEX, max_files=1)
    lethe.upload(ALEX, b"virus")
    assert held(lethe, ALEX) == (0, 0, 0, 0)  # infected: it holds nothing, and the next upload fits
    assert create(lethe, ALEX, 5).status_code == 201
    no_drift(lethe)


@pytest.mark.one_store
def test_limits_per_purpose_by_default_and_a_principal_of_no_limit(make_lethe):
    lethe = make_lethe(**{"quotas.default_files": "2"})
    assert create(lethe, SAM, 1).status_code == 201 and create(lethe, SAM, 1).status_code == 201
    body = problem(create(lethe, SAM, 1), 413, "payload_too_large", "quota_exceeded")
    assert body["quota"]["limit"] == {"bytes": None, "files": 2}
    shown = set_quota(lethe, SAM, max_files=None)  # null: no limit for Sam, the default left for others
    assert shown["files"]["limit"] is None and shown["quota"] == {"max_files": None}
    assert create(lethe, SAM, 1).status_code == 201
    # a purpose's own limit, besides the default of all files
    set_quota(lethe, ALEX, max_files=10, purposes={"avatar": {"max_bytes": 10}})
    assert create(lethe, ALEX, 10, purpose="avatar").status_code == 201
    body = problem(create(lethe, ALEX, 1, purpose="avatar"), 413, "payload_too_large", "quota_exceeded")
    assert body["quota"]["purpose"] == "avatar" and body["quota"]["usage"] == {"bytes": 10, "files": 1}
    assert create(lethe, ALEX, 1).status_code == 201  # other purposes are limited by the whole only
    shown = usage(lethe, ALEX)
    assert shown["purposes"]["avatar"]["bytes"] == {"used": 0, "reserved": 10, "limit": 10}
    assert shown["files"] == {"used": 0, "reserved": 2, "limit": 10}
    # `{}`: back to the defaults
    assert set_quota(lethe, SAM)["files"]["limit"] == 2
    # A lower limit than what is held takes nothing away
    set_quota(lethe, ALEX, max_files=1)
    assert usage(lethe, ALEX)["files"]["reserved"] == 2
    problem(create(lethe, ALEX, 1), 413, "payload_too_large", "quota_exceeded")


@pytest.mark.one_store
def test_fifty_concurrent_creations_never_reserve_past_the_limit(lethe):
    set_quota(lethe, ALEX, max_bytes=10 * 100, max_files=1000)

    def one(_: int) -> int:
        client = lethe.app.test_client()
        body = {"name": "a.bin", "size_bytes": 100, "mime_type": "application/octet-stream"}
        return client.post("/api/v1/uploads", json=body, headers=ALEX.headers).status_code

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(50)))
    assert answers.count(201) == 10 and answers.count(413) == 40
    assert held(lethe, ALEX) == (0, 0, 1000, 10)
    no_drift(lethe)


@pytest.mark.one_store
def test_usage_is_the_principals_own_or_a_managers_and_quotas_are_set_by_managers(lethe):
    problem(lethe.call("GET", f"/api/v1/principals/{ALEX.id}/usage", SAM), 404, "not_found")
    assert lethe.call("GET", f"/api/v1/principals/{ALEX.id}/usage", OWNER).status_code == 200
    assert lethe.call("GET", f"/api/v1/principals/{ALEX.id}/usage").status_code == 401
    problem(lethe.call("PUT", f"/api/v1/principals/{ALEX.id}/quota", ALEX, json={"max_files": 9}), 403, "forbidden")
    for bad in (
        {"max_bytes": -1},
        {"max_files": "ten"},
        {"max_bytes": 1.5},
        {"purposes": {"pictures": {"max_files": 1}}},
        {"purposes": {"avatar": {"max_files": True}}},
        {"max_bytes": 2**63},
        {"limit": 5},
    ):
        problem(lethe.call("PUT", f"/api/v1/principals/{ALEX.id}/quota", OWNER, json=bad), 422, "invalid_request")
    problem(lethe.call("PUT", "/api/v1/principals/not-an-id/quota", OWNER, json={}), 404, "not_found")


@pytest.mark.one_store
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
        max_leaves=8,
    )
    | st.fixed_dictionaries(
        {},
        optional={
            "max_bytes": st.none() | st.integers() | st.text(max_size=4),
            "max_files": st.none() | st.integers(),
            "purposes": st.dictionaries(
                st.sampled_from(["avatar", "attachment", "x"]),
                st.dictionaries(st.sampled_from(["max_bytes", "max_files", "y"]), st.none() | st.integers()),
            ),
        },
    )
)
def test_any_quota_document_is_taken_or_refused_with_a_problem_never_a_500(lethe, body):
    response = lethe.call("PUT", f"/api/v1/principals/{SAM.id}/quota", OWNER, json=body)
    assert response.status_code in (200, 422), response.get_data(as_text=True)
    if response.status_code == 200:
        assert usage(lethe, SAM)["quota"] == response.json["quota"]


@pytest.mark.one_store
def test_the_drift_check_finds_counters_that_differ_from_the_rows(lethe, database_url, tmp_path):
    lethe.upload(ALEX, b"x" * 10)
    no_drift(lethe)
    env = {
        "LETHE_DATABASE_URL": database_url,
        "LETHE_AUTH_JWT_SECRET": "x" * 40,
        "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"),
        "PATH": "/usr/bin:/bin",
    }
    check = [sys.executable, "-m", "app.entry", "quota", "check"]
    assert subprocess.run(check, env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path).returncode == 0
    # Beside a role whose metrics directory is not there: the command's counters stay its own, no traceback
    beside = dict(env, PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "no-such-directory"))
    done = subprocess.run(check, env=beside, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    # A row written with the triggers off (a partial restore, a hand-made fix): the counters no longer match
    stray = uuid.uuid4()

    def bypass(uow):
        uow.conn.execute("SET LOCAL session_replication_role = replica")
        uow.conn.execute(
            "INSERT INTO files (id, uploaded_by, purpose, original_name, mime_type, size_bytes, upload_state, "
            "scan_status, created_at, last_change_at) VALUES (%s, %s, 'attachment', %s, 'text/plain', 7, "
            "'complete', 'skipped', now(), now())",
            (stray, ALEX.id, CANARY),
        )

    lethe.rt.db.unit_of_work(bypass, name="test.bypass")
    drifted = quotas.drift(lethe.rt)
    assert {(row.principal_id, row.purpose) for row in drifted} == {(ALEX.id, "*"), (ALEX.id, "attachment")}
    assert all(row.recorded.bytes == 10 and row.counted.bytes == 17 for row in drifted)
    done = subprocess.run(check, env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 1 and str(ALEX.id) in done.stdout, done.stdout + done.stderr
    assert CANARY not in done.stdout + done.stderr
    repaired = subprocess.run([*check, "--repair"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert repaired.returncode == 0 and "recounted" in repaired.stdout
    no_drift(lethe)
    assert held(lethe, ALEX) == (17, 2, 0, 0)
