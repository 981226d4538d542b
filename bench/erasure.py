"""Erasure at a real install's size (issue 24). Not a test.

A database of its own is filled with SQL (not the API): `--files` files rows (default 5,000,000) of many
people and `--events` stored events (default 20,000,000: four a file), with the indexes of every migration;
one person owns `--subject-files` of those files (default 10,000), half of them attached to messages of
theirs, and is the actor of events of other people's files. Then the erasure runs as the worker runs it
(request, then rounds until complete) on the fs driver (the files have no objects: each key is confirmed
absent by a read, so the store's share is small and the figure is the database's). It prints the time to
complete and the slowest statements, timed on the client. The database is dropped at the end.

    python bench/erasure.py [--files 5000000] [--events-per-file 4] [--subject-files 10000]
                            [--without-actor-index]

Needs PostgreSQL from DATABASE_URL (else an embedded server) and about 8 GB of free disk at the default
size, for the few minutes it runs.
"""

from __future__ import annotations

import sys

sys.path.append(sys.path.pop(0))

import argparse
import tempfile
import time
import uuid
from collections import Counter

import psycopg
from common import bench_database, machine, make_runtime

from app.lifecycle.erasure import erase_round, request_erasure
from app.storage.fs import FsStore

SUBJECT = uuid.UUID("00000000-0000-4000-8000-00000000e7a5")
SLOW = 1.0  # the target: no statement above one second


