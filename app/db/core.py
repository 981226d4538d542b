"""The pool and the unit of work (D3, D10).

Connections are autocommit: a plain read runs without a transaction (as purge needs, D7), and a unit of
work opens exactly one transaction. A deadlock or a serialization failure reruns the whole unit, up to
`database.tx_retry_max` times; so the function given to unit_of_work must not have effects outside the
database (it may not publish, and K1 forbids store calls in it anyway).
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import namedtuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from app.clock import Clock, SystemClock
from app.db.context import in_transaction, reset_in_transaction, set_in_transaction
from app.logs import log_event

log = logging.getLogger("lethe.db")
# Connections use psycopg's namedtuple rows, whose attributes are known only at run time: a row is Any.
Conn = psycopg.Connection[Any]


def one(cursor: psycopg.Cursor[Any]) -> Any:
    """The one row a statement always answers (an aggregate, a RETURNING of one insert)."""
    row = cursor.fetchone()
    if row is None:
        raise RuntimeError("the statement answered no row")
    return row
T = TypeVar("T")
RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)


@dataclass(frozen=True)
class Job:
    """A job written to the outbox inside a unit of work (D9): ids only in its args."""

    outbox_id: int
    queue_name: str
    actor_name: str
    args: tuple[Any, ...]


@dataclass
class UnitOfWork:
    """What a function run by Database.unit_of_work gets: the connection of its one transaction, and
    enqueue() for jobs that must commit with it."""

    conn: psycopg.Connection
    name: str
    clock: Clock = field(default_factory=SystemClock)
    jobs: list[Job] = field(default_factory=list)
    on_commit: list[Callable[[], None]] = field(default_factory=list)

    @contextmanager
    def savepoint(self) -> Iterator["UnitOfWork"]:
        """A savepoint: on an error, its statements are rolled back, and so are the jobs and commit hooks
        it registered (their outbox rows went with the rollback). The error propagates."""
        jobs, hooks = len(self.jobs), len(self.on_commit)
        try:
            with self.conn.transaction():
                yield self
        except BaseException:
            del self.jobs[jobs:]
            del self.on_commit[hooks:]
            raise

    def after_commit_metric(self, fn: Callable[[], None]) -> None:
        """Run fn once this unit of work committed (a counter must not count a rolled-back change)."""
        self.on_commit.append(fn)

    def execute(self, query: str, params: Any = None) -> psycopg.Cursor:
        return self.conn.execute(query, params)

    def enqueue(self, queue_name: str, actor_name: str, *args: Any) -> Job:
        """Write a job to the outbox in this transaction; it is published after the commit (D9)."""
        row = one(self.conn.execute(  # created_at from the project's clock, which the relay ages by (D17)
            "INSERT INTO outbox (queue_name, actor_name, args, created_at) VALUES (%s, %s, %s, %s) RETURNING id",
            (queue_name, actor_name, Jsonb(list(args)), self.clock.now())))
        job = Job(outbox_id=row.id, queue_name=queue_name, actor_name=actor_name, args=tuple(args))
        self.jobs.append(job)
        return job


class Database:
    """A psycopg pool with units of work.

    Args:
        url: PostgreSQL URL.
        pool_size: most connections.
        tx_retry_max: reruns of a unit of work after a deadlock or serialization failure.
        after_commit: called with the jobs of a committed unit of work (the outbox publisher).
        clock: the project's clock (D17): the time an outbox row is written with.
    """

    def __init__(self, url: str, pool_size: int = 10, tx_retry_max: int = 5,
                 after_commit: Callable[[Sequence[Job]], None] | None = None, clock: Clock | None = None):
        self.url = url
        self.tx_retry_max = tx_retry_max
        self.after_commit = after_commit
        self.clock: Clock = clock or SystemClock()
        self.pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "row_factory": namedtuple_row},
            check=ConnectionPool.check_connection,
            timeout=15,
            name="lethe",
            open=True,
        )

    def close(self) -> None:
        self.pool.close()

    def unit_of_work(self, fn: Callable[[UnitOfWork], T], *, name: str) -> T:
        """Run fn in one transaction and return its result; retry it on a deadlock or serialization failure.

        Args:
            fn: the work; it gets a UnitOfWork. It is called again on a retry, so it must only touch the
                database.
            name: the transaction's name in logs (`delete_file`, `cleanup.b`).

        Raises:
            Whatever fn raises (the transaction is rolled back), or the last retryable error.
        """
        if in_transaction():
            raise RuntimeError("a unit of work is already open in this thread; pass it down instead")
        attempt = 0
        while True:
            uow = None
            token = set_in_transaction(True)
            try:
                with self.pool.connection() as conn:
                    with conn.transaction():
                        uow = UnitOfWork(conn=conn, name=name, clock=self.clock)
                        result = fn(uow)
            except RETRYABLE as exc:
                attempt += 1
                if attempt > self.tx_retry_max:
                    log_event(log, "warning", "db.tx_gave_up", "transaction gave up", tx=name, attempts=attempt,
                              sqlstate=exc.sqlstate)
                    raise
                log_event(log, "info", "db.tx_retry", "transaction retried", tx=name, attempt=attempt,
                          sqlstate=exc.sqlstate)
                time.sleep(min(0.01 * 2 ** attempt, 0.5))
                continue
            finally:
                reset_in_transaction(token)
            for hook in uow.on_commit:
                hook()
            if uow.jobs and self.after_commit is not None:
                self.after_commit(uow.jobs)
            return result

    def read(self, fn: Callable[[psycopg.Connection], T]) -> T:
        """Run fn on an autocommit connection: each statement sees the latest committed data, no transaction."""
        with self.pool.connection() as conn:
            return fn(conn)

    def ping(self) -> None:
        with self.pool.connection(timeout=3) as conn:
            conn.execute("SELECT 1")
