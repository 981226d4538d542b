"""The roles as real processes (D1): api under gunicorn, worker under dramatiq, the scheduler, lethe dev.

Each starts on the real PostgreSQL and RabbitMQ as a plain process, becomes ready, does its job and stops cleanly on
a signal.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import tempfile
import time
import uuid

import pika
import pytest

from app.db.conn import one
from app.lifecycle.steps import STEPS
from tests.support.ports import free_port
from tests.support.roles import wait_for_http, wait_for_output

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def plain_processes(monkeypatch):
    """These roles start as `python -m app.entry` does from a fresh interpreter, not forked from the suite's
    zygote (tests/support/zygote.py): what the image runs, imports in their own order included."""
    monkeypatch.setenv("LETHE_TEST_ZYGOTE", "0")


def test_api_serves_readyz_and_metrics_and_stops_on_sigterm(role_env, start_role):
    api = start_role(["api"], role_env)
    base = f"http://127.0.0.1:{role_env['LETHE_API_PORT']}"
    assert json.loads(wait_for_http(base + "/readyz", api)) == {"status": "ready"}
    metrics = wait_for_http(base + "/metrics", api).decode()
    assert 'lethe_http_requests_total{method="GET",route="/readyz",status="200"}' in metrics
    assert api.stop(signal.SIGTERM) == 0
    # gunicorn's own lines come out as JSON too: every line of the api is one JSON object.
    lines = [line for line in api.output().splitlines() if line.strip()]
    assert lines and all(json.loads(line)["role"] == "api" for line in lines)


def test_worker_serves_metrics_and_stops_on_sigterm(role_env, start_role):
    worker = start_role(["worker"], role_env)
    wait_for_http(f"http://127.0.0.1:{role_env['LETHE_METRICS_PORT']}/metrics", worker)
    wait_for_output(worker, '"event": "worker.started"')
    assert worker.stop(signal.SIGTERM) == 0


def test_scheduler_relays_an_outbox_row_left_behind(role_env, start_role, db, broker_url):
    queue = f"test-relay-{uuid.uuid4().hex[:10]}"
    # Given a job committed an hour ago whose publish never happened
    db.read(
        lambda conn: conn.execute(
            "INSERT INTO outbox (queue_name, actor_name, args, created_at) "
            "VALUES (%s, 'record', '[\"x\"]', now() - interval '1 hour')",
            (queue,),
        )
    )
    # When the scheduler runs
    scheduler = start_role(["scheduler"], role_env)
    wait_for_http(f"http://127.0.0.1:{role_env['LETHE_METRICS_PORT']}/metrics", scheduler)
    deadline = time.monotonic() + 30
    while db.read(lambda conn: one(conn.execute("SELECT count(*) AS n FROM outbox")).n) and time.monotonic() < deadline:
        time.sleep(0.2)
    # Then the row is gone and its message waits in RabbitMQ
    connection = pika.BlockingConnection(pika.URLParameters(broker_url))
    try:
        channel = connection.channel()
        declared = channel.queue_declare(queue=queue, durable=True, passive=True)
        assert declared.method.message_count == 1
        channel.queue_delete(queue)
    finally:
        connection.close()
    assert db.read(lambda conn: one(conn.execute("SELECT count(*) AS n FROM outbox")).n) == 0
    assert scheduler.stop(signal.SIGTERM) == 0
    assert '"event": "scheduler.stopped"' in scheduler.output()


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_dev_runs_everything_on_embedded_defaults_and_ctrl_c_stops_it(start_role):
    """`make run` on a machine with nothing configured: readyz within a minute, Ctrl-C stops all."""
    state = tempfile.mkdtemp(prefix="lethe-dev-")
    os.chmod(state, 0o755)  # the embedded server runs as an unprivileged user when we are root
    port = free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LETHE_FILE_FS_ROOT": os.path.join(state, "objects")}
    dev = start_role(["dev", "--port", str(port), "--state-dir", state], env)
    assert json.loads(wait_for_http(f"http://127.0.0.1:{port}/readyz", dev, timeout=60)) == {"status": "ready"}
    output = dev.output()
    assert "export TOKEN=" in output and "curl" in output
    pg_port = int(output.split("port=")[1].split()[0])
    assert port_open(pg_port)
    assert dev.stop(signal.SIGINT) == 0
    assert not port_open(port) and not port_open(pg_port)  # the api and the embedded PostgreSQL are gone


def test_two_schedulers_trigger_one_cleanup_at_start_and_the_worker_runs_it(role_env, start_role, tmp_path):
    # Two dramatiq processes: the backlog gauge must still be one aggregated sample (multiprocess mode).
    worker = start_role(
        ["worker"], dict(role_env, PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "w"), LETHE_WORKER_PROCESSES="2")
    )
    deadline = time.monotonic() + 60
    while worker.output().count('"event": "worker.started"') < 2:
        assert time.monotonic() < deadline and worker.proc.poll() is None, worker.output()
        time.sleep(0.2)
    schedulers = [
        start_role(
            ["scheduler"],
            dict(role_env, LETHE_METRICS_PORT=str(free_port()), PROMETHEUS_MULTIPROC_DIR=str(tmp_path / f"s{n}")),
        )
        for n in range(2)
    ]
    for scheduler in schedulers:
        wait_for_output(scheduler, '"event": "scheduler.started"')
    # The leader triggers at start; the worker runs every step (the last ones a moment after step n's line).
    wait_for_output(worker, '"step": "n"')
    deadline = time.monotonic() + 60
    while worker.output().count('"event": "cleanup.step"') < len(STEPS):
        assert time.monotonic() < deadline and worker.proc.poll() is None, worker.output()
        time.sleep(0.2)
    triggered = [s.output().count('"event": "scheduler.cleanup_triggered"') for s in schedulers]
    assert sorted(triggered) == [0, 1]
    assert worker.output().count('"event": "cleanup.step"') == len(STEPS)  # every step, once
    metrics = wait_for_http(f"http://127.0.0.1:{role_env['LETHE_METRICS_PORT']}/metrics", worker).decode()
    samples = [line for line in metrics.splitlines() if line.startswith("lethe_file_purge_backlog ")]
    assert samples == ["lethe_file_purge_backlog 0.0"]
    for role in (*schedulers, worker):
        assert role.stop(signal.SIGTERM) == 0
