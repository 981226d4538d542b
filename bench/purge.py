"""Benchmark of purge (issue: deletion and purge). Not a test.

For each driver it marks N files deleted (default 10,000) and measures files/s of:
- batched: purge_objects as the service runs it, 1,000 ids a job (batched deletes, one row transaction);
- baseline: one job per file, one transaction, one delete call per key;
- raw limit: no Lethe code on the store path: on fs os.unlink of the same keys plus rmdir, on S3 minio's
  remove_objects in batches of 1,000; plus one DELETE ... WHERE id = ANY(...) per 1,000 ids.

    python bench/purge.py [--files 10000] [--drivers fs s3 s3-versioned] [--webhook] [--hold]
    python bench/purge.py --throttle 2000 [--files 5000]

PostgreSQL from DATABASE_URL (else an embedded server); S3 is moto's server in a process of its own.

With `--throttle RATE`: SeaweedFS behind a proxy that answers S3's 503 SlowDown above RATE deleted keys a second
(tests/support/throttle.py, as providers cap DELETE per bucket); the batched purge runs through it, and the
keys/s it reached are printed against RATE (target: at least 80%), with the SlowDown answers it met.
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import os
import tempfile
import time
import uuid

import psycopg
from common import ROOT, bench_database, machine, make_runtime, make_store, mark_all_deleted, moto_server
from common import seed as common_seed

from app.domain.keys import original_key
from app.domain.objects import FileObjects
from app.lifecycle.purge import purge_files, read_facts

BATCH = 1000


def seed(rt, n: int) -> list[uuid.UUID]:
    """n complete files, each with its original in the store, then marked deleted through mark_deleted."""
    ids = common_seed(rt, rt.store, n, size=64)
    mark_all_deleted(rt, ids)
    rt.db.read(lambda conn: conn.execute("DELETE FROM outbox"))
    return ids


def batched(rt, ids):
    for start in range(0, len(ids), BATCH):
        purge_files(rt, ids[start : start + BATCH])


def baseline(rt, ids):
    for file_id in ids:  # one job per file
        (facts,) = read_facts(rt, [file_id])
        for key in FileObjects(file_id, facts.object_key).object_keys():  # one delete call per key
            rt.store.delete(key)
        rt.db.unit_of_work(
            lambda uow, file_id=file_id: uow.execute(  # one transaction per file
                "DELETE FROM files WHERE id = %s AND deleted_at IS NOT NULL", (file_id,)
            ),
            name="bench.baseline",
        )


def raw_limit(rt, ids):
    """The plainest code that removes the same objects and rows, with no Lethe code on the object path: on
    fs a loop of os.unlink of the same keys (a missing one skipped, as a delete must) and a bottom-up
    os.rmdir of the directories that empties; on S3 the minio client's remove_objects in batches of 1,000;
    the rows with one psycopg DELETE per 1,000 ids. The key list (which keys a file may have) is computed
    before the clock starts: the purge computes it too, but it is not the store's work."""
    keys = [key for file_id in ids for key in FileObjects(file_id, original_key(file_id)).object_keys()]
    store = rt.store.inner
    started = time.perf_counter()
    if store.driver == "fs":
        directories = set()
        for key in keys:
            path = os.path.join(store.root, key)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            directories.add(os.path.dirname(path))
        for directory in sorted(directories, key=len, reverse=True):
            while directory != store.root:
                try:
                    os.rmdir(directory)
                except OSError:  # not empty (or gone already): stop climbing
                    break
                directory = os.path.dirname(directory)
    else:
        from minio.deleteobjects import DeleteObject

        for start in range(0, len(keys), 1000):
            errors = list(
                store.client.remove_objects(store.bucket, [DeleteObject(k) for k in keys[start : start + 1000]])
            )
            assert not errors, errors[:1]
    with psycopg.connect(rt.db.url, autocommit=True) as conn:
        for start in range(0, len(ids), BATCH):
            conn.execute("DELETE FROM files WHERE id = ANY(%s)", (ids[start : start + BATCH],))
    return time.perf_counter() - started


