"""Deletion webhooks (issue 28) against a real HTTP receiver on loopback, each delivery verified with the
`standardwebhooks` library (a verifier no one here wrote): the signature, a stable id across a 500 then a 200,
the retry schedule on the project's fake clock, 410 disabling until the configuration changes, other 4xx final,
a receiver that never answers (bounded by webhooks.timeout), rotation with two secrets, nothing sent for a
rolled-back purge, the cleanup's step n, the operator commands, and no canary in any body."""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from prometheus_client import REGISTRY
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from app.db.publisher import Outbox
from app.lifecycle import webhooks as webhooks_module
from app.lifecycle.cleanup import run_cleanup
from app.lifecycle.erasure import erase_round
from app.lifecycle.purge import purge_files
from tests.support import zygote
from tests.support.helpers import rows
from tests.support.lethe import ALEX, OWNER, sha256
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.one_store  # the store plays no part here
CANARY = "Canary-Wh28-lawsuit"


def secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(32)).decode()


def endpoint(
    receiver: Receiver, secrets, events=("file.purged", "erasure.completed", "hold.placed", "hold.released"), name="app"
) -> str:
    return json.dumps([{"name": name, "url": receiver.url, "secret": secrets, "events": list(events)}])


@pytest.fixture
def receiver():
    made = []

    def make(*answers, default=204, trickle_s=0.3):
        made.append(Receiver(*answers, default=default, trickle_s=trickle_s))
        return made[-1]

    yield make
    for each in made:
        each.close()


def deleted_and_purged(lethe, name=f"{CANARY}.pdf") -> str:
    file_id = lethe.upload(ALEX, name=name)
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    lethe.run_jobs("purge_objects")
    return file_id


def deliveries(lethe):
    return rows(lethe, "webhook_deliveries")


def test_file_purged_is_signed_standard_webhooks_and_carries_the_receipt(make_lethe, receiver):
    hooks, key = receiver(), secret()
    lethe = make_lethe(**{"webhooks.endpoints": endpoint(hooks, key)})
    file_id = deleted_and_purged(lethe)
    assert hooks.received == []  # nothing before the delivery job runs: the purge never waits for a receiver
    lethe.run_jobs()
    (got,) = hooks.received
    message = Webhook(key).verify(got.body, got.headers)
    assert message["type"] == "file.purged" and message["timestamp"].endswith("Z")
    receipt = lethe.call("GET", f"/api/v1/receipts/{file_id}", OWNER).json
    assert message["data"]["file_id"] == file_id and message["data"]["deleted_via"] == "file"
    assert message["data"]["keys_deleted"] == receipt["keys_deleted"]
    assert set(message["data"]) == {"file_id", "deleted_via", "marked_at", "purged_at", "keys_deleted"}
    assert got.headers["webhook-id"].startswith("msg_") and got.headers["content-type"] == "application/json"
    assert abs(int(got.headers["webhook-timestamp"]) - time.time()) < 60  # the wall clock: receivers check it
    with pytest.raises(WebhookVerificationError):
        Webhook(secret()).verify(got.body, got.headers)  # another secret does not verify it
    (row,) = deliveries(lethe)
    assert (row.state, row.attempts, row.last_status) == ("delivered", 1, 204)
    assert REGISTRY.get_sample_value("lethe_webhook_deliveries_total", {"endpoint": "app", "outcome": "delivered"})


def test_the_id_and_bytes_are_stable_across_a_500_then_a_200(make_lethe, receiver):
    hooks, key = receiver(500, 200), secret()
    lethe = make_lethe(**{"webhooks.endpoints": endpoint(hooks, key)})
    deleted_and_purged(lethe)
    lethe.run_jobs()
    assert len(hooks.received) == 1 and len(lethe.retried) == 1  # the job comes back after the first delay
    lethe.clock.advance(5)
    lethe.run_retried()
    first, second = hooks.received
    assert first.headers["webhook-id"] == second.headers["webhook-id"] and first.body == second.body
    Webhook(key).verify(second.body, second.headers)
    assert lethe.retried == []
    (row,) = deliveries(lethe)
    assert (row.state, row.attempts, row.last_status) == ("delivered", 2, 200)


