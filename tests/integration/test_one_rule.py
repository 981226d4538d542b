"""One rule for bytes, against the paths that broke it, on fs and on SeaweedFS with a versioned bucket (every
version, delete marker and multipart upload counted):

- the upload paths keep a held file's bytes: a tus PATCH that finds its session terminated, a native part whose
  record finds the upload aborted, a completion that races a deleteFile;
- a hold placed at any moment of a running purge of 1,000 files loses only the files whose removal had begun,
  and says so in the hold, the rows and the receipts;
- an erasure's counts stay exact when a hold stops it;
- repeated deletes answer alike for held and free files;
- an erasure makes the released holds forget the person; the audit calls a held upload held, not an orphan;
- tus creation-with-upload past Upload-Length creates nothing, or names what it created.
"""

from __future__ import annotations

import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from app.db.conn import one
from app.domain.keys import original_key, part_key
from app.errors import StorageError
from app.lifecycle import purge as purge_module
from app.lifecycle.audit import run_audit
from app.lifecycle.cleanup import run_cleanup
from app.lifecycle.erasure import erase_round
from app.lifecycle.purge import purge_files
from app.storage.base import MultipartRef
from tests.integration.test_tus import TUS, create, created_id, patch
from tests.support import zygote
from tests.support.faults import Failing, Interleaved
from tests.support.helpers import problem, residue, rows
from tests.support.lethe import ALEX, OWNER, SAM
from tests.support.stores import originals_held

STORES = pytest.mark.parametrize("raw_store", ["fs", "seaweed-versioned"], indirect=True)


def place(lethe, **target) -> dict[str, Any]:
    response = lethe.call(
        "POST", "/api/v1/holds", OWNER, json={"case_ref": "CASE-2026-0042", **{k: str(v) for k, v in target.items()}}
    )
    assert response.status_code == 201, response.json
    return response.json


def release(lethe, hold_id: str) -> None:
    assert lethe.call("DELETE", f"/api/v1/holds/{hold_id}", OWNER).status_code == 204


def intervals(lethe, count: int = 2) -> None:
    """Cleanup intervals past privacy.object_delete_delay, with every job run: nothing waits on a clock."""
    for _ in range(count):
        lethe.clock.advance(lethe.cfg.file.gc_interval + lethe.cfg.privacy.object_delete_delay)
        assert run_cleanup(lethe.rt).first_error is None
        lethe.run_jobs()


def parts_in_store(lethe, file_id: str, upload_id: str | None, count: int) -> list[int]:
    """The part numbers the store still holds of an upload: its part objects on fs, ListParts on S3."""
    if lethe.driver == "fs":
        return [n for n in range(1, count + 1) if lethe.raw_store.head(part_key(file_id, n)) is not None]
    try:
        return [
            part.part_number
            for part in lethe.raw_store.list_parts(MultipartRef(file_id, original_key(file_id), upload_id))
        ]
    except Exception:
        return []


def session_of(lethe, file_id: str):
    return rows(lethe, "upload_sessions", file_id=uuid.UUID(file_id))[0]


# -- 1. the upload paths keep held bytes ------------------------------------------------------------------------


@STORES
def test_a_tus_patch_that_finds_its_session_terminated_keeps_every_held_byte(lethe, swap_store):
    # Given Alex under a hold, with a tus upload of three parts of which the first is counted
    hold = place(lethe, subject_id=ALEX.id)
    part = lethe.part_size
    data = os.urandom(part * 3)
    file_id = created_id(create(lethe, len(data)))
    assert patch(lethe, file_id, 0, data[:part]).status_code == 204
    upload_id = session_of(lethe, file_id).storage_upload_id

    # When Alex terminates the upload while the PATCH of part 2 writes it
    def terminate():
        assert lethe.call("DELETE", f"/api/v1/tus/{file_id}", ALEX, headers=TUS).status_code == 204

    real = swap_store(lethe, Interleaved(lethe.rt.store, "put_part", terminate))
    problem(patch(lethe, file_id, part, data[part : 2 * part]), 410, "gone", "upload_terminated")
    lethe.rt.store = real

    # Then both parts stay (on S3 the multipart upload was not aborted to drop the stray one), past the purge
    # job and several cleanups, and go with the purge after the release
    assert parts_in_store(lethe, file_id, upload_id, 3) == [1, 2]
    lethe.run_jobs()
    intervals(lethe)
    assert parts_in_store(lethe, file_id, upload_id, 3) == [1, 2]
    release(lethe, hold["id"])
    lethe.run_jobs()
    assert residue(lethe.raw_store, file_id) == []


