"""Sweeps of unmanaged prefixes (D16, seed 003 4.6, seed 002 "prefix deletions are bounded twice") on both
drivers: the created-before bound against an object written during the sweep, max_age, waves never wider
than storage.sweep_concurrency, idempotent replay, link safety, and Lethe's own prefixes untouched."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime, timedelta

import pytest

from app.errors import ObjectFailed
from app.lifecycle.sweeps import run_sweep
from app.lifecycle.waves import delete_in_waves
from tests.support.aging import age_object
from tests.support.helpers import rows
from tests.support.lethe import ALEX

DAY = timedelta(days=1)


def declared(**entry) -> str:
    return json.dumps([{"prefix": "issues/", "schedule": "0 23 1 1,4,7,10 *", **entry}])


@pytest.fixture
def swept(make_lethe):
    """A Lethe with issues/ declared, its clock on the store's own time (objects are aged explicitly)."""

    def make(concurrency: int = 4, **entry):
        lethe = make_lethe(
            **{"storage.unmanaged_prefixes": declared(**entry), "storage.sweep_concurrency": concurrency}
        )
        lethe.clock.set(datetime.now(UTC))
        return lethe

    return make


def put(lethe, key: str, age: timedelta | None = None) -> str:
    lethe.raw_store.put(key, b"third-party bytes", 17)
    if age is not None:
        age_object(lethe.raw_store, key, lethe.clock.now() - age)
    return key


def present(lethe, key: str) -> bool:
    return lethe.raw_store.head(key) is not None


def sweep(lethe, **kwargs):
    return run_sweep(lethe.rt, lethe.cfg.storage.unmanaged_prefixes[0], **kwargs)


def test_a_wipe_removes_every_object_written_before_the_run_and_nothing_else(swept):
    lethe = swept()
    old = [put(lethe, f"issues/{n}/report-{n}.pdf", age=DAY) for n in range(3)]
    fresh = put(lethe, "issues/fresh.txt")  # written in the run's own second: newer than its bound
    ours = lethe.upload(ALEX)
    ours_key = lethe.row(ours).object_key
    report = sweep(lethe)
    assert (report.deleted, report.newer, report.failed) == (3, 1, 0)
    assert not any(present(lethe, key) for key in old)
    assert present(lethe, fresh) and present(lethe, ours_key)
    assert rows(lethe, "schedule_runs")[0].name == "sweep:issues/"
    # A replay converges: nothing left to delete is no error
    assert sweep(lethe).deleted == 0


def test_an_object_written_during_the_sweep_is_never_touched(swept, swap_store):
    lethe = swept()
    for n in range(5):
        put(lethe, f"issues/old-{n}", age=DAY)
    written = []

    class WritesDuringTheListing:
        """The third-party program writes while the sweep lists (after the bound was taken)."""

        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def list_prefix(self, prefix):
            for number, listed in enumerate(self.inner.list_prefix(prefix)):
                if number == 1:
                    written.append(put(lethe, "issues/written-during-the-sweep"))
                yield listed

    swap_store(lethe, WritesDuringTheListing(lethe.rt.store))
    report = sweep(lethe)
    assert report.deleted == 5 and written and present(lethe, written[0])


def test_max_age_keeps_what_is_younger(swept):
    lethe = swept(max_age="7d")
    old = put(lethe, "issues/old", age=8 * DAY)
    young = put(lethe, "issues/young", age=6 * DAY)
    report = sweep(lethe)
    assert report.deleted == 1 and not present(lethe, old) and present(lethe, young)


def test_a_dry_run_counts_and_deletes_nothing(swept):
    lethe = swept()
    keys = [put(lethe, f"issues/{n}", age=DAY) for n in range(2)]
    report = sweep(lethe, dry_run=True)
    assert report.deleted == 2 and all(present(lethe, key) for key in keys)
    assert rows(lethe, "schedule_runs") == []


class CountingStore:
    """A store that counts the batch deletes in flight at once, holding each one until a wave has formed."""

    def __init__(self, inner, width: int):
        self.inner, self.width = inner, width
        self.lock = threading.Lock()
        self.in_flight = self.most = self.calls = 0
        self.sizes: list[int] = []
        self.first_wave = threading.Barrier(width, timeout=10)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def delete_many(self, keys):
        keys = list(keys)
        with self.lock:
            self.in_flight += 1
            self.calls += 1
            call = self.calls
            self.most = max(self.most, self.in_flight)
            self.sizes.append(len(keys))
        try:
            if call <= self.width:
                self.first_wave.wait()  # the first `width` batches are all in flight together
            return self.inner.delete_many(keys)
        finally:
            with self.lock:
                self.in_flight -= 1


