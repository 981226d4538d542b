# The journal is how a deletion outlives a restore of the database. Entries are committed with the change they
# record (journal_pending, in the same transaction); right after the commit the process that committed them
# writes them to a segment of the object store (its journal writer, as its outbox publisher sends jobs), and
# every role writes what it still holds when it stops. One claim of a segment at a time, in the database and
# leased: the claim numbers the entries; the segment is written outside every transaction (K1); the position
# moves past it in a second transaction. The scheduler that leads only catches up what a dead process left.
# A process that cannot reach the database to number the entries it committed writes them, from its memory, to
# the journal's spool: a database restored after losing them still finds them there.
# A database that finds segments past its position, or spooled entries it does not know, was restored from a
# backup: until it has applied them again (reconcile), no process serves data, the worker makes nothing
# deliverable and nothing new is numbered.
"""The deletion journal outside the database: the writer of each process, the restore guard, and the state the
operator commands show."""

from __future__ import annotations

import base64
import contextvars
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from app.db import journal as sql
from app.db.conn import Conn
from app.db.uow import UnitOfWork
from app.domain.journal import (
    ERASURE_COMPLETED,
    GUARD_DETAIL,
    Entry,
    GuardState,
    SegmentDamaged,
    digest,
    entry_of,
    escrow_binding,
    escrow_key,
    read_spool,
    render_segment,
    render_spool,
    segment_key,
    spool_key,
    subject_hash,
)
from app.errors import NotFound, RestorePending, StorageError
from app.platform import tracing
from app.platform.observability import metrics
from app.platform.observability.logs import log_event
from app.storage.journal import JournalSink

if TYPE_CHECKING:
    from app.platform.config import Config
    from app.runtime import Runtime

log = logging.getLogger("lethe.journal")
FLUSH_BATCH = 5000  # entries per segment
LEASE_S = 30.0  # a claim's lease: longer than a segment's write takes (file.s3.timeout), shorter than patience
KEEP_WRITTEN = timedelta(minutes=15)  # written entries kept so that a spooled one is recognised
RECHECK_S = 1.0  # how often a writer that found the database behind its journal looks again
T = TypeVar("T")
# The guard whose answer the work of this thread serves under (a request, a job), or None. In one process several
# guards may watch one database (lethe dev: the api's, the worker's, the scheduler's); each refuses only its own.
_SERVING: contextvars.ContextVar[RestoreGuard | None] = contextvars.ContextVar("lethe_serving", default=None)


# -- writing entries with their change ------------------------------------------------------------------------


def _hash_key(conn: Conn, cfg: Config) -> str:
    return cfg.journal.hash_key or sql.state(conn).hash_key


def record(uow: UnitOfWork, cfg: Config, entries: Sequence[Entry]) -> None:
    """Commit journal entries with the unit of work's change (nothing when the journal is off); after the commit
    the process's writer takes them."""
    if cfg.journal.enabled and entries:
        installation, stored = sql.append(uow.conn, entries)
        uow.journaled.extend((installation, entry) for entry in stored)


def taken_up(uow: UnitOfWork, installation: uuid.UUID, entries: Sequence[Entry]) -> None:
    """Take up entries a statement of this unit of work wrote itself (the mark's); after the commit the process's
    writer takes them, as record()'s."""
    uow.journaled.extend((installation, entry) for entry in entries)


def record_erasure(uow: UnitOfWork, cfg: Config, erasure_id: uuid.UUID, subject_id: uuid.UUID, at: datetime) -> None:
    """An erasure completed: the person appears as a keyed hash, never by id."""
    if cfg.journal.enabled:
        record(
            uow,
            cfg,
            [
                Entry(
                    ERASURE_COMPLETED,
                    at,
                    erasure=erasure_id,
                    subject=subject_hash(_hash_key(uow.conn, cfg), subject_id),
                )
            ],
        )


def record_hold(
    uow: UnitOfWork,
    cfg: Config,
    kind: str,
    hold_id: uuid.UUID,
    at: datetime,
    subject_id: uuid.UUID | None = None,
    file_id: uuid.UUID | None = None,
    case_ref: str | None = None,
) -> None:
    """A legal hold placed or released (its target: a file id, or a person's keyed hash)."""
    if not cfg.journal.enabled:
        return
    subject = subject_hash(_hash_key(uow.conn, cfg), subject_id) if subject_id is not None else None
    record(
        uow,
        cfg,
        [Entry(kind, at, files=(file_id,) if file_id else (), hold=hold_id, subject=subject, case_ref=case_ref)],
    )