@STORES
def test_a_native_part_whose_record_finds_the_upload_aborted_keeps_every_held_byte(lethe, swap_store):
    hold = place(lethe, subject_id=ALEX.id)
    part = lethe.part_size
    data = os.urandom(part * 3)
    file_id = lethe.start_upload(ALEX, data)["file"]["id"]
    lethe.send_parts(ALEX, file_id, data[:part], part)
    upload_id = session_of(lethe, file_id).storage_upload_id

    def abort():
        assert lethe.call("DELETE", f"/api/v1/uploads/{file_id}", ALEX).status_code == 204

    real = swap_store(lethe, Interleaved(lethe.rt.store, "put_part", abort))
    response = lethe.call(
        "PUT",
        f"/api/v1/uploads/{file_id}/parts/2",
        ALEX,
        data=data[part : 2 * part],
        headers={"Content-Type": "application/octet-stream"},
    )
    problem(response, 409, "conflict", "upload_not_open")
    lethe.rt.store = real
    assert parts_in_store(lethe, file_id, upload_id, 3) == [1, 2]
    lethe.run_jobs()
    intervals(lethe)
    assert parts_in_store(lethe, file_id, upload_id, 3) == [1, 2]
    release(lethe, hold["id"])
    lethe.run_jobs()
    assert residue(lethe.raw_store, file_id) == []


@STORES
@pytest.mark.parametrize("held", [True, False])
def test_a_completion_that_races_a_delete_keeps_the_assembled_object_only_under_a_hold(lethe, swap_store, held):
    hold = place(lethe, subject_id=ALEX.id) if held else None
    data = os.urandom(lethe.part_size + 10)
    file_id = lethe.start_upload(ALEX, data)["file"]["id"]
    lethe.send_parts(ALEX, file_id, data, lethe.part_size)

    def delete():  # the parts went into the object; the completion has not recorded it yet
        assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204

    real = swap_store(lethe, Interleaved(lethe.rt.store, "complete_upload", delete))
    problem(lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX), 404, "not_found")
    lethe.rt.store = real
    if held:
        assert lethe.stored(file_id) == data  # every assembled byte, and its key, kept for the case
        lethe.run_jobs()
        intervals(lethe)
        assert lethe.stored(file_id) == data
        assert hold is not None
        release(lethe, hold["id"])
    else:
        assert lethe.raw_store.head(original_key(file_id)) is None  # removed at once, as before
    lethe.run_jobs()
    assert residue(lethe.raw_store, file_id) == [] and lethe.row(file_id) is None


# -- 2. repeated deletes tell nothing of a hold -----------------------------------------------------------------


@STORES
def test_repeated_deletes_answer_alike_for_a_held_and_a_free_file(lethe):
    place(lethe, subject_id=ALEX.id)
    held, free = lethe.upload(ALEX), lethe.upload(SAM)

    def answers(file_id, person):
        single = lethe.call("DELETE", f"/api/v1/files/{file_id}", person)
        batch = lethe.call("POST", "/api/v1/files/batch-delete", person, json={"ids": [file_id]})
        results = [{k: v for k, v in result.items() if k != "id"} for result in batch.json["results"]]
        return single.status_code, single.get_data(), dict(single.headers), batch.status_code, results

    assert lethe.call("DELETE", f"/api/v1/files/{held}", ALEX).status_code == 204
    assert lethe.call("DELETE", f"/api/v1/files/{free}", SAM).status_code == 204
    assert answers(held, ALEX) == answers(free, SAM)  # the held row waits, the free one too (not purged yet)
    lethe.run_jobs()
    assert lethe.row(held) is not None and lethe.row(free) is None  # only now do they differ, inside
    status, body, headers, batch_status, results = answers(held, ALEX)
    assert (status, body, headers, batch_status, results) == answers(free, SAM)
    assert status == 404 and results == [{"status": 404, "reason": "not_found"}]


# -- 7. a hold placed while a purge of 1,000 files runs ---------------------------------------------------------


