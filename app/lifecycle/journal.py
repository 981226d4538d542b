# The journal is how a deletion outlives a restore of the database. Entries are committed with the change they
# record (journal_pending, in the same transaction), then written to segments of the object store by one writer
# at a time (a session lock), numbered as they are written; no store call runs inside a transaction (K1). A
# database that finds segments past its position was restored from a backup: until it has applied them again
# (reconcile), no process serves data, the worker makes nothing deliverable and nothing new is written to the
# journal. Reconciling applies each entry in its own transaction and records how far it got, so it is
# resumable, and applying an entry twice changes nothing.
"""The deletion journal outside the database, the restore guard, and the reconciliation after a restore."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any, Sequence

import psycopg

from app.db import journal as sql
from app.db.conn import Conn
from app.db.uow import UnitOfWork
from app.domain.journal import ERASURE_COMPLETED, Entry, GuardState, line, parse_line, segment_key, subject_hash
from app.platform.observability import metrics
from app.platform.observability.logs import log_event
from app.storage.journal import JournalSink

if TYPE_CHECKING:
    from app.platform.config import Config
    from app.runtime import Runtime

log = logging.getLogger("lethe.journal")
FLUSH_BATCH = 5000  # entries per segment


# -- writing entries with their change ------------------------------------------------------------------------

def _hash_key(conn: Conn, cfg: Config) -> str:
    return cfg.journal.hash_key or sql.state(conn).hash_key


def record(uow: UnitOfWork, cfg: Config, entries: Sequence[Entry]) -> None:
    """Commit journal entries with the unit of work's change (nothing when the journal is off)."""
    if cfg.journal.enabled and entries:
        sql.append(uow.conn, entries)


def record_erasure(uow: UnitOfWork, cfg: Config, erasure_id: uuid.UUID, subject_id: uuid.UUID, at: datetime) -> None:
    """An erasure completed: the person appears as a keyed hash, never by id."""
    if cfg.journal.enabled:
        record(uow, cfg, [Entry(ERASURE_COMPLETED, at, erasure=erasure_id,
                                subject=subject_hash(_hash_key(uow.conn, cfg), subject_id))])


def record_hold(uow: UnitOfWork, cfg: Config, kind: str, hold_id: uuid.UUID, at: datetime,
                subject_id: uuid.UUID | None = None, file_id: uuid.UUID | None = None,
                case_ref: str | None = None) -> None:
    """A legal hold placed or released (its target: a file id, or a person's keyed hash)."""
    if not cfg.journal.enabled:
        return
    subject = subject_hash(_hash_key(uow.conn, cfg), subject_id) if subject_id is not None else None
    record(uow, cfg, [Entry(kind, at, files=(file_id,) if file_id else (), hold=hold_id, subject=subject,
                            case_ref=case_ref)])


# -- the sink: segments ----------------------------------------------------------------------------------------

def sink_of(rt: Runtime, installation_id: uuid.UUID) -> JournalSink:
    """The journal of this installation in the runtime's store."""
    return JournalSink(rt.store, installation_id)


def check(rt: Runtime) -> GuardState:
    """Where the database stands against its journal: a read of the database, a listing of the segments past
    its position, and (when the listing found any) a second read: a segment written and counted between the
    two is no restore, and neither is the segment a flush is writing right now (recorded before its write).

    Raises:
        StorageError: the journal cannot be read. psycopg.Error: the database cannot be read.
    """
    st = rt.db.read(sql.state)
    found = list(sink_of(rt, st.installation_id).segments_after(st.position))
    if not found:
        return GuardState(st.position, st.position)
    now = rt.db.read(sql.state)
    beyond = [segment for segment in found if segment.last > now.position
              and (segment.first, segment.last) != (now.writing_first, now.writing_last)]
    return GuardState(now.position, max([now.position] + [segment.last for segment in beyond]))


def flush(rt: Runtime) -> int:
    """Write the entries waiting in the database to the journal, a segment at a time, while this database is
    not behind its journal (after a restore, reconcile first). Returns how many entries were written. Called by
    the scheduler that leads (and `lethe restore reconcile`)."""
    if not rt.cfg.journal.enabled:
        return 0
    written = 0
    while True:
        count = rt.db.read(lambda conn: _flush_once(rt, conn))
        written += max(count, 0)
        if count < FLUSH_BATCH:
            return written


