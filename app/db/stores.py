"""SQL of several stores: which store holds each file (files.store), the copies a migration makes and leaves
(store_copies), and the migrations themselves (store_migrations).

A file moves only when nothing else may be writing its objects: complete and deliverable, not deleted, its
variants settled (no job is making them), its upload's session ended. The move re-checks all of it, and that the
objects it copied are still the file's (its original's key, its variants), under the row's lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from app.db.conn import Conn, all_as, first_as, one_as
from app.db.keeps import held

# What may move: nothing else writes a file in this state (its content, its variants, its upload's parts).
MOVABLE = (
    "f.deleted_at IS NULL AND f.upload_state = 'complete' AND f.scan_status IN ('clean', 'skipped') "
    "AND f.object_key IS NOT NULL AND f.variants_state IS DISTINCT FROM 'pending' "
    "AND NOT EXISTS (SELECT 1 FROM file_variants v WHERE v.file_id = f.id AND v.state = 'writing') "
    "AND NOT EXISTS (SELECT 1 FROM upload_sessions s WHERE s.file_id = f.id AND s.state = 'open')"
)
# A file that ended without its deletion (failed, infected, error) and whose objects its purge removed: its row
# stays for a while (its uploader is told), and names the new store without a copy (there is nothing to copy).
ENDED_EMPTY = (
    "f.deleted_at IS NULL AND f.objects_purged_at IS NOT NULL AND (f.upload_state = 'failed' "
    "OR (f.upload_state = 'complete' AND f.scan_status IN ('infected', 'error')))"
)
# What a copy is of: the original's key and the variants (name and size); the move happens only when this is
# still what the row says.
SIGNATURE = (
    "f.object_key || ';' || coalesce((SELECT string_agg(v.name || ':' || v.size_bytes || ':' || v.state, ',' "
    "ORDER BY v.name) FROM file_variants v WHERE v.file_id = f.id), '')"
)


@dataclass(frozen=True)
class Candidate:
    """A file a migration copies: where it is, what its objects are, and the signature its move re-checks."""

    file_id: UUID
    store: str
    object_key: str
    size_bytes: int
    encrypted: bool
    signature: str
    variants: list[str] = field(default_factory=list)


def take(
    conn: Conn, migration_id: UUID, sources: Sequence[str] | None, target: str, limit: int, now: datetime
) -> list[Candidate]:
    """Take the next files to copy to `target` from `sources` (None: every store but the target) and record that
    their copy begins (a `copying` row: the target may hold part of it from now on, and a purge clears it there
    too). A file another migration worker holds is skipped; one whose copy began before (a run that stopped) is
    taken again."""
    where = "f.store <> %(target)s" if sources is None else "f.store = ANY(%(sources)s)"
    return all_as(
        conn,
        Candidate,
        f"""
        WITH picked AS (
            SELECT f.id FROM files f
            WHERE {where} AND {MOVABLE}
              AND NOT EXISTS (SELECT 1 FROM store_move_failures m WHERE m.migration_id = %(migration)s
                              AND m.file_id = f.id)
            ORDER BY f.store, f.id
            LIMIT %(limit)s
            FOR UPDATE OF f SKIP LOCKED
        ), copying AS (
            INSERT INTO store_copies (file_id, store, state, since)
            SELECT id, %(target)s, 'copying', %(now)s FROM picked
            ON CONFLICT (file_id, store) DO UPDATE SET state = 'copying', since = excluded.since, remove_after = NULL
        )
        SELECT f.id AS file_id, f.store, f.object_key, f.size_bytes, f.encrypted, {SIGNATURE} AS signature,
               ARRAY(SELECT v.name FROM file_variants v WHERE v.file_id = f.id AND v.state = 'ready'
                     ORDER BY v.name) AS variants
        FROM files f WHERE f.id IN (SELECT id FROM picked)
        ORDER BY f.id
        """,
        {"target": target, "sources": list(sources or []), "limit": limit, "now": now, "migration": migration_id},
    )


def move_empty(conn: Conn, sources: Sequence[str] | None, target: str, limit: int) -> int:
    """Move the rows of ended files whose objects are gone to `target` (nothing to copy). Returns how many."""
    where = "f.store <> %(target)s" if sources is None else "f.store = ANY(%(sources)s)"
    return conn.execute(
        f"""
        UPDATE files SET store = %(target)s WHERE id IN (
            SELECT f.id FROM files f WHERE {where} AND {ENDED_EMPTY} ORDER BY f.id LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED)
        """,
        {"target": target, "sources": list(sources or []), "limit": limit},
    ).rowcount


def failed(conn: Conn, migration_id: UUID, failures: Sequence[tuple[UUID, str]]) -> None:
    """These files could not be copied: this migration goes on without them."""
    if failures:
        conn.execute(
            "INSERT INTO store_move_failures (migration_id, file_id, reason) "
            "SELECT %s, id, reason FROM unnest(%s::uuid[], %s::text[]) AS f(id, reason) ON CONFLICT DO NOTHING",
            (migration_id, [file_id for file_id, _ in failures], [reason for _, reason in failures]),
        )


def failures_of(conn: Conn, migration_id: UUID) -> int:
    """How many files this migration could not copy."""
    row = conn.execute("SELECT count(*) FROM store_move_failures WHERE migration_id = %s", (migration_id,)).fetchone()
    return int(row[0]) if row else 0


def move_many(conn: Conn, copied: Sequence[Candidate], target: str, now: datetime, delay: timedelta) -> dict[UUID, str]:
    """`move` for many files in one statement each step: the rows still movable, still in their source and still
    what was copied name `target`; their copies in the target stop being copies and the sources' are left for
    removal after `delay`; the others' copies in the target are left for removal at once. Returns each file's
    outcome: `moved`, `changed`, or `gone` (no row)."""
    if not copied:
        return {}
    ids = [candidate.file_id for candidate in copied]
    moved = {
        row[0]: row[1]
        for row in conn.execute(
            f"""
            WITH copy AS (
                SELECT * FROM unnest(%(ids)s::uuid[], %(sources)s::text[], %(signatures)s::text[])
                    AS c(id, source, signature)
            ), before AS (
                SELECT f.id, f.store FROM files f JOIN copy ON copy.id = f.id
                WHERE f.store = copy.source AND {MOVABLE} AND {SIGNATURE} = copy.signature
                ORDER BY f.id FOR UPDATE OF f
            )
            UPDATE files f SET store = %(target)s FROM before WHERE f.id = before.id
            RETURNING f.id, before.store
            """,
            {
                "ids": ids,
                "sources": [candidate.store for candidate in copied],
                "signatures": [candidate.signature for candidate in copied],
                "target": target,
            },
        ).fetchall()
    }
    if moved:
        conn.execute("DELETE FROM store_copies WHERE file_id = ANY(%s) AND store = %s", (list(moved), target))
        conn.execute(
            """
            INSERT INTO store_copies (file_id, store, state, since, remove_after)
            SELECT id, source, 'left', %s, %s FROM unnest(%s::uuid[], %s::text[]) AS m(id, source)
            ON CONFLICT (file_id, store) DO UPDATE SET state = 'left', since = excluded.since,
                                                      remove_after = excluded.remove_after
            """,
            (now, now + delay, list(moved), list(moved.values())),
        )
    rest = [file_id for file_id in ids if file_id not in moved]
    present = (
        {row[0] for row in conn.execute("SELECT id FROM files WHERE id = ANY(%s)", (rest,)).fetchall()}
        if rest
        else set()
    )
    if present:
        conn.execute(
            "UPDATE store_copies c SET state = 'left', remove_after = %s FROM files f "
            "WHERE c.file_id = ANY(%s) AND c.store = %s AND c.state = 'copying' AND f.id = c.file_id "
            "AND f.store <> c.store",
            (now, list(present), target),
        )
    return {file_id: "moved" if file_id in moved else "changed" if file_id in present else "gone" for file_id in ids}


def moved_again(conn: Conn, file_ids: Sequence[UUID], target: str, now: datetime, delay: timedelta) -> int:
    """A restored database learns from the journal that these files moved to `target` after its backup: their rows
    name it, and the store the backup names is left for removal after `delay` (it may still hold a copy). Returns
    how many rows changed."""
    rows = conn.execute(
        """
        WITH before AS (
            SELECT id, store FROM files WHERE id = ANY(%s) AND store <> %s FOR UPDATE
        ), moved AS (
            UPDATE files f SET store = %s FROM before WHERE f.id = before.id RETURNING f.id
        )
        INSERT INTO store_copies (file_id, store, state, since, remove_after)
        SELECT id, store, 'left', %s, %s FROM before
        ON CONFLICT (file_id, store) DO UPDATE SET state = 'left', since = excluded.since,
                                                  remove_after = excluded.remove_after
        RETURNING file_id
        """,
        (list(file_ids), target, target, now, now + delay),
    ).fetchall()
    conn.execute("DELETE FROM store_copies WHERE file_id = ANY(%s) AND store = %s", (list(file_ids), target))
    return len(rows)


@dataclass(frozen=True)
class Left:
    """A copy of a file in a store that is not (or no longer) its own, due for removal."""

    file_id: UUID
    store: str
    object_key: str | None
    own_store: str


def due(conn: Conn, now: datetime, limit: int) -> list[Left]:
    """The copies left in a store whose removal is due, oldest first; not those a legal hold keeps (they wait for
    its release, and never stand in front of the others; the clearance asks the rule again)."""
    return all_as(
        conn,
        Left,
        f"""
        SELECT c.file_id, c.store, f.object_key, f.store AS own_store
        FROM store_copies c JOIN files f ON f.id = c.file_id
        WHERE c.state = 'left' AND c.remove_after <= %s AND NOT {held("f")}
        ORDER BY c.remove_after, c.file_id
        LIMIT %s
        """,
        (now, limit),
    )


def postpone(conn: Conn, copies: Sequence[tuple[UUID, str]], until: datetime) -> None:
    """The store refused the removal of these copies: they are due again at `until`, behind the others."""
    if copies:
        conn.execute(
            """
            UPDATE store_copies c SET remove_after = %s
            FROM unnest(%s::uuid[], %s::text[]) AS r(file_id, store)
            WHERE c.file_id = r.file_id AND c.store = r.store AND c.state = 'left'
            """,
            (until, [file_id for file_id, _ in copies], [store for _, store in copies]),
        )


def forget(conn: Conn, copies: Sequence[tuple[UUID, str]]) -> None:
    """These copies were removed from their stores (never the file's own store: its row names that one)."""
    if copies:
        conn.execute(
            """
            DELETE FROM store_copies c USING unnest(%s::uuid[], %s::text[]) AS gone(file_id, store), files f
            WHERE c.file_id = gone.file_id AND c.store = gone.store AND c.state = 'left'
              AND f.id = c.file_id AND f.store <> c.store
            """,
            ([file_id for file_id, _ in copies], [store for _, store in copies]),
        )


def copies_in(conn: Conn, store: str, file_ids: Sequence[UUID]) -> set[UUID]:
    """Of these files, those a copy row records in `store` (being made, or left there)."""
    rows = conn.execute(
        "SELECT file_id FROM store_copies WHERE store = %s AND file_id = ANY(%s)", (store, list(file_ids))
    ).fetchall()
    return {row[0] for row in rows}


def forget_copies(conn: Conn, file_ids: Sequence[UUID]) -> None:
    """A purge removed the objects of these files from every store that held some: no copy is left."""
    conn.execute("DELETE FROM store_copies WHERE file_id = ANY(%s)", (list(file_ids),))


def abandon_other_copies(conn: Conn, target: str, now: datetime) -> int:
    """A migration to `target` begins: copies an earlier migration began towards another store will never become
    their file's; they are left for removal at once. Returns how many."""
    return conn.execute(
        "UPDATE store_copies SET state = 'left', remove_after = %s WHERE state = 'copying' AND store <> %s",
        (now, target),
    ).rowcount


def abandon_failed(conn: Conn, target: str, file_ids: Sequence[UUID], now: datetime) -> None:
    """The copies of these files to `target` did not succeed: what they wrote there is left for removal at once."""
    if file_ids:
        conn.execute(
            "UPDATE store_copies SET state = 'left', remove_after = %s "
            "WHERE file_id = ANY(%s) AND store = %s AND state = 'copying'",
            (now, list(file_ids), target),
        )


@dataclass(frozen=True)
class StoreCounts:
    """What `lethe stores status` says of one store (counts only)."""

    store: str
    files: int = 0
    bytes: int = 0
    copying: int = 0  # copies being made into it by a migration
    left: int = 0  # copies of files that moved out of it, waiting for their removal
    left_due: int = 0  # of those, the ones whose removal is due now


def counts(conn: Conn, now: datetime) -> list[StoreCounts]:
    """Per store that holds a file or a copy: files, bytes, copies being made, copies waiting for removal."""
    return all_as(
        conn,
        StoreCounts,
        """
        WITH owned AS (
            SELECT store, count(*) AS files, coalesce(sum(size_bytes), 0)::bigint AS bytes FROM files GROUP BY store
        ), copies AS (
            SELECT store, count(*) FILTER (WHERE state = 'copying') AS copying,
                   count(*) FILTER (WHERE state = 'left') AS left,
                   count(*) FILTER (WHERE state = 'left' AND remove_after <= %s) AS left_due
            FROM store_copies GROUP BY store
        )
        SELECT coalesce(o.store, c.store) AS store, coalesce(o.files, 0) AS files, coalesce(o.bytes, 0) AS bytes,
               coalesce(c.copying, 0) AS copying, coalesce(c.left, 0) AS left, coalesce(c.left_due, 0) AS left_due
        FROM owned o FULL JOIN copies c ON c.store = o.store
        ORDER BY 1
        """,
        (now,),
    )


def waiting(conn: Conn, migration_id: UUID, sources: Sequence[str] | None, target: str) -> tuple[int, int]:
    """Of the files a migration still has to move: how many may move now, and how many wait (an upload under
    way, variants being made, a scan pending)."""
    where = "f.store <> %(target)s" if sources is None else "f.store = ANY(%(sources)s)"
    row = conn.execute(
        f"""
        SELECT count(*) FILTER (WHERE {MOVABLE} OR {ENDED_EMPTY}) AS movable,
               count(*) FILTER (WHERE NOT ({MOVABLE}) AND NOT ({ENDED_EMPTY})) AS waiting
        FROM files f WHERE {where} AND f.deleted_at IS NULL
          AND NOT EXISTS (SELECT 1 FROM store_move_failures m WHERE m.migration_id = %(migration)s
                          AND m.file_id = f.id)
        """,
        {"target": target, "sources": list(sources or []), "migration": migration_id},
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


# -- migrations ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Migration:
    """A migration between stores, as store_migrations records it (counts only)."""

    id: UUID
    target: str
    source: str | None
    state: str
    started_at: datetime
    finished_at: datetime | None
    files_moved: int
    bytes_moved: int
    copies_made: int
    batches: int

    @property
    def sources(self) -> list[str] | None:
        """The stores it moves files from (None: every store but the target)."""
        return None if self.source is None else [self.source]


_MIGRATION = "id, target, source, state, started_at, finished_at, files_moved, bytes_moved, copies_made, batches"


def start(conn: Conn, migration_id: UUID, target: str, source: str | None, now: datetime) -> Migration:
    """Record a migration that runs from now (the unique index refuses a second running one)."""
    row = one_as(
        conn,
        Migration,
        f"INSERT INTO store_migrations (id, target, source, state, started_at) VALUES (%s, %s, %s, 'running', %s) "
        f"RETURNING {_MIGRATION}",
        (migration_id, target, source, now),
    )
    return row


def running(conn: Conn) -> Migration | None:
    """The migration that runs now, if any."""
    return first_as(conn, Migration, f"SELECT {_MIGRATION} FROM store_migrations WHERE state = 'running'")


def latest(conn: Conn) -> Migration | None:
    """The migration begun last, whatever its state."""
    return first_as(conn, Migration, f"SELECT {_MIGRATION} FROM store_migrations ORDER BY started_at DESC LIMIT 1")


def migration(conn: Conn, migration_id: UUID) -> Migration | None:
    """One migration by id."""
    return first_as(conn, Migration, f"SELECT {_MIGRATION} FROM store_migrations WHERE id = %s", (migration_id,))


def progress(conn: Conn, migration_id: UUID, moved: int, moved_bytes: int, copies: int) -> None:
    """Add a batch's counts to its migration."""
    conn.execute(
        "UPDATE store_migrations SET files_moved = files_moved + %s, bytes_moved = bytes_moved + %s, "
        "copies_made = copies_made + %s, batches = batches + 1 WHERE id = %s",
        (moved, moved_bytes, copies, migration_id),
    )


def finish(conn: Conn, migration_id: UUID, state: str, now: datetime) -> None:
    """End a running migration: `done` (no file left in its sources) or `stopped` (by the operator)."""
    conn.execute(
        "UPDATE store_migrations SET state = %s, finished_at = %s WHERE id = %s AND state = 'running'",
        (state, now, migration_id),
    )
