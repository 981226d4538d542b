"""Benchmark of the cleanup (issue: cleanup). Not a test.

Seeds N files rows (default 1,000,000) of which C (default 100,000) are candidates of step b (deliverable,
never attached, past file.unattached_ttl, each with two stored events to redact); C/10 uploads whose session
expired (step a) and C/10 old failed uploads (step c); the rest are recent files, attached files and
failed uploads. Then runs one cleanup and prints candidates/s per step, and the EXPLAIN
of each candidate query.

    python bench/cleanup.py [--files 1000000] [--candidates 100000] [--batch 500]

PostgreSQL from DATABASE_URL (else an embedded server); the fs driver in a temporary directory.
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta

from common import bench_database, machine, make_runtime, make_store

from app.db import cleanup as sql
from app.lifecycle.cleanup import run_cleanup
from app.platform.clock import FakeClock

SEED = """
WITH numbered AS (
    SELECT i, gen_random_uuid() AS id, gen_random_uuid() AS uploader,
           CASE WHEN i <= %(candidates)s THEN 'b'
                WHEN i <= %(candidates)s + %(side)s THEN 'a'
                WHEN i <= %(candidates)s + 2 * %(side)s THEN 'c'
                WHEN i %% 20 = 0 THEN 'failed_recent'
                ELSE 'recent' END AS kind
    FROM generate_series(1, %(files)s) AS i
), timed AS (
    SELECT *, CASE kind WHEN 'b' THEN %(old)s WHEN 'a' THEN %(old)s WHEN 'c' THEN %(ancient)s
                        ELSE %(recent)s END AS at
    FROM numbered
)
INSERT INTO files (id, uploaded_by, purpose, original_name, mime_type, size_bytes, object_key, upload_state,
                   scan_status, created_at, scanned_at, last_change_at)
SELECT id, uploader, 'attachment', 'bench.bin', 'application/octet-stream', 64,
       'f/' || substr(replace(id::text, '-', ''), 1, 2) || '/' || substr(replace(id::text, '-', ''), 3, 2) || '/' || id || '/orig-1',
       CASE kind WHEN 'a' THEN 'uploading' WHEN 'c' THEN 'failed' WHEN 'failed_recent' THEN 'failed' ELSE 'complete' END,
       CASE WHEN kind IN ('b', 'recent') THEN 'clean' ELSE 'pending' END,
       at, CASE WHEN kind IN ('b', 'recent') THEN at END, at
FROM timed
"""


def seed(db, files: int, candidates: int, now: datetime) -> None:
    old, recent, ancient = now - timedelta(days=3), now - timedelta(hours=1), now - timedelta(days=30)
    started = time.perf_counter()
    side = candidates // 10
    db.read(
        lambda conn: conn.execute(
            SEED,
            {"files": files, "candidates": candidates, "side": side, "old": old, "recent": recent, "ancient": ancient},
        )
    )
    db.read(
        lambda conn: conn.execute(
            "INSERT INTO upload_sessions (file_id, state, part_size, part_count, created_at, expires_at, completed_at) "
            "SELECT id, CASE WHEN upload_state = 'uploading' THEN 'open' ELSE 'completed' END, 8388608, 1, created_at, "
            "created_at + interval '1 day', CASE WHEN upload_state = 'uploading' THEN NULL ELSE created_at END FROM files"
        )
    )
    # A third of the recent deliverable files are attached (they sit in the candidate index too).
    db.read(
        lambda conn: conn.execute(
            "INSERT INTO messages (id, author_id, created_at) SELECT 'm-' || id, uploaded_by, created_at FROM files "
            "WHERE last_change_at > %s AND upload_state = 'complete' AND random() < 0.33",
            (old,),
        )
    )
    db.read(
        lambda conn: conn.execute(
            "INSERT INTO attachments (author_id, message_id, file_id, attached_at) "
            "SELECT author_id, id, substr(id, 3)::uuid, created_at FROM messages"
        )
    )
    # Two stored events for each candidate, to be redacted.
    db.read(
        lambda conn: conn.execute(
            """
        INSERT INTO events (resource_kind, resource_id, type, schema_version, audience_principal_id, payload, created_at)
        SELECT 'file', f.id, 'file.updated', 1, f.uploaded_by,
               jsonb_build_object('file', jsonb_build_object('id', f.id, 'uploaded_by', f.uploaded_by,
                 'purpose', f.purpose, 'original_name', f.original_name, 'mime_type', f.mime_type,
                 'size_bytes', f.size_bytes, 'upload_state', f.upload_state, 'scan_status', s,
                 'created_at', f.created_at, 'thumbnails', '[]'::jsonb)), f.created_at
        FROM files f CROSS JOIN (VALUES ('pending'), ('clean')) AS v(s) WHERE f.last_change_at <= %s
        """,
            (old,),
        )
    )
    db.read(lambda conn: conn.execute("VACUUM ANALYZE"))
    print(
        f"seeded {files:,} files ({candidates:,} candidates of step b) in {time.perf_counter() - started:.0f}s",
        flush=True,
    )


def explain(db, now, ttl) -> None:
    queries = {
        "a": (sql.expired_sessions, (now, None, 500)),
        "b": (sql.unattached_candidates, (now - ttl, None, 500)),
        "c": (sql.failed_candidates, (now - timedelta(days=7), None, 500)),
        "d": (sql.deleted_rows, (None, 500)),
    }
    for step, (query, args) in queries.items():

        def run(conn):
            original = conn.execute
            conn.execute = lambda statement, params=None, **kw: original("EXPLAIN " + statement, params, **kw)
            try:
                return [row[0] for row in query(conn, *args)]
            finally:
                conn.execute = original

        lines = db.read(run)
        print(f"EXPLAIN step {step}:\n    " + "\n    ".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--candidates", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    now = datetime(2026, 6, 1, tzinfo=UTC)
    with bench_database() as url, tempfile.TemporaryDirectory() as workdir:
        rt = make_runtime(url, make_store("fs", None, workdir), **{"file.gc_batch_size": args.batch})
        rt.clock = FakeClock(now)
        try:
            seed(rt.db, args.files, args.candidates, now)
            explain(rt.db, now, rt.cfg.file.unattached_ttl)
            started = time.perf_counter()
            report = run_cleanup(rt)
            total = time.perf_counter() - started
            for step in report.steps:
                rate = step.acted / step.duration_s if step.duration_s and step.acted else 0
                print(
                    f"step {step.step} {step.name:<17} candidates {step.candidates:>8,} acted {step.acted:>8,} "
                    f"in {step.duration_s:7.2f}s = {rate:>8,.0f} candidates/s"
                )
            print(f"whole run: {total:.1f}s; first error: {report.first_error!r}")
        finally:
            rt.close()


if __name__ == "__main__":
    main()
