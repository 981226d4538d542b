"""Benchmark of deletes on a bucket that keeps versions (issues 9 and 23). Not a test.

For a plain and a versioned bucket of moto's server and of SeaweedFS (a real S3 server, `weed mini`) it writes
N originals and times delete_many of every key purge names for them (originals orig-1..orig-2 and four
variants: 6 keys a file), side by side in one run.

    python bench/versions.py [--files 200]
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import tempfile
import time
import uuid

from common import machine, make_store, moto_server, seaweed_server

from app.domain.keys import original_key
from app.domain.objects import FileObjects


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=200)
    args = parser.parse_args()
    print(f"machine: {machine()}; files: {args.files}")
    with moto_server() as moto, seaweed_server() as seaweed, tempfile.TemporaryDirectory() as workdir:
        for server, endpoint in (("moto", moto), ("seaweedfs", seaweed)):
            for driver in ("s3", "s3-versioned"):
                run(server, driver, make_store(driver, endpoint, workdir), args.files)


def run(server: str, driver: str, store, files: int) -> None:
    ids = [uuid.uuid4() for _ in range(files)]
    for file_id in ids:
        store.put(original_key(file_id), b"x" * 64, 64)
    keys = [key for file_id in ids for key in FileObjects(file_id, original_key(file_id)).object_keys()]
    started = time.perf_counter()
    assert store.delete_many(keys) == []
    elapsed = time.perf_counter() - started
    print(f"{server} {driver}: {len(ids) / elapsed:,.0f} files/s ({len(keys)} keys in {elapsed:.2f} s)", flush=True)


if __name__ == "__main__":
    main()