def test_the_retry_schedule_on_the_fake_clock_then_failed(make_lethe, receiver):
    hooks = receiver(default=503)
    lethe = make_lethe(**{"webhooks.endpoints": endpoint(hooks, secret()), "webhooks.retry_schedule": "5s,5m,30m"})
    deleted_and_purged(lethe)
    lethe.run_jobs()
    for attempt, delay in enumerate((timedelta(seconds=5), timedelta(minutes=5), timedelta(minutes=30)), start=1):
        (row,) = deliveries(lethe)
        assert (row.state, row.attempts, row.last_status) == ("pending", attempt, 503)
        assert row.next_attempt_at - lethe.clock.now() == delay
        lethe.clock.advance(delay - timedelta(seconds=1))
        lethe.run_retried()
        assert len(hooks.received) == attempt  # not before it is due
        lethe.clock.advance(1)
        lethe.run_retried()
        assert len(hooks.received) == attempt + 1
    (row,) = deliveries(lethe)
    assert (row.state, row.attempts, row.next_attempt_at) == ("failed", 4, None)
    assert lethe.retried == []  # the schedule is spent: the job ends
    assert len({got.headers["webhook-id"] for got in hooks.received}) == 1


def test_a_410_disables_the_endpoint_until_its_configuration_changes(make_lethe, receiver):
    hooks = receiver(410)
    settings = {"webhooks.endpoints": endpoint(hooks, secret())}
    lethe = make_lethe(**settings)
    deleted_and_purged(lethe)
    lethe.run_jobs()
    deleted_and_purged(lethe)
    lethe.run_jobs()
    assert len(hooks.received) == 1  # the second message is not sent to a gone endpoint
    assert [row.state for row in deliveries(lethe)] == ["disabled", "disabled"]
    assert (
        REGISTRY.get_sample_value("lethe_webhook_deliveries_total", {"endpoint": "app", "outcome": "disabled"}) or 0
    ) >= 2
    changed = make_lethe(**{"webhooks.endpoints": endpoint(hooks, secret())})  # a new secret: a new configuration
    deleted_and_purged(changed)
    changed.run_jobs()
    assert len(hooks.received) == 2 and hooks.received[-1].status == 204


def test_another_4xx_is_final_for_that_message_only(make_lethe, receiver):
    hooks = receiver(400)
    lethe = make_lethe(**{"webhooks.endpoints": endpoint(hooks, secret())})
    deleted_and_purged(lethe)
    lethe.run_jobs()
    deleted_and_purged(lethe)
    lethe.run_jobs()
    assert [got.status for got in hooks.received] == [400, 204] and lethe.retried == []
    assert sorted(row.state for row in deliveries(lethe)) == ["delivered", "failed"]


def test_a_receiver_that_never_answers_is_bounded_by_the_timeout(make_lethe, receiver):
    hooks = receiver("hang")
    lethe = make_lethe(**{"webhooks.endpoints": endpoint(hooks, secret()), "webhooks.timeout": "1s"})
    deleted_and_purged(lethe)
    started = time.monotonic()
    lethe.run_jobs()
    assert time.monotonic() - started < 5  # one second of silence, then the attempt ends
    (row,) = deliveries(lethe)
    assert (row.state, row.attempts, row.last_error) == ("pending", 1, "timeout")
    lethe.clock.advance(5)
    lethe.run_retried()
    assert len(hooks.received) == 2 and deliveries(lethe)[0].state == "delivered"


def test_a_trickling_receivers_attempt_ends_within_the_timeout_end_to_end(make_lethe, receiver):
    # A receiver that sends its status line a byte at a time never lets a read time out; the attempt still
    # ends at webhooks.timeout (2s here), plus at most a second.
    hooks = receiver("trickle", default="trickle")
    lethe = make_lethe(**{"webhooks.endpoints": endpoint(hooks, secret()), "webhooks.timeout": "2s"})
    deleted_and_purged(lethe)
    started = time.monotonic()
    lethe.run_jobs("deliver_webhooks")
    assert time.monotonic() - started < 2 + 1
    (row,) = deliveries(lethe)
    assert (row.state, row.attempts, row.last_error, row.leased_until) == ("pending", 1, "timeout", None)


