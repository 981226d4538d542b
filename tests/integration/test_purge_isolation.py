"""One poisoned file never strands the others (issue 9 finding 2; D7, D8 d): a file whose objects the store
refuses is isolated, retried with backoff, counted, and named by id once it is overdue; a store-wide error
still stops the step. fs poison: the file's directory replaced by a plain file. S3 poison: DeleteObjects
answers AccessDenied for the file's original key."""

from __future__ import annotations

import logging
import os
import shutil
from datetime import timedelta

from prometheus_client import REGISTRY

from app.lifecycle.cleanup import run_cleanup
from tests.support.faults import RefusingS3
from tests.support.helpers import keys_of, rows
from tests.support.lethe import ALEX
from tests.support.stores import versions_of

HEALTHY, POISONED = 36, 4


class Poison:
    """Makes the store refuse the objects of some files, on either driver, until heal()."""

    def __init__(self, lethe, file_ids):
        self.lethe, self.file_ids = lethe, list(file_ids)
        self.keys = {lethe.row(file_id).object_key for file_id in self.file_ids}
        if lethe.driver == "fs":
            for key in self.keys:
                directory = os.path.join(lethe.raw_store.root, *key.split("/")[:-1])
                shutil.rmtree(directory)
                with open(directory, "wb") as handle:
                    handle.write(b"a plain file where the file's directory was")
        else:
            self.fault = RefusingS3(lethe.raw_store, set(self.keys))

    def heal(self):
        if self.lethe.driver == "fs":
            for key in self.keys:
                os.unlink(os.path.join(self.lethe.raw_store.root, *key.split("/")[:-1]))
        else:
            self.fault.heal()


def counter(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def deleted_files(lethe, count: int) -> list[str]:
    """Files deleted by deleteFile whose purge jobs were lost, oldest first."""
    ids = []
    for _ in range(count):
        ids.append(lethe.upload(ALEX, os.urandom(16)))
        lethe.clock.advance(timedelta(seconds=1))
    for file_id in ids:
        assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
        lethe.clock.advance(timedelta(milliseconds=1))
    lethe.broker.take()
    return ids


def failures(lethe):
    return {str(row.file_id): row for row in rows(lethe, "purge_failures")}


def test_poisoned_files_never_hold_back_the_catch_up(make_lethe, caplog):
    lethe = make_lethe(
        **{
            "file.gc_batch_size": 15,
            "file.purge_retry_base": "1m",
            "file.purge_retry_max": "10m",
            "privacy.object_delete_delay": "1h",
            "file.gc_interval": "15m",
        }
    )
    ids = deleted_files(lethe, POISONED + HEALTHY)
    poisoned, healthy = ids[:POISONED], ids[POISONED:]  # the oldest marks: first in the catch-up's order
    poison = Poison(lethe, poisoned)
    refused_before = counter("lethe_purge_refused_files_total")

    # When the cleanup runs, every healthy file loses its objects and row; the poisoned ones wait
    report = run_cleanup(lethe.rt)
    d = report.step("d")
    assert d.error is None and report.first_error is None
    assert (d.acted, d.failed) == (HEALTHY, POISONED)
    assert all(lethe.row(file_id) is None for file_id in healthy)
    assert versions_of(lethe.raw_store, [key for file_id in healthy for key in keys_of(file_id)]) == []
    recorded = failures(lethe)
    assert sorted(recorded) == sorted(poisoned) and {row.attempts for row in recorded.values()} == {1}
    assert counter("lethe_purge_refused_files_total") - refused_before == POISONED
    assert REGISTRY.get_sample_value("lethe_file_purge_failing") == POISONED

    # A run before the next attempt is due leaves them alone; one after it tries again, and the wait doubles
    assert run_cleanup(lethe.rt).step("d").candidates == 0
    lethe.clock.advance(timedelta(minutes=1))
    assert run_cleanup(lethe.rt).step("d").failed == POISONED
    again = failures(lethe)
    assert {row.attempts for row in again.values()} == {2}
    assert all(row.next_attempt_at - row.last_attempt_at == timedelta(minutes=2) for row in again.values())

    # Past privacy.object_delete_delay, one warning per file names its id (and nothing else of it), once
    lethe.clock.advance(timedelta(hours=2))
    with caplog.at_level(logging.WARNING, logger="lethe.purge"):
        run_cleanup(lethe.rt)
        lethe.clock.advance(timedelta(minutes=20))
        run_cleanup(lethe.rt)
    overdue = [r for r in caplog.records if getattr(r, "event", "") == "purge.file_overdue"]
    assert sorted(r.file_id for r in overdue) == sorted(poisoned)
    for record in overdue:
        assert not any(key in record.getMessage() + str(record.__dict__) for key in poison.keys)

    # When the operator fixes the store, the next due attempt purges them
    poison.heal()
    lethe.clock.advance(timedelta(minutes=20))
    report = run_cleanup(lethe.rt)
    assert report.step("d").acted == POISONED and report.step("d").failed == 0
    assert all(lethe.row(file_id) is None for file_id in poisoned)
    assert failures(lethe) == {} and REGISTRY.get_sample_value("lethe_file_purge_failing") == 0
    assert versions_of(lethe.raw_store, [key for file_id in poisoned for key in keys_of(file_id)]) == []


def test_a_purge_job_with_a_poisoned_file_purges_the_others_and_does_not_raise(lethe):
    ids = [lethe.upload(ALEX, os.urandom(8)) for _ in range(3)]
    poison = Poison(lethe, ids[:1])
    for file_id in ids:
        lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX)
    assert lethe.run_jobs("purge_objects") == 3  # no job raised
    assert lethe.row(ids[0]) is not None and lethe.row(ids[1]) is None and lethe.row(ids[2]) is None
    assert list(failures(lethe)) == [ids[0]]
    poison.heal()


def test_a_blocked_file_whose_objects_are_refused_is_retried_by_the_catch_up(make_lethe, clamd):
    """Objects-only purges (failed, infected) are isolated too; the catch-up retries them when due, though
    their row is not deleted."""
    lethe = make_lethe(**{"scan.clamd_address": clamd.address})
    clamd.mode = "eicar"
    file_id = lethe.upload(ALEX, b"infected bytes", scan=False)
    lethe.run_jobs("scan_file")
    poison = Poison(lethe, [file_id])
    lethe.run_jobs("purge_objects")
    assert lethe.row(file_id).scan_status == "infected" and list(failures(lethe)) == [file_id]
    poison.heal()
    lethe.clock.advance(lethe.cfg.file.purge_retry_base)
    report = run_cleanup(lethe.rt)
    assert report.step("d").acted == 1
    assert lethe.row(file_id) is not None and failures(lethe) == {}  # the row stays for its uploader
    assert versions_of(lethe.raw_store, keys_of(file_id)) == []
