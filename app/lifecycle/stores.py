# A file's objects are never in a store Lethe does not know of: a copy is recorded (`copying`) before its first
# byte lands in the target, so that a purge running meanwhile clears the target too; the row moves only when the
# copy read back the same, in one transaction that re-checks that the file is still what was copied; and the
# source's copy is recorded (`left`) in that transaction and removed after privacy.object_delete_delay, under
# the one rule for bytes (a held file's copy stays until the release). Copies are made outside any transaction
# (K1); nothing is decrypted: a sealed file's objects move as the ciphertext they are.
"""Moving every file to another store while Lethe runs (lethe stores migrate), and removing the copies left
behind (cleanup step r)."""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, BinaryIO, cast

from app.db import keeps as keeps_sql
from app.db import stores as stores_sql
from app.db.locks import exclusive
from app.db.stores import Candidate, Migration
from app.db.uow import UnitOfWork
from app.domain.ends import Reach
from app.domain.journal import FILE_MOVED, JOURNAL_PREFIX, Entry
from app.domain.objects import FileObjects
from app.errors import LetheError, NotFound, ObjectFailed, StorageError
from app.lifecycle import journal
from app.platform import jobs
from app.platform.observability import metrics
from app.platform.observability.logs import log_event
from app.storage.base import ObjectStore

if TYPE_CHECKING:
    from app.runtime import Runtime

log = logging.getLogger("lethe.stores")

BATCH_FILES = 500  # files taken per batch job
COPY_THREADS = 8  # objects copied at once within a batch
_IN_MEMORY = 32 * 1024 * 1024  # an object up to this size is copied through memory; larger ones stream
_CHUNK = 1024 * 1024


class StoresRefused(LetheError):
    """An operator's request about stores that cannot be done as asked (an unknown name, one migration at a
    time). The message names stores and the rule, never a file."""

    status = 409
    code = "stores_refused"
    title = "Stores refused"


@dataclass
class BatchReport:
    """What one batch of a migration did (counts only)."""

    taken: int = 0
    moved: int = 0
    bytes: int = 0
    copies: int = 0  # objects copied
    failed: int = 0
    changed: int = 0  # copied, but the file changed or ended before its move: the copy goes
    journal: int = 0  # objects of the deletion journal copied
    state: str = "running"  # running (more to take), waiting (only files not movable yet), done, not_running

    def as_fields(self) -> dict[str, int | str]:
        return {
            "taken": self.taken,
            "moved": self.moved,
            "bytes": self.bytes,
            "copies": self.copies,
            "failed": self.failed,
            "changed": self.changed,
            "journal": self.journal,
            "state": self.state,
        }


def start(rt: Runtime, target: str, source: str | None = None) -> Migration:
    """Begin moving every file of `source` (None: every other store) to `target`, in worker jobs.

    Raises:
        StoresRefused: a store not configured, the source is the target, or a migration already runs.
    """
    names = rt.store_names
    for name in [target] + ([source] if source else []):
        if name not in names:
            raise StoresRefused(f"no store named {name} is configured (file.stores): {', '.join(names)}")
    if source == target:
        raise StoresRefused("the source and the target are the same store")
    now = rt.clock.now()

    def begin(uow: UnitOfWork) -> Migration:
        conn = uow.conn
        running = stores_sql.running(conn)
        if running is not None:
            if running.target == target and running.source == source:
                uow.enqueue(jobs.STORES_QUEUE, jobs.STORES_ACTOR, str(running.id))  # resume: idempotent
                return running
            raise StoresRefused(f"a migration to {running.target} runs: stop it first (lethe stores migrate --stop)")
        stores_sql.abandon_other_copies(conn, target, now)
        migration = stores_sql.start(conn, uuid.uuid4(), target, source, now)
        uow.enqueue(jobs.STORES_QUEUE, jobs.STORES_ACTOR, str(migration.id))
        return migration

    migration: Migration = rt.db.unit_of_work(begin, name="stores.start")
    log_event(log, "info", "stores.migration_started", "a migration between stores began", **_named(migration))
    return migration


def stop(rt: Runtime) -> Migration | None:
    """Stop the running migration: what it moved stays moved, the copies it was making go."""
    now = rt.clock.now()

    def halt(uow: UnitOfWork) -> Migration | None:
        conn = uow.conn
        running = stores_sql.running(conn)
        if running is not None:
            stores_sql.finish(conn, running.id, "stopped", now)
            stores_sql.abandon_other_copies(conn, "", now)
        return running

    stopped: Migration | None = rt.db.unit_of_work(halt, name="stores.stop")
    if stopped is not None:
        log_event(log, "info", "stores.migration_stopped", "a migration between stores was stopped", **_named(stopped))
    return stopped


