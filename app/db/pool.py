"""The pool and the unit of work (D3, D10).

Connections are autocommit: a plain read runs without a transaction (as purge needs, D7), and a unit of
work opens exactly one transaction. A deadlock or a serialization failure reruns the whole unit, up to
`database.tx_retry_max` times; so the function given to unit_of_work must not have effects outside the
database (it may not publish, and K1 forbids store calls in it anyway).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.abc import PQGen
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import namedtuple_row
from psycopg_pool import ConnectionPool

from app.db.context import in_transaction, reset_in_transaction, set_in_transaction
from app.db.uow import Job, UnitOfWork
from app.platform import tracing
from app.platform.clock import Clock, SystemClock
from app.platform.observability import metrics
from app.platform.observability.logs import log_event

log = logging.getLogger("lethe.db")
T = TypeVar("T")
RV = TypeVar("RV")
RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)
_MAINTENANCE: ContextVar[bool] = ContextVar("lethe_db_maintenance", default=False)


@dataclass(frozen=True)
class Timeouts:
    """How long Lethe waits for PostgreSQL (keys `database.*_timeout`, `database.keepalive`), in seconds.

    An outage must answer fast (a 503 within 5 s, never a hang): a refused server fails at once, a silent one
    (a partition, a stalled proxy) is caught by `answer`, the longest silence of the server while a statement
    runs, after which the connection is dropped on the client side: a server-side statement_timeout cannot
    fire for a query that never reached the server.
    """

    pool: float = 3.0
    connect: float = 3.0
    statement: float = 3.0
    maintenance: float = 60.0  # the statements of maintenance work (Database.maintenance)
    keepalive: float = 10.0
    check: float = 1.0  # a pooled connection's liveness check
    pooled: bool = False  # behind a transaction pooler (database.pooler): no prepared statements, no options

    @property
    def answer(self) -> float:
        """The longest silence of the server while a statement runs, in seconds."""
        return self.statement + 1.0

    @property
    def maintenance_answer(self) -> float:
        """The same for maintenance work."""
        return self.maintenance + 1.0

    def connect_kwargs(self, url: str) -> dict[str, Any]:
        """libpq parameters: connect timeout, keepalives and a user timeout on our side, and the statement
        timeout and keepalives of the server's side of the session (its `options`)."""
        idle = max(1, math.ceil(self.keepalive))
        interval = max(1, math.ceil(self.keepalive / 3))
        server = (
            f"-c statement_timeout={int(self.statement * 1000)} -c tcp_keepalives_idle={idle} "
            f"-c tcp_keepalives_interval={interval} -c tcp_keepalives_count=3"
        )
        given = conninfo_to_dict(url).get("options")
        client = {
            "connect_timeout": max(2, math.ceil(self.connect)),
            "keepalives": 1,
            "keepalives_idle": idle,
            "keepalives_interval": interval,
            "keepalives_count": 3,
            "tcp_user_timeout": int((idle + 3 * interval) * 1000),
        }
        if self.pooled:
            # A transaction pooler hands each transaction another server session: a prepared statement or a
            # session setting would meet the wrong one (PgBouncer 1.18 also refuses the options parameter).
            return {**client, "prepare_threshold": None}
        return {**client, "options": f"{given} {server}" if given else server}


class BoundedConnection(psycopg.Connection[Any]):
    """A connection that never waits for its server longer than `answer_timeout` seconds.

    psycopg routes every wait on the server (execute, fetch, commit) through Connection.wait, whose
    `timeout` bounds it; past it the connection is closed (its state is unknown) and the error is an
    OperationalError, which the api answers as 503 (D13) and the pool replaces.
    """

    answer_timeout: float | None = None
    returned_at: float = float("-inf")  # when the pool last took it back (Database._returned)
    fresh: bool = False  # made by the pool and not yet used: the checkout hooks look at it first

    def wait(self, gen: PQGen[RV], interval: float = 0.1, timeout: float | None = None) -> RV:
        """psycopg's wait on the server, bounded by answer_timeout; a timeout closes the connection."""
        try:
            return super().wait(gen, interval, self.answer_timeout if timeout is None else timeout)
        except pg_errors._WaitTimeout:
            self.close()
            raise psycopg.OperationalError("the database did not answer in time") from None

    @contextmanager
    def bounded(self, seconds: float) -> Iterator[BoundedConnection]:
        """Wait at most `seconds` for each answer inside the block (a readiness ping, a pool check)."""
        before = self.answer_timeout
        self.answer_timeout = seconds if before is None else min(before, seconds)
        try:
            yield self
        finally:
            self.answer_timeout = before