# -- the writer of a process -----------------------------------------------------------------------------------


class JournalWriter:
    """Writes the entries a process committed to the journal right after the commit.

    Args:
        rt: the process's runtime.
        background: write from a thread of the process, woken by each commit (the roles and the operator
            commands); off, entries wait until flush_now() (tests move through the steps themselves).
        linger_s: how long the thread gathers the entries of further commits after the first (one segment for
            many commits under load).
        interval_s: the shortest time between the starts of two rounds: under load the entries of that long go
            in one segment. A round costs a few milliseconds of the process's CPU (two statements, the segment's
            write and fsync), so its rate, not the commits', must bound it.
    """

    def __init__(self, rt: Runtime, background: bool, linger_s: float = 0.02, interval_s: float = 0.2):
        self.rt = rt
        self.background = background
        self.linger_s = linger_s
        self.interval_s = interval_s
        self._round_at = float("-inf")  # when the thread's last round began
        self.id = uuid.uuid4()
        self._pid = os.getpid()
        self._held: dict[uuid.UUID, tuple[uuid.UUID, Entry]] = {}  # committed here, not known to be written
        self._traces: dict[uuid.UUID, str] = {}  # the trace of the commit of each held entry (tracing on)
        self._spools: dict[str, tuple[uuid.UUID, set[uuid.UUID]]] = {}  # spool key -> (installation, entry ids)
        self._spooled: set[uuid.UUID] = set()
        self._lock = threading.Lock()  # _held, _spools
        self._flushing = threading.Lock()  # one flush at a time in this process
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._verified = False  # the database was found standing at its journal's head
        self._checked_at = float("-inf")
        self._seen = 0  # the highest position this writer saw: a lower one is a database restored under it

    # -- what commits hand over --

    def committed(self, entries: Sequence[Any]) -> None:
        """Take the entries a unit of work committed ((installation, entry) pairs) and wake the thread."""
        if not self.background or not self.rt.cfg.journal.enabled:
            return
        self._after_fork()
        parent = tracing.traceparent()
        with self._lock:
            for installation, entry in entries:
                self._held[entry.id] = (installation, entry)
                if parent:
                    self._traces[entry.id] = parent
        self._ensure_thread()
        self._wake.set()

    def _after_fork(self) -> None:
        if self._pid != os.getpid():  # a forked process inherits no thread and none of the parent's entries
            self._pid, self.id = os.getpid(), uuid.uuid4()
            self._held, self._spools, self._spooled, self._traces = {}, {}, set(), {}
            self._lock, self._flushing, self._wake = threading.Lock(), threading.Lock(), threading.Event()
            self._thread, self._verified, self._seen, self._stop = None, False, 0, threading.Event()

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            self._wake.wait(timeout=delay if self._held else 30.0)
            self._wake.clear()
            if self._stop.is_set():
                return
            gather = max(self.linger_s, self.interval_s - (time.monotonic() - self._round_at))
            if gather > 0 and self._stop.wait(gather):
                return  # stopping: close() writes what is held
            self._round_at = time.monotonic()
            delay = 0.5 if self._cycle() else min(delay * 2, 10.0)

    def _cycle(self) -> bool:
        """One round of the thread: write what waits; spool what cannot be numbered. True when it went well."""
        try:
            self.flush_now(drain=False)
            return True
        except psycopg.Error as exc:
            log_event(
                log,
                "warning",
                "journal.database_unavailable",
                "journal entries cannot be numbered: the database does not answer; they go to the journal's spool",
                error=type(exc).__name__,
            )
            self._spool()
        except StorageError as exc:
            log_event(
                log,
                "warning",
                "journal.store_unavailable",
                "journal entries cannot be written: the store does not answer; they wait in the database",
                error=type(exc).__name__,
            )
        except Exception as exc:
            log_event(
                log,
                "error",
                "journal.write_failed",
                "writing the journal failed; it is tried again",
                error=type(exc).__name__,
            )
        return False

    # -- writing --

    def flush_now(self, drain: bool = True) -> int:
        """Write the entries waiting in the database to the journal, a segment at a time, in this thread, while
        the database stands at its journal's head. Returns how many entries were written.

        Args:
            drain: write until nothing waits (a stop, the leader, a reconciliation); else stop after a segment
                that was not full, so that the entries committed while it was written wait for the next round
                and its linger (a steady trickle of commits would otherwise make a segment of each).

        Raises:
            psycopg.Error: the database does not answer. StorageError: the store does not answer.
        """
        if not self.rt.cfg.journal.enabled:
            return 0
        self._after_fork()
        with self._flushing:
            with self._lock:
                before = set(self._held)
            written = self._write_all(drain)
            with self._lock:
                # Entries held from before this round and not written by it: another writer took them, or they
                # wait. Entries committed during the round are left for the next one (no read for them).
                left = bool(before & self._held.keys())
            if drain or left:
                self._settle()
            return written

    def _may_number(self) -> bool:
        if self._verified:
            return True
        if time.monotonic() - self._checked_at < RECHECK_S:
            return False
        self._checked_at = time.monotonic()
        self._verified = check(self.rt).reason is None
        if self._verified:
            escrow_hash_key(self.rt)
        return self._verified

    def _write_all(self, drain: bool) -> int:
        written = 0
        while self._may_number():
            # One statement each, claim and finish, on autocommit connections: a writer's round trips are paid
            # by the requests of its process.
            claimed = self.rt.db.read(lambda conn: sql.claim_next(conn, FLUSH_BATCH, LEASE_S, self.id))
            if claimed is None:
                return written  # another writer holds the claim; it takes what this one committed on its next round
            if claimed.position < self._seen:
                # The database went back in time under this process: it was restored. What this process holds was
                # committed to the database that was lost: keep it in the spool, and number nothing more.
                self._behind(claimed, "journal.restore_detected")
                self._spool()
                return written
            self._seen = claimed.position
            if not claimed.rows:
                return written
            entries = [entry_of(row.kind, row.at, row.body, row.seq or 0) for row in claimed.rows]
            text = render_segment(claimed.first, claimed.last, claimed.prev, entries)
            sink = JournalSink(self.rt.store, claimed.installation_id)
            with self._lock:  # the segment joins the trace of the first commit it holds that had one
                traces = [self._traces.pop(row.entry_id, None) for row in claimed.rows]
            with tracing.continued(
                next((t for t in traces if t), None),
                "journal.write",
                entries=len(entries),
                first=claimed.first,
                last=claimed.last,
            ):
                there = sink.existing(claimed.first)
                if there is None:
                    sink.write(segment_key(claimed.installation_id, claimed.first), text)
            if there is not None and there != text:
                # The journal holds other entries under these numbers: this database is behind it.
                self._behind(claimed, "journal.restore_detected")
                return written
            ids = {row.entry_id for row in claimed.rows}
            if self.rt.db.read(lambda conn: sql.finish(conn, claimed, digest(text))):
                self._seen = claimed.last
                written += len(entries)
                metrics.JOURNAL_ENTRIES.inc(len(entries))
                now = datetime.now(UTC)
                for row in claimed.rows:
                    metrics.JOURNAL_LAG.observe(max((now - row.at).total_seconds(), 0.0))
                with self._lock:
                    for entry_id in ids:
                        self._held.pop(entry_id, None)
                        self._traces.pop(entry_id, None)
            if not drain and len(claimed.rows) < FLUSH_BATCH:
                return written
        return written

    def _behind(self, claimed: sql.Claim, event: str) -> None:
        self.rt.db.unit_of_work(lambda uow: sql.release(uow.conn, claimed), name="journal.release")
        self._verified, self._checked_at = False, float("-inf")
        log_event(
            log,
            "error",
            event,
            "the database is behind its deletion journal: it was restored from a backup; "
            "nothing more is written to the journal until it is applied again",
            position=claimed.position,
        )

    def _settle(self) -> None:
        """Forget entries another writer wrote; remove this process's spool objects whose entries are written."""
        with self._lock:
            held = list(self._held)
        if held:
            done = self.rt.db.read(lambda conn: sql.written_among(conn, held))
            with self._lock:
                for entry_id in done:
                    self._held.pop(entry_id, None)
                    self._traces.pop(entry_id, None)
        with self._lock:
            settled = [
                (key, installation) for key, (installation, ids) in self._spools.items() if not ids & set(self._held)
            ]
        for key, installation in settled:
            if not JournalSink(self.rt.store, installation).remove([key]):
                with self._lock:
                    self._spools.pop(key, None)

    def _spool(self) -> None:
        """Write the entries this process committed and cannot have numbered to the journal's spool (from memory:
        the database does not answer, or is not the one they were committed to)."""
        with self._lock:
            waiting = [
                (installation, entry)
                for entry_id, (installation, entry) in self._held.items()
                if entry_id not in self._spooled
            ]
        by_installation: dict[uuid.UUID, list[Entry]] = {}
        for installation, entry in waiting:
            by_installation.setdefault(installation, []).append(entry)
        for installation, entries in by_installation.items():
            key = spool_key(installation, uuid.uuid4())
            try:
                JournalSink(self.rt.store, installation).write(key, render_spool(entries))
            except StorageError as exc:
                log_event(
                    log,
                    "error",
                    "journal.spool_failed",
                    "journal entries could not be written to the spool either; they are tried again",
                    entries=len(entries),
                    error=type(exc).__name__,
                )
                continue
            ids = {entry.id for entry in entries if entry.id is not None}
            with self._lock:
                self._spools[key] = (installation, ids)
                self._spooled |= ids
            metrics.JOURNAL_SPOOLED.inc(len(entries))
            log_event(
                log,
                "warning",
                "journal.spooled",
                "journal entries written to the spool, to be numbered once the database answers",
                entries=len(entries),
            )

    def close(self, timeout: float = 5.0) -> None:
        """The last flush of a stopping process: write what waits (or spool it when the database does not answer),
        then stop the thread."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and self._pid == os.getpid():
            thread.join(timeout)
        if not self.background or not self.rt.cfg.journal.enabled or self._pid != os.getpid():
            return
        try:
            self.flush_now()
        except psycopg.Error:
            self._spool()
        except Exception as exc:
            log_event(
                log,
                "warning",
                "journal.close_failed",
                "the last journal flush failed; the entries wait in the database",
                error=type(exc).__name__,
            )
        with self._lock:
            left = len(self._held)
        log_event(log, "info", "journal.closed", "journal writer stopped", waiting=left)


def flush(rt: Runtime) -> int:
    """Write the entries waiting in the database to the journal now (the leader's catch-up of what dead
    processes left; tests; `lethe restore reconcile`). Returns how many were written."""
    return rt.journal.flush_now()


def escrow_hash_key(rt: Runtime) -> None:
    """Keep the database's hash key beside its journal, wrapped by the keyring's current key, so that a database
    restored from a backup older than the journal, which adopts it, recognises the persons it names (the database
    that made the key is gone by then). Nothing when journal.hash_key is set (the operator keeps that key) or no
    keyring is configured (docs/operations.md says to set journal.hash_key then)."""
    current = rt.keyring.current
    if rt.cfg.journal.hash_key or current is None:
        return
    st = rt.db.read(sql.state)
    sink = JournalSink(rt.store, st.installation_id)
    try:
        kept = json.loads(sink.read(escrow_key(st.installation_id)))
    except (NotFound, ValueError):
        kept = None
    if isinstance(kept, dict) and kept.get("key_id") == current.id:
        return
    try:
        material = bytes.fromhex(st.hash_key)
    except ValueError:
        return
    wrapped = rt.keyring.wrap(escrow_binding(st.installation_id), material)
    sink.write(
        escrow_key(st.installation_id),
        json.dumps({"key_id": wrapped.key_id, "wrapped": base64.b64encode(wrapped.wrapped).decode()}),
    )


def escrowed_hash_key(rt: Runtime, installation_id: uuid.UUID) -> str | None:
    """The hash key kept beside an installation's journal, opened by the keyring (None: none kept, or no key of the
    keyring opens it)."""
    from app.domain.sealing import Wrapped
    from app.errors import KeyUnavailable

    try:
        kept = json.loads(JournalSink(rt.store, installation_id).read(escrow_key(installation_id)))
        wrapped = Wrapped(str(kept["key_id"]), base64.b64decode(kept["wrapped"]))
        return rt.keyring.unwrap(escrow_binding(installation_id), wrapped).hex()
    except (NotFound, ValueError, KeyError, TypeError, KeyUnavailable):
        return None


def settle_spool(rt: Runtime) -> int:
    """The leader's care of the spool: a spool object whose entries are all written (by whoever numbered them) is
    removed. Returns how many were removed."""
    st = rt.db.read(sql.state)
    sink = JournalSink(rt.store, st.installation_id)
    listing = sink.after(st.position)
    done = []
    for key in listing.spooled:
        try:
            ids = [entry.id for entry in read_spool(key, sink.read(key)) if entry.id is not None]
        except (SegmentDamaged, NotFound):
            continue
        if set(ids) <= rt.db.read(lambda conn: sql.written_among(conn, ids)):
            done.append(key)
    if done:
        sink.remove(done)
    return len(done)


def prune(rt: Runtime) -> int:
    """Remove the segments written longer than journal.retention ago, and forget written entries kept for the
    spool; returns how many segments went."""
    st = rt.db.read(sql.state)
    cutoff = rt.clock.now() - rt.cfg.journal.retention
    sink = JournalSink(rt.store, st.installation_id)
    old = [
        segment.key
        for segment, modified in sink.all_segments()
        if modified is not None
        and modified < cutoff
        and (segment.last or segment.first) <= st.position
        and segment.first <= st.position
    ]
    if old:
        sink.remove(old)
    while (
        rt.db.unit_of_work(lambda uow: sql.prune_written(uow.conn, rt.clock.now() - KEEP_WRITTEN), name="journal.prune")
        >= 10_000
    ):
        pass
    return len(old)


def pending(rt: Runtime) -> int:
    """How many entries wait for the journal; the lethe_journal_pending gauge."""
    return rt.db.read(sql.pending_count)


def oldest_pending_age(rt: Runtime) -> float:
    """Seconds since the oldest entry still waiting for the journal committed (0: none waits); the
    lethe_journal_oldest_pending_seconds gauge."""
    oldest = rt.db.read(sql.oldest_pending_at)
    return max((rt.clock.now() - oldest).total_seconds(), 0.0) if oldest is not None else 0.0


# -- the restore guard -----------------------------------------------------------------------------------------


def check(rt: Runtime, conn: Conn | None = None) -> GuardState:
    """Where the database stands against its journal: a read of the database, a listing of the journal past its
    position (segments and the spool), and (when the listing found any) a second read: a segment written and
    counted between the two is no restore, and neither is the segment a claim is writing right now. Spooled
    entries the database does not know were committed to a database that is gone.

    A database that has written nothing to a journal of its own yet, holds files, and shares its store with other
    installations' journals was restored from a backup older than its journal: it waits until one of them is
    adopted (or refused as foreign).

    Args:
        conn: read the database through this connection (a connection being checked out: another one of the
            pool may not be free); else through the pool.

    Raises:
        StorageError: the journal cannot be read. psycopg.Error: the database cannot be read.
    """
    read: Callable[[Callable[[Conn], T]], T] = (lambda fn: fn(conn)) if conn is not None else rt.db.read
    st = read(sql.state)
    sink = JournalSink(rt.store, st.installation_id)
    listing = sink.after(st.position)
    damage = st.damage
    unknown = 0
    if listing.spooled:
        spooled: list[uuid.UUID] = []
        for key in listing.spooled:
            try:
                spooled += [entry.id for entry in read_spool(key, sink.read(key)) if entry.id is not None]
            except SegmentDamaged as exc:
                damage = damage or exc.damage
            except NotFound:
                continue  # settled and removed meanwhile
        unknown = len(set(spooled) - read(lambda db: sql.known_among(db, spooled))) if spooled else 0
    if listing.segments or unknown:
        now = read(sql.state)
        beyond = [
            segment
            for segment in listing.segments
            if (segment.last or segment.first) > now.position and segment.first != now.writing_first
        ]
        head = max([now.position] + [segment.last or segment.first for segment in beyond])
        return GuardState(now.position, head, unknown_spooled=unknown, damaged=damage)
    adoptable: tuple[str, ...] = ()
    if st.position == 0 and st.reconciled_at is None and st.adopted_from is None and read(sql.holds_files):
        refused = {str(installation) for installation in st.foreign_installations}
        adoptable = tuple(sorted(sink.others() - refused))
    return GuardState(st.position, st.position, damaged=damage, adoptable=adoptable)


class RestoreGuard:
    """A process's view of the restore guard, refreshed every journal.check_interval: the reason data requests
    must wait (`restore_pending`, `journal_damaged`, `journal_adoption_pending`, `journal_unreadable`), or None. A
    journal that cannot be read at the first check keeps the process closed; later, a failed check keeps the last
    answer (an outage of the store is not a restore)."""

    def __init__(self, rt: Runtime):
        self.rt = rt
        self.state: GuardState | None = None
        self._checked = float("-inf")
        self._first_done = False  # the first check ended (a request arriving during it waits for its answer)
        self._lock = threading.Lock()
        self._identity: tuple[Any, Any] | None = None  # the database last read: its installation, its server's start
        self._seen = 0  # the highest position read
        self._changing = threading.RLock()
        rt.db.checkout_hooks.append(self._connected)
        rt.db.use_checks.append(self._in_use)

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Work in this block serves data under this guard (a job): a connection is refused to it while data must
        wait. Reconciliation and operator commands are not in it."""
        token = _SERVING.set(self)
        try:
            yield
        finally:
            _SERVING.reset(token)

    def serving_request(self, serving: bool) -> None:
        """A request begins (True) or ends (False) serving data in this thread: as serving(), for a request's
        before and teardown hooks."""
        _SERVING.set(self if serving else None)

    def _connected(self, conn: Conn) -> bool:
        """A new connection, before its first use: when its database is not the one last read (another server
        started since, another installation, or a position lower than one read before: restored, recovered to
        an earlier point, replaced), the guard checks again before anything is read through it, and serving
        work on it is refused while data must wait. A connection after any restart of the server costs one
        check. Returns False when the connection must be looked at again (its database could not be read)."""
        if not self.rt.cfg.journal.enabled:
            return True
        try:
            row = conn.execute(
                "SELECT installation_id, position, pg_postmaster_start_time() FROM journal_state"
            ).fetchone()
        except psycopg.Error:
            row = None  # not migrated, or a restore still under way: nothing is served from it
        if row is None:
            self._refuse_if_serving("journal_unreadable")
            return False
        identity, position = (row[0], row[2]), int(row[1])
        # Whichever thread meets the change first checks again; the others' new connections wait for its answer
        # (the same thread's own reads during the check pass through).
        with self._changing:
            changed = self._identity is not None and (identity != self._identity or position < self._seen)
            if changed:
                log_event(
                    log,
                    "warning",
                    "journal.database_changed",
                    "the database is not the one this process "
                    "last read (restarted, restored or replaced): the restore guard checks again before "
                    "serving from it",
                )
                if self._check(conn) is None:  # through this connection: the pool may have no other free
                    # It could not tell (a restore still under way, the store away): the database stays
                    # unknown, the next new connection asks again, and nothing is served through this one.
                    self._refuse_if_serving("journal_unreadable")
                    return False
                self._identity, self._seen = identity, position
            else:
                self._identity, self._seen = identity, max(self._seen, position)
            state = self.state
        if state is None or state.reason is not None:
            self._refuse_if_serving(state.reason if state is not None else "journal_unreadable")
        return True

    def _in_use(self) -> None:
        """Before every use of a connection by serving work: the guard's answer now, not the one the request or
        job began with (another thread may have found the database restored meanwhile)."""
        if self.state is not None and self.state.reason is not None:
            self._refuse_if_serving(self.state.reason)

    def _refuse_if_serving(self, reason: str | None) -> None:
        if _SERVING.get() is self:
            raise RestorePending(reason or "journal_unreadable", GUARD_DETAIL[reason or "journal_unreadable"])

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

    def refresh(self, conn: Conn | None = None) -> GuardState | None:
        """Check now (through `conn` when given: see check()); a check that fails keeps the last answer."""
        checked = self._check(conn)
        return checked if checked is not None else self.state

    def _check(self, conn: Conn | None = None) -> GuardState | None:
        """Check now and keep the answer; None when the check failed (the last answer stands)."""
        self._checked = time.monotonic()
        try:
            state = check(self.rt, conn)
        except Exception as exc:
            log_event(
                log,
                "warning",
                "journal.unreadable",
                "the journal or the database could not be read; the restore guard keeps its last answer",
                error=type(exc).__name__,
            )
            return None
        before = self.state.reason if self.state is not None else None
        if state.reason != before and state.reason is not None:
            self._said(state)
        if state.behind and (self.state is None or not self.state.behind):
            try:
                if conn is not None:
                    sql.restore_seen(conn, self.rt.clock.now())  # one statement: autocommit is enough
                else:
                    self.rt.db.unit_of_work(
                        lambda uow: sql.restore_seen(uow.conn, self.rt.clock.now()), name="journal.restore_seen"
                    )
            except psycopg.Error:
                pass
        self.state = state
        self._seen = max(self._seen, state.position)
        metrics.RESTORE_PENDING.set(1 if state.reason is not None else 0)
        return state

    @staticmethod
    def _said(state: GuardState) -> None:
        if state.damaged is not None:
            log_event(
                log,
                "error",
                "journal.damaged",
                "the deletion journal is damaged past the database's position; "
                "data requests wait until it is mended (docs/operations.md, 'A damaged journal')",
                where=state.damaged.where,
                line=state.damaged.line,
                what=state.damaged.what,
            )
        elif state.adoptable:
            log_event(
                log,
                "error",
                "journal.adoption_pending",
                "the database is older than its deletion journal and "
                "the store holds another installation's journal: data requests wait until it is adopted "
                "(lethe restore adopt) or refused (lethe restore foreign)",
                installations=list(state.adoptable),
            )
        elif state.behind:
            log_event(
                log,
                "error",
                "journal.restore_detected",
                "the database is behind its deletion journal: it "
                "was restored from a backup; data requests wait until the journal is applied again",
                position=state.position,
                head=state.head,
                spooled=state.unknown_spooled,
            )


