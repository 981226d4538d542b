"""A store that throttles: SeaweedFS behind a proxy that answers S3's `503 SlowDown` above a rate of deleted keys
(tests/support/throttle.py), while 5,000 deleted files are purged by their jobs. The driver backs off with
jittered waits and smaller batches: every file is purged, exactly once, no job fails, nothing is left in the
bucket, and the throttling is counted. Also the backoff's own rules, with a fake sleep."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
from prometheus_client import REGISTRY

from app.domain.keys import original_key
from app.errors import Throttled
from app.lifecycle.cleanup import run_cleanup
from app.lifecycle.deletion import mark_deleted
from app.storage.s3 import DELETE_BATCH, Backoff
from tests.support.database import truncate_all
from tests.support.lethe import ALEX, Lethe
from tests.support.stores import make_s3_store
from tests.support.throttle import ThrottlingProxy

FILES = 5_000
RATE = 2_000  # keys a second the proxy lets through (each purged file sends its six keys)
BURST = 500  # at most this many at once: a whole batch of 1,000 keys is always refused, however slow the machine


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_backoff_halves_the_batch_when_throttled_grows_it_back_and_gives_up_after_its_attempts():
    waits: list[float] = []
    backoff = Backoff(attempts=4, base=0.1, cap=0.3, sleep=waits.append, jitter=lambda: 1.0)
    backoff.throttled(), backoff.throttled()
    assert backoff.batch == DELETE_BATCH // 4
    backoff.took()
    assert backoff.batch == DELETE_BATCH // 4 + DELETE_BATCH // 16
    calls = []

    def throttled_twice() -> str:
        calls.append(1)
        if len(calls) <= 2:
            raise Throttled("s3 delete_many throttled: SlowDown")
        return "done"

    assert backoff.call(throttled_twice) == "done" and waits == [0.1, 0.2]

    def always() -> str:
        raise Throttled("s3 delete_many throttled: SlowDown")

    with pytest.raises(Throttled):
        backoff.call(always)
    assert waits[2:] == [0.1, 0.2, 0.3]  # capped; the fourth throttled answer ends it


@pytest.fixture
def throttled_lethe(database_url, seaweed_server, clock):
    direct = make_s3_store(seaweed_server, server="seaweed")  # seeding and checking go around the proxy
    proxy = ThrottlingProxy(seaweed_server, rate=RATE, burst=BURST).start()
    proxied = make_s3_store(proxy.endpoint, bucket=direct.bucket, server="seaweed")
    truncate_all(database_url)
    lethe = Lethe(database_url, proxied, clock)
    yield lethe, direct, proxy
    lethe.close()
    proxy.stop()


def test_five_thousand_files_are_purged_exactly_once_through_a_store_that_throttles(throttled_lethe):
    lethe, direct, proxy = throttled_lethe
    ids = sorted(uuid.uuid4() for _ in range(FILES))
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda file_id: direct.put(original_key(file_id), b"x" * 16, 16), ids))
    now = datetime.now(UTC)

    def seed_and_mark(uow, chunk):
        with uow.conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO files (id, uploaded_by, purpose, original_name, mime_type, size_bytes, object_key, "
                "upload_state, scan_status, created_at, last_change_at) VALUES (%s, %s, 'attachment', 'n', "
                "'text/plain', 16, %s, 'complete', 'skipped', %s, %s)",
                [(file_id, ALEX.id, original_key(file_id), now, now) for file_id in chunk],
            )
        mark_deleted(uow, chunk, now, via="file")

    for start in range(0, FILES, 1000):  # one purge job a thousand files, as a batch delete commits them
        lethe.rt.db.unit_of_work(lambda uow, start=start: seed_and_mark(uow, ids[start : start + 1000]), name="t")
    purged_before = sample("lethe_purge_files_total", result="row")
    throttled_before = sample("lethe_store_throttled_total", operation="delete_many")
    assert lethe.run_jobs("purge_objects") == FILES // 1000  # no job failed: a throttled store fails no file
    assert proxy.refused > 0 and sample("lethe_store_throttled_total", operation="delete_many") > throttled_before
    assert sample("lethe_purge_files_total", result="row") - purged_before == FILES  # each once
    assert lethe.rt.db.read(lambda conn: conn.execute("SELECT count(*) FROM files").fetchone()[0]) == 0
    assert list(direct.client.list_objects(direct.bucket, recursive=True)) == []
    assert proxy.keys_deleted >= FILES * 6  # every key of every file went through, none skipped
    # The backlog the alert reads is empty again once the purge caught up
    assert run_cleanup(lethe.rt).ran and sample("lethe_file_purge_backlog") == 0
