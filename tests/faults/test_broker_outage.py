"""RabbitMQ cut off: deletes still commit (their jobs wait in the outbox), /readyz says `broker`, and when
RabbitMQ is back the relay publishes, the worker consumes again, and every deleted file is purged, with no
role restarted. (A RabbitMQ that accepts and never answers is the performance issue's drill: today the
request that publishes after its commit waits for it.)"""

from __future__ import annotations

import pytest

from tests.faults.conftest import host_port
from tests.support.proxy import TcpProxy

pytestmark = pytest.mark.faults


def test_a_broker_outage_loses_no_deletion(stage_factory, broker_url):
    rabbit = TcpProxy(*host_port(broker_url, 5672)).start()
    proxied = broker_url.replace(f"{host_port(broker_url, 5672)[0]}:{host_port(broker_url, 5672)[1]}",
                                 rabbit.address)
    stage = stage_factory(LETHE_BROKER_URL=proxied)
    stage.proxies.append(rabbit)
    roles = stage.start_all()
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
