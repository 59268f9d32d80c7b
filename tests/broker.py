"""
The test broker: RabbitMQ on the machine, a throwaway exchange per test.

``SAGA_TEST_BROKER_URL`` (default the local server, guest/guest).  Without a
reachable broker the tests are skipped, except under ``CI=true``, where that
is a failure.  Each test's exchanges and queues carry a unique prefix and are
deleted afterwards.  :class:`~saga.core.messages.netfault.Outage` is a TCP forwarder
in front of the broker that a test can cut and restore: a real outage, as the
client sees it.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from saga.core.messages.netfault import Outage
from saga.core.messages.rabbitmq import connect, declare, remove
from saga.exceptions import BrokerUnavailable

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
BROKER_URL = os.environ.get("SAGA_TEST_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")

try:
    connect(BROKER_URL, timeout=3).close()
    _problem: str | None = None
except BrokerUnavailable as _exc:  # pragma: no cover - depends on the machine
    _problem = f"RabbitMQ unreachable at {BROKER_URL}: {_exc}"


def require_broker() -> None:
    """Skip without RabbitMQ; fail under CI=true."""
    if _problem is None:
        return
    if IN_CI:
        pytest.fail(f"{_problem} (CI=true: RabbitMQ tests must run)")
    pytest.skip(_problem)


class Broker:
    """A unique exchange name and the queues a test made, all deleted afterwards."""

    def __init__(self) -> None:
        self.url = BROKER_URL
        self.prefix = f"t.{uuid.uuid4().hex[:12]}"
        self.exchange = f"{self.prefix}.events"
        self.queues: list[str] = [f"{self.exchange}.unrouted"]

    def queue(self, name: str) -> str:
        """A queue name of this test (deleted afterwards)."""
        full = f"{self.prefix}.{name}"
        self.queues.append(full)
        return full

    def bind(self, name: str, *patterns: str) -> str:
        """Declare a queue of this test bound to the exchange."""
        queue = self.queue(name)
        declare(self.url, exchange=self.exchange, queue=queue, bindings=patterns)
        return queue

    def drain(self, queue: str) -> list[tuple[dict, object]]:
        """Every message waiting in ``queue`` (body and properties), acked."""
        connection = connect(self.url)
        try:
            channel = connection.channel()
            got = []
            while True:
                method, properties, body = channel.basic_get(queue, auto_ack=True)
                if method is None:
                    return got
                got.append((json.loads(body), properties))
        finally:
            connection.close()

    def count(self, queue: str) -> int:
        """Messages ready in ``queue``."""
        connection = connect(self.url)
        try:
            return int(connection.channel().queue_declare(queue, passive=True).method.message_count)
        finally:
            connection.close()

    def cleanup(self) -> None:
        """Delete this test's queues and exchanges."""
        remove(self.url, exchange=self.exchange, queues=self.queues)


@pytest.fixture
def broker():
    """A RabbitMQ exchange of this test's own."""
    require_broker()
    made = Broker()
    try:
        yield made
    finally:
        made.cleanup()


@pytest.fixture
def outage():
    """A cuttable path to the broker."""
    require_broker()
    proxy = Outage(BROKER_URL)
    try:
        yield proxy
    finally:
        proxy.close()
