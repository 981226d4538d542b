"""Restores people actually meet, on fs and on SeaweedFS with a versioned bucket, each against a real backup
(pg_dump, pg_restore): a journal damaged past the backup (lines removed, cut short, garbled, a segment gone) keeps
every data request waiting with a reason of its own, named by segment and line, until it is mended; a backup taken
before the journal existed waits for the adoption of the journal the store holds, and applies all of it, the
erased person included; a replayed erasure has run before the guard lifts; the journal written at commit by the
process that committed it, with entries spooled when the database cannot be reached and found again after a
restore; two writers share one journal without a number lost or given twice. In none is a deleted file, a name
or an erased person's data served for a single request after the restore."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from app.db import journal as journal_sql
from app.db.migrate import MIGRATIONS, migrate
from app.domain.journal import JOURNAL_PREFIX, is_spooled, parse_segment, read_segment
from app.lifecycle import journal, restore
from scheduler.jobs import journal_tick
from tests.integration.test_journal import dump, erase, everywhere, restore_dump, settle
from tests.support import zygote
from tests.support.helpers import problem
from tests.support.lethe import ALEX, OWNER, SAM, SECRET

STORES = pytest.mark.parametrize("raw_store", ["fs", "seaweed-versioned"], indirect=True)
CANARY = "Drill-Canary-9Kd"


class Leader:
    """The scheduler's leadership, held (the tests call the leader's tick themselves)."""

    def is_leader(self) -> bool:
        return True


def segments(lethe) -> list[Any]:
    """This installation's segments, in journal order, with their text."""
    installation = lethe.rt.db.read(journal_sql.state).installation_id
    found = []
    for obj in lethe.rt.maintenance.list_prefix(JOURNAL_PREFIX):
        segment = parse_segment(obj.key, installation)
        if segment is not None:
            found.append((segment, lethe.raw_store.get(obj.key).decode()))
    return sorted(found, key=lambda item: item[0].first)


def served(lethe, person, file_ids) -> list[int]:
    """What each file's content answers now (a deleted file must never answer 200)."""
    return [lethe.call("GET", f"/api/v1/files/{file_id}/content", person).status_code for file_id in file_ids]


