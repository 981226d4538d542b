"""One runner at a time (D19): an advisory lock per named piece of work, held for the whole run by a transaction
left open on a connection of its own (a transaction pooler keeps one server session for a transaction, never
for a session). The actor, a cleanup step and an operator command may all start the same run; the
one that holds the lock runs it, the others see it busy and leave it alone, so counts are counted once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from app.db.conn import one
from app.db.pool import Database


@contextmanager
def exclusive(db: Database, name: str | int) -> Iterator[bool]:
    """Try to become the one runner of `name` (`erasure:<id>`, `retention:<policy>`, `sweep:<prefix>`, or a
    numeric key such as the cleanup's).

    The lock is transaction-level, taken in a transaction that stays open (idle, with no snapshot in READ
    COMMITTED) until the block ends: its end releases the lock, even when the process dies.

    Yields:
        True when this caller holds the lock for the block; False when another runner holds it (do nothing).
    """
    key = "%s" if isinstance(name, int) else "hashtextextended(%s, 0)"
    with db.pool.connection() as conn, conn.transaction():
        yield bool(one(conn.execute(f"SELECT pg_try_advisory_xact_lock({key}) AS locked", (name,))).locked)
