"""SQL of quotas: a principal's limits, what it holds (the `principal_usage` counters, per purpose and in all under
the purpose '*', which triggers on `files` keep in the transaction of every change to a file's row, holding the
principal's rows locked until it commits: migration 0025), and the check of the counters against the rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from app.db.conn import Conn, all_as, first_as, one_as
from app.db.keeps import held
from app.domain.quotas import Held

# A file's charge, as the triggers count it ('reserved', 'used' or NULL): the one SQL definition, in the database.
_CHARGE = "file_charge(f.upload_state, f.scan_status)"
ALL = "*"  # the purpose of a principal's counters of all its files
_HELD = ("reserved_bytes", "reserved_files", "used_bytes", "used_files")


@dataclass(frozen=True)
class QuotaRow:
    principal_id: UUID
    limits: dict[str, Any]
    updated_at: datetime


@dataclass(frozen=True)
class UsageRow:
    purpose: str
    reserved_bytes: int
    reserved_files: int
    used_bytes: int
    used_files: int

    @property
    def held(self) -> Held:
        """The counters as the rules read them."""
        return Held(self.reserved_bytes, self.reserved_files, self.used_bytes, self.used_files)


@dataclass(frozen=True)
class Waiting:
    """Deleted files a principal still holds: waiting for their purge, and (of those) kept by a legal hold."""

    bytes: int
    files: int
    held_bytes: int
    held_files: int


@dataclass(frozen=True)
class DriftRow:
    """One principal and purpose whose counters differ from its rows: what is recorded, what the rows hold."""

    principal_id: UUID
    purpose: str
    reserved_bytes: int
    reserved_files: int
    used_bytes: int
    used_files: int
    rows_reserved_bytes: int
    rows_reserved_files: int
    rows_used_bytes: int
    rows_used_files: int

    @property
    def recorded(self) -> Held:
        """What the counters say."""
        return Held(self.reserved_bytes, self.reserved_files, self.used_bytes, self.used_files)

    @property
    def counted(self) -> Held:
        """What the rows hold."""
        return Held(self.rows_reserved_bytes, self.rows_reserved_files, self.rows_used_bytes, self.rows_used_files)


def quota_of(conn: Conn, principal_id: UUID) -> QuotaRow | None:
    """A principal's own limits, or None (the installation's defaults apply)."""
    return first_as(
        conn, QuotaRow, "SELECT principal_id, limits, updated_at FROM quotas WHERE principal_id = %s", (principal_id,)
    )


def set_quota(conn: Conn, principal_id: UUID, limits: dict[str, Any], now: datetime) -> QuotaRow:
    """Replace a principal's own limits."""
    return one_as(
        conn,
        QuotaRow,
        """
        INSERT INTO quotas (principal_id, limits, updated_at) VALUES (%s, %s, %s)
        ON CONFLICT (principal_id) DO UPDATE SET limits = excluded.limits, updated_at = excluded.updated_at
        RETURNING principal_id, limits, updated_at
        """,
        (principal_id, Jsonb(limits), now),
    )


@dataclass(frozen=True)
class Standing:
    """A principal's limits and what it holds in all and for one purpose, read in the transaction that has just
    written a change of its files (whose counters it then holds locked: no other transaction moves them)."""

    limits: dict[str, Any] | None
    reserved_bytes: int
    reserved_files: int
    used_bytes: int
    used_files: int
    purpose_reserved_bytes: int
    purpose_reserved_files: int
    purpose_used_bytes: int
    purpose_used_files: int

    @property
    def everything(self) -> Held:
        """What all its files hold."""
        return Held(self.reserved_bytes, self.reserved_files, self.used_bytes, self.used_files)

    @property
    def of_purpose(self) -> Held:
        """What its files of the purpose hold."""
        return Held(
            self.purpose_reserved_bytes, self.purpose_reserved_files, self.purpose_used_bytes, self.purpose_used_files
        )