def fill(url: str, files: int, events_per_file: int, subject_files: int) -> None:
    """Load the rows with the secondary indexes dropped, then build them again (as a restore would)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename IN ('files', 'events') "
            "AND indexname NOT LIKE '%%_pkey'"
        ).fetchall()
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{name}"')
        started = time.perf_counter()
        conn.execute(
            """
            INSERT INTO files (id, uploaded_by, purpose, original_name, mime_type, size_bytes, object_key,
                               upload_state, scan_status, created_at, last_change_at)
            SELECT gen_random_uuid(),
                   CASE WHEN i <= %(subject_files)s THEN %(subject)s
                        ELSE ('00000000-0000-4000-8000-' || lpad((i %% 200000)::text, 12, '0'))::uuid END,
                   'attachment', 'report.pdf', 'application/pdf', 1000, NULL, 'complete', 'clean',
                   timestamptz '2026-01-01' + i * interval '1 second', timestamptz '2026-01-01' + i * interval '1 second'
            FROM generate_series(1, %(files)s) AS i
            """,
            {"files": files, "subject_files": subject_files, "subject": SUBJECT},
        )
        conn.execute(
            "UPDATE files SET object_key = 'f/' || substr(id::text, 1, 2) || '/' || substr(id::text, 3, 2) "
            "|| '/' || id || '/orig-1' WHERE uploaded_by = %s",
            (SUBJECT,),
        )
        print(f"  files: {files:,} rows in {time.perf_counter() - started:.0f} s", flush=True)
        started = time.perf_counter()
        conn.execute(
            """
            INSERT INTO events (resource_kind, resource_id, type, schema_version, audience_principal_id, actor_id,
                                payload, created_at)
            SELECT 'file', f.id, 'file.updated', 1, f.uploaded_by,
                   CASE WHEN n = 1 THEN f.uploaded_by
                        WHEN n = 2 AND f.created_at < timestamptz '2026-01-01' + %(subject_files)s * interval '3 second'
                            THEN %(subject)s END,
                   jsonb_build_object('file', jsonb_build_object('id', f.id, 'uploaded_by', f.uploaded_by,
                       'purpose', f.purpose, 'original_name', f.original_name, 'mime_type', f.mime_type,
                       'size_bytes', f.size_bytes, 'upload_state', f.upload_state, 'scan_status', f.scan_status,
                       'created_at', f.created_at, 'thumbnails', '[]'::jsonb)), f.created_at
            FROM files f, generate_series(1, %(per)s) AS n
            """,
            {"per": events_per_file, "subject_files": subject_files, "subject": SUBJECT},
        )
        print(f"  events: {files * events_per_file:,} rows in {time.perf_counter() - started:.0f} s", flush=True)
        conn.execute(
            "INSERT INTO messages (author_id, id, created_at) SELECT %s, 'm-' || n, now() "
            "FROM generate_series(1, %s) AS n",
            (SUBJECT, subject_files // 2),
        )
        conn.execute(
            """
            INSERT INTO attachments (author_id, message_id, file_id, attached_at)
            SELECT %s, 'm-' || row_number() OVER (ORDER BY id), id, now()
            FROM (SELECT id FROM files WHERE uploaded_by = %s ORDER BY id LIMIT %s) AS f
            """,
            (SUBJECT, SUBJECT, subject_files // 2),
        )
        started = time.perf_counter()
        for _, definition in indexes:
            conn.execute(definition)
        conn.execute("ANALYZE")
        print(f"  indexes and ANALYZE in {time.perf_counter() - started:.0f} s", flush=True)


def timed_statements() -> tuple[Counter, object]:
    """Time every statement this process sends (client side), by its first line; returns the durations and
    a function that stops the timing."""
    durations: Counter = Counter()
    original = psycopg.Cursor.execute

    def execute(cursor, query, params=None, **kwargs):
        started = time.perf_counter()
        try:
            return original(cursor, query, params, **kwargs)
        finally:
            elapsed = time.perf_counter() - started
            text = " ".join(str(query).split())[:90]
            durations[text] = max(durations[text], elapsed)

    psycopg.Cursor.execute = execute

    def stop() -> None:
        psycopg.Cursor.execute = original

    return durations, stop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=5_000_000)
    parser.add_argument("--events-per-file", type=int, default=4)
    parser.add_argument("--subject-files", type=int, default=10_000)
    parser.add_argument(
        "--without-actor-index",
        action="store_true",
        help="drop events_actor (migration 0011) first: the erasure as it ran before issue 24",
    )
    args = parser.parse_args()
    print(
        f"machine: {machine()}; {args.files:,} files, {args.files * args.events_per_file:,} events, "
        f"one person with {args.subject_files:,} files"
    )
    with bench_database() as url:
        fill(url, args.files, args.events_per_file, args.subject_files)
        store = FsStore(tempfile.mkdtemp(prefix="lethe-bench-erasure-"))
        rt = make_runtime(url, store, **{"file.gc_batch_size": 500})
        if args.without_actor_index:
            rt.db.read(lambda conn: conn.execute("DROP INDEX events_actor"))
        durations, stop = timed_statements()
        started = time.perf_counter()
        erasure = request_erasure(rt, None, SUBJECT)
        rounds, state = 0, "running"
        while state == "running":
            state = erase_round(rt, erasure.id)
            rounds += 1
        elapsed = time.perf_counter() - started
        row = rt.db.read(
            lambda conn: conn.execute(
                "SELECT files_marked, files_purged, keys_confirmed_absent, messages_removed FROM erasures WHERE id = %s",
                (erasure.id,),
            ).fetchone()
        )
        stop()
        rt.close()
    print(
        f"\nerasure {state} in {elapsed:.1f} s, {rounds} round(s): {row.files_marked:,} files marked, "
        f"{row.files_purged:,} purged, {row.keys_confirmed_absent:,} keys confirmed absent, "
        f"{row.messages_removed:,} messages"
    )
    print("\n| slowest statements (client side) | seconds |\n| --- | --- |")
    for text, seconds in durations.most_common(8):
        print(f"| `{text}` | {seconds:.3f} |")
    over = [text for text, seconds in durations.items() if seconds > SLOW]
    print(
        f"\nstatements above {SLOW:.0f} s: {len(over)} (target 0); time to complete {elapsed:.0f} s "
        f"(target: minutes, not hours)"
    )


if __name__ == "__main__":
    main()
