"""Every file reaches an end (issue 20, D19): a scan clamd refuses for its size, a scan lost with its process,
a purge job lost with a failing transition, a deleted row the database will not let go, an avatar still
uploading. Each test names the path that once left a file, its bytes or its name behind for good."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, timedelta
from typing import Any

import psycopg
import pytest

from app.content.clamd import ClamdUnavailable, Verdict, instream
from app.db.conn import one
from app.domain.keys import original_key, part_key
from app.lifecycle.cleanup import run_cleanup
from app.lifecycle.purge import purge_files
from app.platform.observability import metrics
from tests.support import zygote
from tests.support.helpers import keys_of, problem, rows
from tests.support.lethe import ALEX, OWNER
from tests.support.stores import uploads_left, versions_of


def leftovers(lethe, file_id: str, part_count: int = 1) -> list[Any]:
    """What the store still holds of a file: its objects and parts (every version on a versioned bucket), and
    on S3 any multipart upload still open under its original's key (a test may list; the service never does)."""
    file_uuid = uuid.UUID(file_id)
    found = list(
        versions_of(lethe.raw_store, keys_of(file_id) + [part_key(file_uuid, n) for n in range(1, part_count + 1)])
    )
    found += [("multipart", upload_id) for upload_id in uploads_left(lethe.raw_store, original_key(file_uuid, 1))]
    return found


# -- clamd's size limit ----------------------------------------------------------------------------------------


def test_clamd_closing_early_over_its_limit_is_a_final_error_not_an_outage(clamd):
    # Given a clamd (fake, behaving like the real one) whose stream limit is 64 KiB
    clamd.mode, clamd.limit = "limit", 64 * 1024
    # When 4 MiB are streamed: clamd answers and closes while the client still sends
    verdict = instream(clamd.address, [os.urandom(1024 * 1024) for _ in range(4)], 10)
    # Then its answer is read and classified: an error for the file's size, not an outage
    assert verdict == Verdict("error", "size_limit")


def test_a_clamd_that_closes_without_a_word_is_an_outage(clamd):
    clamd.mode = "ok"
    clamd.server.shutdown()  # nobody answers any more
    clamd.server.server_close()
    with pytest.raises(ClamdUnavailable):
        instream(clamd.address, [b"bytes"], 2)


def test_a_file_over_clamds_limit_ends_as_error_and_is_purged(make_lethe, clamd, caplog):
    import logging

    clamd.mode, clamd.limit = "limit", 1024
    lethe = make_lethe(**{"scan.clamd_address": clamd.address})
    with caplog.at_level(logging.INFO):
        file_id = lethe.upload(ALEX, os.urandom(lethe.part_size + 5))  # over clamd's limit, under scan.max_size
    assert lethe.row(file_id).scan_status == "error"
    (done,) = [r for r in caplog.records if getattr(r, "event", None) == "scan.done"]
    assert (done.outcome, done.reason) == ("error", "size_limit")  # issue 21, point 9: the reason is said
    lethe.run_jobs("purge_objects")
    assert leftovers(lethe, file_id, 2) == []
    assert lethe.row(file_id).objects_purged_at is not None  # the catch-up need not come back


@pytest.mark.one_store
def test_an_upload_larger_than_the_scanner_takes_is_refused_up_front(make_lethe, clamd):
    scanning = make_lethe(**{"scan.clamd_address": clamd.address, "scan.max_size": "1KiB"})
    body = {"name": "big.bin", "size_bytes": 1025, "mime_type": "application/octet-stream"}
    answer = problem(
        scanning.call("POST", "/api/v1/uploads", ALEX, json=body), 413, "payload_too_large", "too_large_to_scan"
    )
    assert "1024" not in str(answer) and "1KiB" not in str(answer)  # the key is named in docs, never a number
    assert scanning.call("POST", "/api/v1/uploads", ALEX, json={**body, "size_bytes": 1024}).status_code == 201
    not_scanning = make_lethe(**{"scan.max_size": "1KiB"})
    assert not_scanning.call("POST", "/api/v1/uploads", ALEX, json=body).status_code == 201


