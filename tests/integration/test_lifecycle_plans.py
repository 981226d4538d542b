"""Every query of the lifecycle wing reads through an index at a real install's size (issue 24, review B5).

One database of this module's own is seeded once with realistic statistics (many uploaders, four stored
events a file, messages and attachments, receipts, an erasure's file list, slots), then ANALYZEd. Each
lifecycle function is called as it runs, inside a transaction that is rolled back; every statement it sends
is also EXPLAINed, and the test fails on a sequential scan of files, events, attachments, upload_sessions or
messages. The cleanup's candidate queries stay covered by test_cleanup_indexes.py as well.
"""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import namedtuple_row

from app.db import aborts as aborts_sql
from app.db import cleanup as cleanup_sql
from app.db import erasures as erasures_sql
from app.db import file_keys as file_keys_sql
from app.db import files as files_sql
from app.db import holds as holds_sql
from app.db import keeps as keeps_sql
from app.db import messages as messages_sql
from app.db import purge_failures as failures_sql
from app.db import receipts as receipts_sql
from app.db import retention as retention_sql
from app.db import sessions as sessions_sql
from app.db import slots as slots_sql
from app.db import variants as variants_sql
from app.db import webhooks as webhooks_sql
from app.db.conn import one
from app.db.migrate import migrate
from app.db.uow import UnitOfWork
from app.domain.ends import Reach
from app.lifecycle import deletion
from tests.support.database import create_test_database, with_database

NOW = datetime(2026, 6, 1, tzinfo=UTC)
WATCHED = {"files", "events", "attachments", "upload_sessions", "messages"}
SUBJECT = uuid.UUID("00000000-0000-4000-8000-000000000123")  # one uploader among thousands
ERASURE = uuid.UUID("00000000-0000-4000-8000-0000000e7a5e")
HOLD = uuid.UUID("00000000-0000-4000-8000-00000000401d")
ZERO = uuid.UUID(int=0)
CURSOR = (NOW - timedelta(days=30), ZERO)


