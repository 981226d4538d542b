"""Answers that say why, as a newcomer meets them: an empty file is an ordinary file (native and tus, on every
store, up to its purge); a 403 names the missing scope; a 413 states the limit; /metrics has one charset; the
root points at the docs; a manager's deleteFile is recorded as such; the installation's own id is no person to
erase."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.test_tus import create, created_id
from tests.support.helpers import problem, residue
from tests.support.lethe import ALEX, OWNER, SAM, Person

STORES = pytest.mark.parametrize("raw_store", ["fs", "s3-versioned", "seaweed-versioned"], indirect=True)
READER = Person("Alex", "alex@example.com", ("files:read",))


@STORES
@pytest.mark.parametrize("transfer", ["native", "tus"])
def test_an_empty_file_is_uploaded_scanned_served_and_purged_like_any(lethe, transfer):
    if transfer == "native":
        file_id = lethe.upload(ALEX, b"", name="empty.txt")
    else:
        file_id = created_id(create(lethe, 0, name="empty.txt"))  # whole at its creation
        lethe.run_jobs("scan_file")
    shown = lethe.call("GET", f"/api/v1/files/{file_id}", ALEX).json
    assert (shown["size_bytes"], shown["upload_state"], shown["scan_status"]) == (0, "complete", "skipped")
    content = lethe.call("GET", f"/api/v1/files/{file_id}/content", ALEX)
    assert content.status_code == 200 and content.data == b""
    assert lethe.stored(file_id) == b""  # sealed: one empty segment, authenticated
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    lethe.run_jobs()
    assert lethe.row(file_id) is None and residue(lethe.raw_store, file_id) == []


@pytest.mark.one_store
def test_a_403_names_the_scope_the_token_lacks(lethe):
    body = problem(
        lethe.call("POST", "/api/v1/uploads", READER, json={"name": "a", "size_bytes": 1, "mime_type": "text/plain"}),
        403,
        "forbidden",
        "scope_missing",
    )
    assert "files:write" in body["detail"]
    body = problem(lethe.call("GET", "/api/v1/holds", ALEX), 403, "forbidden", "scope_missing")
    assert "manage" in body["detail"]


@pytest.mark.one_store
def test_a_413_states_the_limit(make_lethe):
    lethe = make_lethe(**{"file.max_size": "1MiB"})
    body = problem(
        lethe.call(
            "POST",
            "/api/v1/uploads",
            ALEX,
            json={"name": "a", "size_bytes": 2 * 1024 * 1024, "mime_type": "text/plain"},
        ),
        413,
        "payload_too_large",
        "file_too_large",
    )
    assert "1 MiB" in body["detail"] and "file.max_size" in body["detail"]
    file_id = lethe.start_upload(ALEX, b"x" * 10)["file"]["id"]
    too_big = lethe.call(
        "PUT",
        f"/api/v1/uploads/{file_id}/parts/1",
        ALEX,
        data=b"x" * (lethe.part_size + 65 * 1024),
        headers={"Content-Type": "application/octet-stream"},
    )
    body = problem(too_big, 413, "payload_too_large")
    assert "at most" in body["detail"]


@pytest.mark.one_store
def test_metrics_say_their_charset_once_and_the_root_points_at_the_docs(lethe):
    metrics = lethe.client.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["Content-Type"].count("charset") == 1
    root = lethe.client.get("/")
    assert root.status_code == 200 and root.json["docs"] == "/docs" and root.json["openapi"] == "/openapi.json"


@pytest.mark.one_store
def test_a_managers_deletefile_of_anothers_file_is_recorded_as_the_managers(lethe):
    theirs, mine = lethe.upload(ALEX), lethe.upload(OWNER)
    assert lethe.call("DELETE", f"/api/v1/files/{theirs}", OWNER).status_code == 204
    assert lethe.call("DELETE", f"/api/v1/files/{mine}", OWNER).status_code == 204
    lethe.run_jobs()
    receipts = {file_id: lethe.call("GET", f"/api/v1/receipts/{file_id}", OWNER).json for file_id in (theirs, mine)}
    assert (receipts[theirs]["via"], receipts[mine]["via"]) == ("manager", "file")
    assert str(OWNER.id) not in str(receipts) and str(ALEX.id) not in str(receipts)  # nobody is named


@pytest.mark.one_store
def test_the_installations_own_id_is_no_person_to_erase(lethe):
    problem(
        lethe.call("POST", "/api/v1/erasures", OWNER, json={"subject_id": str(uuid.UUID(int=0))}),
        422,
        "invalid_request",
        "subject_reserved",
    )
    assert lethe.call("POST", "/api/v1/erasures", OWNER, json={"subject_id": str(SAM.id)}).status_code == 202