@pytest.mark.one_store
def test_a_pending_file_over_scan_max_size_is_not_streamed_and_ends_as_error(make_lethe, clamd):
    # Given a file completed while no size limit applied (scan.max_size lowered since)
    before = make_lethe()
    file_id = before.upload(ALEX, b"x" * 2048, scan=False)
    after = make_lethe(**{"scan.clamd_address": clamd.address, "scan.max_size": "1KiB"})
    # When its scan runs
    from workers.actors import ACTORS

    ACTORS["scan_file"].fn(after.rt, file_id)
    # Then clamd never saw its bytes, and it ended as error with its purge committed
    assert clamd.received == [] and after.row(file_id).scan_status == "error"
    assert [m.actor_name for m in after.broker.take()] == ["purge_objects"]


# -- scans lost with their process -----------------------------------------------------------------------------


def test_a_lost_scan_is_sent_again_once_and_then_ends(make_lethe):
    lethe = make_lethe(**{"scan.pending_ttl": "2h"})
    lost_once = lethe.upload(ALEX, scan=False)
    lost_twice = lethe.upload(ALEX, scan=False)
    lethe.broker.take()  # both scan jobs are lost with the process that held them
    ttl = timedelta(hours=2)
    # Before the ttl nothing happens
    lethe.clock.advance(ttl - timedelta(seconds=1))
    assert run_cleanup(lethe.rt).step("j").acted == 0 and lethe.broker.take() == []
    # Past it the cleanup sends each scan again, once
    lethe.clock.advance(timedelta(seconds=1))
    assert run_cleanup(lethe.rt, dry_run=True).step("j").acted == 2 and lethe.broker.take() == []
    report = run_cleanup(lethe.rt)
    assert report.step("j").acted == 2 and report.step("k").candidates == 2
    assert sorted(m.args[0] for m in lethe.broker.messages if m.actor_name == "scan_file") == sorted(
        [lost_once, lost_twice]
    )
    assert run_cleanup(lethe.rt).step("j").acted == 0  # once, not on every run
    # The first resent scan runs; the second is lost again
    from workers.actors import ACTORS

    lethe.broker.take()
    ACTORS["scan_file"].fn(lethe.rt, lost_once)
    assert lethe.row(lost_once).scan_status == "skipped"
    count, oldest = metrics.scan_pending_gauges()
    run_cleanup(lethe.rt)
    assert count._value.get() == 1 and oldest._value.get() == pytest.approx(2 * 3600, abs=1)
    # Past twice the ttl the scan ends as error and the file is purged
    lethe.clock.advance(ttl)
    report = run_cleanup(lethe.rt)
    assert report.step("j").acted == 1
    assert lethe.row(lost_twice).scan_status == "error" and lethe.row(lost_once).scan_status == "skipped"
    lethe.run_jobs("purge_objects")
    assert leftovers(lethe, lost_twice) == []
    assert count._value.get() == 0


# -- the catch-up covers every file whose objects must go ------------------------------------------------------


@pytest.mark.parametrize("purpose", ["attachment", "avatar", "branding", "gdpr_export"])
def test_an_aborted_upload_whose_purge_job_was_lost_loses_its_bytes_within_one_cleanup(make_lethe, purpose):
    lethe = make_lethe()
    data = os.urandom(lethe.part_size * 2)
    created = lethe.start_upload(OWNER, data, purpose=purpose)
    file_id = created["file"]["id"]
    lethe.send_parts(OWNER, file_id, data[: lethe.part_size], lethe.part_size)  # part 1 of 2
    # the immediate removal does not happen either (the store swallows it)
    lethe.rt.store.abort_upload = lambda ref, part_count: None
    lethe.rt.store.delete_many = lambda keys: []
    assert lethe.call("DELETE", f"/api/v1/uploads/{file_id}", OWNER).status_code == 204
    del lethe.rt.store.abort_upload, lethe.rt.store.delete_many
    assert [m.actor_name for m in lethe.broker.take()] == ["purge_objects"]  # lost
    assert leftovers(lethe, file_id, 2) != []
    report = run_cleanup(lethe.rt)
    assert report.step("d").acted == 1
    assert leftovers(lethe, file_id, 2) == []
    assert lethe.row(file_id).objects_purged_at is not None
    assert run_cleanup(lethe.rt).step("d").candidates == 0  # done: not read again