def test_one_attempt_of_a_delivery_at_a_time_whoever_sends_it(make_lethe, receiver):
    from app.lifecycle import webhooks

    hooks = receiver(default="trickle")
    lethe = make_lethe(
        **{"webhooks.endpoints": endpoint(hooks, secret()), "webhooks.timeout": "2s", "file.gc_interval": "2s"}
    )
    deleted_and_purged(lethe)
    (job,) = lethe.broker.take("deliver_webhooks")
    ids = [uuid.UUID(i) for i in job.args[0]]
    first = threading.Thread(target=webhooks.deliver, args=(lethe.rt, ids))
    first.start()
    deadline = time.monotonic() + 10
    while not hooks.received and time.monotonic() < deadline:
        time.sleep(0.01)  # a condition polled: the first attempt's connection arrived
    # While it trickles: the delivery is overdue for the cleanup's catch-up, and its job comes again
    lethe.clock.advance(3)
    assert webhooks.catch_up(lethe.rt, lethe.clock.now(), timedelta(seconds=2), 100, dry_run=False) == 0
    assert lethe.broker.take("deliver_webhooks") == []
    assert webhooks.deliver(lethe.rt, ids).outcomes == {}  # leased: not attempted twice
    first.join(10)
    assert len(hooks.received) == 1 and max(hooks.most.values()) == 1
    # Once the attempt ended (its lease with it), the catch-up sends it again
    lethe.clock.advance(10)
    assert webhooks.catch_up(lethe.rt, lethe.clock.now(), timedelta(seconds=2), 100, dry_run=False) == 1


def test_a_healthy_endpoint_is_served_on_time_beside_a_trickling_one(make_lethe, receiver):
    from workers.actors import ACTORS

    slow, fast = receiver(default="trickle"), receiver()
    lethe = make_lethe(
        **{
            "webhooks.timeout": "2s",
            "webhooks.endpoints": json.dumps(
                [
                    {"name": "slow", "url": slow.url, "secret": secret(), "events": ["file.purged"]},
                    {"name": "fast", "url": fast.url, "secret": secret(), "events": ["file.purged"]},
                ]
            ),
        }
    )
    deleted_and_purged(lethe)
    jobs = lethe.broker.take("deliver_webhooks")
    assert len(jobs) == 2  # one job per endpoint: neither waits behind the other
    started = time.monotonic()
    threads = [threading.Thread(target=lambda job=job: run_job(lethe, ACTORS, job)) for job in jobs]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while not fast.received and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fast.received and fast.arrived[0] - started < 1.0  # not behind the slow one's 2 seconds
    for thread in threads:
        thread.join(10)
    assert {row.endpoint: row.state for row in deliveries(lethe)} == {"fast": "delivered", "slow": "pending"}


def run_job(lethe, actors, job):
    import dramatiq

    try:
        actors[job.actor_name].fn(lethe.rt, *job.args)
    except dramatiq.Retry:
        pass


def test_webhook_attempts_never_take_the_threads_of_purges(make_lethe, receiver):
    # The worker's own threads (here one) keep purging while every webhook thread (here one) waits on a receiver
    import dramatiq
    from dramatiq import Worker
    from dramatiq.brokers.stub import StubBroker

    from app.platform.jobs.broker import QUEUES
    from workers.actors import register
    from workers.pools import add_webhook_pool, split_queues

    hooks = receiver(default="trickle")
    lethe = make_lethe(**{"webhooks.endpoints": endpoint(hooks, secret()), "webhooks.timeout": "3s"})
    deleted_and_purged(lethe)  # its file.purged delivery trickles for 3 seconds
    broker = StubBroker()
    for queue in QUEUES:
        broker.declare_queue(queue)
    actors = register(broker, lethe.rt)
    queues, pool = split_queues(QUEUES)
    assert pool and queues == {"maintenance", "scan", "variants", "stores"}
    add_webhook_pool(broker, 1)
    worker = Worker(broker, queues=queues, worker_threads=1)
    worker.start()
    try:
        for job in lethe.broker.take("deliver_webhooks"):
            actors["deliver_webhooks"].send(*job.args)
        deadline = time.monotonic() + 10
        while not hooks.received and time.monotonic() < deadline:
            time.sleep(0.01)
        assert hooks.received  # the webhook thread is in its attempt now
        other = lethe.upload(ALEX)
        assert lethe.call("DELETE", f"/api/v1/files/{other}", ALEX).status_code == 204
        for job in lethe.broker.take("purge_objects"):
            actors["purge_objects"].send(*job.args)
        started = time.monotonic()
        broker.join("maintenance", timeout=10_000)
        assert lethe.row(other) is None and time.monotonic() - started < 2  # not behind the receiver
        assert hooks.open and max(hooks.open.values()) == 1  # still trickling meanwhile
    finally:
        worker.stop(timeout=5000)
        dramatiq.set_broker(dramatiq.get_broker())