def cli_env(lethe, database_url: str) -> dict[str, Any]:
    """The environment an operator's command gets: the same database and store."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_AUTH_JWT_SECRET": SECRET,
        "LETHE_FILE_KEYRING": os.environ.get("LETHE_FILE_KEYRING", ""),
    }
    from tests.support.keyring import SEALED_ENV

    env.update(SEALED_ENV)
    if lethe.driver == "fs":
        env["LETHE_FILE_FS_ROOT"] = lethe.raw_store.root
    else:
        s3 = lethe.cfg.file.s3
        env.update(
            {
                "LETHE_FILE_STORAGE_DRIVER": "s3",
                "LETHE_FILE_S3_ENDPOINT": lethe.raw_store.endpoint,
                "LETHE_FILE_S3_BUCKET": lethe.raw_store.bucket,
                "LETHE_FILE_S3_ACCESS_KEY": "testing",
                "LETHE_FILE_S3_SECRET_KEY": "testing",
                "LETHE_FILE_S3_REGION": s3.region or "us-east-1",
                "LETHE_FILE_S3_SECURE": "false",
            }
        )
    return env


def lethe_command(args: list[str], env: dict[str, Any], cwd: Path) -> subprocess.CompletedProcess[Any]:
    return zygote.run(
        [sys.executable, "-m", "app.entry", *args], capture_output=True, text=True, env=env, timeout=120, cwd=cwd
    )


def deleted_after_a_backup(make_lethe, database_url, tmp_path):
    """Given 8 files and a backup; after it, one file deleted and written out, then four deleted together (one
    segment of four entries), then their purges: three segments past the backup. Returns the closed Lethe, the
    deleted ids, the live ids and the segments past the backup."""
    lethe = make_lethe()
    ids = [lethe.upload(ALEX, f"{CANARY} {n}".encode() * 20, name=f"{CANARY}-{n}.txt") for n in range(8)]
    settle(lethe)
    position = lethe.rt.db.read(journal_sql.state).position
    dump(database_url, tmp_path / "before.dump")
    deleted, live = ids[:5], ids[5:]
    assert lethe.call("DELETE", f"/api/v1/files/{deleted[0]}", ALEX).status_code == 204
    journal.flush(lethe.rt)
    for file_id in deleted[1:]:
        assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    journal.flush(lethe.rt)
    settle(lethe)
    past = [(segment, text) for segment, text in segments(lethe) if segment.first > position]
    assert len(past) >= 3 and len(past[1][1].splitlines()) == 5  # a header and four entries
    lethe.close()
    return deleted, live, past


def damage(kind: str, text: str) -> str:
    lines = text.splitlines(keepends=True)
    if kind == "lines_removed":
        return "".join(lines[:2] + lines[5:])  # three of its entries gone, as an editor or a tool leaves it
    if kind == "truncated":
        return text[: len(text) * 2 // 3]  # a write cut short
    return "".join(lines[:3]) + "\x00\x17{garbled" + "".join(lines[3:])[7:]


@STORES
@pytest.mark.parametrize("kind", ["lines_removed", "truncated", "garbled", "missing"])
def test_a_damaged_journal_keeps_every_request_waiting_names_the_segment_and_is_mended(
    make_lethe, database_url, tmp_path, kind
):
    deleted, live, past = deleted_after_a_backup(make_lethe, database_url, tmp_path)
    restore_dump(database_url, tmp_path / "before.dump")
    broken, original = past[1]
    # Given a restored database and a damaged segment past its position
    after = make_lethe(**{"journal.auto_reconcile": "true"})
    if kind == "missing":
        after.raw_store.delete(broken.key)  # a bucket's lifecycle rule, an operator's mistake
    else:
        after.raw_store.put(broken.key, damage(kind, original).encode(), len(damage(kind, original).encode()))
    # Then no deleted file is served, from the first request on
    assert 200 not in served(after, ALEX, deleted)
    # When the journal is applied again, by the leader or by the operator
    guard = after.app.extensions["lethe.guard"]
    assert journal_tick(after.rt, Leader(), guard) == 0  # no traceback: said, and the guard stays up
    with pytest.raises(restore.JournalDamaged) as info:
        restore.reconcile(after.rt)
    where = info.value.damage.where
    assert where == broken.key or (kind == "missing" and where.endswith("(missing)"))
    if kind == "lines_removed":
        assert info.value.damage.line is not None or "digest" in info.value.damage.what
    guard.refresh()
    for file_id in deleted:
        problem(
            after.call("GET", f"/api/v1/files/{file_id}/content", ALEX), 503, "service_unavailable", "journal_damaged"
        )
    ready = after.client.get("/readyz")
    assert ready.status_code == 503 and ready.json["reason"] == "journal_damaged"
    # The operator's commands name the segment (and the line), exit 2, and print no traceback
    env = cli_env(after, database_url)
    for args in (["restore", "status"], ["restore", "reconcile"]):
        answer = lethe_command(args, env, tmp_path)
        assert answer.returncode == 2, answer.stdout + answer.stderr
        assert (broken.key if kind != "missing" else "(missing)") in answer.stderr
        assert "Traceback" not in answer.stderr and CANARY not in answer.stdout + answer.stderr
    assert 200 not in served(after, ALEX, deleted)
    # When the segment is put back (from a copy, or a version the bucket kept), the journal applies
    after.raw_store.put(broken.key, original.encode(), len(original.encode()))
    report = restore.reconcile(after.rt)
    assert report.files_marked == len(deleted)
    settle(after)
    guard.refresh()
    for file_id in deleted:
        problem(after.call("GET", f"/api/v1/files/{file_id}", ALEX), 404, "not_found")
    assert served(after, ALEX, live) == [200] * len(live)
    assert not any(f"{CANARY}-{n}.txt" in everywhere(database_url) for n in range(5))


@pytest.mark.one_store
def test_an_accepted_damage_applies_what_can_be_read_and_lifts_the_guard(make_lethe, database_url, tmp_path):
    deleted, live, past = deleted_after_a_backup(make_lethe, database_url, tmp_path)
    restore_dump(database_url, tmp_path / "before.dump")
    broken, original = past[1]
    after = make_lethe(**{"journal.auto_reconcile": "false"})
    after.raw_store.put(broken.key, damage("garbled", original).encode(), len(damage("garbled", original).encode()))
    with pytest.raises(restore.JournalDamaged) as info:
        restore.reconcile(after.rt)
    # The operator accepts the loss of the garbled line (docs/operations.md): the rest applies
    report = restore.reconcile(after.rt, accept=[info.value.damage.where])
    assert report.entries >= 3 and not journal.check(after.rt).behind
    after.app.extensions["lethe.guard"].refresh()
    assert after.call("GET", f"/api/v1/files/{deleted[0]}", ALEX).status_code == 404


def make_pre_journal(database_url: str) -> None:
    """Turn a restored database into one from before the journal existed: its journal tables and their
    migrations gone, as a backup taken before the release that brought the journal restores."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        for name in ("0022.journal_at_commit", "0020.journal"):
            conn.execute((MIGRATIONS / f"{name}.rollback.sql").read_text())
            conn.execute("DELETE FROM _yoyo_migration WHERE migration_id = %s", (name,))


