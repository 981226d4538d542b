"""What PostgreSQL keeps after a delete: a deleted row's bytes, a file name among them, stay in the
table's heap file as a dead tuple until VACUUM reclaims the space. Autovacuum does it on its own; with it off
(for the server or a table) they stay until someone runs VACUUM. These reads let Lethe say so."""

from __future__ import annotations

from app.db.conn import Conn, one

WATCHED_TABLES = ("files", "events", "messages")  # the tables whose rows hold names, texts or payloads
LETHE_TABLES = (
    "files",
    "events",
    "messages",
    "attachments",
    "drafts",
    "upload_sessions",
    "upload_parts",
    "erasure_files",
    "erasures",
    "receipts",
    "outbox",
)


def autovacuum_off(conn: Conn) -> list[str]:
    """Where autovacuum is off: `server` when the server's `autovacuum` (or `track_counts`, which it needs) is
    off, and the names of Lethe's tables whose `autovacuum_enabled` storage parameter is false."""
    off = []
    settings = one(
        conn.execute(
            "SELECT current_setting('autovacuum') AS autovacuum, current_setting('track_counts') AS track_counts"
        )
    )
    if settings.autovacuum != "on" or settings.track_counts != "on":
        off.append("server")
    off += [
        row.relname
        for row in conn.execute(
            """
        SELECT c.relname FROM pg_class c
        WHERE c.relkind = 'r' AND c.relname = ANY(%s) AND c.relnamespace = to_regnamespace(current_schema())
          AND 'autovacuum_enabled=false' = ANY(coalesce(c.reloptions, '{}'))
        ORDER BY c.relname
        """,
            (list(LETHE_TABLES),),
        )
    ]
    return off


def dead_tuples(conn: Conn) -> dict[str, int]:
    """Dead tuples of the watched tables (PostgreSQL's statistics; a deleted row's bytes stay until VACUUM)."""
    return {
        row.relname: int(row.n_dead_tup)
        for row in conn.execute(
            "SELECT relname, n_dead_tup FROM pg_stat_user_tables WHERE relname = ANY(%s) "
            "AND schemaname = current_schema()",
            (list(WATCHED_TABLES),),
        )
    }
