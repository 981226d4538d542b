"""The deletion journal and the restore guard, drilled against a real backup (pg_dump, pg_restore) on fs and on
SeaweedFS with a versioned bucket: a database restored to before some deletions, an erasure and a hold answers
503 restore_pending to every data request until it has applied the journal again; after that every deleted file
is 404, no name of theirs and not the erased person's id is anywhere in the database, no version of their objects
is listed, the live files are intact and the hold is in force. The journal names nobody."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from app.db import journal as journal_sql
from app.db.conn import one
from app.domain.journal import JOURNAL_PREFIX, parse_segment, subject_hash
from app.lifecycle import journal, restore
from app.lifecycle.erasure import erase_round, request_erasure
from tests.support import zygote
from tests.support.helpers import problem, residue
from tests.support.lethe import ALEX, OWNER, ROBIN, SAM
from tests.support.pgtools import run_tool

STORES = pytest.mark.parametrize("raw_store", ["fs", "seaweed-versioned"], indirect=True)
CANARY = "Restore-Canary-7Qx"


def dump(url: str, path) -> None:
    """Last night's backup: pg_dump of the server's own major version (tests/support/pgtools.py)."""
    run_tool(url, "pg_dump", "-Fc", "-f", str(path), url)


def restore_dump(url: str, path) -> None:
    """Restore the dump over the database, as an operator restores last night's backup."""
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(url.replace(f"/{name}", "/postgres"), autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
    run_tool(url, "pg_restore", "--clean", "--if-exists", "--no-owner", "-d", url, str(path))


class ListingOf:
    """The store, with its listing (the journal's read) done by `listing(store, prefix, after)` instead."""

    def __init__(self, store, listing):
        self._store, self._listing = store, listing
        self.driver = store.driver

    def __getattr__(self, name):
        return getattr(self._store, name)

    def list_prefix(self, prefix, after=""):
        return self._listing(self._store, prefix, after)


def journal_read(lethe) -> tuple[str, list[Any]]:
    """The whole journal of the store as its text, and its entries (every segment verified)."""
    from app.domain.journal import read_segment

    installation = lethe.rt.db.read(journal_sql.state).installation_id
    texts: list[Any] = []
    entries: list[Any] = []
    for obj in lethe.rt.maintenance.list_prefix(JOURNAL_PREFIX):
        text = lethe.raw_store.get(obj.key).decode()
        texts.append(text)
        segment = parse_segment(obj.key, installation)
        if segment is not None:
            entries += read_segment(segment, text).entries
    return "".join(texts), entries


def place(lethe, **target) -> str:
    answer = lethe.call(
        "POST", "/api/v1/holds", OWNER, json={"case_ref": "CASE-2026-0042", **{k: str(v) for k, v in target.items()}}
    )
    assert answer.status_code == 201, answer.json
    return answer.json["id"]


def erase(lethe, person) -> None:
    erasure = request_erasure(lethe.rt, None, person.id)
    lethe.run_jobs()
    while erase_round(lethe.rt, erasure.id) == "running":
        lethe.run_jobs()
    lethe.run_jobs()


def settle(lethe) -> None:
    """Run every job, as the worker would, until none is left; then write the journal out."""
    for _ in range(5):
        lethe.run_jobs()
        lethe.run_retried()
    journal.flush(lethe.rt)


def everywhere(database_url: str) -> str:
    """Every value of every column of every table, as text: what a name could hide in."""
    with psycopg.connect(database_url) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                "AND table_type = 'BASE TABLE'"
            )
        ]
        return "\n".join(str(row) for table in tables for row in conn.execute(f'SELECT t::text FROM "{table}" t'))