@STORES
def test_a_backup_from_before_the_journal_adopts_the_journal_and_serves_nothing_it_ended(
    make_lethe, database_url, tmp_path
):
    lethe = make_lethe()
    alex = [lethe.upload(ALEX, b"alex " * 30, name=f"{CANARY}-alex-{n}.txt") for n in range(4)]
    sams = lethe.upload(SAM, b"sam " * 30, name=f"{CANARY}-sam.txt")
    assert lethe.call(
        "PUT", "/api/v1/drafts/note", SAM, json={"text": f"{CANARY} Sam's words", "file_ids": [sams]}
    ).status_code in (200, 204)
    settle(lethe)
    old_installation = lethe.rt.db.read(journal_sql.state).installation_id
    dump(database_url, tmp_path / "before.dump")
    # After the backup: two of Alex's files deleted, Sam erased; all of it in the journal
    for file_id in alex[:2]:
        assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    settle(lethe)
    erase(lethe, SAM)
    settle(lethe)
    lethe.close()
    # When the backup restored is one from before the journal (its database knew no journal), and migrated
    restore_dump(database_url, tmp_path / "before.dump")
    make_pre_journal(database_url)
    migrate(database_url)
    after = make_lethe(**{"journal.auto_reconcile": "true"})
    assert after.rt.db.read(journal_sql.state).installation_id != old_installation  # a new installation id
    # Then nothing is served: the database waits for the store's journal to be adopted
    guard = after.app.extensions["lethe.guard"]
    guard.refresh()
    for file_id in alex[:2] + [sams]:
        problem(
            after.call("GET", f"/api/v1/files/{file_id}/content", ALEX if file_id != sams else SAM),
            503,
            "service_unavailable",
            "journal_adoption_pending",
        )
    problem(after.call("GET", "/api/v1/drafts", SAM), 503, "service_unavailable", "journal_adoption_pending")
    # When the leader's tick runs: the only other installation's journal is adopted and applied
    journal_tick(after.rt, Leader(), guard)
    state = after.rt.db.read(journal_sql.state)
    assert state.installation_id == old_installation and state.adopted_from is not None
    guard.refresh()
    assert guard.reason() is None
    settle(after)
    # Then the deleted files are gone, and so is everything of Sam (matched under the hash key kept beside the
    # journal: the database that made it is gone)
    for file_id in alex[:2] + [sams]:
        problem(after.call("GET", f"/api/v1/files/{file_id}", OWNER), 404, "not_found")
    assert after.call("GET", "/api/v1/drafts", SAM).json["drafts"] == []
    stored = everywhere(database_url)
    assert f"{CANARY} Sam's words" not in stored and str(SAM.id) not in stored
    assert f"{CANARY}-alex-0.txt" not in stored and f"{CANARY}-alex-3.txt" in stored
    assert served(after, ALEX, alex[2:]) == [200, 200]


@pytest.mark.one_store
def test_several_other_journals_wait_for_the_operator_who_adopts_one_and_refuses_another(
    make_lethe, database_url, tmp_path
):
    lethe = make_lethe()
    file_id = lethe.upload(ALEX)
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    settle(lethe)
    mine = lethe.rt.db.read(journal_sql.state).installation_id
    # A database older than its journal, beside its own installation's journal and a stranger's
    stranger = uuid.uuid4()
    lethe.raw_store.put(f"journal/{stranger}/0000000000000001.jsonl", b"x\n", 2)
    lethe.upload(ALEX, name="kept.txt")
    lethe.rt.db.unit_of_work(
        lambda uow: uow.conn.execute(
            "UPDATE journal_state SET installation_id = gen_random_uuid(), position = 0, reconciled_at = NULL"
        ),
        name="test.pre_journal",
    )
    guard = lethe.app.extensions["lethe.guard"]
    guard.refresh()
    assert set(guard.state.adoptable) == {str(mine), str(stranger)}
    journal_tick(lethe.rt, Leader(), guard)  # two candidates: the leader does not choose
    assert guard.refresh().reason == "journal_adoption_pending"
    env = cli_env(lethe, database_url)
    answer = lethe_command(["restore", "status"], env, tmp_path)
    assert answer.returncode == 1 and str(stranger) in answer.stdout
    assert lethe_command(["restore", "foreign", str(stranger)], env, tmp_path).returncode == 0
    assert lethe_command(["restore", "adopt", str(uuid.uuid4())], env, tmp_path).returncode == 2  # no such journal
    adopted = lethe_command(["restore", "adopt", str(mine)], env, tmp_path)
    assert adopted.returncode == 0, adopted.stderr
    reconciled = lethe_command(["restore", "reconcile"], env, tmp_path)
    assert reconciled.returncode == 0, reconciled.stderr
    assert guard.refresh().reason is None
    assert lethe.call("GET", f"/api/v1/files/{file_id}", OWNER).status_code == 404