def seed_deleted(lethe, uploader, count: int) -> list[uuid.UUID]:
    """`count` files of `uploader`, deleted, each with its original in the store (seeded, not uploaded: the
    purge is what is under test)."""
    ids = sorted(uuid.uuid4() for _ in range(count))
    now = lethe.clock.now()
    with psycopg.connect(lethe.cfg.database.url, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO files (id, uploaded_by, purpose, original_name, mime_type, size_bytes, object_key, "
            "upload_state, scan_status, created_at, last_change_at, deleted_at, deleted_via) VALUES "
            "(%s, %s, 'attachment', 'seeded.txt', 'text/plain', 5, %s, 'complete', 'clean', %s, %s, %s, 'file')",
            [(file_id, uploader.id, original_key(file_id), now, now, now) for file_id in ids],
        )
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda file_id: lethe.raw_store.put(original_key(file_id), b"bytes", 5), ids))
    return ids


@pytest.mark.parametrize(
    "raw_store, chunks_begun",
    [
        ("fs", 0),
        ("fs", 3),
        ("fs", 10),
        ("seaweed-versioned", 3),  # a real server once, in the middle: the edges are the same calls on fs
    ],
    indirect=["raw_store"],
)
def test_a_hold_placed_during_a_purge_of_1000_files_loses_only_what_had_begun_and_says_so(
    lethe, swap_store, chunks_begun
):
    # Given 1,000 deleted files of Alex in one purge job (the purge clears 100 at a time)
    ids = seed_deleted(lethe, ALEX, 1000)
    placed: dict[str, Any] = {}

    def hold():
        lethe.clock.advance(1)
        placed.update(place(lethe, subject_id=ALEX.id))

    # When a hold on Alex is placed right before the deletes of chunk k (its clearance committed: begun)
    if chunks_begun:
        swap_store(lethe, Interleaved(lethe.rt.store, "delete_many", hold, when="before", call=chunks_begun))
    else:
        hold()
    report = purge_files(lethe.rt, ids)

    # Then exactly the files of the begun chunks are lost, counted in the hold's answer, and nothing else went
    lost = ids[: chunks_begun * purge_module.PURGE_CHUNK]
    assert placed["files_lost"] == len(lost) and placed["files_deferred"] == len(ids) - len(lost)
    assert originals_held(lethe.raw_store, ids) == set(ids) - set(lost)
    assert report.results["row"] == 0 and len(rows(lethe, "files")) == 1000  # every row waits for the release
    begun = {row.id for row in rows(lethe, "files") if row.removal_begun_at is not None}
    assert begun == set(lost)  # the rows say which
    got = lethe.call("GET", f"/api/v1/holds/{placed['id']}", OWNER).json
    assert (got["files_lost"], got["files_deferred"]) == (len(lost), len(ids) - len(lost))
    # And after the release every file goes, the receipts telling the lost from the kept
    release(lethe, placed["id"])
    lethe.run_jobs()
    assert originals_held(lethe.raw_store, ids) == set() and rows(lethe, "files") == []
    receipts = {row.file_id: row for row in rows(lethe, "receipts")}
    assert {file_id for file_id, row in receipts.items() if row.hold_too_late} == set(lost)
    assert all(receipts[file_id].deferred_by_hold == uuid.UUID(placed["id"]) for file_id in ids)
    if lethe.driver != "fs":
        from tests.support.stores import all_versions

        assert all_versions(lethe.raw_store) == []


@STORES
def test_a_hold_racing_a_purge_at_a_moment_nobody_chose_keeps_exact_accounts(lethe, swap_store):
    # The hold is placed from another thread as the purge goes, without waiting for it: whatever the moment,
    # every file is either lost (its removal had begun, its row says so) or kept whole, never both or neither.
    ids = seed_deleted(lethe, ALEX, 1000)
    placed: dict[str, Any] = {}
    started = threading.Event()
    swap_store(
        lethe,
        Interleaved(
            lethe.rt.store,
            "delete_many",
            started.set,
            when="before",
            call=int.from_bytes(os.urandom(1), "big") % 10 + 1,
        ),
    )
    purging = threading.Thread(target=purge_files, args=(lethe.rt, ids))
    purging.start()
    assert started.wait(60)
    placed.update(place(lethe, subject_id=ALEX.id))  # races the next chunks' clearances
    purging.join(120)
    begun = {row.id for row in rows(lethe, "files") if row.removal_begun_at is not None}
    assert placed["files_lost"] == len(begun) and placed["files_deferred"] == 1000 - len(begun)
    assert originals_held(lethe.raw_store, ids) == set(ids) - begun


# -- 8. an erasure's counts, whatever interrupts its round -------------------------------------------------------


