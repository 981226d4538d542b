"""The outbox on the real RabbitMQ with a real dramatiq worker (D9).

A job enqueued in a committed transaction runs; one enqueued in a rolled-back transaction never runs; a row
left behind because publishing failed is relayed and runs once.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta

import dramatiq
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from app.db.publisher import Outbox
from app.db.uow import Job
from tests.support.fakes import RecordingBroker

pytestmark = pytest.mark.broker


class Recorder:
    """What the test actor saw, with a way to wait for a given value."""

    def __init__(self):
        self.seen: list[str] = []
        self.cond = threading.Condition()

    def record(self, value: str) -> None:
        with self.cond:
            self.seen.append(value)
            self.cond.notify_all()

    def wait_for(self, value: str, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while value not in self.seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"job {value!r} did not run; saw {self.seen}")
                self.cond.wait(left)


@pytest.fixture
def rabbit(broker_url):
    """A RabbitMQ broker with a queue of this test's own, a real worker consuming it, and a recorder."""
    queue = f"test-outbox-{uuid.uuid4().hex[:10]}"
    broker = RabbitmqBroker(url=broker_url, confirm_delivery=True)
    recorder = Recorder()
    dramatiq.Actor(
        recorder.record, broker=broker, actor_name="record", queue_name=queue, priority=0, options={"max_retries": 0}
    )
    worker = dramatiq.Worker(broker, worker_threads=1, worker_timeout=100)
    worker.start()
    yield broker, queue, recorder
    worker.stop(timeout=5000)
    for name in (queue, f"{queue}.DQ", f"{queue}.XQ"):
        broker.channel.queue_delete(name)
    broker.close()


def outbox_rows(db):
    return db.read(
        lambda conn: conn.execute("SELECT id, actor_name, args, created_at FROM outbox ORDER BY id").fetchall()
    )


def test_a_job_of_a_committed_transaction_runs_and_leaves_no_row(db, rabbit):
    broker, queue, recorder = rabbit
    db.after_commit = Outbox(db, broker).publish_committed
    db.unit_of_work(lambda uow: uow.enqueue(queue, "record", "committed"), name="test.commit")
    recorder.wait_for("committed")
    assert outbox_rows(db) == []


def test_a_job_of_a_rolled_back_transaction_never_runs(db, rabbit):
    broker, queue, recorder = rabbit
    db.after_commit = Outbox(db, broker).publish_committed

    def work(uow):
        uow.enqueue(queue, "record", "rolled-back")
        raise RuntimeError("the change failed")

    with pytest.raises(RuntimeError):
        db.unit_of_work(work, name="test.rollback")
    assert outbox_rows(db) == []
    # One worker thread consumes in order: once a later job ran, an earlier one would have run too.
    db.unit_of_work(lambda uow: uow.enqueue(queue, "record", "sentinel"), name="test.commit")
    recorder.wait_for("sentinel")
    assert recorder.seen == ["sentinel"]


class BrokenBroker:
    """A broker whose publish fails, as when RabbitMQ is down between commit and publish."""

    def enqueue(self, message, *, delay=None):
        raise ConnectionError("broker down")


def test_a_row_left_behind_is_relayed_and_runs_once(db, rabbit):
    broker, queue, recorder = rabbit
    # Given a commit whose publish failed
    db.after_commit = Outbox(db, BrokenBroker()).publish_committed
    db.unit_of_work(lambda uow: uow.enqueue(queue, "record", "left-behind"), name="test.commit")
    rows = outbox_rows(db)
    assert [(row.actor_name, row.args) for row in rows] == [("record", ["left-behind"])]
    relay = Outbox(db, broker)
    # When the relay runs: a row younger than the relay age is still its committer's business
    assert relay.relay(older_than=timedelta(hours=1)) == 0
    assert relay.relay(older_than=timedelta(0)) == 1
    assert relay.relay(older_than=timedelta(0)) == 0
    # Then the job runs once and the row is gone
    db.after_commit = relay.publish_committed
    db.unit_of_work(lambda uow: uow.enqueue(queue, "record", "sentinel"), name="test.commit")
    recorder.wait_for("sentinel")
    assert recorder.seen.count("left-behind") == 1
    assert outbox_rows(db) == []
    assert relay.depth() == 0


def test_a_relay_skips_rows_another_relay_holds(db, rabbit):
    broker, queue, recorder = rabbit
    db.after_commit = Outbox(db, BrokenBroker()).publish_committed
    for value in ("one", "two"):
        db.unit_of_work(lambda uow, v=value: uow.enqueue(queue, "record", v), name="test.commit")
    relay = Outbox(db, broker)
    # Another relay holds the rows locked (FOR UPDATE SKIP LOCKED): this one publishes nothing.
    with db.pool.connection() as conn, conn.transaction():
        conn.execute("SELECT id FROM outbox FOR UPDATE")
        assert relay.relay(older_than=timedelta(0)) == 0
    assert relay.relay(older_than=timedelta(0)) == 2
    recorder.wait_for("two")
    assert sorted(recorder.seen) == ["one", "two"]


def test_publishing_inside_a_transaction_is_refused(db, rabbit):
    broker, queue, recorder = rabbit
    outbox = Outbox(db, broker)
    with pytest.raises(RuntimeError):
        db.unit_of_work(lambda uow: outbox._publish(Job(1, queue, "record", ("x",))), name="test")


