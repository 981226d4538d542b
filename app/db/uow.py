"""The unit of work (D3, D10): one transaction, the jobs that commit with it (D9), and savepoints."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg

from app.db import outbox as outbox_sql
from app.platform import tracing
from app.platform.clock import Clock, SystemClock


@dataclass(frozen=True)
class Job:
    """A job written to the outbox inside a unit of work (D9): ids only in its args."""

    outbox_id: int
    queue_name: str
    actor_name: str
    args: tuple[Any, ...]
    traceparent: str | None = None  # the trace the job continues (tracing on)


@dataclass
class UnitOfWork:
    """What a function run by Database.unit_of_work gets: the connection of its one transaction, and
    enqueue() for jobs that must commit with it."""

    conn: psycopg.Connection[Any]
    name: str
    clock: Clock = field(default_factory=SystemClock)
    jobs: list[Job] = field(default_factory=list)
    on_commit: list[Callable[[], None]] = field(default_factory=list)
    # Journal entries this transaction committed (app/lifecycle/journal.py), handed to the process's journal
    # writer after the commit, as jobs are to the outbox's publisher.
    journaled: list[Any] = field(default_factory=list)
    # The consequences of a file's end (app/lifecycle/ends.py), wired by the composition root; None: not wired.
    subscribers: Sequence[Any] | None = None

    @contextmanager
    def savepoint(self) -> Iterator[UnitOfWork]:
        """A savepoint: on an error, its statements are rolled back, and so are the jobs and commit hooks
        it registered (their outbox rows went with the rollback). The error propagates."""
        jobs, hooks, journaled = len(self.jobs), len(self.on_commit), len(self.journaled)
        try:
            with self.conn.transaction():
                yield self
        except BaseException:
            del self.jobs[jobs:]
            del self.on_commit[hooks:]
            del self.journaled[journaled:]
            raise

    def after_commit(self, fn: Callable[[], None]) -> None:
        """Run fn once this unit of work committed (a counter must not count a rolled-back change); a savepoint
        rolled back forgets it."""
        self.on_commit.append(fn)

    def execute(self, query: str, params: Any = None) -> psycopg.Cursor:
        """Run a statement in the unit of work's transaction."""
        return self.conn.execute(query, params)

    def enqueued(
        self, outbox_id: int, queue_name: str, actor_name: str, *args: Any, traceparent: str | None = None
    ) -> Job:
        """Take up a job whose outbox row a statement of this transaction wrote itself (the mark of
        mark_deleted writes its purge job in the same statement: one round trip)."""
        job = Job(
            outbox_id=outbox_id,
            queue_name=queue_name,
            actor_name=actor_name,
            args=tuple(args),
            traceparent=traceparent or tracing.traceparent(),
        )
        self.jobs.append(job)
        return job

    def enqueue(self, queue_name: str, actor_name: str, *args: Any) -> Job:
        """Write a job to the outbox in this transaction; it is published after the commit (D9)."""
        # created_at from the project's clock, which the relay ages by (D17)
        parent = tracing.traceparent()
        outbox_id = outbox_sql.insert_job(self.conn, queue_name, actor_name, args, self.clock.now(), parent)
        return self.enqueued(outbox_id, queue_name, actor_name, *args, traceparent=parent)
