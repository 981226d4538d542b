"""RabbitMQ restarted in the middle of a 2,000-file purge, on quorum queues (issue 23): the worker, the scheduler
and the relay come back on their own, nothing is lost, every file is gone afterwards. The drill restarts a
RabbitMQ node of its own (rabbitmqctl stop_app / start_app): the machine's shared RabbitMQ, which every other
test and every other run on the machine uses, is never stopped."""

from __future__ import annotations

import pytest

from tests.faults.conftest import Stage
from tests.support.database import truncate_all
from tests.support.rabbitmq import RabbitNode
from tests.support.services import start_or_missing

pytestmark = pytest.mark.faults


def queue_types(node: RabbitNode) -> dict[str, str]:
    rows = [line.split() for line in node.ctl("list_queues", "name", "type", "-q").splitlines()]
    return {row[0]: row[1] for row in rows if len(row) == 2 and row[0] != "name"}


def test_a_rabbitmq_restart_mid_purge_on_quorum_queues_loses_nothing(tmp_path, database_url):
    node = start_or_missing(RabbitNode(), "rabbitmq-server (a RabbitMQ node of the drill's own)")
    truncate_all(database_url)
    stage = Stage(tmp_path, database_url, node.url, LETHE_BROKER_QUEUE_TYPE="quorum", LETHE_FILE_GC_BATCH_SIZE="200")
    try:
        stage.start("scheduler")
        stage.start("worker")
        ids = stage.seed(2000)
        stage.mark_deleted(ids)  # the catch-up purges them in batches of 200, triggered through RabbitMQ
        stage.until(lambda: 0 < stage.rows_left(ids) < len(ids), 90, step=0.05)
        # When RabbitMQ stops in the middle of it and starts again
        try:
            node.ctl("stop_app")
            assert 0 < stage.rows_left(ids)
        finally:
            node.ctl("start_app")
            node.wait_for_amqp()
        # Then the roles reconnect by themselves and every file is gone: no row, no object
        stage.wait_gone(ids, timeout=120)
        # And the queues work again: files deleted after the restart are purged by a cleanup the scheduler
        # sends through the restarted quorum queues to the worker
        later = stage.seed(200)
        stage.mark_deleted(later)
        stage.wait_gone(later, timeout=120)
        assert {name: kind for name, kind in queue_types(node).items() if not name.startswith("dramatiq")} and set(
            queue_types(node).values()
        ) == {"quorum"}
        stage.assert_alive()
    finally:
        stage.close()
        node.stop()