@STORES
def test_a_replayed_erasure_has_run_before_the_guard_lifts(make_lethe, database_url, tmp_path):
    lethe = make_lethe()
    sams = [lethe.upload(SAM, b"sam " * 30, name=f"{CANARY}-sam-{n}.txt") for n in range(2)]
    assert lethe.call(
        "PUT", "/api/v1/drafts/note", SAM, json={"text": f"{CANARY} draft", "file_ids": sams}
    ).status_code in (200, 204)
    settle(lethe)
    dump(database_url, tmp_path / "before.dump")
    erase(lethe, SAM)
    settle(lethe)
    lethe.close()
    restore_dump(database_url, tmp_path / "before.dump")
    after = make_lethe(**{"journal.auto_reconcile": "false"})
    problem(after.call("GET", "/api/v1/drafts", SAM), 503, "service_unavailable", "restore_pending")
    restore.reconcile(after.rt)  # no worker runs any job here
    after.app.extensions["lethe.guard"].refresh()
    # The first request after the guard lifted finds nothing of Sam
    assert after.call("GET", "/api/v1/drafts", SAM).json["drafts"] == []
    for file_id in sams:
        assert after.call("GET", f"/api/v1/files/{file_id}/content", SAM).status_code == 404
    assert f"{CANARY} draft" not in everywhere(database_url)


# -- the journal written at commit ----------------------------------------------------------------------------


