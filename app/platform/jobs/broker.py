"""The Dramatiq broker (D9): RabbitMQ from `broker.url`, or an in-process broker for the role `all`."""

from __future__ import annotations

from typing import Any

import dramatiq
import pika.exceptions
from dramatiq.brokers.rabbitmq import DEAD_MESSAGE_TTL, RabbitmqBroker
from dramatiq.brokers.stub import StubBroker
from dramatiq.common import dq_name, xq_name
from dramatiq.middleware import default_middleware

from app.platform.tracing import TracingMiddleware

QUEUES = ("maintenance", "scan", "webhooks", "variants", "stores")


class LetheRabbitmqBroker(RabbitmqBroker):
    """dramatiq's RabbitMQ broker, declaring every queue (a queue, its delay queue .DQ and its dead-letter queue
    .XQ) with `x-queue-type` from broker.queue_type: quorum queues replicate over a RabbitMQ
    cluster; their dead-lettering and message TTL are what dramatiq needs, and Lethe uses no priorities."""

    def __init__(self, *, queue_type: str = "classic", **kwargs: Any):
        super().__init__(**kwargs)
        self.queue_type = queue_type

    def _typed(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return {**arguments, "x-queue-type": self.queue_type}

    def _build_queue_arguments(self, queue_name: str) -> dict[str, Any]:
        return self._typed(super()._build_queue_arguments(queue_name))  # type: ignore[no-untyped-call]

    def _declare_xq_queue(self, queue_name: str) -> Any:
        return self.channel.queue_declare(
            queue=xq_name(queue_name), durable=True, arguments=self._typed({"x-message-ttl": DEAD_MESSAGE_TTL})
        )

    def mismatched_queues(self) -> list[str]:
        """The queues that exist with another type than broker.queue_type (RabbitMQ refuses to declare them
        again with other arguments: 406 PRECONDITION_FAILED), each tried on a channel of its own."""
        mismatched = []
        for queue in QUEUES:
            for name, declare in (
                (queue, self._declare_queue),
                (dq_name(queue), self._declare_dq_queue),
                (xq_name(queue), self._declare_xq_queue),
            ):
                try:
                    declare(queue)
                except pika.exceptions.ChannelClosedByBroker as exc:
                    del self.channel  # the broker closed it; the next use opens another
                    if exc.reply_code != 406:
                        raise
                    mismatched.append(name)
        return mismatched


def build_broker(url: str, queue_type: str = "classic") -> dramatiq.Broker:
    """RabbitMQ when `url` is set (queues of `queue_type`: broker.queue_type), else an in-process StubBroker
    (served by an in-process Worker).

    Publisher confirms are on, so a publish that RabbitMQ did not take raises and the outbox row stays for
    the relay (D9). dramatiq's own Prometheus middleware is left out: Lethe serves its metrics itself (D15).
    """
    middleware = [m() for m in default_middleware]
    middleware.append(TracingMiddleware())  # carries the trace through each message (nothing when tracing is off)
    if url:
        broker: dramatiq.Broker = LetheRabbitmqBroker(
            url=url, confirm_delivery=True, middleware=middleware, queue_type=queue_type
        )
    else:
        broker = StubBroker(middleware=middleware)
    for queue in QUEUES:
        broker.declare_queue(queue)
    return broker


def check_broker(broker: object) -> None:
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


def queue_depths(broker: object) -> dict[str, tuple[int, int, int]] | None:
    """Messages waiting in each queue: (ready, delayed, dead-lettered), by queue; None when the broker cannot
    be asked. Each queue is declared passively on a channel of its own (RabbitMQ closes a channel on a missing
    queue; the thread's shared channel is never used), and a queue not declared yet counts 0."""
    if isinstance(broker, StubBroker):

        def size(name: str) -> int:
            return broker.queues[name].qsize() if name in broker.queues else 0

        return {queue: (size(queue), size(dq_name(queue)), size(xq_name(queue))) for queue in QUEUES}
    if not isinstance(broker, RabbitmqBroker):
        return None
    depths = {}
    try:
        connection = broker.connection
        for queue in QUEUES:
            counts = []
            for name in (queue, dq_name(queue), xq_name(queue)):
                channel = connection.channel()
                try:
                    counts.append(channel.queue_declare(queue=name, passive=True).method.message_count)
                except pika.exceptions.ChannelClosedByBroker:
                    counts.append(0)  # not declared yet: nothing was ever sent to it
                    continue
                channel.close()
            depths[queue] = (counts[0], counts[1], counts[2])
    except Exception:
        del broker.connection  # a broken connection: the next use connects again
        return None
    return depths