@STORES
def test_an_erasure_stopped_by_a_hold_counts_exactly_what_went_before(lethe, swap_store):
    # Given Alex's 12 files, and an erasure whose first round marks them and then meets a store outage
    files = [lethe.upload(ALEX, f"file {n}".encode()) for n in range(12)]
    erasure = lethe.call("POST", "/api/v1/erasures", OWNER, json={"subject_id": str(ALEX.id)}).json
    lethe.broker.take("erase_subject")
    real = swap_store(lethe, Failing(lethe.rt.store, "delete_many"))
    with pytest.raises(StorageError):
        erase_round(lethe.rt, uuid.UUID(erasure["id"]))
    lethe.rt.store = real
    # When the purge jobs the marks committed run (every file purged, each with its receipt), a hold is placed
    # on Alex, and the erasure's next round meets it
    lethe.run_jobs("purge_objects")
    assert len(rows(lethe, "receipts")) == 12 and rows(lethe, "files") == []
    place(lethe, subject_id=ALEX.id)
    assert erase_round(lethe.rt, uuid.UUID(erasure["id"])) == "failed"
    # Then the failed erasure counts and lists every file that went, with every key confirmed absent
    body = lethe.call("GET", f"/api/v1/erasures/{erasure['id']}", OWNER).json
    assert (body["state"], body["reason"]) == ("failed", "subject_on_hold")
    assert body["files_marked"] == 12 and body["files_purged"] == 12
    assert sorted(r["file_id"] for r in body["receipts"]) == sorted(files)
    assert body["keys_confirmed_absent"] == sum(r["keys_confirmed_absent"] for r in body["receipts"]) > 0
    assert all(residue(lethe.raw_store, file_id) == [] for file_id in files)


@STORES
def test_a_hold_landing_in_an_erasures_purge_keeps_what_had_not_begun_and_counts_the_rest(
    lethe, swap_store, monkeypatch
):
    monkeypatch.setattr(purge_module, "PURGE_CHUNK", 4)
    files = sorted(lethe.upload(ALEX, f"file {n}".encode()) for n in range(12))
    erasure = lethe.call("POST", "/api/v1/erasures", OWNER, json={"subject_id": str(ALEX.id)}).json
    placed: dict[str, Any] = {}

    def hold():
        lethe.clock.advance(1)
        placed.update(place(lethe, subject_id=ALEX.id))

    swap_store(lethe, Interleaved(lethe.rt.store, "delete_many", hold, when="before", call=2))
    erase_round(lethe.rt, uuid.UUID(erasure["id"]))
    assert erase_round(lethe.rt, uuid.UUID(erasure["id"])) == "failed"
    # chunks 1 and 2 (8 files) had begun: lost, and counted so; chunk 3 is kept whole
    assert placed["files_lost"] == 8 and placed["files_deferred"] == 4
    assert originals_held(lethe.raw_store, files) == set(files[8:])
    body = lethe.call("GET", f"/api/v1/erasures/{erasure['id']}", OWNER).json
    assert body["files_purged"] == 0 and body["receipts"] == []  # no row went: they wait for the release


# -- 4. an erased person leaves released holds ------------------------------------------------------------------


@STORES
def test_a_completed_erasure_makes_released_holds_forget_the_person(lethe):
    hold = place(lethe, subject_id=ALEX.id)
    release(lethe, hold["id"])
    other = place(lethe, subject_id=SAM.id)
    lethe.upload(ALEX)
    erasure = lethe.call("POST", "/api/v1/erasures", OWNER, json={"subject_id": str(ALEX.id)}).json
    lethe.run_jobs()
    for _ in range(3):
        if erase_round(lethe.rt, uuid.UUID(erasure["id"])) == "complete":
            break
        lethe.run_jobs()
    assert lethe.call("GET", f"/api/v1/erasures/{erasure['id']}", OWNER).json["state"] == "complete"
    forgotten = lethe.call("GET", f"/api/v1/holds/{hold['id']}", OWNER).json
    assert "subject_id" not in forgotten and forgotten["subject_forgotten"] is True
    assert forgotten["case_ref"] == "CASE-2026-0042" and forgotten["released_at"] == hold_released(lethe, hold)
    with psycopg.connect(lethe.cfg.database.url) as conn:
        assert one(conn.execute("SELECT count(*) FROM legal_holds WHERE subject_id = %s", (ALEX.id,)))[0] == 0
    assert lethe.call("GET", f"/api/v1/holds/{other['id']}", OWNER).json["subject_id"] == str(SAM.id)


