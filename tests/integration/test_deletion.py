"""Deletion and purge (D5, D6, D7, D10, D12) through the API and the actor functions, on both drivers."""

from __future__ import annotations

import ast
import re
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from app.db import files as files_sql
from app.domain.keys import original_key, part_key
from app.errors import StorageError
from tests.support.faults import FailOnce
from tests.support.helpers import attach_while_a_request_waits, keys_of, problem, rows, wait_for_a_lock_waiter
from tests.support.lethe import ALEX, OWNER, SAM, Person

ROOT = Path(__file__).resolve().parents[2]
CANARY = "Canary-payroll-2026.xlsx"


def purge(lethe):
    return lethe.run_jobs("purge_objects")


# -- the one deletion function ---------------------------------------------------------------------------------


def test_exactly_one_statement_of_the_project_writes_files_deleted_at():
    writes = []
    for path in (
        list((ROOT / "app").rglob("*.py"))
        + list((ROOT / "workers").rglob("*.py"))
        + list((ROOT / "scheduler").rglob("*.py"))
        + list((ROOT / "app").rglob("*.sql"))
    ):
        text = path.read_text()
        strings = (
            [text]
            if path.suffix == ".sql"
            else [
                node.value
                for node in ast.walk(ast.parse(text))
                if isinstance(node, ast.Constant) and isinstance(node.value, str)
            ]
        )
        for sql in strings:
            squashed = " ".join(sql.split())
            if re.search(r"UPDATE files SET [^;]*\bdeleted_at\s*=", squashed, re.I) or re.search(
                r"INSERT INTO files \([^)]*\bdeleted_at\b", squashed, re.I
            ):
                writes.append(path.relative_to(ROOT).as_posix())
    assert writes == ["app/db/files.py"]
    callers = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "app").rglob("*.py")
        if "files_sql.set_deleted(" in path.read_text()
    ]
    assert callers == ["app/lifecycle/deletion.py"]


def test_delete_file_marks_redacts_and_purges(lethe):
    data = b"numbers nobody should keep"
    file_id = lethe.upload(ALEX, data, name=CANARY)
    assert lethe.stored(file_id) == data
    response = lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX)
    assert response.status_code == 204
    row = lethe.row(file_id)
    assert row.deleted_at == lethe.clock.now()
    events = lethe.call("GET", "/api/v1/events", ALEX).json["events"]
    assert events and all(e["redacted"] for e in events)
    assert CANARY not in str(events)
    stored = rows(lethe, "events")
    assert all(
        e.redacted_at is not None and CANARY not in str(e.payload) and "sha256" not in e.payload["file"] for e in stored
    )
    # The purge job was committed with the mark.
    assert purge(lethe) == 1
    assert lethe.row(file_id) is None
    assert all(lethe.store.head(k) is None for k in keys_of(file_id))
    # The events stay, redacted; the file is the same 404 as an unknown id.
    assert len(lethe.call("GET", "/api/v1/events", ALEX).json["events"]) == len(events)
    problem(lethe.call("GET", f"/api/v1/files/{file_id}", ALEX), 404, "not_found")


def test_a_rolled_back_deletion_leaves_no_mark_no_redaction_and_no_job(lethe):
    file_id = lethe.upload(ALEX)
    # A stored event of a type no redaction rule knows fails the deleting transaction (D6).
    lethe.rt.db.read(
        lambda conn: conn.execute(
            "INSERT INTO events (resource_kind, resource_id, type, schema_version, audience_principal_id, payload, "
            "created_at) VALUES ('file', %s, 'file.renamed', 1, %s, '{}', now())",
            (file_id, ALEX.id),
        )
    )
    # An internal error (a type without a redaction rule is a programming error): a 500 problem.
    problem(lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX), 500, "internal_error")
    assert lethe.row(file_id).deleted_at is None
    assert all(e.redacted_at is None for e in rows(lethe, "events"))
    assert rows(lethe, "outbox") == [] and lethe.broker.take("purge_objects") == []


# -- deleteFile's answer table (D12) ---------------------------------------------------------------------------


