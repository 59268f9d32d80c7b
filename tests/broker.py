"""
The test broker: RabbitMQ on the machine, a throwaway exchange per test.

``SAGA_TEST_BROKER_URL`` (default the local server, guest/guest).  Without a
reachable broker the tests are skipped, except under ``CI=true``, where that
is a failure.  Each test's exchanges and queues carry a unique prefix and are
deleted afterwards.  :class:`Outage` is a TCP forwarder in front of the
broker that a test can cut and restore: a real outage, as the client sees it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from contextlib import suppress

import pytest

from saga.core.rabbitmq import connect, declare
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
        connection = connect(self.url)
        try:
            channel = connection.channel()
            for queue in self.queues:
                channel.queue_delete(queue)
            for exchange in (self.exchange, f"{self.exchange}.unrouted"):
                channel.exchange_delete(exchange)
        finally:
            connection.close()


@pytest.fixture
def broker():
    """A RabbitMQ exchange of this test's own."""
    require_broker()
    made = Broker()
    try:
        yield made
    finally:
        made.cleanup()


class Outage:
    """
    A TCP forwarder to the broker that can be cut: ``down()`` closes every
    connection through it and refuses new ones; ``up()`` accepts again.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 5672) -> None:
        self.target = (host, port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        """The broker's URL through this forwarder."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if not self._open.is_set():
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for s in (source, sink):
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def down(self) -> None:
        """Cut every connection and refuse new ones."""
        self._open.clear()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def up(self) -> None:
        """Accept connections again."""
        self._open.set()

    def close(self) -> None:
        """Stop forwarding."""
        self._stop = True
        self.down()
        self._server.close()


@pytest.fixture
def outage():
    """A cuttable path to the broker."""
    require_broker()
    proxy = Outage()
    try:
        yield proxy
    finally:
        proxy.close()