@pytest.mark.parametrize("raw_store", ["fs", "s3"], indirect=True)
def test_an_expired_session_loses_its_parts_within_one_cleanup_when_its_purge_job_is_lost(make_lethe):
    lethe = make_lethe()
    # the relay and the publisher are gone: every job the cleanup commits stays unpublished
    lethe.rt.db.after_commit = None
    data = os.urandom(lethe.part_size * 2)
    file_id = lethe.start_upload(ALEX, data)["file"]["id"]
    lethe.send_parts(ALEX, file_id, data[: lethe.part_size], lethe.part_size)
    lethe.clock.advance(lethe.cfg.file.upload_session_ttl)
    report = run_cleanup(lethe.rt)
    assert report.step("a").acted == 1 and lethe.row(file_id).upload_state == "failed"
    assert leftovers(lethe, file_id, 2) == []


# -- the purge and rows the database refuses (D7) --------------------------------------------------------------


@pytest.mark.one_store
def test_a_deleted_file_still_held_by_a_slot_never_strands_its_batch(lethe):
    held = lethe.upload(ALEX, purpose="avatar")
    assert lethe.call("PUT", f"/api/v1/principals/{ALEX.id}/avatar", ALEX, json={"file_id": held}).status_code == 200
    other = lethe.upload(ALEX)
    # a slot set between an erasure's slot step and its file marks: the file is deleted and still held
    lethe.rt.db.unit_of_work(
        lambda uow: uow.execute(
            "UPDATE files SET deleted_at = now() WHERE id = ANY(%s)", ([uuid.UUID(held), uuid.UUID(other)],)
        ),
        name="test",
    )
    report = purge_files(lethe.rt, [held, other])
    assert report.results["row"] == 1 and report.results["kept_slot"] == 1
    assert lethe.row(other) is None and lethe.row(held) is not None


@pytest.mark.one_store
def test_a_row_the_database_refuses_is_isolated_and_the_others_go(lethe, database_url):
    refused, others = lethe.upload(ALEX), [lethe.upload(ALEX) for _ in range(3)]
    with psycopg.connect(database_url, autocommit=True) as conn:
        # another table still references one row (as slots did before the purge knew them)
        conn.execute("CREATE TABLE test_references (file_id uuid REFERENCES files (id))")
        try:
            conn.execute("INSERT INTO test_references VALUES (%s)", (refused,))
            conn.execute("UPDATE files SET deleted_at = now()")
            report = purge_files(lethe.rt, [refused, *others])
        finally:
            conn.execute("DROP TABLE test_references")
    assert report.results["row"] == 3 and report.results["row_refused"] == 1
    assert [lethe.row(file_id) for file_id in others] == [None] * 3 and lethe.row(refused) is not None


# -- cleanup h and avatars still uploading -------------------------------------------------------------------


@pytest.mark.one_store
def test_an_avatar_still_uploading_is_not_released_whatever_the_ttls(make_lethe):
    lethe = make_lethe(**{"file.upload_session_ttl": "48h", "file.unattached_ttl": "24h"})
    uploading = lethe.start_upload(ALEX, b"face", purpose="avatar")["file"]["id"]
    lethe.clock.advance(timedelta(hours=25))
    assert run_cleanup(lethe.rt).step("h").candidates == 0
    assert lethe.row(uploading).deleted_at is None
    lethe.clock.advance(timedelta(hours=24))  # the session expires (step a); the failed avatar is released after
    run_cleanup(lethe.rt)
    assert lethe.row(uploading).upload_state == "failed"
    lethe.clock.advance(timedelta(hours=24))
    assert run_cleanup(lethe.rt).step("h").acted == 1


# -- the candidate catch (review: it swallowed bugs) -----------------------------------------------------------


@pytest.mark.one_store
def test_a_bug_in_a_candidate_fails_loudly_and_a_broken_constraint_is_isolated(lethe):
    from psycopg import errors as pg_errors

    from app.errors import StoreCallInTransaction
    from app.lifecycle.batches import isolated

    ids = [uuid.uuid4() for _ in range(3)]

    def failing(error):
        def work(uow, batch):
            if ids[1] in batch:
                raise error
            return len(batch)

        return isolated(lethe.rt.db, "test", work, event="test.candidate_failed")

    outcome = failing(pg_errors.UniqueViolation("duplicate key"))(ids)
    assert (outcome.acted, outcome.failed) == (2, 1)
    for bug in (StoreCallInTransaction("a store call in a unit of work"), pg_errors.UndefinedColumn("no column")):
        with pytest.raises(type(bug)):
            failing(bug)(ids)