@STORES
def test_a_restored_database_serves_no_deleted_file_and_applies_its_journal_again(make_lethe, database_url, tmp_path):
    lethe = make_lethe()
    # Given 20 files: Alex 10, Sam 3, Robin 7 (names carry a canary), written out to the journal
    files = {
        person.name: [
            lethe.upload(person, f"{person.name} {n}".encode() * 40, name=f"{CANARY}-{person.name}-{n}.txt")
            for n in range(count)
        ]
        for person, count in ((ALEX, 10), (SAM, 3), (ROBIN, 7))
    }
    link = lethe.call("POST", f"/api/v1/files/{files['Alex'][0]}/links", ALEX, json={}).json["url"]
    settle(lethe)
    backup = tmp_path / "lethe.dump"
    dump(database_url, backup)

    # When, after the backup: 5 of Alex's files are deleted (one held, then released), Sam is erased, and a hold is
    # placed on one of Robin's files
    held_then_released = files["Alex"][4]
    first_hold = place(lethe, file_id=held_then_released)
    deleted = files["Alex"][:5]
    for file_id in deleted:
        assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    settle(lethe)
    assert lethe.call("DELETE", f"/api/v1/holds/{first_hold}", OWNER).status_code == 204
    settle(lethe)
    erase(lethe, SAM)
    kept_hold = place(lethe, file_id=files["Robin"][0])
    settle(lethe)
    gone = deleted + files["Sam"]
    assert all(lethe.row(file_id) is None and residue(lethe.raw_store, file_id) == [] for file_id in gone)
    # The journal names nobody: ids, kinds and times; a person as a keyed hash
    text, entries = journal_read(lethe)
    assert {entry.kind for entry in entries} >= {
        "file.marked",
        "file.objects_gone",
        "file.row_removed",
        "erasure.completed",
        "hold.placed",
        "hold.released",
    }
    assert CANARY not in text and str(SAM.id) not in text and SAM.id.hex not in text
    key = lethe.rt.db.read(journal_sql.state).hash_key
    assert any(entry.subject == subject_hash(key, SAM.id) for entry in entries if entry.kind == "erasure.completed")
    lethe.close()

    # Then the backup is restored over the database and the roles start again
    restore_dump(database_url, backup)
    assert CANARY in everywhere(database_url)  # the restore brought the names back
    after = make_lethe(**{"journal.auto_reconcile": "false"})
    # From the first request on, no deleted file is served: every data request waits
    for file_id in gone:
        for path in (f"/api/v1/files/{file_id}", f"/api/v1/files/{file_id}/content"):
            problem(after.call("GET", path, ALEX), 503, "service_unavailable", "restore_pending")
    assert after.client.get(urlsplit(link).path).status_code == 503
    ready = after.client.get("/readyz")
    assert ready.status_code == 503 and ready.json["reason"] == "restore_pending"
    assert after.client.get("/healthz").status_code == 200
    assert journal.flush(after.rt) == 0  # nothing new is numbered before the journal is applied

    # When it is reconciled (twice: the second run finds nothing to do)
    dry = restore.reconcile(after.rt, dry_run=True)
    assert dry.entries > 0 and dry.files_marked == len(gone) and after.call("GET", "/healthz").status_code == 200
    report = restore.reconcile(after.rt)
    assert report.files_marked == len(gone) and report.erasures == 1 and report.holds_placed >= 1
    settle(after)
    for _ in range(3):
        for erasure_id in [
            row[0]
            for row in after.rt.db.read(
                lambda c: c.execute("SELECT id FROM erasures WHERE state = 'running'").fetchall()
            )
        ]:
            while erase_round(after.rt, erasure_id) == "running":
                after.run_jobs()
        settle(after)
    assert restore.reconcile(after.rt).entries == 0
    after.app.extensions["lethe.guard"].refresh()

    # Then every deleted file is 404, nothing of them or of Sam is in the database, no version of their objects
    for file_id in gone:
        problem(after.call("GET", f"/api/v1/files/{file_id}", OWNER), 404, "not_found")
        assert residue(after.raw_store, file_id) == []
    stored = everywhere(database_url)
    assert not any(f"{CANARY}-{name}" in stored for name in ("Sam",)) and str(SAM.id) not in stored
    for n in range(5):
        assert f"{CANARY}-Alex-{n}.txt" not in stored
    # the live files are intact and readable, the hold is in force
    for file_id in files["Alex"][5:] + files["Robin"]:
        assert after.call("GET", f"/api/v1/files/{file_id}/content", OWNER).status_code == 200
    hold = after.call("GET", f"/api/v1/holds/{kept_hold}", OWNER)
    assert hold.status_code == 200 and hold.json.get("released_at") is None
    assert after.call("DELETE", f"/api/v1/files/{files['Robin'][0]}", ROBIN).status_code == 204
    settle(after)
    assert after.raw_store.get(after.row(files["Robin"][0]).object_key)  # kept by the hold, as before the restore
    # receipts say the deletion was applied again after a restore
    receipt = after.call("GET", f"/api/v1/receipts/{deleted[1]}", OWNER)
    assert receipt.status_code == 200 and receipt.json["via"] == "restore"


