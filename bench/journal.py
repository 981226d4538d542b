"""Reconciliation after a restore (issue: the deletion journal). Not a test.

A restored database holds N live files (default 100,000) with their objects still in the store, and the journal
says each of them was deleted after the backup: one `file.marked` entry per file (as deleteFile writes them),
then `file.objects_gone` and `file.row_removed` entries per purge of 1,000. Measured, side by side in one run:

- reconciled: `lethe restore reconcile` as the scheduler runs it (the journal read, every file marked again
  through mark_deleted in transactions of 1,000, the two-way check and the audit's listing), then the purge of
  those files as the worker runs it (purge_objects, 1,000 ids a job): files/s from the first read to the last row;
- raw limit: the same objects and rows removed by the plainest code (os.unlink, or minio's remove_objects, and
  one DELETE per 1,000 ids), as bench/purge.py measures it.

Target: reconciled at least 50% of the raw limit.

    python bench/journal.py [--files 100000] [--drivers fs]
"""

from __future__ import annotations

import sys  # noqa: E402,I001 - first: bench/ holds http.py, so the standard library must be searched first

sys.path.append(sys.path.pop(0))

import argparse
import tempfile
import time
import uuid
from datetime import datetime, timezone

from common import bench_database, machine, make_runtime, make_store, moto_server
from common import seed as common_seed
from purge import raw_limit

from app.db import journal as journal_sql
from app.domain.journal import FILE_MARKED, OBJECTS_GONE, ROW_REMOVED, Entry, line, segment_key
from app.lifecycle import restore
from app.lifecycle.purge import purge_files
from app.storage.journal import JournalSink

SEGMENT = 5000


def write_journal(rt, ids: list[uuid.UUID]) -> None:
    """The journal of a database that deleted and purged every one of these files after its backup."""
    now = datetime.now(timezone.utc)
    entries = [Entry(FILE_MARKED, now, files=(file_id,), via="file") for file_id in ids]
    for start in range(0, len(ids), 1000):
        chunk = tuple(ids[start:start + 1000])
        entries += [Entry(OBJECTS_GONE, now, files=chunk), Entry(ROW_REMOVED, now, files=chunk)]
    state = rt.db.read(journal_sql.state)
    sink = JournalSink(rt.store, state.installation_id)
    for start in range(0, len(entries), SEGMENT):
        numbered = [Entry(e.kind, e.at, e.files, e.via, seq=state.position + start + index + 1)
                    for index, e in enumerate(entries[start:start + SEGMENT])]
        sink.write(segment_key(state.installation_id, numbered[0].seq, numbered[-1].seq, now),
                   "".join(line(entry) + "\n" for entry in numbered))


def reconciled(rt, ids: list[uuid.UUID]) -> float:
    write_journal(rt, ids)
    started = time.perf_counter()
    report = restore.reconcile(rt)
    assert report.files_marked == len(ids), report
    for start in range(0, len(ids), 1000):
        purge_files(rt, ids[start:start + 1000])
    elapsed = time.perf_counter() - started
    left = rt.db.read(lambda conn: conn.execute("SELECT count(*) FROM files").fetchone()[0])
    assert left == 0, f"{left} rows left"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--drivers", nargs="+", default=["fs"])
    args = parser.parse_args()
    print(f"machine: {machine()}; files: {args.files}")
    with bench_database() as url, tempfile.TemporaryDirectory() as workdir, moto_server() as endpoint:
        for driver in args.drivers:
            rt = make_runtime(url, make_store(driver, endpoint, workdir))
            try:
                ids = common_seed(rt, rt.store, args.files, size=64)
                seconds = reconciled(rt, ids)
                rt.db.read(lambda conn: conn.execute("DELETE FROM outbox"))
                raw_ids = common_seed(rt, rt.store, args.files, size=64)
                raw = raw_limit(rt, raw_ids)
            finally:
                rt.close()
            print(f"{driver}: reconciled and purged {args.files / seconds:,.0f} files/s ({seconds:.1f} s); raw limit "
                  f"{args.files / raw:,.0f} files/s; reconciled/raw {raw / seconds:.0%}", flush=True)


if __name__ == "__main__":
    main()