def wait_until(condition, timeout_s: float = 15.0) -> None:
    """Poll a condition the product reaches by itself (bounded; never a window slept)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.01)


def journaled_files(lethe) -> set[str]:
    return {
        str(file_id)
        for segment, text in segments(lethe)
        for entry in read_segment(segment, text).entries
        for file_id in entry.files
    }


@STORES
def test_the_process_that_commits_writes_the_journal_without_a_scheduler(make_lethe):
    lethe = make_lethe(journal_writes="background")
    file_id = lethe.upload(ALEX)
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    # Nobody flushes: the api process's writer does it right after the commit, the segment first, then the
    # pending row goes (a moment later: the writer's own round after the segment's write)
    wait_until(lambda: file_id in journaled_files(lethe))
    wait_until(lambda: lethe.rt.db.read(journal_sql.pending_count) == 0)


@pytest.mark.one_store
def test_a_steady_trickle_of_deletions_shares_segments_instead_of_making_one_each(make_lethe):
    """A round of the writer costs a few milliseconds of its process's CPU: under a steady trickle of commits, the
    rounds are paced by journal.write_interval, not by the commits (a segment per deletion before)."""
    lethe = make_lethe(journal_writes="background", **{"journal.write_interval": "300ms"})
    ids = [lethe.upload(ALEX) for _ in range(12)]
    settle(lethe)
    before = len(segments(lethe))
    started = time.monotonic()
    for file_id in ids:
        assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    took = time.monotonic() - started
    wait_until(lambda: set(ids) <= journaled_files(lethe))
    written = len(segments(lethe)) - before
    # at most a round to begin with and one per interval the deletions lasted, and a last one
    assert written <= 2 + int(took / 0.3), (written, took)


@pytest.mark.one_store
def test_an_entry_committed_to_a_database_then_lost_is_spooled_and_found_after_the_restore(
    make_lethe, database_url, tmp_path, monkeypatch
):
    lethe = make_lethe(journal_writes="background")
    ids = [lethe.upload(ALEX, name=f"{CANARY}-{n}.txt") for n in range(2)]
    settle(lethe)
    dump(database_url, tmp_path / "before.dump")

    # Given the database's host lost right after a delete committed: the writer cannot number its entry
    def unreachable(*args, **kwargs):
        raise psycopg.OperationalError("the server closed the connection unexpectedly")

    monkeypatch.setattr(journal_sql, "claim_next", unreachable)
    assert lethe.call("DELETE", f"/api/v1/files/{ids[0]}", ALEX).status_code == 204
    installation = lethe.rt.db.read(journal_sql.state).installation_id

    def spooled() -> list[str]:
        return [
            obj.key for obj in lethe.rt.maintenance.list_prefix(JOURNAL_PREFIX) if is_spooled(obj.key, installation)
        ]

    wait_until(lambda: len(spooled()) == 1)  # from the process's memory, into the journal's spool
    assert CANARY not in lethe.raw_store.get(spooled()[0]).decode()
    # While the same database is there, the spool is no restore: its entries are known
    assert journal.check(lethe.rt).reason is None
    # When the database is restored from the backup (the lost host's data is gone), and the process stops
    restore_dump(database_url, tmp_path / "before.dump")
    monkeypatch.undo()
    lethe.close()
    after = make_lethe(**{"journal.auto_reconcile": "false"})
    # Then the spooled deletion is found: nothing is served until it is applied
    problem(after.call("GET", f"/api/v1/files/{ids[0]}/content", ALEX), 503, "service_unavailable", "restore_pending")
    report = restore.reconcile(after.rt)
    assert report.spooled == 1 and report.files_marked == 1
    after.app.extensions["lethe.guard"].refresh()
    assert after.call("GET", f"/api/v1/files/{ids[0]}/content", ALEX).status_code == 404
    assert after.call("GET", f"/api/v1/files/{ids[1]}/content", ALEX).status_code == 200
    # and the spooled entry is numbered in the journal, after which its spool object goes
    journal.flush(after.rt)
    assert journal.settle_spool(after.rt) == 1 and spooled() == []
    assert ids[0] in journaled_files(after)


@pytest.mark.one_store
def test_a_database_restored_under_a_running_writer_stops_it_and_keeps_its_entries(make_lethe, database_url, tmp_path):
    lethe = make_lethe()
    ids = [lethe.upload(ALEX) for _ in range(3)]
    settle(lethe)
    dump(database_url, tmp_path / "before.dump")
    assert lethe.call("DELETE", f"/api/v1/files/{ids[0]}", ALEX).status_code == 204
    journal.flush(lethe.rt)
    # Given the database restored under this process (its writer saw a later position)
    lethe.rt.db.close()
    restore_dump(database_url, tmp_path / "before.dump")
    from app.db.pool import Database

    lethe.rt.db = Database(
        database_url,
        pool_size=4,
        clock=lethe.clock,
        subscribers=lethe.rt.db.subscribers,
        on_journal=lethe.rt.journal.committed,
    )
    # Then the writer numbers nothing over the journal's numbers, and the guard sees the restore
    assert journal.flush(lethe.rt) == 0
    assert journal.check(lethe.rt).behind
    assert restore.reconcile(lethe.rt).files_marked == 1


@pytest.mark.one_store
def test_two_writers_share_one_journal_without_a_number_lost_or_given_twice(make_lethe):
    first = make_lethe(journal_writes="background")
    second = make_lethe(journal_writes="background")
    ids = [first.upload(ALEX) for _ in range(60)]
    errors: list[Any] = []

    def delete(lethe, chunk):
        for file_id in chunk:
            if lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code != 204:
                errors.append(file_id)

    threads = [threading.Thread(target=delete, args=(lethe, ids[n::4])) for n, lethe in enumerate([first, second] * 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    wait_until(lambda: set(ids) <= journaled_files(first))
    numbers = [entry.seq for segment, text in segments(first) for entry in read_segment(segment, text).entries]
    assert numbers == list(range(1, len(numbers) + 1))  # contiguous, each once
    marked = [
        file_id
        for segment, text in segments(first)
        for entry in read_segment(segment, text).entries
        if entry.kind == "file.marked"
        for file_id in entry.files
    ]
    assert sorted(map(str, marked)) == sorted(ids)  # every deletion once


@pytest.mark.one_store
def test_a_writer_that_died_holding_the_claim_is_taken_over_with_the_same_segment(make_lethe):
    lethe = make_lethe()
    file_id = lethe.upload(ALEX)
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    # Given another process claimed the segment and died before writing it (its lease ran out)
    claimed = lethe.rt.db.unit_of_work(
        lambda uow: journal_sql.claim(uow.conn, 10, 0.0, uuid.uuid4()), name="test.claim"
    )
    assert claimed is not None and claimed.rows
    # When this process flushes: it takes the claim over, with the same numbers
    assert journal.flush(lethe.rt) == len(claimed.rows)
    ((segment, text),) = segments(lethe)
    assert (segment.first, read_segment(segment, text).last) == (claimed.first, claimed.last)
    assert not journal.check(lethe.rt).behind
