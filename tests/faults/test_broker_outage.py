"""RabbitMQ cut off or partitioned: deletes still commit at once (their jobs wait in the outbox and in each
process's publisher thread, never in the request), /readyz says `broker`, and when RabbitMQ is back every
deleted file is purged, with no role restarted."""

from __future__ import annotations

import pytest

from tests.faults.conftest import host_port, via
from tests.support.proxy import TcpProxy
from tests.support.roles import wait_for_output

pytestmark = pytest.mark.faults


def stage_behind_a_rabbit_proxy(stage_factory, broker_url, **settings):
    """A stage whose roles reach RabbitMQ through a proxy of their own (PostgreSQL's stays in pass)."""
    rabbit = TcpProxy(*host_port(broker_url, 5672)).start()
    stage = stage_factory(LETHE_BROKER_URL=via(broker_url, rabbit.address), **settings)
    stage.proxies.append(rabbit)
    return stage, rabbit


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def test_a_broker_partition_never_blocks_a_delete(stage_factory, broker_url):
    """Issue 11: with publishing in the request thread, a delete that had committed waited 20 to 137 s for a
    RabbitMQ that accepted and never answered."""
    stage, rabbit = stage_behind_a_rabbit_proxy(stage_factory, broker_url)
    roles = stage.start_all()
    ids = stage.seed(30)

    rabbit.blackhole()
    answers = [stage.delete(file_id) for file_id in ids]
    assert all(answer.status == 204 for answer in answers), answers
    assert percentile([answer.seconds for answer in answers], 0.99) < 1, answers
    ready = stage.readyz()
    assert ready.status == 503 and ready.seconds < 2 and "broker" in ready.body["detail"], ready

    rabbit.pass_()
    stage.wait_gone(ids, timeout=60)
    stage.assert_alive()
    for role in roles.values():
        assert "Traceback" not in role.output(), role.tail()


def test_a_broker_outage_loses_no_deletion(stage_factory, broker_url):
    # No cleanup run while the broker is out: one delivered before the outage would purge the deleted rows inline
    # (its catch-up needs no broker), and the drill is about the jobs the deletes commit.
    stage, rabbit = stage_behind_a_rabbit_proxy(stage_factory, broker_url, LETHE_FILE_GC_INTERVAL="1h")
    roles = stage.start_all()
    # The cleanup the leader sends at start is past its catch-up before the files are seeded (a loaded machine
    # ran it late, during the deletes, and it purged one of them inline)
    wait_for_output(roles["worker"], '"step_name": "catch_up"')
    ids = stage.seed(10)

    rabbit.refuse()
    for file_id in ids:
        answer = stage.delete(file_id)
        assert answer.status == 204 and answer.seconds < 5, answer
    ready = stage.readyz()
    assert ready.status == 503 and ready.seconds < 2 and "broker" in ready.body["detail"], ready
    assert stage.left(ids) == (len(ids), len(ids))  # nothing can be purged without the broker

    rabbit.pass_()
    stage.wait_gone(ids, timeout=30)
    stage.until(lambda: stage.readyz().status == 200, 10)
    stage.assert_alive()
    assert any('"event": "outbox.publish_failed"' in line for line in roles["api"].output().splitlines())
    for role in roles.values():
        assert "Traceback" not in role.output(), role.tail()