# -- operator commands never publish to a broker nobody consumes ------------------------------------------------


@pytest.mark.one_store
def test_an_operator_command_without_a_broker_leaves_its_jobs_for_the_relay(lethe, database_url, tmp_path):
    import json
    import sys
    from datetime import datetime

    from app.db.publisher import Outbox
    from tests.support.fakes import RecordingBroker

    # Given an export past its policy, and an operator shell that names the database but no broker
    export = lethe.upload(OWNER, purpose="gdpr_export")
    lethe.rt.db.unit_of_work(
        lambda uow: uow.execute("UPDATE files SET last_change_at = now() - interval '40 days'"), name="test"
    )
    policy = [{"name": "exports", "purpose": "gdpr_export", "max_age": "30d", "grace": "0s", "schedule": "0 0 * * *"}]
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"),
        "LETHE_RETENTION_POLICIES": json.dumps(policy),
    }
    # When it runs the policy
    result = zygote.run(
        [sys.executable, "-m", "app.entry", "retention", "run"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    # Then it says where its jobs are, and the purge job waits in the outbox (it was deleted as if sent before)
    assert "broker.url" in result.stderr and "outbox" in result.stderr
    assert lethe.row(export).deleted_at is not None
    waiting = rows(lethe, "outbox")
    assert [row.actor_name for row in waiting] == ["purge_objects"] and waiting[0].args == [[export]]
    # And a relay (the scheduler's, or lethe dev's) sends it; the purge then removes the file
    relay_broker = RecordingBroker()
    lethe.clock.set(datetime.now(UTC) + timedelta(minutes=1))
    assert Outbox(lethe.rt.db, relay_broker).relay(older_than=timedelta(seconds=10)) == 1
    lethe.broker.messages.extend(relay_broker.messages)
    lethe.run_jobs("purge_objects")
    assert lethe.row(export) is None and rows(lethe, "outbox") == []
    # lethe erase without --wait no longer promises a worker that is not there
    erase = zygote.run(
        [sys.executable, "-m", "app.entry", "erase", "--subject", str(ALEX.id)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert erase.returncode == 0 and "a worker runs it" not in erase.stdout and "--wait" in erase.stdout


# -- VACUUM is watched --------------------------------------------------------------------------------------------


@pytest.mark.one_store
def test_autovacuum_off_is_said_and_dead_tuples_are_counted(lethe, database_url, tmp_path):
    import sys

    env = {
        "PATH": os.environ.get("PATH", ""),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"),
        "LETHE_AUTH_JWT_SECRET": "a-secret-of-sufficient-length-0",
    }

    def config_check() -> str:
        result = zygote.run(
            [sys.executable, "-m", "app.entry", "config", "check"], capture_output=True, text=True, env=env, timeout=60
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def where_off(said: str) -> set[str]:
        marker = "warning: autovacuum is off for "
        lines = [line for line in said.splitlines() if line.startswith(marker)]
        return set(lines[0][len(marker) :].split(":")[0].split(", ")) if lines else set()

    with psycopg.connect(database_url, autocommit=True) as conn:
        server_off = one(conn.execute("SELECT current_setting('autovacuum') <> 'on'"))[0]
        # The server's own setting is named when it is off (CI's server runs with autovacuum = off)
        assert where_off(config_check()) == ({"server"} if server_off else set())
        conn.execute("ALTER TABLE files SET (autovacuum_enabled = false)")
        try:
            said = config_check()
        finally:
            conn.execute("ALTER TABLE files RESET (autovacuum_enabled)")
    assert where_off(said) == ({"server", "files"} if server_off else {"files"}) and "VACUUM" in said
    # The gauge: dead tuples of the tables whose rows hold names and texts, set by each cleanup run
    run_cleanup(lethe.rt)
    gauge = metrics.dead_tuples_gauge()
    assert {labels[0] for labels in gauge._metrics} >= {"files", "events", "messages"}
