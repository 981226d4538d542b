"""RabbitMQ restarted in the middle of a 2,000-file purge, on quorum queues (issue 23): the worker, the scheduler
and the relay come back on their own, nothing is lost, every file is gone afterwards. The drill restarts the
RabbitMQ application of this machine (rabbitmqctl stop_app / start_app): every run on the machine shares it,
so it is short, bounded, and always started again."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.conftest import service_missing, truncate_all
from tests.faults.conftest import Stage
from tests.integration.test_quorum_queues import queue_types

pytestmark = pytest.mark.faults


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=120)


def wait_for_amqp(host: str, port: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("RabbitMQ did not come back")


def test_a_rabbitmq_restart_mid_purge_on_quorum_queues_loses_nothing(tmp_path, database_url, broker_url):
    parts = urlsplit(broker_url)
    if shutil.which("rabbitmqctl") is None or parts.hostname not in ("127.0.0.1", "localhost"):
        service_missing("rabbitmqctl (a local RabbitMQ)", "the drill restarts the local RabbitMQ")
    vhost = f"lethe_drill_{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", vhost)
    rabbitmqctl("set_permissions", "-p", vhost, parts.username or "guest", ".*", ".*", ".*")
    truncate_all(database_url)
    stage = Stage(tmp_path, database_url, urlunsplit(parts._replace(path="/" + vhost)),
                  LETHE_BROKER_QUEUE_TYPE="quorum", LETHE_FILE_GC_BATCH_SIZE="200")
    try:
        stage.start("scheduler")
        stage.start("worker")
        ids = stage.seed(2000)
        stage.mark_deleted(ids)  # the catch-up purges them in batches of 200, triggered through RabbitMQ
        stage.until(lambda: 0 < stage.left(ids)[0] < len(ids), 90, step=0.05)
        # When RabbitMQ stops in the middle of it and starts again
        try:
            rabbitmqctl("stop_app")
            assert 0 < stage.left(ids)[0]
        finally:
            rabbitmqctl("start_app")
            wait_for_amqp(parts.hostname or "127.0.0.1", parts.port or 5672)
        # Then the roles reconnect by themselves and every file is gone: no row, no object
        stage.wait_gone(ids, timeout=120)
        # And the queues work again: files deleted after the restart are purged by a cleanup the scheduler
        # sends through the restarted quorum queues to the worker
        later = stage.seed(200)
        stage.mark_deleted(later)
        stage.wait_gone(later, timeout=120)
        assert {name: kind for name, kind in queue_types(vhost).items() if not name.startswith("dramatiq")} and \
            set(queue_types(vhost).values()) == {"quorum"}
        stage.assert_alive()
    finally:
        stage.close()
        subprocess.run(["rabbitmqctl", "delete_vhost", vhost], capture_output=True, timeout=60)
