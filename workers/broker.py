"""The Dramatiq broker (D9): RabbitMQ from `broker.url`, or an in-process broker for the role `all`."""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import default_middleware

QUEUES = ("maintenance", "scan")


def build_broker(url: str) -> dramatiq.Broker:
    """RabbitMQ when `url` is set, else an in-process StubBroker (served by an in-process Worker).

    Publisher confirms are on, so a publish that RabbitMQ did not take raises and the outbox row stays for
    the relay (D9). dramatiq's own Prometheus middleware is left out: Lethe serves its metrics itself (D15).
    """
    middleware = [m() for m in default_middleware]
    if url:
        broker: dramatiq.Broker = RabbitmqBroker(url=url, confirm_delivery=True, middleware=middleware)
    else:
        broker = StubBroker(middleware=middleware)
    for queue in QUEUES:
        broker.declare_queue(queue)
    return broker


def check_broker(broker: dramatiq.Broker) -> None:
    """Raise when the broker cannot be reached (readiness)."""
    if isinstance(broker, RabbitmqBroker):
        # Declaring an existing queue is a cheap round trip that proves the connection and the channel.
        broker.channel.queue_declare(queue=QUEUES[0], durable=True, passive=True)
