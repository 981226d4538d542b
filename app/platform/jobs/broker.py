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
    """Raise when the broker cannot be reached (readiness).

    It opens and closes a channel of its own: a cheap round trip that proves the connection. It never
    declares a queue passively on the thread's shared channel: RabbitMQ closes a channel on a missing queue,
    and dramatiq kept that closed channel for the thread, so /readyz flapped (and that thread's publishes
    failed) until a restart. A closed channel or connection of this thread is dropped so that the next use
    opens a new one: recovery without a restart.
    """
    if not isinstance(broker, RabbitmqBroker):
        return
    channel = getattr(broker.state, "channel", None)
    if channel is not None and channel.is_closed:
        del broker.channel
    try:
        broker.connection.channel().close()
    except Exception:
        del broker.connection  # a broken connection: the next call (or publish) connects again
        raise