def test_delete_file_answer_table(lethe):
    own = lethe.upload(ALEX)
    attached = lethe.upload(ALEX)
    lethe.call("PUT", "/api/v1/messages/m1", ALEX, json={"file_ids": [attached]})
    avatar = lethe.upload(ALEX, purpose="avatar")
    reader = Person("Alex", "alex@example.com", ("files:read",))

    assert lethe.client.delete(f"/api/v1/files/{own}").status_code == 401
    problem(lethe.call("DELETE", f"/api/v1/files/{uuid.uuid4()}", ALEX), 404, "not_found")
    problem(lethe.call("DELETE", f"/api/v1/files/{own}", SAM), 404, "not_found")
    problem(lethe.call("DELETE", f"/api/v1/files/{own}", reader), 403, "forbidden")
    problem(lethe.call("DELETE", f"/api/v1/files/{attached}", ALEX), 409, "conflict", "file_attached")
    problem(lethe.call("DELETE", f"/api/v1/files/{avatar}", ALEX), 409, "conflict", "purpose_not_deletable")
    assert lethe.call("DELETE", f"/api/v1/files/{own}", ALEX).status_code == 204
    # deleted, the uploader: the same 404 as a purged or unknown id (the answer rests on the deletion, not on
    # whether the row still waits: a legal hold must not show)
    problem(lethe.call("DELETE", f"/api/v1/files/{own}", ALEX), 404, "not_found")
    problem(lethe.call("DELETE", f"/api/v1/files/{own}", SAM), 404, "not_found")  # deleted, anyone else
    problem(lethe.call("DELETE", f"/api/v1/files/{own}", OWNER), 404, "not_found")
    # manage may delete someone else's live file
    sams = lethe.upload(SAM)
    assert lethe.call("DELETE", f"/api/v1/files/{sams}", OWNER).status_code == 204


def test_the_404s_of_unknown_foreign_and_purged_ids_are_byte_identical(lethe):
    foreign = lethe.upload(SAM)
    purged = lethe.upload(ALEX)
    lethe.call("DELETE", f"/api/v1/files/{purged}", ALEX)
    purge(lethe)
    answers = []
    for file_id in (uuid.uuid4(), foreign, purged):
        for method in ("GET", "DELETE"):
            response = lethe.call(method, f"/api/v1/files/{file_id}", ALEX)
            answers.append((method, response.status_code, response.get_data(), tuple(sorted(response.headers.items()))))
    gets = {a[1:] for a in answers if a[0] == "GET"}
    deletes = {a[1:] for a in answers if a[0] == "DELETE"}
    assert len(gets) == 1 and len(deletes) == 1 and gets == deletes
    assert next(iter(gets))[0] == 404


def test_deleting_a_running_upload(lethe):
    data = b"p" * (lethe.part_size + 3)
    file_id = lethe.start_upload(ALEX, data)["file"]["id"]
    lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/1", ALEX, data=data[: lethe.part_size])
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    session = rows(lethe, "upload_sessions", file_id=file_id)[0]
    assert session.state == "aborted"
    problem(
        lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/2", ALEX, data=data[lethe.part_size :]), 404, "not_found"
    )
    purge(lethe)
    assert lethe.row(file_id) is None and rows(lethe, "upload_parts", file_id=file_id) == []
    if lethe.driver == "fs":
        assert lethe.store.head(part_key(file_id, 1)) is None
    else:
        listed = lethe.raw_store.client._list_multipart_uploads(lethe.raw_store.bucket)
        assert [u for u in listed.uploads if file_id in u.object_name] == []


# -- messages --------------------------------------------------------------------------------------------------