def run_batch(rt: Runtime, migration_id: uuid.UUID) -> BatchReport:
    """One batch of a migration: take files, copy their objects, verify, move their rows, and commit the next
    batch with the progress. One batch runs at a time (a second job for it returns at once); a batch that dies
    leaves its files in their store, taken again by the next.

    Raises:
        StorageError: a store as a whole failed; the files moved so far stay moved, the job retries.
    """
    report = BatchReport()
    with exclusive(rt.db, "stores:migrate") as mine:
        if not mine:
            report.state = "busy"
            return report
        migration = rt.db.read(lambda conn: stores_sql.migration(conn, migration_id))
        if migration is None or migration.state != "running":
            report.state = "not_running"
            return report
        started = time.monotonic()
        now = rt.clock.now()
        if migration.batches == 0:
            report.journal = copy_journal(rt, migration)
        taken = rt.db.unit_of_work(
            lambda uow: stores_sql.take(uow.conn, migration.id, migration.sources, migration.target, BATCH_FILES, now),
            name="stores.take",
        )
        report.taken = len(taken)
        emptied = rt.db.unit_of_work(
            lambda uow: stores_sql.move_empty(uow.conn, migration.sources, migration.target, BATCH_FILES),
            name="stores.move_empty",
        )
        report.moved += emptied
        if not taken and emptied:
            rt.db.unit_of_work(lambda uow: _next_batch(uow, migration, report), name="stores.progress")
            return report
        if not taken:
            return _settle_empty(rt, migration, report)
        target = rt.store_named(migration.target)
        with ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="lethe-copy") as pool:
            outcomes = list(pool.map(lambda candidate: _copy_file(rt, candidate, target), taken))
        failures: list[tuple[uuid.UUID, str]] = []
        gone: list[Candidate] = []
        delay = rt.lifecycle.object_delete_delay
        moved_bytes = 0
        copied = []
        for candidate, outcome in zip(taken, outcomes, strict=True):
            report.copies += outcome.copies
            if outcome.failure is not None:
                failures.append((candidate.file_id, outcome.failure))
            else:
                copied.append(candidate)
        # The rows move in one transaction, each re-checked under its lock (what was copied is still the file).
        moved = rt.db.unit_of_work(_mover(rt, migration, copied, delay), name="stores.move")
        sizes = {candidate.file_id: outcome.bytes for candidate, outcome in zip(taken, outcomes, strict=True)}
        for candidate in copied:
            if moved[candidate.file_id] == "moved":
                report.moved += 1
                moved_bytes += sizes[candidate.file_id]
            else:
                report.changed += 1
            if moved[candidate.file_id] == "gone":
                gone.append(candidate)
        _remove_gone(rt, migration.target, gone)
        report.bytes = moved_bytes
        report.failed = len(failures)

        def record(uow: UnitOfWork) -> None:
            conn = uow.conn
            stores_sql.failed(conn, migration.id, failures)
            stores_sql.abandon_failed(conn, migration.target, [file_id for file_id, _ in failures], rt.clock.now())
            _next_batch(uow, migration, report)

        rt.db.unit_of_work(record, name="stores.progress")
    metrics.STORE_FILES_MOVED.inc(report.moved)
    metrics.STORE_BYTES_MOVED.inc(moved_bytes)
    for file_id, reason in failures:
        log_event(
            log,
            "warning",
            "stores.copy_failed",
            "a file could not be copied; it stays",
            file_id=str(file_id),
            reason=reason,
        )
    log_event(
        log,
        "info",
        "stores.batch",
        "a batch of a migration between stores",
        duration_s=round(time.monotonic() - started, 4),
        **_named(migration),
        **report.as_fields(),
    )
    return report


def _next_batch(uow: UnitOfWork, migration: Migration, report: BatchReport) -> None:
    """Record a batch's counts and commit the next batch with them."""
    stores_sql.progress(uow.conn, migration.id, report.moved, report.bytes, report.copies)
    uow.enqueue(jobs.STORES_QUEUE, jobs.STORES_ACTOR, str(migration.id))


def _mover(
    rt: Runtime, migration: Migration, copied: Sequence[Candidate], delay: timedelta
) -> Callable[[UnitOfWork], dict[uuid.UUID, str]]:
    def move(uow: UnitOfWork) -> dict[uuid.UUID, str]:
        now = rt.clock.now()
        outcomes = stores_sql.move_many(uow.conn, copied, migration.target, now, delay)
        moved = tuple(sorted(file_id for file_id, outcome in outcomes.items() if outcome == "moved"))
        if moved:  # a database restored from before this commit learns where the files are (lethe restore)
            journal.record(uow, rt.cfg, [Entry(FILE_MOVED, now, files=moved, store=migration.target)])
        return outcomes

    return move