@pytest.mark.one_store
def test_waves_never_have_more_batches_in_flight_than_configured(raw_store):
    keys = [f"issues/{n:05d}" for n in range(5 * 7 + 3)]
    for key in keys:
        raw_store.put(key, b"x", 1)
    counting = CountingStore(raw_store, width=3)
    report = delete_in_waves(counting.delete_many, iter(keys), concurrency=3, batch_keys=7)
    assert report.batches == 6 and report.deleted == len(keys) and report.failed == 0
    assert counting.most == 3  # reached, never passed
    assert max(counting.sizes) == 7
    assert not any(raw_store.head(key) for key in keys)


@pytest.mark.parametrize("raw_store", ["fs", "s3"], indirect=True)
def test_the_sweep_sends_batches_of_at_most_1000_keys(swept, swap_store):
    lethe = swept(concurrency=1, max_age="1d")
    for n in range(1003):
        lethe.raw_store.put(f"issues/k{n:05d}", b"x", 1)
    # All written now: none is older than a day; make the bound cover them instead
    lethe.clock.advance(2 * DAY)
    counting = CountingStore(lethe.rt.store, width=1)
    swap_store(lethe, counting)
    report = sweep(lethe)
    assert report.deleted == 1003 and counting.sizes == [1000, 3] and counting.most == 1


@pytest.mark.one_store
def test_links_are_removed_and_never_followed_and_emptied_directories_go(swept, tmp_path):
    lethe = swept()
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_text("keep me")
    (outside / "dir" / "inner.txt").write_text("keep me too")
    root = lethe.raw_store.root
    os.makedirs(os.path.join(root, "issues", "a", "b"))
    put(lethe, "issues/a/b/old.txt", age=DAY)
    os.symlink(outside / "secret.txt", os.path.join(root, "issues", "file-link"))
    os.symlink(outside / "dir", os.path.join(root, "issues", "dir-link"))
    for link in ("file-link", "dir-link"):
        age_object(lethe.raw_store, f"issues/{link}", lethe.clock.now() - DAY)
    report = sweep(lethe)
    assert report.deleted == 3  # the object and the two links, as entries
    assert (outside / "secret.txt").read_text() == "keep me"
    assert (outside / "dir" / "inner.txt").read_text() == "keep me too"
    assert os.listdir(os.path.join(root, "issues")) == []  # a/ and a/b/ went; the prefix's own directory stays


@pytest.mark.one_store
def test_a_prefix_that_is_a_link_is_never_entered(swept, tmp_path):
    lethe = swept()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "precious").write_text("x")
    os.symlink(outside, os.path.join(lethe.raw_store.root, "issues"))
    with pytest.raises(ObjectFailed):
        sweep(lethe)
    assert (outside / "precious").exists()


@pytest.mark.one_store
def test_waves_never_hold_more_of_the_listing_than_the_batches_in_flight(raw_store):
    """The width bound is on what is taken from the listing, not only on threads: while `width` batches are in
    flight, at most one more batch is read from the listing (never the whole listing in memory)."""
    width, batch = 2, 5
    keys = [f"issues/{n:04d}" for n in range(batch * 8)]
    for key in keys:
        raw_store.put(key, b"x", 1)
    taken = []

    def listing():
        for key in keys:
            taken.append(key)
            yield key

    class Holding:
        """Holds each batch until the test has seen how far the listing was read."""

        driver = "fs"

        def __init__(self):
            self.ahead = 0  # most keys read from the listing beyond the batches already done
            self.done = 0
            self.lock = threading.Lock()

        def delete_many(self, batch_keys):
            # A proof of absence needs a bound: give the caller a moment to read further than it may.
            threading.Event().wait(0.2)
            with self.lock:
                self.ahead = max(self.ahead, len(taken) - self.done * batch)
            failures = raw_store.delete_many(batch_keys)
            with self.lock:
                self.done += 1
            return failures

    store = Holding()
    report = delete_in_waves(store.delete_many, listing(), concurrency=width, batch_keys=batch)
    assert report.deleted == len(keys)
    # Beyond the batches done: `width` in flight and one being filled, never more.
    assert store.ahead <= (width + 1) * batch
