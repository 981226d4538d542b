"""Step a, expired sessions: an open upload session past expires_at ends; its file fails (one event without
actor) and its purge job commits with the change (D7: final and not deliverable; parts and the multipart
upload go)."""

from __future__ import annotations

import uuid

from app.db import cleanup as sql
from app.db.conn import Conn
from app.db.events import announce_settled, write_files_updated
from app.db.uow import UnitOfWork
from app.domain.ages import session_expired
from app.domain.ends import FilesSettled
from app.domain.webhooks import FILE_FAILED
from app.lifecycle.batches import CandidateStep
from app.lifecycle.steps.base import Run
from app.platform.jobs import enqueue_purge


def step(run: Run) -> CandidateStep:
    """Candidates by expiry; re-checked under the file row lock, then the session lock (D10)."""

    def expiring(conn: Conn, file_ids: list[uuid.UUID]) -> list[uuid.UUID]:
        return [
            row.file_id
            for row in sql.open_sessions(conn, file_ids)
            if session_expired(row.state, row.expires_at, run.now)
        ]

    def expire(uow: UnitOfWork, file_ids: list[uuid.UUID]) -> int:
        # D10 expiry lock order: the files (skipping rows another transaction holds), then their sessions.
        locked = sql.lock_skip_locked(uow.conn, file_ids)
        expired = [
            row.file_id
            for row in sql.lock_open_sessions(uow.conn, locked)
            if session_expired(row.state, row.expires_at, run.now)
        ]
        if expired:
            sql.expire_sessions(uow.conn, expired)
            write_files_updated(uow, expired, None, run.now)  # a job writes no actor
            announce_settled(uow, FilesSettled(FILE_FAILED, tuple(expired), run.now, reason="expired"))
            enqueue_purge(uow, expired)
        return len(expired)

    return CandidateStep(
        "a",
        "expired_sessions",
        [lambda conn, cursor, limit: sql.expired_sessions(conn, run.now, cursor, limit)],
        expiring,
        run.in_unit_of_work("a", expire),
    )
