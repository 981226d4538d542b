"""cleanup_pending (D8) on both drivers with the fake clock: steps, batches, ages, drafts, expiry, failed
and blocked rows, catch-up, temporary files, backlog, races, the cluster lock and the dry run."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from datetime import timedelta
from typing import Any

import pytest

from app.db import cleanup as cleanup_sql
from app.domain.keys import original_key, part_key
from app.errors import StorageError
from app.lifecycle.cleanup import run_cleanup
from app.lifecycle.steps import STEPS
from tests.support import zygote
from tests.support.faults import Down, FailOnce
from tests.support.helpers import keys_of, problem, rows
from tests.support.lethe import ALEX, OWNER, SAM

DAY = timedelta(days=1)
SECOND = timedelta(seconds=1)
IN_ORDER = list("abcdefghijklmnopqrstuvwxyz"[: len(STEPS)])  # every step's letter, in the order a run takes them


def ttl(lethe, key):
    return lethe.cfg.get(key)


def cleanup(lethe, **kwargs):
    report = run_cleanup(lethe.rt, **kwargs)
    assert report.ran
    return report


# -- order, batches, isolation -------------------------------------------------------------------------------


def test_steps_run_in_order_in_batches(make_lethe):
    lethe = make_lethe(**{"file.gc_batch_size": 2})
    ids = [lethe.upload(ALEX) for _ in range(5)]
    lethe.clock.advance(ttl(lethe, "file.unattached_ttl"))
    report = cleanup(lethe)
    assert [s.step for s in report.steps] == IN_ORDER
    b = report.step("b")
    assert (b.candidates, b.batches, b.acted, b.failed) == (5, 3, 5, 0)
    assert report.step("d").acted == 5  # the catch-up purged them inline
    assert all(lethe.row(file_id) is None for file_id in ids)
    assert all(lethe.store.head(k) is None for file_id in ids for k in keys_of(file_id))
    assert report.first_error is None and report.backlog == 0


def test_one_failing_candidate_leaves_the_others_done(make_lethe):
    lethe = make_lethe(**{"file.gc_batch_size": 10})
    good = [lethe.upload(ALEX) for _ in range(3)]
    bad = lethe.upload(ALEX)
    lethe.rt.db.read(
        lambda conn: conn.execute(
            "INSERT INTO events (resource_kind, resource_id, type, schema_version, audience_principal_id, payload, "
            "created_at) VALUES ('file', %s, 'file.renamed', 1, %s, '{}', now())",
            (bad, ALEX.id),
        )
    )
    lethe.clock.advance(ttl(lethe, "file.unattached_ttl"))
    report = cleanup(lethe)
    assert (report.step("b").acted, report.step("b").failed) == (3, 1)
    assert all(lethe.row(file_id) is None for file_id in good)
    assert lethe.row(bad).deleted_at is None
    # Only the deleted files' purge jobs were committed.
    purged = [file_id for m in lethe.broker.take("purge_objects") for file_id in m.args[0]]
    assert sorted(purged) == sorted(good)


# -- b: never attached -----------------------------------------------------------------------------------------


def test_never_attached_is_kept_until_the_ttl_then_deleted_and_purged(lethe):
    file_id = lethe.upload(ALEX)
    key = lethe.row(file_id).object_key
    lethe.clock.advance(ttl(lethe, "file.unattached_ttl") - SECOND)
    assert cleanup(lethe).step("b").acted == 0 and lethe.row(file_id).deleted_at is None
    lethe.clock.advance(SECOND)
    report = cleanup(lethe)
    assert report.step("b").acted == 1
    assert lethe.row(file_id) is None and lethe.store.head(key) is None


def test_a_long_upload_keeps_its_full_window_from_completion(lethe):
    data = b"slow upload"
    created = lethe.start_upload(ALEX, data)
    file_id = created["file"]["id"]
    lethe.clock.advance(ttl(lethe, "file.upload_session_ttl") - timedelta(minutes=1))
    lethe.send_parts(ALEX, file_id, data, created["upload"]["part_size"])
    assert lethe.call("POST", f"/api/v1/uploads/{file_id}/complete", ALEX).status_code == 200
    lethe.run_jobs("scan_file")
    lethe.clock.advance(ttl(lethe, "file.unattached_ttl") - SECOND)
    assert cleanup(lethe).step("b").acted == 0
    lethe.clock.advance(SECOND)
    assert cleanup(lethe).step("b").acted == 1


def test_the_uploaders_own_drafts_keep_the_file(lethe):
    file_id = lethe.upload(ALEX)
    lethe.call("PUT", "/api/v1/drafts/thread:42", ALEX, json={"text": "", "file_ids": [file_id]})
    lethe.call("PUT", "/api/v1/drafts/channel:general", ALEX, json={"text": "", "file_ids": [file_id]})
    lethe.clock.advance(ttl(lethe, "file.unattached_ttl") * 3)
    assert cleanup(lethe).step("b").kept == 1
    lethe.call("DELETE", "/api/v1/drafts/thread:42", ALEX)
    assert cleanup(lethe).step("b").kept == 1  # the channel draft still names it
    lethe.call("DELETE", "/api/v1/drafts/channel:general", ALEX)
    assert cleanup(lethe).step("b").acted == 1
    assert lethe.row(file_id) is None


def test_a_foreign_draft_protects_nothing(lethe):
    file_id = lethe.upload(ALEX)
    lethe.call("PUT", "/api/v1/drafts/mine", SAM, json={"text": "", "file_ids": [file_id]})
    lethe.clock.advance(ttl(lethe, "file.unattached_ttl"))
    assert cleanup(lethe).step("b").acted == 1
    problem(
        lethe.call("PUT", "/api/v1/messages/sams", SAM, json={"file_ids": [file_id]}),
        409,
        "conflict",
        "file_not_attachable",
    )


def test_attached_files_and_other_purposes_are_never_candidates_of_b_and_c(lethe):
    attached = lethe.upload(ALEX)
    lethe.call("PUT", "/api/v1/messages/m", ALEX, json={"file_ids": [attached]})
    avatar, logo = lethe.upload(ALEX, purpose="avatar"), lethe.upload(OWNER, purpose="branding")
    assert lethe.call("PUT", f"/api/v1/principals/{ALEX.id}/avatar", ALEX, json={"file_id": avatar}).status_code == 200
    assert lethe.call("PUT", "/api/v1/branding/logo", OWNER, json={"file_id": logo}).status_code == 200
    export = lethe.upload(OWNER, purpose="gdpr_export")
    lethe.clock.advance(ttl(lethe, "file.failed_row_ttl") * 10)
    report = cleanup(lethe)
    assert report.step("b").candidates == 0 and report.step("c").candidates == 0
    assert report.step("h").acted == 0  # held by their slots
    assert all(lethe.row(f).deleted_at is None for f in [attached, avatar, logo, export])


def test_h_releases_avatars_and_logos_that_no_slot_holds_after_the_ttl(lethe):
    unheld = [lethe.upload(ALEX, purpose="avatar"), lethe.upload(OWNER, purpose="branding")]
    held = lethe.upload(SAM, purpose="avatar")
    assert lethe.call("PUT", f"/api/v1/principals/{SAM.id}/avatar", SAM, json={"file_id": held}).status_code == 200
    lethe.clock.advance(ttl(lethe, "file.unattached_ttl") - SECOND)
    assert cleanup(lethe).step("h").acted == 0
    lethe.clock.advance(SECOND)
    assert cleanup(lethe).step("h").acted == 2
    lethe.run_jobs("purge_objects")
    assert all(lethe.row(f) is None for f in unheld) and lethe.row(held).deleted_at is None
    assert [row.via for row in rows(lethe, "receipts")] == ["cleanup_unheld", "cleanup_unheld"]


# -- a: expired sessions ---------------------------------------------------------------------------------------


def test_an_expired_session(lethe):
    data = b"e" * (lethe.part_size + 1)
    created = lethe.start_upload(ALEX, data)
    file_id = created["file"]["id"]
    lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/1", ALEX, data=data[: lethe.part_size])
    lethe.clock.advance(ttl(lethe, "file.upload_session_ttl") - timedelta(microseconds=1))
    assert cleanup(lethe).step("a").acted == 0
    lethe.clock.advance(timedelta(microseconds=1))  # expired at expires_at exactly
    assert cleanup(lethe).step("a").acted == 1
    session = rows(lethe, "upload_sessions", file_id=file_id)[0]
    assert session.state == "expired" and lethe.row(file_id).upload_state == "failed"
    assert rows(lethe, "upload_parts", file_id=file_id) == []
    events = lethe.call("GET", "/api/v1/events", ALEX).json["events"]
    assert [(e["payload"]["file"]["upload_state"], "actor_id" in e) for e in events] == [("failed", False)]
    assert lethe.run_jobs("purge_objects") == 1
    if lethe.driver == "fs":
        assert lethe.store.head(part_key(file_id, 1)) is None
    else:
        listed = lethe.raw_store.client._list_multipart_uploads(lethe.raw_store.bucket)
        assert [u for u in listed.uploads if file_id in u.object_name] == []
    problem(
        lethe.call("PUT", f"/api/v1/uploads/{file_id}/parts/2", ALEX, data=data[lethe.part_size :]),
        410,
        "gone",
        "upload_expired",
    )
    assert lethe.row(file_id) is not None  # the failed row stays until failed_row_ttl


# -- c: failed and blocked rows --------------------------------------------------------------------------------


@pytest.fixture
def scanning(make_lethe, clamd):
    return make_lethe(**{"scan.clamd_address": clamd.address}), clamd


def test_failed_and_blocked_rows_stay_until_the_ttl_with_their_objects_gone(scanning):
    lethe, clamd = scanning
    clamd.mode = "eicar"
    infected = lethe.upload(ALEX, b"virus")
    aborted = lethe.start_upload(ALEX, b"abc")["file"]["id"]
    lethe.call("DELETE", f"/api/v1/uploads/{aborted}", ALEX)
    lethe.run_jobs("purge_objects")
    assert lethe.store.head(original_key(infected)) is None  # objects already gone
    lethe.clock.advance(ttl(lethe, "file.failed_row_ttl") - SECOND)
    assert cleanup(lethe).step("c").acted == 0
    assert lethe.row(infected) is not None and lethe.row(aborted) is not None
    lethe.clock.advance(SECOND)
    assert cleanup(lethe).step("c").acted == 2
    assert lethe.row(infected) is None and lethe.row(aborted) is None


def test_an_attached_blocked_file_keeps_its_row(lethe):
    file_id = lethe.upload(ALEX)
    lethe.call("PUT", "/api/v1/messages/m", ALEX, json={"file_ids": [file_id]})
    lethe.rt.db.read(lambda conn: conn.execute("UPDATE files SET scan_status = 'infected' WHERE id = %s", (file_id,)))
    lethe.clock.advance(ttl(lethe, "file.failed_row_ttl") * 2)
    assert cleanup(lethe).step("c").acted == 0
    assert lethe.row(file_id).deleted_at is None


# -- d: catch-up -----------------------------------------------------------------------------------------------


def test_catch_up_after_a_lost_purge_job(lethe):
    file_id = lethe.upload(ALEX)
    lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX)
    # The job is lost: no outbox row, no broker message.
    lethe.broker.take()
    lethe.rt.db.read(lambda conn: conn.execute("DELETE FROM outbox"))
    assert lethe.store.head(lethe.row(file_id).object_key) is not None
    report = cleanup(lethe)
    assert report.step("d").acted == 1
    assert lethe.row(file_id) is None and all(lethe.store.head(k) is None for k in keys_of(file_id))
    assert lethe.broker.take() == []  # inline: no new job


def test_catch_up_stops_at_the_first_store_error_and_the_later_steps_still_run(make_lethe, caplog, swap_store):
    lethe = make_lethe(**{"file.gc_batch_size": 1, "privacy.object_delete_delay": "2h", "file.gc_interval": "1h"})
    ids = [lethe.upload(ALEX) for _ in range(2)]
    for file_id in ids:
        lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX)
    lethe.broker.take()
    real = swap_store(lethe, Down(lethe.rt.store, "delete_many"))
    lethe.clock.advance(timedelta(hours=3))
    with caplog.at_level(logging.WARNING, logger="lethe.cleanup"):
        report = cleanup(lethe)
    d = report.step("d")
    assert d.error == "StorageError" and d.batches == 1  # ended at its first batch
    assert report.step("e").error is None and report.step("f").candidates == 2
    assert isinstance(report.first_error, StorageError)
    overdue = [r for r in caplog.records if getattr(r, "event", "") == "cleanup.backlog_overdue"]
    assert len(overdue) == 1 and overdue[0].count == 2
    assert all(i not in overdue[0].getMessage() + str(overdue[0].__dict__) for i in ids)  # count only, no ids
    lethe.rt.store = real
    assert cleanup(lethe).step("d").acted == 2


def test_a_missing_row_and_a_purged_row_are_nothing_to_the_catch_up(lethe):
    file_id = lethe.upload(ALEX)
    lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX)
    lethe.run_jobs("purge_objects")
    assert cleanup(lethe).step("d").candidates == 0


# -- e: temporary files ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw_store", ["s3", "s3-versioned"], indirect=True)
def test_the_temporary_sweep_on_s3_lists_nothing(lethe):
    """S3 puts are atomic on the server, so there is no temporary area of Lethe's there: step e makes no
    request that lists the bucket (K2), and reports nothing swept."""
    listed = []
    client = lethe.raw_store.client
    original = client.list_objects
    client.list_objects = lambda *args, **kwargs: listed.append(args) or original(*args, **kwargs)
    try:
        report = cleanup(lethe)
    finally:
        del client.list_objects
    assert report.step("e").acted == 0 and report.step("e").error is None
    assert listed == []


@pytest.mark.one_store
def test_the_temporary_sweep_never_follows_a_link(lethe, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary").write_bytes(b"keep me")
    root = lethe.raw_store.root
    tmp = os.path.join(root, ".tmp")
    stale_time = (lethe.clock.now() - ttl(lethe, "file.upload_session_ttl") - SECOND).timestamp()
    fresh_time = lethe.clock.now().timestamp()
    for name, when in (("put-stale", stale_time), ("put-fresh", fresh_time)):
        with open(os.path.join(tmp, name), "wb") as handle:
            handle.write(b"x")
        os.utime(os.path.join(tmp, name), (when, when))
    os.symlink(outside / "canary", os.path.join(tmp, "put-link"))
    os.utime(os.path.join(tmp, "put-link"), (stale_time, stale_time), follow_symlinks=False)
    kept_file = lethe.upload(ALEX)
    report = cleanup(lethe)
    assert report.step("e").acted == 2
    assert sorted(os.listdir(tmp)) == ["put-fresh"]
    assert (outside / "canary").read_bytes() == b"keep me"
    assert lethe.store.get(lethe.row(kept_file).object_key)  # nothing else in the root was touched


# -- f: backlog ------------------------------------------------------------------------------------------------


def test_the_backlog_gauge_is_absent_before_the_first_run():
    code = (
        "from prometheus_client import generate_latest; import app.platform.observability.metrics, workers.actors; "
        "print(generate_latest().decode())"
    )
    env = {name: value for name, value in os.environ.items() if name != "PROMETHEUS_MULTIPROC_DIR"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert "lethe_file_purge_backlog" not in result.stdout
    assert "lethe_outbox_depth" in result.stdout


def test_the_backlog_gauge_counts_deleted_rows(lethe, swap_store):
    from prometheus_client import REGISTRY

    file_id = lethe.upload(ALEX)
    lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX)
    lethe.broker.take()
    real = swap_store(
        lethe, FailOnce(lethe.rt.store, "delete_many")
    )  # the catch-up fails: the row stays in the backlog
    lethe.clock.advance(timedelta(hours=2))
    cleanup(lethe)
    assert REGISTRY.get_sample_value("lethe_file_purge_backlog") == 1
    assert REGISTRY.get_sample_value("lethe_file_purge_backlog_oldest_seconds") == 7200
    lethe.rt.store = real
    cleanup(lethe)
    assert REGISTRY.get_sample_value("lethe_file_purge_backlog") == 0


# -- races and the cluster lock --------------------------------------------------------------------------------


def test_an_attach_between_the_cleanups_read_and_its_lock_keeps_the_file(lethe, monkeypatch):
    """Forced order: step b reads the file as a candidate, then an attach commits, then step b locks and
    re-checks: the file is kept (D10). Then the other order: the cleanup deletes first, the attach is 409."""
    file_id = lethe.upload(ALEX)
    later = lethe.upload(ALEX)
    lethe.clock.advance(ttl(lethe, "file.unattached_ttl"))
    original = cleanup_sql.lock_skip_locked
    attached: dict[Any, Any] = {}

    def attach_before_the_lock(conn, ids):
        if not attached and file_id in {str(i) for i in ids}:
            thread = threading.Thread(
                target=lambda: attached.setdefault(
                    "status",
                    lethe.app.test_client()
                    .put("/api/v1/messages/forced", headers=ALEX.headers, json={"file_ids": [file_id]})
                    .status_code,
                )
            )
            thread.start()
            thread.join(10)
        return original(conn, ids)

    monkeypatch.setattr(cleanup_sql, "lock_skip_locked", attach_before_the_lock)
    report = cleanup(lethe)
    assert attached == {"status": 200}
    b = report.step("b")
    assert (b.candidates, b.acted, b.kept) == (2, 1, 1)
    assert lethe.row(file_id).deleted_at is None and rows(lethe, "attachments", file_id=file_id)
    assert lethe.row(later) is None or lethe.row(later).deleted_at is not None
    problem(
        lethe.call("PUT", "/api/v1/messages/late", ALEX, json={"file_ids": [later]}),
        409,
        "conflict",
        "file_not_attachable",
    )


@pytest.mark.one_store  # a database lock race: the store plays no part
def test_a_cleanup_racing_an_attach_ends_attached_or_deleted_never_both(lethe):
    for round_ in range(10):
        file_id = lethe.upload(ALEX)
        lethe.clock.advance(ttl(lethe, "file.unattached_ttl"))
        barrier = threading.Barrier(2)
        answer = {}

        def attach():
            barrier.wait()
            answer["attach"] = lethe.call(
                "PUT", f"/api/v1/messages/race-{round_}", ALEX, json={"file_ids": [file_id]}
            ).status_code

        def clean():
            barrier.wait()
            run_cleanup(lethe.rt)

        threads = [threading.Thread(target=attach), threading.Thread(target=clean)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        row = lethe.row(file_id)
        attached = bool(rows(lethe, "attachments", file_id=file_id))
        assert attached != (row is None or row.deleted_at is not None)
        assert answer["attach"] == (200 if attached else 409)


def test_a_second_concurrent_cleanup_returns_at_once(lethe, caplog):
    from app.db.locks import exclusive

    with exclusive(lethe.rt.db, cleanup_sql.CLEANUP_LOCK_KEY) as held:  # another runner holds the cleanup
        assert held
        with caplog.at_level(logging.INFO, logger="lethe.cleanup"):
            report = run_cleanup(lethe.rt)
    assert report.ran is False and report.steps == []
    assert any(getattr(r, "event", "") == "cleanup.busy" for r in caplog.records)


# -- dry run ---------------------------------------------------------------------------------------------------


def snapshot(lethe):
    tables = {
        t: [tuple(r) for r in rows(lethe, t)]
        for t in ("files", "upload_sessions", "upload_parts", "attachments", "drafts", "events", "outbox")
    }
    if lethe.driver == "fs":
        objects = sorted(
            os.path.relpath(os.path.join(d, n), lethe.raw_store.root)
            for d, _, names in os.walk(lethe.raw_store.root)
            for n in names
        )
    else:
        objects = sorted(
            o.object_name for o in lethe.raw_store.client.list_objects(lethe.raw_store.bucket, recursive=True)
        )
    return tables, objects


def test_dry_run_changes_nothing(lethe):
    unattached = lethe.upload(ALEX)
    deleted = lethe.upload(ALEX)
    lethe.call("DELETE", f"/api/v1/files/{deleted}", ALEX)
    lethe.broker.take()
    lethe.start_upload(ALEX, b"abc")
    lethe.clock.advance(ttl(lethe, "file.failed_row_ttl") * 2)
    before = snapshot(lethe)
    report = cleanup(lethe, dry_run=True)
    assert snapshot(lethe) == before
    assert (report.step("a").acted, report.step("b").acted, report.step("d").acted) == (1, 1, 1)
    assert lethe.broker.take() == []
    assert lethe.row(unattached).deleted_at is None


def test_lethe_cleanup_prints_every_step(lethe, database_url, tmp_path):
    lethe.upload(ALEX)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_FILE_FS_ROOT": str(tmp_path / "cli-objects"),
    }
    for args in (["cleanup", "--dry-run"], ["cleanup"]):
        result = zygote.run(
            [sys.executable, "-m", "app.entry", *args], capture_output=True, text=True, env=env, timeout=60
        )
        assert result.returncode == 0, result.stderr
        lines = [line.strip() for line in result.stdout.splitlines()]
        assert [line.split(".")[0] for line in lines[1:]] == IN_ORDER
    assert (
        "dry run"
        in zygote.run(
            [sys.executable, "-m", "app.entry", "cleanup", "--dry-run"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        ).stdout
    )
    as_json = json.loads(
        zygote.run(
            [sys.executable, "-m", "app.entry", "cleanup", "--dry-run", "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        ).stdout
    )
    assert as_json["dry_run"] is True and [step["step"] for step in as_json["steps"]] == IN_ORDER


def test_the_scheduler_triggers_only_as_leader_and_survives_a_broker_outage(lethe, database_url):
    from app.db.pool import Database
    from scheduler.jobs import Leadership, trigger_cleanup

    first, second = Leadership(lethe.rt.db), Leadership(Database(database_url, pool_size=2))
    try:
        assert trigger_cleanup(lethe.rt, first) is True
        assert trigger_cleanup(lethe.rt, second) is False  # the lock is held by the first
        assert [m.actor_name for m in lethe.broker.take()] == ["cleanup_pending"]
        lethe.broker.fail = True
        assert trigger_cleanup(lethe.rt, first) is False  # logged, not raised
        lethe.broker.fail = False
        first.release()
        assert trigger_cleanup(lethe.rt, second) is True  # the other replica takes over
    finally:
        first.release()
        second.release()
        second.db.close()