@pytest.fixture(scope="module")
def seeded(postgres_server):
    server = postgres_server  # DATABASE_URL's server, or the suite's embedded one
    name = f"lethe_plans_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    admin = create_test_database(server, name)
    url = with_database(server, name)
    try:
        yield _seed(url)
    finally:  # a seed that failed drops its database too
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _seed(url: str) -> str:
    migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"""
            INSERT INTO files (id, uploaded_by, purpose, original_name, mime_type, size_bytes, object_key,
                               upload_state, scan_status, created_at, last_change_at, deleted_at, retired_at,
                               encrypted, key_id, wrapped_key, piece_size)
            SELECT gen_random_uuid(),
                   CASE WHEN i % 2000 = 0 THEN '{SUBJECT}'::uuid ELSE ('00000000-0000-4000-8000-' || lpad((i % 3000)::text, 12, '0'))::uuid END,
                   CASE WHEN i % 40 = 0 THEN 'avatar' WHEN i % 97 = 0 THEN 'gdpr_export' ELSE 'attachment' END,
                   'n', 'text/plain', 1, NULL,
                   CASE WHEN i % 50 = 0 THEN 'failed' WHEN i % 333 = 0 THEN 'uploading' ELSE 'complete' END,
                   CASE WHEN i % 50 = 0 OR i % 333 = 0 OR i % 71 = 0 THEN 'pending' ELSE 'clean' END,
                   timestamptz '2026-01-01' + i * interval '1 minute', timestamptz '2026-01-01' + i * interval '1 minute',
                   CASE WHEN i % 97 = 1 THEN timestamptz '2026-05-01' END,
                   CASE WHEN i % 89 = 0 THEN timestamptz '2026-05-02' END,
                   i % 4 <> 0, CASE i % 4 WHEN 1 THEN 'k-old' WHEN 2 THEN 'k-new' WHEN 3 THEN 'k-new' END,
                   CASE WHEN i % 4 <> 0 THEN '\\x01'::bytea END, CASE WHEN i % 4 <> 0 THEN 1024 END
            FROM generate_series(1, 80000) AS i
            """
        )
        conn.execute(
            "INSERT INTO upload_sessions (file_id, state, part_size, part_count, created_at, expires_at, completed_at) "
            "SELECT id, CASE WHEN upload_state = 'uploading' THEN 'open' ELSE 'completed' END, 1024, 1, created_at, "
            "created_at + interval '1 day', created_at FROM files"
        )
        conn.execute(
            """
            INSERT INTO events (resource_kind, resource_id, type, schema_version, audience_principal_id, actor_id,
                                payload, created_at)
            SELECT 'file', f.id, 'file.updated', 1, f.uploaded_by, CASE WHEN n % 2 = 0 THEN f.uploaded_by END,
                   jsonb_build_object('file', jsonb_build_object('id', f.id, 'uploaded_by', f.uploaded_by,
                       'purpose', f.purpose, 'original_name', f.original_name, 'mime_type', f.mime_type,
                       'size_bytes', f.size_bytes, 'upload_state', f.upload_state, 'scan_status', f.scan_status,
                       'created_at', f.created_at, 'thumbnails', '[]'::jsonb)), f.created_at
            FROM files f, generate_series(1, 4) AS n
            """
        )
        conn.execute(
            "INSERT INTO messages (author_id, id, created_at, deleted_at) "
            "SELECT uploaded_by, 'm-' || id, created_at, CASE WHEN purpose = 'gdpr_export' THEN created_at END "
            "FROM files WHERE purpose = 'attachment' AND upload_state = 'complete' LIMIT 30000"
        )
        conn.execute(
            "INSERT INTO attachments (author_id, message_id, file_id, attached_at) "
            "SELECT author_id, id, substring(id from 3)::uuid, created_at FROM messages"
        )
        conn.execute(
            "INSERT INTO receipts (file_id, via, marked_at, purged_at, keys_deleted) "
            "SELECT gen_random_uuid(), 'file', timestamptz '2026-01-01', timestamptz '2026-01-01' + i * interval '5 minutes', 6 "
            "FROM generate_series(1, 30000) AS i"
        )
        conn.execute(
            "INSERT INTO erasures (id, subject_id, state, created_at) VALUES (%s, %s, 'running', now())",
            (ERASURE, SUBJECT),
        )
        conn.execute(
            "INSERT INTO erasure_files (erasure_id, file_id, object_key, part_count) "
            "SELECT %s, id, object_key, 1 FROM files WHERE uploaded_by = %s",
            (ERASURE, SUBJECT),
        )
        conn.execute(
            "INSERT INTO slots (kind, holder_id, file_id, set_at) "
            "SELECT 'avatar', uploaded_by, min(id::text)::uuid, now() FROM files WHERE purpose = 'avatar' "
            "AND deleted_at IS NULL AND upload_state = 'complete' GROUP BY uploaded_by"
        )
        # Legal holds (issue 27): a few hundred on files and on uploaders, half of them released, and one on the
        # subject.
        conn.execute(
            "INSERT INTO legal_holds (id, subject_id, file_id, case_ref, created_at, released_at, files_deferred) "
            "SELECT gen_random_uuid(), CASE WHEN mod(n, 4) = 0 THEN uploaded_by END, CASE WHEN mod(n, 4) <> 0 THEN id END, "
            "'T-' || n, timestamptz '2026-01-01', CASE WHEN mod(n, 2) = 0 THEN timestamptz '2026-02-01' END, "
            "CASE WHEN mod(n, 2) = 0 THEN 0 END FROM (SELECT id, uploaded_by, row_number() OVER (ORDER BY id) AS n "
            "FROM files WHERE uploaded_by <> %s LIMIT 400) AS picked",
            (SUBJECT,),
        )
        conn.execute(
            "INSERT INTO legal_holds (id, subject_id, case_ref, created_at) VALUES (%s, %s, 'T-s', now())",
            (HOLD, SUBJECT),
        )
        conn.execute("ANALYZE")
    return url


def plans_of(url: str, call) -> list[dict[str, Any]]:
    """Run call(conn) in a transaction that is rolled back; EXPLAIN every statement it sends on the way."""
    plans: list[dict[str, Any]] = []
    original = psycopg.Cursor.execute

    def explained(cursor, query, params=None, **kwargs):
        text = query if isinstance(query, str) else query.as_string(cursor.connection)
        if text.lstrip().split(None, 1)[0].upper() in ("SELECT", "WITH", "UPDATE", "DELETE", "INSERT"):
            with cursor.connection.cursor(row_factory=namedtuple_row) as probe:
                original(probe, "EXPLAIN (FORMAT JSON) " + text, params)
                plans.append(one(probe)[0][0]["Plan"])
        return original(cursor, query, params, **kwargs)

    with psycopg.connect(url, autocommit=True, row_factory=namedtuple_row) as conn:
        setattr(psycopg.Cursor, "execute", explained)  # noqa: B010 (a method replaced for the call)
        try:
            with conn.transaction(force_rollback=True):
                call(conn)
        finally:
            setattr(psycopg.Cursor, "execute", original)  # noqa: B010
    return plans


def nodes(node):
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def subject_file_ids(url: str, limit: int = 50) -> list[uuid.UUID]:
    with psycopg.connect(url) as conn:
        return [
            row[0]
            for row in conn.execute(
                "SELECT id FROM files WHERE uploaded_by = %s ORDER BY id LIMIT %s", (SUBJECT, limit)
            )
        ]