@pytest.mark.one_store
def test_a_reconciliation_killed_half_way_continues_and_counts_once(make_lethe, database_url, tmp_path):
    lethe = make_lethe()
    ids = [lethe.upload(ALEX, b"x" * 100, name=f"{CANARY}-{n}.txt") for n in range(6)]
    journal.flush(lethe.rt)
    backup = tmp_path / "lethe.dump"
    dump(database_url, backup)
    for file_id in ids:
        assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    settle(lethe)
    lethe.close()
    restore_dump(database_url, backup)
    after = make_lethe(**{"journal.auto_reconcile": "false"})

    class Killed(Exception):
        pass

    seen = []

    def die_after_two(entry):
        seen.append(entry.seq)
        if len(seen) == 2:
            raise Killed

    total = restore.reconcile(after.rt, dry_run=True).entries
    with pytest.raises(Killed):
        restore.reconcile(after.rt, after_entry=die_after_two, batch_files=1)
    state = after.rt.db.read(journal_sql.state)
    assert state.reconciled_to == seen[-1] and state.position < seen[-1]  # resumes from here; still guarded
    assert journal.check(after.rt).behind
    report = restore.reconcile(after.rt)
    assert report.entries == total - 2  # it went on after the last entry it had applied, not from the start
    assert report.files_marked + 2 >= 0 and restore.reconcile(after.rt).entries == 0
    settle(after)
    assert all(after.row(file_id) is None for file_id in ids)
    assert not journal.check(after.rt).behind


@pytest.mark.one_store
def test_a_missing_journal_is_said_and_another_installations_journal_is_counted(make_lethe, database_url):
    lethe = make_lethe()
    lethe.upload(ALEX)
    # a journal the store cannot be asked about: the first check keeps data requests closed
    lethe.app.extensions["lethe.guard"].state = None

    def unreadable(store, prefix, after):
        from app.errors import StorageError

        raise StorageError("the store does not answer")

    real = lethe.rt.store
    lethe.rt.store = ListingOf(real, unreadable)
    try:
        lethe.app.extensions["lethe.guard"].refresh()
        problem(lethe.call("GET", "/api/v1/files", ALEX), 503, "service_unavailable", "journal_unreadable")
    finally:
        lethe.rt.store = real
    lethe.app.extensions["lethe.guard"].refresh()
    assert lethe.call("GET", "/api/v1/files", ALEX).status_code == 200
    # a journal of another installation in the same store is said by `status`
    other = "journal/00000000-0000-4000-8000-000000000001/0000000000000001-0000000000000001-20260101T000000Z.jsonl"
    lethe.raw_store.put(other, b"{}\n", 3)
    assert journal.status(lethe.rt)["other_installations"] == 1