def test_the_relay_ages_rows_by_the_projects_clock(db, clock):
    """D17: an outbox row is written with the project's clock and the relay ages it by the same clock, not by
    PostgreSQL's now(), so a test moves the fake clock instead of waiting."""
    from tests.support.fakes import RecordingBroker

    db.clock = clock
    db.after_commit = Outbox(db, BrokenBroker()).publish_committed
    db.unit_of_work(lambda uow: uow.enqueue("maintenance", "record", "left-behind"), name="test.commit")
    assert [row.created_at for row in outbox_rows(db)] == [clock.now()]
    broker = RecordingBroker()
    relay = Outbox(db, broker)
    assert relay.relay(older_than=timedelta(seconds=10)) == 0
    clock.advance(timedelta(seconds=10))
    assert relay.relay(older_than=timedelta(seconds=10)) == 1
    assert [message.args for message in broker.messages] == [("left-behind",)]


class HeldBroker:
    """A broker whose publish waits until released, as a RabbitMQ that stopped answering (a partition)."""

    def __init__(self):
        self.release = threading.Event()
        self.entered = threading.Event()
        self.messages = []

    def enqueue(self, message, *, delay=None):
        self.entered.set()
        assert self.release.wait(30)
        self.messages.append(message)
        return message


def test_in_the_background_a_commit_never_waits_for_the_broker(db):
    broker = HeldBroker()
    outbox = Outbox(db, broker, background=True)
    db.after_commit = outbox.publish_committed
    try:
        started = time.monotonic()
        for value in ("one", "two", "three"):
            db.unit_of_work(lambda uow, v=value: uow.enqueue("maintenance", "record", v), name="test.commit")
        assert time.monotonic() - started < 1  # the commits returned while the broker holds every publish
        assert broker.entered.wait(5)
        assert len(outbox_rows(db)) == 3  # not published yet: the rows stay, the relay's safety net
        broker.release.set()
        assert outbox.flush(10)
        assert sorted(message.args[0] for message in broker.messages) == ["one", "three", "two"]
        assert outbox_rows(db) == []
    finally:
        broker.release.set()
        outbox.close()


def test_a_full_publisher_queue_leaves_the_jobs_to_the_relay(db):
    broker = HeldBroker()
    outbox = Outbox(db, broker, background=True, capacity=1)
    db.after_commit = outbox.publish_committed
    try:
        db.unit_of_work(lambda uow: uow.enqueue("maintenance", "record", "taken"), name="test.commit")
        assert broker.entered.wait(5)  # the thread holds "taken"; the queue has room for one more
        for value in ("queued", "overflow"):
            db.unit_of_work(lambda uow, v=value: uow.enqueue("maintenance", "record", v), name="test.commit")
        broker.release.set()
        assert outbox.flush(10)
        assert sorted(message.args[0] for message in broker.messages) == ["queued", "taken"]
        assert [row.args for row in outbox_rows(db)] == [["overflow"]]  # the relay publishes it
    finally:
        broker.release.set()
        outbox.close()


def test_the_background_publisher_publishes_to_rabbitmq_and_deletes_the_rows(db, rabbit):
    broker, queue, recorder = rabbit
    outbox = Outbox(db, broker, background=True)
    db.after_commit = outbox.publish_committed
    try:
        for value in range(20):
            db.unit_of_work(lambda uow, v=value: uow.enqueue(queue, "record", f"job-{v}"), name="test.commit")
        recorder.wait_for("job-19")
        assert outbox.flush(10)
        assert outbox_rows(db) == []
    finally:
        outbox.close()


def test_the_publisher_gathers_the_purges_of_commits_within_its_linger_into_one_message(db):
    """outbox.publish_linger (issue 24): under load the purge jobs of many deletes travel as one message and
    their rows go in one DELETE; each commit still returned at once."""
    broker = RecordingBroker()
    outbox = Outbox(db, broker, background=True, linger_s=1.0)
    db.after_commit = outbox.publish_committed
    try:
        for n in range(5):
            db.unit_of_work(
                lambda uow, n=n: uow.enqueue("maintenance", "purge_objects", [f"file-{n}"]), name="test.commit"
            )
        assert outbox.flush(10)
        assert [sorted(message.args[0]) for message in broker.messages] == [[f"file-{n}" for n in range(5)]]
        assert outbox_rows(db) == []
    finally:
        outbox.close()


@pytest.mark.one_store
def test_the_scheduler_relay_meets_a_database_gone_after_its_leader_check_with_a_warning(lethe, caplog):
    """A database that goes away between the leader's ping and the relay's claim: one warning line, no stack
    trace in the scheduler's output (APScheduler prints one for a job that raises), and the next tick relays."""
    import logging

    import psycopg

    from scheduler.jobs import relay_outbox

    class GoneMidway:
        def is_leader(self):
            return True

    real = lethe.rt.outbox.relay

    def relay(**kwargs):
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    lethe.rt.outbox.relay = relay
    with caplog.at_level(logging.WARNING, logger="lethe.scheduler"):
        assert relay_outbox(lethe.rt, GoneMidway()) == 0
    assert any(getattr(record, "event", None) == "scheduler.database_unavailable" for record in caplog.records)
    lethe.rt.outbox.relay = real
    assert relay_outbox(lethe.rt, GoneMidway()) == 0  # back: nothing left behind, no error