class Database:
    """A psycopg pool with units of work.

    Args:
        url: PostgreSQL URL.
        pool_size: most connections.
        tx_retry_max: reruns of a unit of work after a deadlock or serialization failure.
        after_commit: called with the jobs of a committed unit of work (the outbox publisher).
        clock: the project's clock (D17): the time an outbox row is written with.
        timeouts: how long to wait for the server (D13: an outage answers fast).
        subscribers: the consequences of a file's end, handed to every unit of work (app/lifecycle/ends.py).
        on_journal: called with the journal entries of a committed unit of work (the process's journal writer).
    """

    def __init__(
        self,
        url: str,
        pool_size: int = 10,
        tx_retry_max: int = 5,
        after_commit: Callable[[Sequence[Job]], None] | None = None,
        clock: Clock | None = None,
        timeouts: Timeouts | None = None,
        subscribers: Sequence[Any] | None = None,
        on_journal: Callable[[Sequence[Any]], None] | None = None,
    ):
        self.url = url
        self.on_journal = on_journal
        # Called with each new connection before its first use (the restore guard compares the database with the
        # one it last read). A hook returns False to see the connection again at its next use, and may raise to
        # refuse this one.
        self.checkout_hooks: list[Callable[[BoundedConnection], bool]] = []
        # Called before every use of a connection, new or not: cheap checks that may refuse it (the restore
        # guard's answer, which may have changed since the request began).
        self.use_checks: list[Callable[[], None]] = []
        self.subscribers = subscribers
        self.tx_retry_max = tx_retry_max
        self.after_commit = after_commit
        self.clock: Clock = clock or SystemClock()
        self.timeouts = timeouts or Timeouts()
        self.pool: ConnectionPool[BoundedConnection] = ConnectionPool(
            url,
            connection_class=BoundedConnection,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "row_factory": namedtuple_row, **self.timeouts.connect_kwargs(url)},
            configure=self._configure,
            check=self._check,
            reset=self._returned,
            timeout=self.timeouts.pool,
            # Short reconnect rounds: once the server is back a waiting request gets a connection within
            # about two seconds, however long the outage lasted (psycopg_pool's backoff doubles otherwise).
            reconnect_timeout=max(5.0, 2 * self.timeouts.connect),
            name="lethe",
            open=True,
        )

    def _configure(self, conn: BoundedConnection) -> None:
        conn.answer_timeout = self.timeouts.answer
        conn.fresh = True

    def _first_use(self, conn: BoundedConnection) -> None:
        """Before a connection is used: a new one is seen first by every checkout hook (and may be refused; it
        stays new until every hook took it); then every use check runs."""
        if conn.fresh:
            conn.fresh = not all([hook(conn) for hook in self.checkout_hooks])
        for use_check in self.use_checks:
            use_check()

    def _returned(self, conn: BoundedConnection) -> None:
        conn.returned_at = time.monotonic()

    def _check(self, conn: BoundedConnection) -> None:
        """A connection back from work less than a second ago is taken as it is (its last statement just
        answered): a round trip saved on each request of a busy process. An idler one is pinged."""
        if time.monotonic() - conn.returned_at < 1.0:
            return
        with conn.bounded(self.timeouts.check):
            conn.execute("")

    def connect(self, url: str | None = None) -> BoundedConnection:
        """A connection of its own, outside the pool (the scheduler's leader session), with the same
        timeouts, to `url` (a direct server, past any pooler) or the pool's; the caller closes it."""
        direct = url or self.url
        timeouts = dataclasses.replace(self.timeouts, pooled=False) if url else self.timeouts
        conn = BoundedConnection.connect(
            direct, autocommit=True, row_factory=namedtuple_row, **timeouts.connect_kwargs(direct)
        )
        self._configure(conn)
        return conn

    @contextmanager
    def maintenance(self) -> Iterator[None]:
        """Maintenance work (cleanup, retention, erasure, sweeps, audit) in this block: every unit of work and
        read runs in a transaction whose statements may take `database.maintenance_statement_timeout`
        (SET LOCAL, so a transaction pooler carries it too), and the client waits as long; requests keep
        `database.statement_timeout` (at a real install's size a step's statement can take longer
        than a request may)."""
        token = _MAINTENANCE.set(True)
        try:
            yield
        finally:
            _MAINTENANCE.reset(token)

    @contextmanager
    def _maintenance_timeout(self, conn: BoundedConnection) -> Iterator[None]:
        """Inside a transaction: the maintenance statement timeout, on both ends, when in maintenance()."""
        if not _MAINTENANCE.get():
            yield
            return
        before = conn.answer_timeout
        conn.answer_timeout = self.timeouts.maintenance_answer
        try:
            conn.execute(
                "SELECT set_config('statement_timeout', %s, true)", (f"{int(self.timeouts.maintenance * 1000)}ms",)
            )
            yield
        finally:
            conn.answer_timeout = before

    def close(self) -> None:
        """Close the pool and its connections."""
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
        started = time.perf_counter()
        try:
            with tracing.span(f"tx {name}"):
                return self._unit_of_work(fn, name)
        finally:
            # Synapse's sql_txn_duration by desc: which transaction is slow, by its name.
            metrics.DB_UNIT_SECONDS.labels(name).observe(time.perf_counter() - started)

    def _unit_of_work(self, fn: Callable[[UnitOfWork], T], name: str) -> T:
        attempt = 0
        while True:
            uow = None
            token = set_in_transaction(True)
            try:
                with self.pool.connection() as conn:
                    outside = set_in_transaction(False)  # before the transaction begins: a hook may read the store
                    try:
                        self._first_use(conn)
                    finally:
                        reset_in_transaction(outside)
                    with conn.transaction(), self._maintenance_timeout(conn):
                        uow = UnitOfWork(conn=conn, name=name, clock=self.clock, subscribers=self.subscribers)
                        result = fn(uow)
            except RETRYABLE as exc:
                attempt += 1
                if attempt > self.tx_retry_max:
                    log_event(
                        log,
                        "warning",
                        "db.tx_gave_up",
                        "transaction gave up",
                        tx=name,
                        attempts=attempt,
                        sqlstate=exc.sqlstate,
                    )
                    raise
                log_event(
                    log, "info", "db.tx_retry", "transaction retried", tx=name, attempt=attempt, sqlstate=exc.sqlstate
                )
                time.sleep(min(0.01 * 2**attempt, 0.5))
                continue
            finally:
                reset_in_transaction(token)
            if uow.journaled and self.on_journal is not None:
                self.on_journal(uow.journaled)
            for hook in uow.on_commit:
                hook()
            if uow.jobs and self.after_commit is not None:
                self.after_commit(uow.jobs)
            return result

    def read(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run fn on an autocommit connection: each statement sees the latest committed data, no transaction.
        In maintenance() it runs in a transaction of its own (READ COMMITTED: each statement still sees the
        latest committed data) that carries the maintenance statement timeout."""
        with self.pool.connection() as conn:
            self._first_use(conn)
            if not _MAINTENANCE.get():
                return fn(conn)
            with conn.transaction(), self._maintenance_timeout(conn):
                return fn(conn)

    def ping(self, timeout: float = 1.0) -> None:
        """Raise unless the server answers within about `timeout` seconds (readiness)."""
        with self.pool.connection(timeout=timeout) as conn, conn.bounded(timeout):
            conn.execute("SELECT 1")