def hold_released(lethe, hold) -> str:
    return lethe.call("GET", f"/api/v1/holds/{hold['id']}", OWNER).json["released_at"]


# -- 9. the audit calls a held upload held ----------------------------------------------------------------------


@pytest.mark.parametrize("raw_store", ["seaweed-versioned"], indirect=True)
def test_the_audit_reports_a_held_files_kept_upload_as_held_not_orphaned(lethe):
    place(lethe, subject_id=ALEX.id)
    data = os.urandom(lethe.part_size * 2)
    file_id = lethe.start_upload(ALEX, data)["file"]["id"]
    lethe.send_parts(ALEX, file_id, data[: lethe.part_size], lethe.part_size)
    assert lethe.call("DELETE", f"/api/v1/uploads/{file_id}", ALEX).status_code == 204
    lethe.run_jobs()
    report = run_audit(lethe.rt, delete=True, grace=timedelta(0)).as_dict()
    assert report["uploads_orphaned"]["count"] == 0 and report["uploads_aborted"] == 0
    assert report["uploads_held"] == {"count": 1, "file_ids": [file_id], "file_ids_truncated": False}
    assert parts_in_store(lethe, file_id, session_of(lethe, file_id).storage_upload_id, 2) == [1]


# -- 6. tus creation-with-upload past Upload-Length -------------------------------------------------------------


@pytest.mark.one_store
def test_a_creation_with_a_body_longer_than_its_upload_length_creates_nothing(lethe):
    response = create(lethe, 10, body=b"x" * 11)
    problem(response, 413, "payload_too_large", "past_upload_length")
    assert "Location" not in response.headers and rows(lethe, "files") == []


@pytest.mark.one_store
def test_a_creation_whose_body_of_no_length_runs_past_it_names_what_it_created(lethe):
    import io

    from app.domain.tus import encode_metadata

    headers = {
        **TUS,
        **ALEX.headers,
        "Upload-Length": "10",
        "Content-Type": "application/offset+octet-stream",
        "Upload-Metadata": encode_metadata({"filename": "a.txt"}),
        "Transfer-Encoding": "chunked",
    }
    response = lethe.client.post(
        "/api/v1/tus",
        headers=headers,
        input_stream=io.BytesIO(b"y" * 16),
        environ_overrides={"wsgi.input_terminated": True},
    )
    problem(response, 413, "payload_too_large", "past_upload_length")
    location = response.headers["Location"]
    assert lethe.call("DELETE", location, ALEX, headers=TUS).status_code == 204  # the client can end it


# -- 5. case references are ticket numbers of the installation's form --------------------------------------------


@pytest.mark.one_store
def test_the_case_reference_follows_the_configured_ticket_pattern(make_lethe):
    default = make_lethe()
    for case_ref, status in (
        ("CASE-2026-0042", 201),
        ("LIT-17", 201),
        ("Jane.Doe", 422),
        ("scan.pdf", 422),
        ("JANE-DOE", 422),
    ):
        response = default.call("POST", "/api/v1/holds", OWNER, json={"case_ref": case_ref, "subject_id": str(SAM.id)})
        assert response.status_code == status, case_ref
        if status == 422:
            assert response.json["reason"] == "case_ref_invalid" and case_ref not in response.get_data(as_text=True)
    dotted = make_lethe(**{"holds.case_ref_pattern": r"^INC\.[0-9]+$"})
    assert (
        dotted.call(
            "POST", "/api/v1/holds", OWNER, json={"case_ref": "INC.2041", "subject_id": str(SAM.id)}
        ).status_code
        == 201
    )
    assert (
        dotted.call(
            "POST", "/api/v1/holds", OWNER, json={"case_ref": "CASE-2026-0042", "subject_id": str(SAM.id)}
        ).status_code
        == 422
    )


def test_a_case_reference_pattern_that_is_no_regular_expression_is_a_configuration_error(database_url):
    import sys

    env = {
        **os.environ,
        "LETHE_DATABASE_URL": database_url,
        "LETHE_AUTH_JWT_SECRET": "x" * 32,
        "LETHE_HOLDS_CASE_REF_PATTERN": "^(CANARY-[0-9]+$",
    }
    result = zygote.run(
        [sys.executable, "-m", "app.entry", "config", "check"], env=env, capture_output=True, text=True, timeout=60
    )
    said = result.stdout + result.stderr  # `config check` prints its report on stdout
    assert result.returncode == 2 and "holds.case_ref_pattern" in said
    assert "CANARY" not in said and "Traceback" not in said