def _flush_once(rt: Runtime, conn: psycopg.Connection) -> int:
    # One writer: the scheduler that leads. At a change of leader two may write a segment of the same numbers;
    # only one moves the position, the other's entries stay pending and are written again (an entry is a fact,
    # and applying it twice changes nothing).
    st = sql.state(conn)
    sink = sink_of(rt, st.installation_id)
    if check(rt).behind:
        return -1  # behind its journal: a restore; nothing is written before it is reconciled
    rows = sql.pending(conn, FLUSH_BATCH)
    metrics.JOURNAL_PENDING.set(sql.pending_count(conn))
    if not rows:
        return 0
    first, last = st.position + 1, st.position + len(rows)
    entries = [_entry(row.kind, row.at, row.body, first + index) for index, row in enumerate(rows)]
    with conn.transaction():
        if not sql.writing(conn, st.position, first, last):
            return -1  # another writer moved the position meanwhile
    sink.write(segment_key(st.installation_id, first, last, rt.clock.now()),
               "".join(line(entry) + "\n" for entry in entries))
    with conn.transaction():
        if not sql.written(conn, [row.id for row in rows], st.position, last):
            return -1
    metrics.JOURNAL_ENTRIES.inc(len(rows))
    return len(rows)


def _entry(kind: str, at: datetime, body: dict[str, Any], seq: int) -> Entry:
    return parse_line(json.dumps({"seq": seq, "kind": kind, "at": at.isoformat(), **body}))


def prune(rt: Runtime) -> int:
    """Remove the segments written longer than journal.retention ago; returns how many."""
    st = rt.db.read(sql.state)
    cutoff = rt.clock.now() - rt.cfg.journal.retention
    sink = sink_of(rt, st.installation_id)
    old = [segment for segment, modified in sink.all_segments() if isinstance(modified, datetime) and modified < cutoff
           and segment.last <= st.position]
    if old:
        sink.remove(old)
    return len(old)


# -- the restore guard -----------------------------------------------------------------------------------------

class RestoreGuard:
    """A process's view of the restore guard, refreshed every journal.check_interval: the reason data requests
    must wait (`restore_pending`, `journal_unreadable`), or None. A journal that cannot be read at the first
    check keeps the process closed; later, a failed check keeps the last answer (an outage of the store is not
    a restore)."""

    def __init__(self, rt: Runtime):
        self.rt = rt
        self.state: GuardState | None = None
        self._checked = float("-inf")
        self._first_done = False  # the first check ended (a request arriving during it waits for its answer)
        self._lock = threading.Lock()

    def reason(self) -> str | None:
        """Why data requests must wait now, or None. The first answer is checked at once (nothing is served
        before it); later ones are checked in the background, so that an outage never slows a request."""
        if not self.rt.cfg.journal.enabled:
            return None
        if not self._first_done:
            with self._lock:
                if not self._first_done:
                    self.refresh()
                    self._first_done = True
        elif time.monotonic() - self._checked >= self.rt.cfg.journal.check_interval.total_seconds():
            with self._lock:
                if time.monotonic() - self._checked >= self.rt.cfg.journal.check_interval.total_seconds():
                    self._checked = time.monotonic()
                    threading.Thread(target=self.refresh, name="journal-guard", daemon=True).start()
        return self.state.reason if self.state is not None else "journal_unreadable"

    def refresh(self) -> GuardState | None:
        """Check now."""
        self._checked = time.monotonic()
        try:
            state = check(self.rt)
        except Exception as exc:  # noqa: BLE001 - the store, the database, or anything else: keep the last answer
            log_event(log, "warning", "journal.unreadable", "the journal or the database could not be read; the "
                      "restore guard keeps its last answer", error=type(exc).__name__)
            return self.state
        if state.behind and (self.state is None or not self.state.behind):
            log_event(log, "error", "journal.restore_detected", "the database is behind its deletion journal: it "
                      "was restored from a backup; data requests wait until the journal is applied again",
                      position=state.position, head=state.head)
            try:
                self.rt.db.unit_of_work(lambda uow: sql.restore_seen(uow.conn, self.rt.clock.now()),
                                        name="journal.restore_seen")
            except psycopg.Error:
                pass
        self.state = state
        metrics.RESTORE_PENDING.set(1 if state.behind else 0)
        return state


def status(rt: Runtime) -> dict[str, Any]:
    """Where the database stands against its journal, for `lethe restore status` and /readyz."""
    st = rt.db.read(sql.state)
    state = check(rt)
    others = sink_of(rt, st.installation_id).others()
    return {"installation_id": str(st.installation_id), "position": state.position, "head": state.head,
            "behind": state.behind, "reconciled_to": st.reconciled_to,
            "restore_seen_at": st.restore_seen_at.isoformat() if st.restore_seen_at else None,
            "reconciled_at": st.reconciled_at.isoformat() if st.reconciled_at else None,
            "pending": rt.db.read(sql.pending_count), "other_installations": len(others)}


__all__ = ["RestoreGuard", "check", "flush", "record", "record_erasure", "record_hold", "status", "prune"]
