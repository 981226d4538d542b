"""Benchmark of deletes on a bucket that keeps versions (issue 9). Not a test.

For a plain and a versioned bucket of moto's server it writes N originals and times delete_many of every
key purge names for them (originals orig-1..orig-2 and four variants: 6 keys a file), side by side.

    python bench/versions.py [--files 200]
"""

from __future__ import annotations

import sys  # noqa: E402,I001 - first: bench/ holds http.py, so the standard library must be searched first

sys.path.append(sys.path.pop(0))

import argparse
import tempfile
import time
import uuid

from common import machine, make_store, moto_server

from app.domain.keys import original_key
from app.domain.purge_plan import object_keys_of


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=200)
    args = parser.parse_args()
    print(f"machine: {machine()}; files: {args.files}")
    with moto_server() as endpoint, tempfile.TemporaryDirectory() as workdir:
        for driver in ("s3", "s3-versioned"):
            store = make_store(driver, endpoint, workdir)
            ids = [uuid.uuid4() for _ in range(args.files)]
            for file_id in ids:
                store.put(original_key(file_id), b"x" * 64, 64)
            keys = [key for file_id in ids for key in object_keys_of(file_id, original_key(file_id))]
            started = time.perf_counter()
            assert store.delete_many(keys) == []
            elapsed = time.perf_counter() - started
            print(f"{driver}: {len(ids) / elapsed:,.0f} files/s ({len(keys)} keys in {elapsed:.2f} s)", flush=True)


if __name__ == "__main__":
    main()