def test_the_webhook_pool_stops_beside_the_main_worker_and_is_down_when_it_is():
    # Each Worker's stop waits out its threads' polls; the pool's runs on a thread of its own meanwhile (not
    # before the main one's, which doubled a graceful stop), and the main Worker's stop returns only after it.
    import dramatiq
    from dramatiq import Worker
    from dramatiq.brokers.stub import StubBroker

    from workers.pools import WebhookPool

    broker = StubBroker()
    for queue in ("maintenance", "webhooks"):
        broker.declare_queue(queue)
    pool_alive_at_flush: list[bool] = []

    class Flush(dramatiq.Middleware):  # where the worker's FlushAtShutdown sits: added before the pool
        def after_worker_shutdown(self, broker, worker):
            if worker is not pool and stopped_on:
                assert pool is not None
                pool_alive_at_flush.append(any(t.is_alive() for t in [*pool.workers, *pool.consumers.values()]))

    broker.add_middleware(Flush())
    middleware = WebhookPool(2)
    broker.add_middleware(middleware)
    worker = Worker(broker, queues={"maintenance"}, worker_threads=1, worker_timeout=100)
    worker.start()
    pool = middleware.pool
    assert pool is not None and pool.worker_timeout == 100 and pool.consumer_whitelist == {"webhooks"}
    stopped_on: list[str] = []
    stop = pool.stop

    def recorded(timeout: int = 600000) -> None:
        stopped_on.append(threading.current_thread().name)
        stop(timeout)

    pool.stop = recorded  # type: ignore[method-assign]
    try:
        worker.stop(timeout=5000)
    finally:
        dramatiq.set_broker(dramatiq.get_broker())
    assert stopped_on == ["webhook-pool-stop"]
    assert pool_alive_at_flush == [False]  # the flush came after the pool was down
    assert not any(thread.is_alive() for thread in [*pool.workers, *pool.consumers.values()])
    assert middleware.pool is None and middleware.stopping is None


def test_a_rotation_signs_with_both_secrets(make_lethe, receiver):
    hooks, old, new = receiver(), secret(), secret()
    lethe = make_lethe(**{"webhooks.endpoints": endpoint(hooks, [new, old])})
    deleted_and_purged(lethe)
    lethe.run_jobs()
    (got,) = hooks.received
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    for key in (old, new):
        Webhook(key).verify(got.body, got.headers)  # a receiver on either secret accepts it


def test_a_rolled_back_purge_sends_nothing(make_lethe, receiver, monkeypatch):
    hooks = receiver()
    lethe = make_lethe(**{"webhooks.endpoints": endpoint(hooks, secret())})
    file_id = lethe.upload(ALEX)
    lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX)
    lethe.broker.take()
    original = webhooks_module.record_file_purged

    def then_fail(uow, cfg, file_ids, now):
        original(uow, cfg, file_ids, now)
        raise psycopg.errors.AdminShutdown("the database went away before the commit")

    monkeypatch.setattr(webhooks_module, "record_file_purged", then_fail)
    with pytest.raises(psycopg.Error):
        purge_files(lethe.rt, [file_id])
    assert deliveries(lethe) == [] and lethe.broker.take() == [] and lethe.row(file_id) is not None
    monkeypatch.setattr(webhooks_module, "record_file_purged", original)
    purge_files(lethe.rt, [file_id])
    lethe.run_jobs()
    assert len(hooks.received) == 1 and len(deliveries(lethe)) == 1


def test_endpoints_take_only_their_events_and_hold_and_erasure_events_name_no_one(make_lethe, receiver):
    purged_only, everything = receiver(), receiver()
    keys = secret(), secret()
    lethe = make_lethe(
        **{
            "webhooks.endpoints": json.dumps(
                [
                    {"name": "cdn", "url": purged_only.url, "secret": keys[0], "events": ["file.purged"]},
                    {
                        "name": "audit",
                        "url": everything.url,
                        "secret": keys[1],
                        "events": ["file.purged", "erasure.completed", "hold.placed", "hold.released"],
                    },
                ]
            )
        }
    )
    data = f"bytes of {CANARY}".encode()
    file_id = lethe.upload(ALEX, data, name=f"{CANARY}.pdf")
    secrets = {CANARY, lethe.row(file_id).object_key, sha256(data), str(ALEX.id), "CASE-WH28-7"}
    hold = lethe.call("POST", "/api/v1/holds", OWNER, json={"subject_id": str(ALEX.id), "case_ref": "CASE-WH28-7"}).json
    lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX)
    lethe.run_jobs()
    assert lethe.call("DELETE", f"/api/v1/holds/{hold['id']}", OWNER).status_code == 204
    lethe.run_jobs()
    erasure = lethe.call("POST", "/api/v1/erasures", OWNER, json={"subject_id": str(ALEX.id)}).json
    lethe.run_jobs()
    assert (
        erase_round(lethe.rt, uuid.UUID(erasure["id"])) == "complete"
        or lethe.call("GET", f"/api/v1/erasures/{erasure['id']}", OWNER).json["state"] == "complete"
    )
    lethe.run_jobs()
    types = [Webhook(keys[1]).verify(got.body, got.headers)["type"] for got in everything.received]
    assert types == ["hold.placed", "hold.released", "file.purged", "erasure.completed"]
    assert [Webhook(keys[0]).verify(got.body, got.headers)["type"] for got in purged_only.received] == ["file.purged"]
    by_type = {json.loads(got.body)["type"]: json.loads(got.body)["data"] for got in everything.received}
    assert by_type["hold.placed"]["hold_id"] == hold["id"] and by_type["hold.placed"]["target"] == "subject"
    assert by_type["hold.released"]["files_freed"] == 1
    assert by_type["erasure.completed"]["erasure_id"] == erasure["id"]
    for got in everything.received + purged_only.received:
        text = got.body.decode() + json.dumps(got.headers)
        for value in secrets:
            assert value not in text  # D15: never a name, key, digest, uploader, subject or case reference


