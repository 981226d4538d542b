"""One runner at a time (D19): a session-level advisory lock per named piece of work, held on a connection of
its own for the whole run. The actor, a cleanup step and an operator command may all start the same run; the
one that holds the lock runs it, the others see it busy and leave it alone, so counts are counted once."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from app.db.pool import Database
from app.db.conn import one


@contextmanager
def exclusive(db: Database, name: str) -> Iterator[bool]:
    """Try to become the one runner of `name` (`erasure:<id>`, `retention:<policy>`, `sweep:<prefix>`).

    Yields:
        True when this caller holds the lock for the block; False when another runner holds it (do nothing).
    """
    with db.pool.connection() as conn:
        locked = bool(one(conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0)) AS locked",
                                       (name,))).locked)
        try:
            yield locked
        finally:
            if locked and not conn.closed:
                conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (name,))