def test_delete_a_message_deletes_every_attached_file(lethe):
    one, two = lethe.upload(ALEX, name=CANARY), lethe.upload(ALEX)
    kept = lethe.upload(ALEX)
    lethe.call("PUT", "/api/v1/messages/m1", ALEX, json={"file_ids": [one, two]})
    problem(lethe.call("DELETE", "/api/v1/messages/m1", SAM), 404, "not_found")
    problem(lethe.call("DELETE", "/api/v1/messages/unknown", ALEX), 404, "not_found")
    assert lethe.call("DELETE", "/api/v1/messages/m1", ALEX).status_code == 204
    assert rows(lethe, "attachments") == []
    assert lethe.row(one).deleted_at is not None and lethe.row(two).deleted_at is not None
    # One purge message carries both ids.
    messages = [m for m in lethe.broker.messages if m.actor_name == "purge_objects"]
    assert len(messages) == 1 and sorted(messages[0].args[0]) == sorted([one, two])
    purge(lethe)
    assert lethe.row(one) is None and lethe.row(two) is None and lethe.row(kept) is not None
    assert lethe.call("DELETE", "/api/v1/messages/m1", ALEX).status_code == 204  # again
    problem(
        lethe.call("PUT", "/api/v1/messages/m1", ALEX, json={"file_ids": [kept]}), 409, "conflict", "message_deleted"
    )


def test_manage_may_delete_anyones_message_by_naming_its_author(lethe):
    file_id = lethe.upload(ALEX)
    lethe.call("PUT", "/api/v1/messages/m2", ALEX, json={"file_ids": [file_id]})
    # Ids are scoped by author: without author_id the manager names its own (absent) message m2.
    problem(lethe.call("DELETE", "/api/v1/messages/m2", OWNER), 404, "not_found")
    assert lethe.row(file_id).deleted_at is None
    assert lethe.call("DELETE", f"/api/v1/messages/m2?author_id={ALEX.id}", OWNER).status_code == 204
    assert lethe.row(file_id).deleted_at is not None


# -- failing transitions (D7) -----------------------------------------------------------------------------------


def test_an_abort_whose_immediate_delete_fails_is_purged_by_its_job(lethe, swap_store):
    data = b"q" * (lethe.part_size + 1)
    file_id = lethe.start_upload(ALEX, data)["file"]["id"]
    lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/1", ALEX, data=data[: lethe.part_size])
    real = swap_store(lethe, FailOnce(lethe.rt.store, "delete_many"))
    assert lethe.call("DELETE", f"/api/v1/uploads/{file_id}", ALEX).status_code == 204
    assert lethe.rt.store.failed
    if lethe.driver == "fs":
        assert real.head(part_key(file_id, 1)) is not None  # the immediate delete did not happen
    lethe.rt.store = real
    assert purge(lethe) == 1
    if lethe.driver == "fs":
        assert real.head(part_key(file_id, 1)) is None
    else:
        listed = lethe.raw_store.client._list_multipart_uploads(lethe.raw_store.bucket)
        assert [u for u in listed.uploads if file_id in u.object_name] == []
    assert lethe.call("GET", f"/api/v1/files/{file_id}", ALEX).json["upload_state"] == "failed"


@pytest.mark.parametrize("mode, outcome", [("eicar", "infected"), ("garbage", "error")])
def test_blocked_files_lose_their_objects_and_keep_their_row(make_lethe, clamd, mode, outcome, swap_store):
    lethe = make_lethe(**{"scan.clamd_address": clamd.address})
    clamd.mode = mode
    file_id = lethe.upload(ALEX, b"bad bytes")
    key = lethe.row(file_id).object_key
    assert lethe.stored(file_id) == b"bad bytes"
    # A purge whose first store call fails retries; the second run finishes (crash midway, STYLE.md).
    real = swap_store(lethe, FailOnce(lethe.rt.store, "delete_many"))
    with pytest.raises(StorageError):
        purge(lethe)
    lethe.rt.store = real
    # The bytes are still in the store, but their removal had begun: the key that opens them went with it.
    assert real.head(key) is not None and b"bad bytes" not in real.get(key)
    assert lethe.row(file_id).wrapped_key is None
    from workers.actors import ACTORS

    ACTORS["purge_objects"].fn(lethe.rt, [file_id])
    assert real.head(key) is None
    shown = lethe.call("GET", f"/api/v1/files/{file_id}", ALEX).json
    assert shown["scan_status"] == outcome and shown["upload_state"] == "complete"