def measure(rt, n: int, run) -> float:
    ids = seed(rt, n)
    started = time.perf_counter()
    timed = run(rt, ids)
    elapsed = timed if timed is not None else time.perf_counter() - started
    left = rt.db.read(lambda conn: conn.execute("SELECT count(*) AS n FROM files").fetchone().n)
    assert left == 0, f"{left} rows left"
    return n / elapsed


def throttled(files: int, rate: float) -> None:
    """The batched purge through a store that throttles at `rate` keys a second."""
    from common import seaweed_server

    sys.path.insert(0, str(ROOT))
    from tests.support.stores import make_s3_store
    from tests.support.throttle import ThrottlingProxy

    with bench_database() as url, seaweed_server() as endpoint:
        direct = make_s3_store(endpoint, server="seaweed")
        proxy = ThrottlingProxy(endpoint, rate=rate).start()
        try:
            rt = make_runtime(url, make_s3_store(proxy.endpoint, bucket=direct.bucket, server="seaweed"))
            try:
                ids = common_seed(rt, direct, files, size=64)
                mark_all_deleted(rt, ids)
                rt.db.read(lambda conn: conn.execute("DELETE FROM outbox"))
                started = time.perf_counter()
                batched(rt, ids)
                elapsed = time.perf_counter() - started
            finally:
                rt.close()
        finally:
            proxy.stop()
    assert proxy.first_pass is not None and proxy.last_pass is not None
    reached = proxy.keys_deleted / (proxy.last_pass - proxy.first_pass)
    print(
        f"throttled at {rate:,.0f} keys/s: {files:,} files ({proxy.keys_deleted:,} keys) purged in {elapsed:.1f} s; "
        f"{reached:,.0f} keys/s while deleting = {reached / rate:.0%} of the rate allowed (target >= 80%); "
        f"{proxy.refused} SlowDown answers",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--drivers", nargs="+", default=["fs", "s3"])
    parser.add_argument(
        "--webhook",
        action="store_true",
        help="an endpoint that takes file.purged: every purged row also writes its message",
    )
    parser.add_argument(
        "--hold", action="store_true", help="a legal hold on a subject with no files: every claim checks it"
    )
    parser.add_argument("--throttle", type=float, help="keys/s a throttling proxy in front of SeaweedFS allows")
    args = parser.parse_args()
    if args.throttle:
        print(f"machine: {machine()}; files: {args.files}")
        throttled(args.files, args.throttle)
        return
    settings = {}
    if args.webhook:
        import base64
        import json

        settings["webhooks.endpoints"] = json.dumps(
            [
                {
                    "name": "bench",
                    "url": "http://127.0.0.1:9/",
                    "secret": "whsec_" + base64.b64encode(os.urandom(32)).decode(),
                    "events": ["file.purged"],
                }
            ]
        )
    print(f"machine: {machine()}; files: {args.files}")
    with bench_database() as url, tempfile.TemporaryDirectory() as workdir, moto_server() as endpoint:
        for driver in args.drivers:
            rt = make_runtime(url, make_store(driver, endpoint, workdir), **settings)
            if args.hold:
                from app.lifecycle.holds import place_hold

                place_hold(rt, None, "BENCH-1", subject_id=uuid.uuid4())
            try:
                figures = {
                    name: measure(rt, args.files, run)
                    for name, run in (("batched", batched), ("baseline", baseline), ("raw", raw_limit))
                }
            finally:
                rt.close()
            print(
                f"{driver}: batched {figures['batched']:,.0f} files/s; baseline {figures['baseline']:,.0f} files/s; "
                f"raw limit {figures['raw']:,.0f} files/s; batched/baseline {figures['batched'] / figures['baseline']:.1f}x; "
                f"batched/raw {figures['batched'] / figures['raw']:.0%}",
                flush=True,
            )


if __name__ == "__main__":
    main()