def _remove_gone(rt: Runtime, target: str, gone: Sequence[Candidate]) -> None:
    """Files purged while their copy ran (the purge cleared the target before the copy landed; their rows, and
    the record of the copy, went with them): what the copy wrote goes now, as the one rule allows (a hold on the
    id keeps it; `lethe audit` then finds it)."""
    if not gone:
        return
    ids = [candidate.file_id for candidate in gone]
    cleared = rt.db.unit_of_work(
        lambda uow: keeps_sql.clearance(uow, ids, Reach.STRAY, rt.clock.now()), name="stores.clear_gone"
    )
    keys = {
        candidate.file_id: rt.files.keys_of(FileObjects(candidate.file_id, candidate.object_key, store=target))
        for candidate in gone
    }
    rt.files.remove_keys(cleared, keys, store=target)


def copy_journal(rt: Runtime, migration: Migration) -> int:
    """Copy the deletion journal's objects (segments, spool, the escrowed hash key) of the migration's sources to
    its target, those the target lacks or holds at another size: the journal is written to the primary store, so
    after the switch the target holds the new segments and, with these, the ones before (a restore reads them all
    from there). Its own prefix is listed, as its writer and the restore guard list it. Returns how many."""
    target_name = migration.target
    target = rt.store_named(target_name)
    sources = migration.sources or [name for name in rt.store_names if name != target_name]
    copied = 0
    for name in sources:
        source = rt.store_named(name)
        for listed in rt.maintenance_of(name).list_prefix(JOURNAL_PREFIX):
            there = target.head(listed.key)
            info = source.head(listed.key)
            if info is None or (there is not None and there.size_bytes == info.size_bytes):
                continue
            copy_object(source, target, listed.key)
            copied += 1
    return copied


def _settle_empty(rt: Runtime, migration: Migration, report: BatchReport) -> BatchReport:
    """Nothing to take now: done when no file of the sources is left, else waiting (an upload under way, a scan
    or variants pending): the cleanup's step r commits the next batch."""
    movable, waiting = rt.db.read(
        lambda conn: stores_sql.waiting(conn, migration.id, migration.sources, migration.target)
    )
    if movable or waiting:
        report.state = "waiting"
        return report
    report.journal = copy_journal(rt, migration)  # what the old store's writers wrote until the rollout ended
    failed = rt.db.unit_of_work(lambda uow: _finish(uow, migration, rt), name="stores.finish")
    report.state = "done"
    log_event(
        log, "info", "stores.migration_done", "a migration between stores is done", failed=failed, **_named(migration)
    )
    return report


def _finish(uow: UnitOfWork, migration: Migration, rt: Runtime) -> int:
    conn = uow.conn
    stores_sql.finish(conn, migration.id, "done", rt.clock.now())
    return stores_sql.failures_of(conn, migration.id)


@dataclass
class _Copied:
    copies: int = 0
    bytes: int = 0
    failure: str | None = None


def _copy_file(rt: Runtime, candidate: Candidate, target: ObjectStore) -> _Copied:
    """Copy a file's objects (its original, its ready variants) as they are, each read back from the target and
    compared, size and sha256. A store-wide failure raises; a missing or differing object is the file's failure."""
    source = rt.store_named(candidate.store)
    objects = FileObjects(candidate.file_id, candidate.object_key)
    keys = [candidate.object_key] + [objects.variant(name) for name in candidate.variants]
    copied = _Copied()
    for key in keys:
        # An original no larger than its plaintext size's worth of memory, and every variant, is read whole at once
        # (no head first); a larger original streams.
        small = key != candidate.object_key or candidate.size_bytes <= _IN_MEMORY // 2
        try:
            copied.bytes += copy_object(source, target, key, small)
        except NotFound:
            copied.failure = "source_missing"
            return copied
        except _Differs:
            copied.failure = "copy_differs"
            return copied
        except ObjectFailed as exc:
            copied.failure = _code(exc.store_code)
            return copied
        copied.copies += 1
    return copied


def _code(store_code: str | None) -> str:
    code = "".join(ch for ch in (store_code or "refused").lower() if ch.isalpha() or ch == "_")[:32]
    return code or "refused"


class _Differs(Exception):
    """The object read back from the target is not the one read from the source."""