def test_a_checksum_failure_purges_the_assembled_object(lethe):
    data = b"assembled then refused"
    created = lethe.start_upload(ALEX, data, sha256="0" * 64)
    file_id = created["file"]["id"]
    lethe.send_parts(ALEX, file_id, data, created["upload"]["part_size"])
    lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX)
    assert lethe.store.head(original_key(file_id)) is not None
    purge(lethe)
    assert lethe.store.head(original_key(file_id)) is None
    assert lethe.row(file_id).upload_state == "failed"


def test_a_stray_purge_never_touches_a_live_file(lethe):
    file_id = lethe.upload(ALEX)
    from workers.actors import ACTORS

    ACTORS["purge_objects"].fn(lethe.rt, [file_id, str(uuid.uuid4())])
    assert lethe.store.head(original_key(file_id)) is not None and lethe.row(file_id) is not None


def test_an_attached_deleted_row_is_kept_and_logged(lethe, caplog):
    file_id = lethe.upload(ALEX)
    lethe.call("PUT", "/api/v1/messages/m3", ALEX, json={"file_ids": [file_id]})
    # Simulate the internal error: a deleted row that is still attached (bypassing the services).
    from app.lifecycle.deletion import mark_deleted

    lethe.rt.db.unit_of_work(
        lambda uow: mark_deleted(uow, [uuid.UUID(file_id)], lethe.clock.now(), via="test"), name="test"
    )
    with caplog.at_level("ERROR", logger="lethe.purge"):
        purge(lethe)
    assert lethe.row(file_id) is not None
    assert any(getattr(r, "event", "") == "purge.kept_attached" and r.file_id == file_id for r in caplog.records)


# -- jobs that meet a deleted row (D9) --------------------------------------------------------------------------


def test_a_scan_delayed_while_the_file_is_deleted_ends_without_writes(make_lethe, clamd):
    lethe = make_lethe(**{"scan.clamd_address": clamd.address})
    clamd.mode = "hold"
    file_id = lethe.upload(ALEX, b"scan me slowly", scan=False)
    scan_jobs = lethe.broker.take("scan_file")
    from workers.actors import ACTORS

    errors = []

    def run_scan():
        try:
            ACTORS["scan_file"].fn(lethe.rt, *scan_jobs[0].args)
        except Exception as exc:
            errors.append(exc)

    scanner = threading.Thread(target=run_scan)
    scanner.start()
    assert clamd.started_event.wait(10)  # the scan holds the bytes at clamd
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    events_before = rows(lethe, "events")
    clamd.release()
    scanner.join(10)
    assert errors == []
    assert lethe.row(file_id).scan_status == "pending"  # no write
    assert rows(lethe, "events") == events_before
    purge(lethe)
    assert lethe.row(file_id) is None


# -- concurrency (D10) and no deduplication (K3) ---------------------------------------------------------------


