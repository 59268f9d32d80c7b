"""
RabbitMQ: the relay's broker publisher and a consumer with manual acks.

Through pika (``pip install 'saga-engine[rabbitmq]'``).  The topology:

* ``<exchange>``: a durable topic exchange; an event's routing key is its type
  (``order.confirmed``), so a queue binds ``order.*`` or ``#.refunded``;
* ``<exchange>.unrouted``: its alternate exchange, with a durable queue of the
  same name: an event no queue is bound for is kept there instead of being
  dropped by the broker (and does not hold back its saga's later events).

Messages are persistent (delivery mode 2) and published with publisher
confirms: ``basic_publish`` returns once the broker took responsibility for
the message, and only then is the outbox row marked.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from saga.core.faults import crash_point
from saga.core.logs import get_logger
from saga.core.messages.outbox import Event
from saga.exceptions import BrokerUnavailable, InvalidInput, PublishFailed

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

log = get_logger(__name__)

DEFAULT_EXCHANGE: Final = "saga.events"
BROKER_ENV: Final = "SAGA_BROKER_URL"
EXCHANGE_ENV: Final = "SAGA_EXCHANGE"


SCHEMES: Final = ("amqp", "amqps")
EXTRA: Final = "pip install 'saga-engine[rabbitmq]'"


def checked_url(url: str, *, field: str = "broker") -> str:
    """
    ``url`` if RabbitMQ can be reached at it: ``amqp://`` or ``amqps://``, and pika installed.

    Checked when a command starts: without it, a worker given ``http://…``, or
    run without the extra, would start, log a warning each poll and publish
    nothing.  The message never repeats the URL (it may hold a password).
    """
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        got = f"a {scheme}:// URL" if scheme else "no scheme"
        raise InvalidInput(
            field=field,
            problem=f"expected a RabbitMQ URL, amqp://user:pass@host:5672/vhost (or amqps://); "
            f"got {got}",
        )
    try:
        _pika()
    except RuntimeError as exc:
        raise InvalidInput(
            field=field, problem=f"RabbitMQ needs pika, which is not installed: {EXTRA}"
        ) from exc
    return url


def _pika() -> Any:
    try:
        import pika  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        msg = f"RabbitMQ needs pika: {EXTRA}"
        raise RuntimeError(msg) from exc
    return pika


def connect(url: str, *, timeout: float = 5.0) -> BlockingConnection:
    """A blocking connection to ``url`` (``amqp://guest:guest@127.0.0.1:5672/%2F``)."""
    pika = _pika()
    params = pika.URLParameters(url)
    params.socket_timeout = timeout
    params.blocked_connection_timeout = timeout * 6
    params.connection_attempts = 1
    try:
        connection: BlockingConnection = pika.BlockingConnection(params)
    except (pika.exceptions.AMQPConnectionError, OSError) as exc:
        detail = str(exc) or repr(exc.args[0] if exc.args else exc)
        raise BrokerUnavailable(
            broker=f"{params.host}:{params.port} (vhost {params.virtual_host})",
            error=f"{type(exc).__name__}: {detail}",
        ) from exc
    return connection


def declare_exchange(channel: BlockingChannel, exchange: str) -> None:
    """Declare the durable topic exchange and its alternate for unrouted events."""
    unrouted = f"{exchange}.unrouted"
    channel.exchange_declare(unrouted, "fanout", durable=True)
    channel.queue_declare(unrouted, durable=True)
    channel.queue_bind(unrouted, unrouted)
    channel.exchange_declare(
        exchange, "topic", durable=True, arguments={"alternate-exchange": unrouted}
    )


def declare_queue(
    channel: BlockingChannel, exchange: str, queue: str, bindings: Sequence[str]
) -> None:
    """Declare a durable queue bound to ``exchange`` for each routing pattern."""
    declare_exchange(channel, exchange)
    channel.queue_declare(queue, durable=True)
    for pattern in bindings:
        channel.queue_bind(queue, exchange, routing_key=pattern)


def declare(url: str, *, exchange: str, queue: str, bindings: Sequence[str]) -> None:
    """Declare ``queue`` and its bindings now, so no event is unrouted before it consumes."""
    connection = connect(url)
    try:
        declare_queue(connection.channel(), exchange, queue, bindings)
    finally:
        connection.close()


def remove(url: str, *, exchange: str, queues: Sequence[str] = ()) -> None:
    """Delete ``queues``, ``exchange`` and its alternate with its queue (a harness cleaning up)."""
    connection = connect(url)
    try:
        channel = connection.channel()
        for queue in (*queues, f"{exchange}.unrouted"):
            channel.queue_delete(queue)
        for name in (exchange, f"{exchange}.unrouted"):
            channel.exchange_delete(name)
    finally:
        connection.close()


def message_properties(event: Event) -> Any:
    """Persistent, JSON, with the event's id and type where AMQP tools look."""
    pika = _pika()
    return pika.BasicProperties(
        content_type="application/json",
        delivery_mode=pika.DeliveryMode.Persistent,
        message_id=event.id,
        type=event.type,
        timestamp=int(event.occurred_at.timestamp()),
        headers={"saga_id": event.saga_id, "saga_version": event.saga_version},
    )


def body_of(event: Event) -> bytes:
    """The message body: the event as compact JSON."""
    return json.dumps(event.to_json(), separators=(",", ":"), sort_keys=True).encode()


class RabbitPublisher:
    """
    Publish events to a RabbitMQ topic exchange with publisher confirms.

    The connection opens on first use and is dropped after any broker
    error, so the next batch reconnects: a broker that is down delays
    events, it does not lose them (the relay retries with backoff).
    """

    def __init__(self, url: str, *, exchange: str = DEFAULT_EXCHANGE, timeout: float = 5.0) -> None:
        self.url = url
        self.exchange = exchange
        self.timeout = timeout
        self._connection: BlockingConnection | None = None
        self._channel: BlockingChannel | None = None

    def __repr__(self) -> str:
        return f"<RabbitPublisher exchange={self.exchange!r}>"

    def _open(self) -> BlockingChannel:
        if self._channel is not None and self._channel.is_open:
            return self._channel
        self.close()
        self._connection = connect(self.url, timeout=self.timeout)
        channel = self._connection.channel()
        declare_exchange(channel, self.exchange)
        channel.confirm_delivery()
        self._channel = channel
        return channel

    def publish(self, events: Sequence[Event]) -> Sequence[str]:
        """Publish in order, each confirmed by the broker; :class:`PublishFailed` on error."""
        pika = _pika()
        confirmed: list[str] = []
        current: str | None = None
        try:
            channel = self._open()
            for event in events:
                current = event.id
                # With confirms on, this returns once the broker acked the
                # message, and raises if it nacked or returned it.
                channel.basic_publish(
                    self.exchange,
                    routing_key=event.type,
                    body=body_of(event),
                    properties=message_properties(event),
                    mandatory=True,
                )
                confirmed.append(event.id)
        except (
            pika.exceptions.NackError,
            pika.exceptions.UnroutableError,
            pika.exceptions.BodyTooLongError,
        ) as exc:
            # The broker refused this message, not the connection: it counts
            # against the event, which is dead-lettered if it keeps happening.
            raise PublishFailed(
                confirmed=confirmed, reason=f"RabbitMQ refused it: {exc!r}", rejected=current
            ) from exc
        except (pika.exceptions.AMQPError, OSError, BrokerUnavailable) as exc:
            self.close()
            raise PublishFailed(
                confirmed=confirmed, reason=f"RabbitMQ: {type(exc).__name__}: {exc}"
            ) from exc
        return confirmed

    def close(self) -> None:
        """Close the connection, ignoring a broker that already went away."""
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except Exception:  # noqa: BLE001 - closing a dead connection must not raise
                log.debug("rabbitmq_close_failed")


@dataclass(slots=True)
class ConsumeReport:
    """What a consumer did: messages received, acked, rejected as malformed."""

    received: int = 0
    acked: int = 0
    rejected: int = 0

    def as_dict(self) -> dict[str, int]:
        """The report as JSON fields."""
        return {"received": self.received, "acked": self.acked, "rejected": self.rejected}


def consume(
    url: str,
    *,
    exchange: str,
    queue: str,
    bindings: Sequence[str],
    handle: Callable[[Event], object],
    prefetch: int = 50,
    stopping: Callable[[], bool] = lambda: False,
    idle_exit: float | None = None,
    max_messages: int | None = None,
) -> ConsumeReport:
    """
    Consume events from ``queue`` with manual acks until stopped.

    Each message is acked only after ``handle`` returned, so a consumer that
    dies before its ack gets the message again (handle must be idempotent:
    the consumer inbox makes it so).  An exception from ``handle`` leaves the
    message unacked and propagates: the connection closes and the broker
    redelivers it.  A body that is not an event is rejected (not requeued)
    and logged.  ``prefetch`` bounds the unacked messages in flight.

    Returns after ``idle_exit`` seconds without a message, after
    ``max_messages``, or when ``stopping()`` is true.
    """
    connection = connect(url)
    report = ConsumeReport()
    try:
        channel = connection.channel()
        declare_queue(channel, exchange, queue, bindings)
        channel.basic_qos(prefetch_count=prefetch)
        idle_since = time.monotonic()
        for method, _properties, body in channel.consume(
            queue, auto_ack=False, inactivity_timeout=0.2
        ):
            if method is None:
                idle = time.monotonic() - idle_since
                if stopping() or (idle_exit is not None and idle >= idle_exit):
                    break
                continue
            report.received += 1
            try:
                event = Event.from_json(json.loads(body))
            except ValueError as exc:
                log.error("consumer_rejected_message", queue=queue, error=str(exc))
                channel.basic_reject(method.delivery_tag, requeue=False)
                report.rejected += 1
                continue
            handle(event)
            crash_point("consumer.before_ack")
            channel.basic_ack(method.delivery_tag)
            report.acked += 1
            idle_since = time.monotonic()
            if stopping() or (max_messages is not None and report.received >= max_messages):
                break
        channel.cancel()
    finally:
        if connection.is_open:
            connection.close()
    return report
