"""The orphan audit (D16) on both drivers: each kind of anomaly is found, and --delete removes only orphans
older than the grace."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from app.db import files as files_sql
from app.domain.keys import original_key, part_key
from app.lifecycle.audit import file_id_of, run_audit
from tests.support.aging import age_object
from tests.support.lethe import ALEX

DAY = timedelta(days=1)


def test_file_ids_are_read_from_the_schema_only():
    file_id = uuid.uuid4()
    assert file_id_of(original_key(file_id)) == file_id
    assert file_id_of(part_key(file_id, 3)) == file_id
    assert file_id_of(f"f/00/00/{file_id}/orig-1") is None  # fan-out directories that do not match the id
    assert file_id_of("f/zz/garbage") is None and file_id_of("issues/x") is None


@pytest.fixture
def world(make_lethe):
    """One file of each kind, then the clock one second on (the audit starts after the rows last changed)."""
    lethe = make_lethe()
    lethe.clock.set(datetime.now(UTC))
    fine = lethe.upload(ALEX)
    deleted = lethe.upload(ALEX)
    assert lethe.call("DELETE", f"/api/v1/files/{deleted}", ALEX).status_code == 204  # purge job not run
    missing = lethe.upload(ALEX)
    lethe.raw_store.delete(lethe.row(missing).object_key)
    old_orphan, young_orphan = uuid.uuid4(), uuid.uuid4()
    for orphan in (old_orphan, young_orphan):
        lethe.raw_store.put(original_key(orphan), b"nobody's", 8)
    age_object(lethe.raw_store, original_key(old_orphan), lethe.clock.now() - 2 * DAY)
    lethe.raw_store.put("f/zz/not-ours", b"?", 1)
    lethe.clock.advance(1)
    return lethe, {
        "fine": fine,
        "deleted": deleted,
        "missing": missing,
        "old_orphan": str(old_orphan),
        "young_orphan": str(young_orphan),
    }


def test_the_audit_finds_each_kind_and_changes_nothing(world):
    lethe, ids = world
    report = run_audit(lethe.rt)
    assert sorted(report.orphans.file_ids) == sorted([ids["old_orphan"], ids["young_orphan"]])
    assert report.orphans.count == 2
    assert report.deleted_present.file_ids == [ids["deleted"]]
    assert report.missing_originals.file_ids == [ids["missing"]]
    assert report.unrecognized == 1
    assert report.orphans_deleted == 0
    assert lethe.raw_store.head(original_key(ids["old_orphan"])) is not None
    assert lethe.raw_store.head(lethe.row(ids["deleted"]).object_key) is not None


def test_delete_removes_only_orphans_older_than_the_grace(world):
    lethe, ids = world
    report = run_audit(lethe.rt, delete=True, grace=DAY)
    assert (report.orphans_deleted, report.orphans_too_young, report.orphans_failed) == (1, 1, 0)
    assert lethe.raw_store.head(original_key(ids["old_orphan"])) is None
    assert lethe.raw_store.head(original_key(ids["young_orphan"])) is not None
    assert lethe.raw_store.head(lethe.row(ids["deleted"]).object_key) is not None  # a row explains it
    assert lethe.raw_store.head(lethe.row(ids["fine"]).object_key) is not None
    assert lethe.raw_store.head("f/zz/not-ours") is not None
    again = run_audit(lethe.rt)
    assert again.orphans.file_ids == [ids["young_orphan"]]


@pytest.mark.one_store
def test_parts_without_a_row_are_orphans_and_a_row_appearing_keeps_them(make_lethe, monkeypatch):
    lethe = make_lethe()
    lethe.clock.set(datetime.now(UTC))
    orphan = uuid.uuid4()
    lethe.raw_store.put(part_key(orphan, 1), b"part", 4)
    age_object(lethe.raw_store, part_key(orphan, 1), lethe.clock.now() - 2 * DAY)
    report = run_audit(lethe.rt)
    assert report.orphans.file_ids == [str(orphan)]
    # A row for that id appearing before the wave goes out explains the object: it stays.

    real = files_sql.files_by_ids
    calls = []

    def appears(conn, file_ids):
        calls.append(list(file_ids))
        found = real(conn, file_ids)
        return found if len(calls) == 1 else [type("Row", (), {"id": orphan})()]

    monkeypatch.setattr(files_sql, "files_by_ids", appears)
    kept = run_audit(lethe.rt, delete=True, grace=DAY)
    assert kept.orphans_deleted == 0 and lethe.raw_store.head(part_key(orphan, 1)) is not None