@pytest.mark.one_store  # a database lock race: the store plays no part
def test_delete_and_attach_at_once_end_attached_or_deleted_never_both(lethe):
    for round_ in range(15):
        file_id = lethe.upload(ALEX)
        barrier = threading.Barrier(2)
        answers: dict[Any, Any] = {}

        def delete():
            barrier.wait()
            answers["delete"] = lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code

        def attach():
            barrier.wait()
            answers["attach"] = lethe.call(
                "PUT", f"/api/v1/messages/race-{round_}", ALEX, json={"file_ids": [file_id]}
            ).status_code

        threads = [threading.Thread(target=delete), threading.Thread(target=attach)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        row = lethe.row(file_id)
        attached = bool(rows(lethe, "attachments", file_id=file_id))
        assert not (attached and row.deleted_at is not None)
        if attached:
            assert answers == {"attach": 200, "delete": 409}
        else:
            assert row.deleted_at is not None and answers == {"attach": 409, "delete": 204}


def test_an_attach_that_waits_for_a_delete_sees_it_and_answers_409(lethe):
    """Forced order: the delete holds the file row (here the test runs mark_deleted itself, holding the
    lock) while the attach waits for it; after the commit the attach sees deleted_at (D10)."""
    from app.lifecycle.deletion import mark_deleted

    file_id = lethe.upload(ALEX)
    answers: dict[Any, Any] = {}
    with lethe.rt.db.pool.connection() as conn, conn.transaction():
        conn.execute("SELECT id FROM files WHERE id = %s FOR UPDATE", (file_id,))
        attach = threading.Thread(
            target=lambda: answers.setdefault(
                "attach",
                lethe.app.test_client()
                .put("/api/v1/messages/forced", headers=ALEX.headers, json={"file_ids": [file_id]})
                .status_code,
            )
        )
        attach.start()
        wait_for_a_lock_waiter(lethe.rt.db)
        from app.db.uow import UnitOfWork

        mark_deleted(
            UnitOfWork(conn=conn, name="test.delete", subscribers=lethe.rt.db.subscribers),
            [uuid.UUID(file_id)],
            lethe.clock.now(),
            "file",
        )
    attach.join(10)
    assert answers == {"attach": 409}
    assert lethe.row(file_id).deleted_at is not None and not rows(lethe, "attachments", file_id=file_id)


def test_a_delete_that_waits_for_an_attach_sees_it_and_answers_409(lethe):
    """Forced order: the attach holds the file row and commits its attachment while deleteFile waits; after
    the commit the delete sees the attachment (D10)."""
    file_id = lethe.upload(ALEX)
    answer = attach_while_a_request_waits(
        lethe, ALEX, file_id, lambda client: client.delete(f"/api/v1/files/{file_id}", headers=ALEX.headers)
    )
    assert answer["status"] == 409 and answer["reason"] == "file_attached"
    assert lethe.row(file_id).deleted_at is None


def test_a_purge_that_waits_for_another_removes_no_row_twice(lethe, monkeypatch):
    """Forced order: the first purge holds the row lock of its re-check while the second purge (objects
    already gone) waits for it; the second then finds no row and removes nothing (D7)."""
    from app.lifecycle.purge import purge_files

    file_id = lethe.upload(ALEX)
    lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX)
    lethe.broker.take()
    original = files_sql.lock_files
    second: dict[str, Any] = {}

    def first_holds_the_lock(conn, ids):
        locked = original(conn, ids)
        if not second:
            second["thread"] = threading.Thread(
                target=lambda: second.setdefault("removed", purge_files(lethe.rt, [file_id]).results["row"])
            )
            second["thread"].start()
            wait_for_a_lock_waiter(lethe.rt.db)
        return locked

    monkeypatch.setattr(files_sql, "lock_files", first_holds_the_lock)
    first = purge_files(lethe.rt, [file_id]).results["row"]
    second["thread"].join(10)
    assert (first, second["removed"]) == (1, 0)
    assert lethe.row(file_id) is None and all(lethe.store.head(k) is None for k in keys_of(file_id))


def test_two_purges_and_a_catch_up_of_one_file_at_once(lethe):
    from app.lifecycle.cleanup import run_cleanup
    from app.lifecycle.purge import purge_files

    file_id = lethe.upload(ALEX)
    lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX)
    lethe.broker.take()
    barrier = threading.Barrier(3)
    errors, removed = [], []

    def purge_job():
        barrier.wait()
        try:
            removed.append(purge_files(lethe.rt, [file_id]).results["row"])
        except Exception as exc:
            errors.append(exc)

    def catch_up():
        barrier.wait()
        try:
            report = run_cleanup(lethe.rt)
            assert report.first_error is None
            removed.append(report.step("d").acted)
        except Exception as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=purge_job),
        threading.Thread(target=purge_job),
        threading.Thread(target=catch_up),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert sum(removed) == 1  # one row delete among the three
    assert lethe.row(file_id) is None and all(lethe.store.head(k) is None for k in keys_of(file_id))


def test_no_deduplication_identical_bytes_stay_separate(lethe):
    data = b"the same bytes, twice"
    alexs, owners = lethe.upload(ALEX, data), lethe.upload(OWNER, data)
    assert lethe.row(alexs).sha256 == lethe.row(owners).sha256
    lethe.call("DELETE", f"/api/v1/files/{alexs}", ALEX)
    purge(lethe)
    assert lethe.row(alexs) is None
    assert lethe.row(owners).deleted_at is None
    assert lethe.stored(owners) == data