def status(rt: Runtime) -> dict[str, Any]:
    """Where the database stands against its journal, for `lethe restore status` and /readyz."""
    st = rt.db.read(sql.state)
    state = check(rt)
    sink = JournalSink(rt.store, st.installation_id)
    others = sink.others()
    return {
        "installation_id": str(st.installation_id),
        "position": state.position,
        "head": state.head,
        "behind": state.behind,
        "reason": state.reason,
        "reconciled_to": st.reconciled_to,
        "spooled_unknown": state.unknown_spooled,
        "damaged": state.damaged.as_dict() if state.damaged else None,
        "adoptable": list(state.adoptable),
        "adopted_from": str(st.adopted_from) if st.adopted_from else None,
        "restore_seen_at": st.restore_seen_at.isoformat() if st.restore_seen_at else None,
        "reconciled_at": st.reconciled_at.isoformat() if st.reconciled_at else None,
        "pending": pending(rt),
        "oldest_pending_s": round(oldest_pending_age(rt), 3),
        "other_installations": len(others),
    }


def adopt(rt: Runtime, installation_id: uuid.UUID) -> uuid.UUID:
    """Take another installation's journal as this database's own (restored from a backup older than its
    journal); the next reconciliation applies all of it. Returns the id the database had.

    Raises:
        NotFound: the store holds no journal of that installation.
    """
    if str(installation_id) not in JournalSink(rt.store, uuid.UUID(int=0)).others():
        raise NotFound()
    before = rt.db.unit_of_work(lambda uow: sql.adopt(uow.conn, installation_id), name="journal.adopt")
    log_event(
        log,
        "warning",
        "journal.adopted",
        "the database adopted the journal of an installation it was restored from",
        installation=str(installation_id),
        was=str(before),
    )
    return before


def refuse(rt: Runtime, installation_id: uuid.UUID) -> None:
    """Say that another installation's journal in the store is not this database's (never adopted)."""
    rt.db.unit_of_work(lambda uow: sql.refuse(uow.conn, installation_id), name="journal.refuse")
    log_event(
        log,
        "warning",
        "journal.refused",
        "another installation's journal is foreign to this database",
        installation=str(installation_id),
    )


__all__ = [
    "JournalWriter",
    "RestoreGuard",
    "adopt",
    "check",
    "escrow_hash_key",
    "escrowed_hash_key",
    "flush",
    "oldest_pending_age",
    "pending",
    "prune",
    "record",
    "taken_up",
    "record_erasure",
    "record_hold",
    "refuse",
    "settle_spool",
    "status",
]