def test_the_cleanup_sends_a_lost_delivery_again_and_prunes_old_rows(make_lethe, receiver):
    hooks = receiver()
    lethe = make_lethe(**{"webhooks.endpoints": endpoint(hooks, secret()), "webhooks.delivery_ttl": "7d"})
    deleted_and_purged(lethe)
    lethe.broker.take("deliver_webhooks")  # the delivery job is lost
    lethe.clock.advance(lethe.cfg.file.gc_interval)
    assert run_cleanup(lethe.rt).step("n").acted == 0  # not overdue yet: its job may still be on its way
    lethe.clock.advance(1)
    report = run_cleanup(lethe.rt)
    assert report.step("n").acted == 1
    assert (REGISTRY.get_sample_value("lethe_webhook_oldest_undelivered_seconds") or 0) > 0
    lethe.run_jobs()
    assert len(hooks.received) == 1 and deliveries(lethe)[0].state == "delivered"
    lethe.clock.advance(timedelta(days=7))
    assert run_cleanup(lethe.rt).step("n").acted == 1 and deliveries(lethe) == []
    assert (REGISTRY.get_sample_value("lethe_webhook_oldest_undelivered_seconds") or 0) == 0


def test_lethe_webhooks_list_and_redeliver(make_lethe, receiver, database_url, tmp_path):
    hooks = receiver(400)
    lethe = make_lethe(**{"webhooks.endpoints": endpoint(hooks, secret())})
    deleted_and_purged(lethe)
    lethe.run_jobs()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_FILE_FS_ROOT": str(tmp_path / "cli-objects"),
    }

    def cli(*args):
        return zygote.run(
            [sys.executable, "-m", "app.entry", "webhooks", *args], capture_output=True, text=True, env=env, timeout=60
        )

    listed = json.loads(cli("list", "--failed", "--json").stdout)["deliveries"]
    assert [(d["state"], d["last_status"], d["event_type"]) for d in listed] == [("failed", 400, "file.purged")]
    assert "data" not in listed[0] and CANARY not in cli("list").stdout
    lethe.clock.set(datetime.now(UTC) + timedelta(minutes=1))  # past the command's own clock
    # Without the endpoint's configuration the command only makes it pending again: its job waits in the
    # outbox for the relay (the scheduler's), which sends it.
    again = cli("redeliver", "msg_" + listed[0]["id"].replace("-", ""), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["state"] == "pending"
    assert Outbox(lethe.rt.db, lethe.broker).relay(older_than=timedelta(0)) == 1
    lethe.run_jobs()
    assert [got.status for got in hooks.received] == [400, 204]
    # With it (the operator's usual environment) and no broker, it sends the message itself, at once
    env["LETHE_WEBHOOKS_ENDPOINTS"] = endpoint(hooks, secret())
    started = time.monotonic()
    now = cli("redeliver", listed[0]["id"])
    assert now.returncode == 0 and "sent again" in now.stdout and "delivered" in now.stdout, now.stdout + now.stderr
    assert time.monotonic() - started < 5 and len(hooks.received) == 3
    assert hooks.received[0].headers["webhook-id"] == hooks.received[1].headers["webhook-id"]
    assert cli("redeliver", str(uuid.uuid4())).returncode == 1