# Every query function of the lifecycle wing (retention, slots h, erasure, receipts, sweeps' bookkeeping,
# audit pages, purge failures), called as the services call it.
QUERIES = {
    "retention retire": lambda c, ids: retention_sql.retire_candidates(c, "attachment", NOW, False, None, 500),
    "retention retire+cursor": lambda c, ids: retention_sql.retire_candidates(c, "attachment", NOW, False, CURSOR, 500),
    "retention retire attached": lambda c, ids: retention_sql.retire_candidates(c, "gdpr_export", NOW, True, None, 500),
    "retention retired": lambda c, ids: retention_sql.retired_candidates(c, "attachment", NOW, None, 500),
    "retention retired+cursor": lambda c, ids: retention_sql.retired_candidates(c, "attachment", NOW, CURSOR, 500),
    "retention facts": lambda c, ids: retention_sql.retention_facts(c, ids),
    "retention set": lambda c, ids: retention_sql.set_retired(c, ids, NOW),
    "retention restore": lambda c, ids: retention_sql.restore(c, ids[0], NOW),
    "retention runs": lambda c, ids: (
        retention_sql.record_run(c, "retention:x", NOW),
        retention_sql.last_run(c, "retention:x"),
    ),
    "untyped p": lambda c, ids: files_sql.untyped(c, None, 500),
    "untyped p+after": lambda c, ids: files_sql.untyped(c, ids[0], 500),
    "untyped p set": lambda c, ids: files_sql.set_detected_type(c, ids[0], "image/png"),
    "slots h": lambda c, ids: slots_sql.unkept_candidates(c, NOW, None, 500),
    "slots h+cursor": lambda c, ids: slots_sql.unkept_candidates(c, NOW, CURSOR, 500),
    "slots kept": lambda c, ids: slots_sql.kept(c, ids),
    "slots clear holder": lambda c, ids: slots_sql.clear_holder(c, SUBJECT),
    "erasure messages": lambda c, ids: erasures_sql.lock_messages_of(c, SUBJECT, 500),
    "erasure files of messages": lambda c, ids: erasures_sql.files_of_messages(c, SUBJECT, ["m-1", "m-2"]),
    "erasure delete messages": lambda c, ids: erasures_sql.delete_messages(c, SUBJECT, ["m-1", "m-2"]),
    "erasure files": lambda c, ids: erasures_sql.lock_files_of(c, SUBJECT, 500, ZERO),
    "erasure adopt": lambda c, ids: erasures_sql.adopt_unconfirmed(c, ERASURE, SUBJECT),
    "erasure drafts": lambda c, ids: erasures_sql.delete_drafts_of(c, SUBJECT),
    "erasure events": lambda c, ids: erasures_sql.forget_events_of(c, SUBJECT, ERASURE),
    "erasure remaining": lambda c, ids: erasures_sql.remaining(c, SUBJECT, ERASURE),
    "erasure unconfirmed": lambda c, ids: erasures_sql.unconfirmed_purged(c, ERASURE, 500, ZERO),
    "erasure deleted files": lambda c, ids: erasures_sql.deleted_files_of(c, ERASURE, 500, ZERO),
    "erasure confirm": lambda c, ids: erasures_sql.set_confirmed(c, ERASURE, {i: 6 for i in ids}, NOW),
    "erasure drafts of others": lambda c, ids: erasures_sql.forget_files_in_drafts(c, ERASURE),
    "erasure finish": lambda c, ids: erasures_sql.finish(c, ERASURE, "complete", None, NOW),
    "erasure file ids": lambda c, ids: erasures_sql.file_ids_of(c, ERASURE),
    "receipts of": lambda c, ids: receipts_sql.receipts_of(c, ids),
    "receipts confirm": lambda c, ids: receipts_sql.set_confirmed_absent(c, {i: 6 for i in ids}),
    "receipts g": lambda c, ids: receipts_sql.prune(c, NOW - timedelta(days=60), 500),
    "purge failures": lambda c, ids: (
        failures_sql.attempts_of(c, ids),
        failures_sql.record(c, [(i, 1, "S3Error", NOW) for i in ids], NOW),
        failures_sql.set_warned(c, ids, NOW),
        failures_sql.clear(c, ids),
        failures_sql.failing(c),
    ),
    "mark": lambda c, ids: deletion.mark_deleted(UnitOfWork(conn=c, name="plan", subscribers=()), ids, NOW, "erasure"),
    "mark sparing attached": lambda c, ids: files_sql.set_deleted(c, ids, NOW, "file", ("q", "a", NOW), ids),
    "purge facts": lambda c, ids: files_sql.purge_facts(c, ids),
    "purge re-check": lambda c, ids: (files_sql.lock_files(c, ids), keeps_sql.byte_facts(c, ids)),
    "audit page": lambda c, ids: files_sql.rows_after(c, ZERO, 1000),
    "audit page+after": lambda c, ids: files_sql.rows_after(c, ids[0], 1000),
    "audit rows": lambda c, ids: files_sql.files_by_ids(c, ids),
    "cleanup d objects": lambda c, ids: cleanup_sql.objects_due_live(c, None, 500),
    "cleanup j": lambda c, ids: cleanup_sql.pending_scans(c, NOW, None, 500),
    "cleanup j facts": lambda c, ids: cleanup_sql.pending_scan_facts(c, ids),
    "cleanup o": lambda c, ids: variants_sql.pending(c, NOW, None, 500),
    "cleanup o+after": lambda c, ids: variants_sql.pending(c, NOW, (NOW, ZERO), 500),
    "cleanup o facts": lambda c, ids: variants_sql.pending_facts(c, ids),
    "cleanup l": lambda c, ids: messages_sql.prune(c, NOW, 500),
    "cleanup b facts": lambda c, ids: cleanup_sql.cleanup_facts(c, ids),
    "cleanup a sessions": lambda c, ids: cleanup_sql.lock_open_sessions(c, ids),
    "cleanup m": lambda c, ids: aborts_sql.due(c, NOW, None, 500),
    "cleanup m+after": lambda c, ids: aborts_sql.due(c, NOW, (NOW, "u"), 500),
    "audit open uploads": lambda c, ids: sessions_sql.open_upload_ids(c, ids),
    "audit held": lambda c, ids: keeps_sql.held_among(c, ids + [uuid.uuid4()]),
    "cleanup d deleted": lambda c, ids: cleanup_sql.deleted_rows(c, NOW, None, 500),
    "cleanup d refused": lambda c, ids: cleanup_sql.due_refused_live(c, NOW, None, 500),
    "cleanup f backlog": lambda c, ids: cleanup_sql.backlog(c),
    "clearance": lambda c, ids: keeps_sql.clearance(UnitOfWork(c, "plan"), ids, Reach.FILE, NOW),
    "keys in use": lambda c, ids: file_keys_sql.key_ids_in_use(c),
    "keys rotate batch": lambda c, ids: file_keys_sql.lock_wrapped_by(c, "k-old", uuid.UUID(int=0), 1000),
    "keys destroyed": lambda c, ids: file_keys_sql.destroy(c, ids),
    "holds place": lambda c, ids: (
        holds_sql.insert(c, uuid.uuid4(), SUBJECT, None, "CASE-1", NOW),
        holds_sql.insert(c, uuid.uuid4(), None, ids[0], "CASE-2", NOW),
    ),
    "holds one": lambda c, ids: holds_sql.hold(c, HOLD),
    "holds page": lambda c, ids: (holds_sql.page(c, None, 100), holds_sql.page(c, HOLD, 100)),
    "holds subject on hold": lambda c, ids: holds_sql.subject_on_hold(c, SUBJECT),
    "holds release": lambda c, ids: holds_sql.release(c, HOLD, NOW),
    "holds freed": lambda c, ids: (holds_sql.release(c, HOLD, NOW), holds_sql.freed(c, HOLD, ZERO, 500)),
    "holds summary": lambda c, ids: holds_sql.summary(c),
    "holds g": lambda c, ids: (holds_sql.prune(c, NOW, 500), holds_sql.count_prunable(c, NOW)),
    "webhooks file.purged": lambda c, ids: webhooks_sql.insert_file_purged(c, ["app"], ids, NOW),
    "webhooks due": lambda c, ids: (webhooks_sql.lease_due(c, ids, NOW, NOW), webhooks_sql.next_due(c, ids)),
    "webhooks n": lambda c, ids: (
        webhooks_sql.overdue(c, NOW, NOW, 500),
        webhooks_sql.oldest_undelivered(c),
        webhooks_sql.prune(c, NOW, 500),
    ),
    "purge receipts": lambda c, ids: (
        messages_sql.detach_files(c, ids),
        slots_sql.clear_holder(c, SUBJECT),
        receipts_sql.write(
            c, [dataclasses.replace(row, marked_at=NOW) for row in files_sql.delete_rows(c, ids, {})], NOW
        ),
    ),
    "holds forget subject": lambda c, ids: holds_sql.forget_subject(c, SUBJECT, NOW),
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_every_lifecycle_query_reads_through_an_index(seeded, name):
    ids = subject_file_ids(seeded)
    plans = plans_of(seeded, lambda conn: QUERIES[name](conn, ids))
    assert plans, f"{name} sent no statement"
    for plan in plans:
        sequential = {n["Relation Name"] for n in nodes(plan) if n["Node Type"] == "Seq Scan"}
        assert not sequential & WATCHED, f"{name} scans {sorted(sequential & WATCHED)}: {json.dumps(plan)}"
