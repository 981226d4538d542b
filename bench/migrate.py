"""Benchmark of a migration between stores (lethe stores migrate). Not a test.

N files (default 2,000 of 256 KiB, and as many of 4 KiB) on a source store move to a second SeaweedFS, measured
side by side in one run against a raw copy loop of the same objects between the same servers: a GET from the
source and a PUT to the target per object, on as many threads as a migration batch copies with, no Lethe code
(into a fresh bucket, so both write new objects). The migration also reads each object back from the target
and compares its SHA-256, records each copy, moves each row and journals it. Target: >= 50% of the raw loop.

    python bench/migrate.py [--files 2000] [--sizes 4096 262144] [--source seaweed|fs]

PostgreSQL from DATABASE_URL (else an embedded server).
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import contextlib
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from common import bench_database, machine, make_runtime, make_store, seaweed_server
from common import seed as common_seed

from app.db.context import in_transaction
from app.domain.keys import original_key
from app.lifecycle import stores
from app.storage.guard import GuardedStore


def raw_copy(source, target, keys: list[str]) -> float:
    """GET from the source, PUT to the target, on the migration's number of threads; seconds taken."""

    def one(key: str) -> None:
        data = source.get(key)
        target.put(key, data, len(data))

    started = time.perf_counter()
    with ThreadPoolExecutor(stores.COPY_THREADS) as pool:
        list(pool.map(one, keys))
    return time.perf_counter() - started


def migrate(rt) -> float:
    started = time.perf_counter()
    migration = stores.start(rt, "b")
    while stores.run_batch(rt, migration.id).state == "running":
        pass
    return time.perf_counter() - started


def run(url: str, source_kind: str, source_endpoint: str | None, target_endpoint: str, files: int, size: int) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        source = make_store("fs" if source_kind == "fs" else "s3", source_endpoint, workdir)
        target = make_store("s3", target_endpoint, workdir)
        rt = make_runtime(url, source)
        rt.others["b"] = GuardedStore(target, in_transaction)
        rt.db.unit_of_work(
            lambda uow: uow.conn.execute(
                "TRUNCATE files, store_copies, store_migrations, store_move_failures, outbox CASCADE"
            ),
            name="bench.reset",
        )
        ids = common_seed(rt, source, files, size=size)
        keys = [original_key(file_id) for file_id in ids]
        first = raw_copy(source, make_store("s3", target_endpoint, workdir), keys)
        moved = migrate(rt)
        second = raw_copy(source, make_store("s3", target_endpoint, workdir), keys)
        assert (
            rt.db.read(lambda conn: conn.execute("SELECT count(*) FROM files WHERE store = 'b'").fetchone())[0] == files
        )
        raw = (first + second) / 2
        mib = files * size / 1024 / 1024
        print(
            f"{source_kind}->seaweed, {files} files of {size // 1024} KiB: raw copy {files / raw:8.0f} files/s "
            f"({mib / raw:6.1f} MiB/s); migration {files / moved:8.0f} files/s ({mib / moved:6.1f} MiB/s); "
            f"migration/raw {raw / moved:.2f} (target >= 0.50)"
        )
        rt.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 262144])
    parser.add_argument("--source", choices=["seaweed", "fs"], default="seaweed")
    args = parser.parse_args()
    print(f"# {machine()}")
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(bench_database())
        target = stack.enter_context(seaweed_server())
        source = stack.enter_context(seaweed_server()) if args.source == "seaweed" else None
        for size in args.sizes:
            run(url, args.source, source, target, args.files, size)


if __name__ == "__main__":
    main()