def copy_object(source: ObjectStore, target: ObjectStore, key: str, small: bool = False) -> int:
    """Copy one object as its bytes are, then read it back from the target: its size and sha256 must be the
    source's. `small`: known to fit in memory (read whole, without a head first). Returns its size. Raises NotFound
    (missing in the source), _Differs, StorageError."""
    info = None if small else source.head(key)
    if not small and info is None:
        raise NotFound()
    if info is None or info.size_bytes <= _IN_MEMORY:
        data = source.get(key)
        # The target checks the body against its MD5 and reports the MD5 of what it stored (S3's ETag): when it is
        # ours, the copy is verified without reading it back.
        if target.put_md5(key, data) == hashlib.md5(data, usedforsecurity=False).hexdigest():
            return len(data)
        digest = hashlib.sha256(data).hexdigest()
        size = len(data)
    else:
        reader = _Reader(source.open(key))
        target.put(key, cast(BinaryIO, reader), info.size_bytes)
        digest, size = reader.digest.hexdigest(), reader.size
        if size != info.size_bytes:
            raise StorageError("the source object changed while it was copied")
    if size <= _IN_MEMORY:  # read back whole, in one request
        stored = target.get(key)
        length, found = len(stored), hashlib.sha256(stored).hexdigest()
    else:
        back = hashlib.sha256()
        length = 0
        chunks = target.open(key)
        try:
            for chunk in chunks:
                back.update(chunk)
                length += len(chunk)
        finally:
            chunks.close()
        found = back.hexdigest()
    if length != size or found != digest:
        raise _Differs()
    return size


class _Reader:
    """A file-like view of an object's chunks for a streaming put, hashing what it hands out."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self._buffer = b""
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += chunk
        if size < 0:
            out, self._buffer = self._buffer, b""
        else:
            out, self._buffer = self._buffer[:size], self._buffer[size:]
        self.digest.update(out)
        self.size += len(out)
        return out


# -- the copies left behind ----------------------------------------------------------------------------------


@dataclass
class LeftReport:
    removed: int = 0
    held: int = 0
    refused: int = 0
    stores: dict[str, int] = field(default_factory=dict)


def remove_left(rt: Runtime, limit: int) -> LeftReport:
    """Remove the copies whose removal is due from the stores they were left in, under the one rule (a copy that
    is not its file's own is a stray: a legal hold keeps it until the release), then forget them."""
    report = LeftReport()
    now = rt.clock.now()
    due = rt.db.read(lambda conn: stores_sql.due(conn, now, limit))
    if not due:
        return report
    ids = sorted({left.file_id for left in due})
    clearance = rt.db.unit_of_work(
        lambda uow: keeps_sql.clearance(uow, ids, Reach.STRAY, rt.clock.now()), name="stores.clear"
    )
    gone: list[tuple[uuid.UUID, str]] = []
    refused_copies: list[tuple[uuid.UUID, str]] = []
    by_store: dict[str, list[stores_sql.Left]] = {}
    for left in due:
        if left.file_id not in clearance:
            report.held += 1
        elif left.store != left.own_store:
            by_store.setdefault(left.store, []).append(left)
    for store, lefts in sorted(by_store.items()):
        keys = {
            left.file_id: rt.files.keys_of(FileObjects(left.file_id, left.object_key, store=store), with_tail=True)
            for left in lefts
        }
        refused = {_owner(failure.key, keys) for failure in rt.files.remove_keys(clearance, keys, store=store)}
        report.refused += len(refused)
        for left in lefts:
            if left.file_id in refused:
                refused_copies.append((left.file_id, store))
            else:
                gone.append((left.file_id, store))
                report.stores[store] = report.stores.get(store, 0) + 1
    again = now + rt.lifecycle.purge_retry_base

    def settle(uow: UnitOfWork) -> None:
        stores_sql.forget(uow.conn, gone)
        stores_sql.postpone(uow.conn, refused_copies, again)

    if gone or refused_copies:
        rt.db.unit_of_work(settle, name="stores.forget")
    report.removed = len(gone)
    metrics.STORE_COPIES_REMOVED.inc(report.removed)
    return report


def _owner(key: str, keys: dict[uuid.UUID, list[str]]) -> uuid.UUID | None:
    return next((file_id for file_id, file_keys in keys.items() if key in file_keys), None)


def resume_running(rt: Runtime) -> uuid.UUID | None:
    """Commit the next batch of the running migration (the cleanup's step r: a migration that waited for files
    to become movable, or whose job ran out of retries, goes on)."""

    def resume(uow: UnitOfWork) -> uuid.UUID | None:
        running = stores_sql.running(uow.conn)
        if running is not None:
            uow.enqueue(jobs.STORES_QUEUE, jobs.STORES_ACTOR, str(running.id))
            return running.id
        return None

    resumed: uuid.UUID | None = rt.db.unit_of_work(resume, name="stores.resume")
    return resumed


def _named(migration: Migration) -> dict[str, str]:
    return {"migration_id": str(migration.id), "target": migration.target, "source": migration.source or "*"}
