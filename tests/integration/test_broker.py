"""Readiness of the broker (D1, /readyz) on a real RabbitMQ."""

from __future__ import annotations

import uuid

import pika.exceptions
import pytest
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from app.platform.jobs.broker import check_broker


@pytest.fixture
def rabbit_broker(broker_url):
    broker = RabbitmqBroker(url=broker_url, confirm_delivery=True)
    yield broker
    broker.close()


def test_a_channel_the_server_closed_does_not_make_readiness_flap(rabbit_broker):
    """A passive declare of a queue that does not exist (yet) makes RabbitMQ close the channel; the check
    must not keep answering 503 from that thread, and the thread can publish again."""
    missing = f"test-missing-{uuid.uuid4().hex[:10]}"
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        rabbit_broker.channel.queue_declare(queue=missing, durable=True, passive=True)
    assert rabbit_broker.channel.is_closed
    for _ in range(20):
        check_broker(rabbit_broker)
    queue = f"test-ready-{uuid.uuid4().hex[:10]}"
    rabbit_broker.channel.queue_declare(queue=queue, durable=False, auto_delete=True)
    rabbit_broker.channel.basic_publish(exchange="", routing_key=queue, body=b"ok")
    rabbit_broker.channel.queue_delete(queue)