@pytest.mark.one_store
def test_the_command_says_where_the_database_stands(make_lethe, database_url, tmp_path):
    lethe = make_lethe()
    file_id = lethe.upload(ALEX)
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204  # one entry waits
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"),
    }
    import sys

    shown = zygote.run(
        [sys.executable, "-m", "app.entry", "restore", "status", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["behind"] is False and status["pending"] >= 1
    dry = zygote.run(
        [sys.executable, "-m", "app.entry", "restore", "reconcile", "--dry-run", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert dry.returncode == 0 and json.loads(dry.stdout)["entries"] == 0


@pytest.mark.one_store
def test_a_flush_that_dies_after_its_write_is_never_taken_for_a_restore(make_lethe, monkeypatch):
    lethe = make_lethe()
    file_id = lethe.upload(ALEX)
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204

    def dies(*args, **kwargs):
        raise psycopg.OperationalError("the scheduler died between the write and the commit")

    monkeypatch.setattr(journal_sql, "finish", dies)
    with pytest.raises(psycopg.OperationalError):
        journal.flush(lethe.rt)
    monkeypatch.undo()
    installation = lethe.rt.db.read(journal_sql.state).installation_id
    segments = [obj for obj in lethe.rt.maintenance.list_prefix(JOURNAL_PREFIX) if parse_segment(obj.key, installation)]
    assert len(segments) == 1  # the segment is there
    state = journal.check(lethe.rt)
    assert not state.behind, state  # it was this installation's own write, recorded before it
    assert lethe.call("GET", "/api/v1/files", ALEX).status_code == 200
    assert journal.flush(lethe.rt) >= 1 and not journal.check(lethe.rt).behind  # written again, numbered again


@pytest.mark.one_store
def test_objects_gone_alone_deletes_nothing_and_a_file_hold_comes_back_without_its_row(
    make_lethe, database_url, tmp_path
):
    from datetime import datetime

    from app.domain.journal import Entry, render_segment, segment_key
    from app.storage.journal import JournalSink

    lethe = make_lethe()
    failed_live = uuid.UUID(lethe.upload(ALEX, name="kept.txt"))
    unknown = uuid.uuid4()  # a file uploaded after the backup: no row in the restored database
    state = lethe.rt.db.read(journal_sql.state)
    now = datetime.now(UTC)
    entries = [
        Entry("file.objects_gone", now, files=(failed_live,), seq=state.position + 1),
        Entry(
            "hold.placed", now, files=(unknown,), hold=uuid.uuid4(), case_ref="CASE-2026-0007", seq=state.position + 2
        ),
    ]
    JournalSink(lethe.rt.store, state.installation_id).write(
        segment_key(state.installation_id, entries[0].seq),
        render_segment(entries[0].seq, entries[-1].seq, None, entries),
    )
    assert journal.check(lethe.rt).behind
    report = restore.reconcile(lethe.rt)
    assert report.files_marked == 0 and report.holds_placed == 1
    assert lethe.row(failed_live).deleted_at is None  # a failed file's objects went; nobody deleted it
    held = lethe.rt.db.read(
        lambda conn: one(
            conn.execute("SELECT count(*) FROM legal_holds WHERE file_id = %s AND released_at IS NULL", (unknown,))
        )[0]
    )
    assert held == 1


@pytest.mark.one_store
def test_requests_arriving_during_the_first_journal_check_wait_for_its_answer(make_lethe, swap_store):
    """The first check of a process reads the journal; requests that arrive meanwhile (gunicorn's threads at
    start-up) wait for its answer instead of answering 503 journal_unreadable."""
    import threading

    lethe = make_lethe()
    entered, release = threading.Event(), threading.Event()

    def slow(store, prefix, after):
        entered.set()
        release.wait(10)
        return store.list_prefix(prefix, after)

    swap_store(lethe, ListingOf(lethe.rt.store, slow))
    statuses: list[int] = []

    def ask() -> None:
        statuses.append(lethe.app.test_client().get("/api/v1/files", headers=ALEX.headers).status_code)

    first = threading.Thread(target=ask)
    first.start()
    assert entered.wait(10)  # the first check is reading the journal
    others = [threading.Thread(target=ask) for _ in range(3)]
    for thread in others:
        thread.start()
    for thread in others:
        thread.join(0.5)  # before the fix they answered at once, 503
    release.set()
    for thread in [first, *others]:
        thread.join(10)
    assert statuses == [200, 200, 200, 200]


@pytest.mark.one_store
def test_the_leader_says_how_long_the_oldest_entry_has_waited_while_the_store_refuses_it(make_lethe, swap_store, clock):
    """The gauges behind the alert LetheJournalBehind are set by the leader's tick even when the tick cannot write
    (the store refuses): that is when they matter."""
    from prometheus_client import REGISTRY

    from scheduler.jobs import journal_tick
    from tests.integration.test_restore_drills import Leader
    from tests.support.faults import Down

    lethe = make_lethe()
    file_id = lethe.upload(ALEX)
    settle(lethe)
    guard = lethe.app.extensions["lethe.guard"]
    # Given a deletion committed while the store refuses every write
    original = swap_store(lethe, Down(lethe.rt.store, "put"))
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    clock.advance(90)
    # When the leader ticks
    journal_tick(lethe.rt, Leader(), guard)
    # Then the entry is counted and its age said
    assert (REGISTRY.get_sample_value("lethe_journal_pending") or 0) >= 1
    assert (REGISTRY.get_sample_value("lethe_journal_oldest_pending_seconds") or 0) >= 90
    # and once the store takes writes again, nothing waits
    lethe.rt.store = original
    journal_tick(lethe.rt, Leader(), guard)
    assert (REGISTRY.get_sample_value("lethe_journal_pending") or 0) == 0
    assert (REGISTRY.get_sample_value("lethe_journal_oldest_pending_seconds") or 0) == 0


@pytest.mark.one_store
def test_a_new_connection_to_another_database_is_checked_through_itself_on_a_pool_of_one(make_lethe):
    """The check a new connection to a changed database gets reads through that connection: the pool may have no
    other free (a pool of one here; under load, every other one busy)."""
    import time as clock_time

    lethe = make_lethe(**{"database.pool_size": "1", "database.pool_timeout": "2s"})
    file_id = lethe.upload(ALEX)
    guard = lethe.app.extensions["lethe.guard"]
    # Given the database's server looks restarted to this process (as after a failover), and a new connection
    guard._identity = (guard._identity[0], "another server start")
    lethe.rt.db.pool.check()  # the pool's connections are taken as they are; make the next one new
    with lethe.rt.db.pool.connection() as conn:
        conn.close()
    started = clock_time.monotonic()
    # When a request uses it, then the check runs through that same connection: no wait for a second one
    assert lethe.call("GET", f"/api/v1/files/{file_id}", ALEX).status_code == 200
    assert clock_time.monotonic() - started < 1.5
