"""broker.queue_type (issue 23): with `quorum` every queue Lethe declares (its queues, their delay and
dead-letter queues) is a quorum queue on the real RabbitMQ, a purge runs through them, and a worker meeting a
queue of the other type exits 2 naming the key and the queue. Each test has a vhost of its own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

from app.platform.jobs.broker import LetheRabbitmqBroker, build_broker
from tests.support import zygote
from tests.support.lethe import ALEX
from tests.support.ports import free_port
from tests.support.services import service_missing

LETHE_QUEUES = {
    "maintenance",
    "maintenance.DQ",
    "maintenance.XQ",
    "scan",
    "scan.DQ",
    "scan.XQ",
    "webhooks",
    "webhooks.DQ",
    "webhooks.XQ",
}


@pytest.fixture
def fresh_vhost(broker_url):
    """A vhost of this test's own on the local RabbitMQ (rabbitmqctl): queue types are fixed at creation."""
    parts = urlsplit(broker_url)
    if shutil.which("rabbitmqctl") is None or parts.hostname not in ("127.0.0.1", "localhost"):
        service_missing("rabbitmqctl (a local RabbitMQ)", "needed to make a vhost of the test's own")
    name = f"lethe_q_{uuid.uuid4().hex[:8]}"
    subprocess.run(["rabbitmqctl", "add_vhost", name], check=True, capture_output=True, timeout=60)
    subprocess.run(
        ["rabbitmqctl", "set_permissions", "-p", name, parts.username or "guest", ".*", ".*", ".*"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    yield name, urlunsplit(parts._replace(path="/" + name))
    subprocess.run(["rabbitmqctl", "delete_vhost", name], capture_output=True, timeout=60)


def queue_types(vhost: str) -> dict[str, str]:
    out = subprocess.run(
        ["rabbitmqctl", "list_queues", "-p", vhost, "name", "type", "-q"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    rows = [line.split() for line in out.splitlines()]
    return {row[0]: row[1] for row in rows if len(row) == 2 and row[0] != "name"}


@pytest.mark.one_store
def test_quorum_queues_are_declared_and_a_purge_runs_through_them(fresh_vhost, make_lethe):
    from dramatiq import Worker

    from workers.actors import register

    vhost, url = fresh_vhost
    broker = build_broker(url, "quorum")
    assert isinstance(broker, LetheRabbitmqBroker) and broker.mismatched_queues() == []
    assert {name: kind for name, kind in queue_types(vhost).items() if name in LETHE_QUEUES} == {
        name: "quorum" for name in LETHE_QUEUES
    }
    # A purge through the quorum queues: the job a delete commits, consumed by a dramatiq worker
    lethe = make_lethe()
    file_id = lethe.upload(ALEX)
    assert lethe.call("DELETE", f"/api/v1/files/{file_id}", ALEX).status_code == 204
    (job,) = lethe.broker.take("purge_objects")
    register(broker, lethe.rt)
    broker.enqueue(job)
    worker = Worker(broker, worker_threads=1)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while lethe.row(file_id) is not None:
            assert time.monotonic() < deadline, "the purge did not run through the quorum queue"
            time.sleep(0.1)
    finally:
        worker.stop()
        broker.close()


def test_a_worker_meeting_queues_of_the_other_type_exits_2_naming_the_key(fresh_vhost, database_url, tmp_path):
    vhost, url = fresh_vhost
    classic = build_broker(url, "classic")
    assert isinstance(classic, LetheRabbitmqBroker)
    classic.mismatched_queues()  # declares Lethe's queues as classic ones, as a worker of before did
    classic.close()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LETHE_DATABASE_URL": database_url,
        "LETHE_BROKER_URL": url,
        "LETHE_BROKER_QUEUE_TYPE": "quorum",
        "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"),
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "LETHE_METRICS_PORT": str(free_port()),
    }
    result = zygote.run(
        [sys.executable, "-m", "app.entry", "worker"], capture_output=True, text=True, env=env, timeout=120
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "broker.queue_type" in output and "maintenance" in output and "Traceback" not in output
    assert "guest" not in output  # never the URL's credentials
    assert set(queue_types(vhost).values()) == {"classic"}  # nothing was changed