def standing(conn: Conn, principal_id: UUID, purpose: str) -> Standing:
    """A principal's limits and counters, in all and for `purpose`: one statement, after a change of its files in
    this transaction (the '*' row exists, and is this transaction's until it ends)."""
    return one_as(
        conn,
        Standing,
        f"""
        SELECT (SELECT q.limits FROM quotas q WHERE q.principal_id = a.principal_id) AS limits,
               {", ".join(f"a.{name}" for name in _HELD)},
               {", ".join(f"coalesce(p.{name}, 0) AS purpose_{name}" for name in _HELD)}
        FROM principal_usage a
        LEFT JOIN principal_usage p ON p.principal_id = a.principal_id AND p.purpose = %(purpose)s
        WHERE a.principal_id = %(principal)s AND a.purpose = '{ALL}'
        """,
        {"principal": principal_id, "purpose": purpose},
    )


def forget(conn: Conn, principal_id: UUID) -> None:
    """Remove a principal's own limits and its counters (an erasure that left none of its files)."""
    conn.execute("DELETE FROM principal_usage WHERE principal_id = %s", (principal_id,))
    conn.execute("DELETE FROM quotas WHERE principal_id = %s", (principal_id,))


def usage_of(conn: Conn, principal_id: UUID) -> list[UsageRow]:
    """What a principal holds, per purpose and in all (ALL); purposes it never held a file for have no row."""
    return all_as(
        conn,
        UsageRow,
        "SELECT purpose, reserved_bytes, reserved_files, used_bytes, used_files FROM principal_usage "
        "WHERE principal_id = %s ORDER BY purpose",
        (principal_id,),
    )


def waiting_of(conn: Conn, principal_id: UUID) -> Waiting:
    """The deleted files a principal still holds (their rows stay until the purge): all, and those a hold keeps."""
    return one_as(
        conn,
        Waiting,
        f"""
        SELECT coalesce(sum(f.size_bytes), 0)::bigint AS bytes, count(*) AS files,
               coalesce(sum(f.size_bytes) FILTER (WHERE {held("f")}), 0)::bigint AS held_bytes,
               count(*) FILTER (WHERE {held("f")}) AS held_files
        FROM files f
        WHERE f.uploaded_by = %s AND f.deleted_at IS NOT NULL AND {_CHARGE} = 'used'
        """,
        (principal_id,),
    )


_COUNTED = f"""
    SELECT f.uploaded_by AS principal_id, p AS purpose,
           coalesce(sum(f.size_bytes) FILTER (WHERE {_CHARGE} = 'reserved'), 0)::bigint AS reserved_bytes,
           count(*) FILTER (WHERE {_CHARGE} = 'reserved') AS reserved_files,
           coalesce(sum(f.size_bytes) FILTER (WHERE {_CHARGE} = 'used'), 0)::bigint AS used_bytes,
           count(*) FILTER (WHERE {_CHARGE} = 'used') AS used_files
    FROM files f CROSS JOIN LATERAL unnest(ARRAY['{ALL}', f.purpose]) AS p
    WHERE {_CHARGE} IS NOT NULL
    GROUP BY f.uploaded_by, p
"""


def drift(conn: Conn, limit: int = 100) -> list[DriftRow]:
    """Principals and purposes (ALL: all its files) whose counters differ from what their rows hold (one read of
    every row of files: an audit's, not a request's)."""
    return all_as(
        conn,
        DriftRow,
        f"""
        WITH counted AS ({_COUNTED})
        SELECT coalesce(u.principal_id, c.principal_id) AS principal_id, coalesce(u.purpose, c.purpose) AS purpose,
               {", ".join(f"coalesce(u.{name}, 0) AS {name}" for name in _HELD)},
               {", ".join(f"coalesce(c.{name}, 0) AS rows_{name}" for name in _HELD)}
        FROM principal_usage u FULL JOIN counted c ON c.principal_id = u.principal_id AND c.purpose = u.purpose
        WHERE {" OR ".join(f"coalesce(u.{name}, 0) <> coalesce(c.{name}, 0)" for name in _HELD)}
        ORDER BY 1, 2
        LIMIT %s
        """,
        (limit,),
    )


def recount(conn: Conn) -> None:
    """Every principal's usage counted again from the rows. Writers of files wait for this transaction (a lock
    of the table in SHARE mode), so nothing changes between the count and the counters."""
    conn.execute("LOCK TABLE files IN SHARE MODE")
    conn.execute("DELETE FROM principal_usage")
    conn.execute(
        f"INSERT INTO principal_usage (principal_id, purpose, {', '.join(_HELD)}) "
        f"SELECT principal_id, purpose, {', '.join(_HELD)} FROM ({_COUNTED}) AS counted"
    )
