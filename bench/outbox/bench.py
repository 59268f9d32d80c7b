"""
The outbox relay's throughput against a plain publishing loop.

Both publish the same JSON bodies to a durable topic exchange on the local
RabbitMQ with pika's BlockingChannel, publisher confirms, persistent
delivery and a bound durable queue.  The relay also claims its rows under a
lease (FOR UPDATE SKIP LOCKED on PostgreSQL) and marks them published after
the confirms: the ratio is what the outbox's guarantees cost over the wire
alone.  Each configuration runs --runs times on a fresh database and
exchange; medians, and ratios within the run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from saga import Application, Engine, Machine, Registry, State, Transition
from saga.core.logs import configure_logging
from saga.core.messages.outbox import Event
from saga.core.messages.rabbitmq import body_of, connect, declare_queue, message_properties
from saga.events import Emit

BROKER = "amqp://guest:guest@127.0.0.1:5672/%2F"
PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

ticket = Machine(
    "ticket",
    states=[State("open", initial=True), State("done", terminal=True)],
    transitions=[
        Transition("touch", source="open", target="open"),
        Transition("close", source="open", target="done"),
    ],
)


def application() -> Application:
    registry = Registry()
    registry.register(
        ticket,
        emits=[
            Emit("ticket.opened", on="open", fields=("customer_id", "amount_minor")),
            Emit("ticket.closed", on="done", fields=("customer_id",)),
        ],
    )
    return Application(name="bench", registry=registry)


class Topology:
    """A fresh exchange and a bound queue, deleted afterwards."""

    def __init__(self) -> None:
        self.exchange = f"bench.{uuid.uuid4().hex[:10]}"
        self.queue = f"{self.exchange}.all"
        connection = connect(BROKER)
        declare_queue(connection.channel(), self.exchange, self.queue, ["#"])
        connection.close()

    def count(self) -> int:
        connection = connect(BROKER)
        try:
            declared = connection.channel().queue_declare(self.queue, passive=True)
            return int(declared.method.message_count)
        finally:
            connection.close()

    def delete(self) -> None:
        connection = connect(BROKER)
        channel = connection.channel()
        for queue in (self.queue, f"{self.exchange}.unrouted"):
            channel.queue_delete(queue)
        for exchange in (self.exchange, f"{self.exchange}.unrouted"):
            channel.exchange_delete(exchange)
        connection.close()


def fill(engine: Engine, events: int, per_saga: int) -> None:
    """Write ``events`` outbox rows through real transitions, ``per_saga`` per saga."""
    sagas = max(1, events // per_saga)
    for i in range(sagas):
        saga = engine.sagas.start(
            "ticket",
            operation_id=f"t-{i}",
            request={"customer_id": f"c-{i}", "amount_minor": 4900},
        ).saga
        for _ in range(per_saga - 1):
            engine.sagas.fire(saga.id, "touch", actor="bench")


def events_of(engine: Engine) -> list[Event]:
    """The unpublished events, oldest first: what the plain loop publishes."""
    rows = engine.db.transaction(
        lambda tx: tx.all("list_outbox", unpublished=True, dead=False, saga_id=None, limit=10**9),
        write=False,
    )
    return sorted((Event.from_row(row) for row in rows), key=lambda e: (e.saga_id, e.saga_version))


def plain_loop(events: list[Event], topology: Topology) -> float:
    """Publish ``events`` in a loop with confirms; seconds."""
    connection = connect(BROKER)
    channel = connection.channel()
    channel.confirm_delivery()
    started = time.perf_counter()
    for event in events:
        channel.basic_publish(
            topology.exchange,
            routing_key=event.type,
            body=body_of(event),
            properties=message_properties(event),
            mandatory=True,
        )
    seconds = time.perf_counter() - started
    connection.close()
    return seconds


def relay_run(engine: Engine, topology: Topology, batch: int) -> float:
    relay = engine.relay(broker_url=BROKER, exchange=topology.exchange, batch=batch)
    assert relay is not None
    relay.publishers[0]._open()  # connect before the clock starts, like the loop
    started = time.perf_counter()
    report = relay.run(burst=True)
    seconds = time.perf_counter() - started
    relay.close()
    assert report.failed == 0, report.errors
    return seconds


def fresh_url(backend: str, folder: Path) -> tuple[str, Any]:
    if backend == "sqlite":
        return f"sqlite:///{folder}/{uuid.uuid4().hex}.db", None
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test", autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))

    def drop() -> None:
        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test", autocommit=True) as c:
            c.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))

    return f"{PG}?options=-csearch_path%3D{name}", drop


def one(backend: str, events: int, per_saga: int, batch: int, folder: Path) -> dict[str, float]:
    url, drop = fresh_url(backend, folder)
    try:
        with Engine(url, app=application(), check_schema=False) as engine:
            engine.upgrade()
            fill(engine, events, per_saga)
            pending = events_of(engine)
            baseline = Topology()
            try:
                plain = plain_loop(pending, baseline)
                assert baseline.count() == len(pending)
            finally:
                baseline.delete()
            target = Topology()
            try:
                relayed = relay_run(engine, target, batch)
                assert target.count() == len(pending)
            finally:
                target.delete()
        return {"events": len(pending), "plain_s": plain, "relay_s": relayed}
    finally:
        if drop is not None:
            drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--per-saga", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--backends", nargs="+", default=["postgres", "sqlite"])
    args = parser.parse_args()
    configure_logging("warning")
    print(
        "| backend | events per saga | plain loop ev/s | relay ev/s | relay / plain "
        "| runs (relay/plain) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as folder:
        for backend in args.backends:
            for per_saga in args.per_saga:
                runs = [
                    one(backend, args.events, per_saga, args.batch, Path(folder))
                    for _ in range(args.runs)
                ]
                plain = statistics.median(r["events"] / r["plain_s"] for r in runs)
                relay = statistics.median(r["events"] / r["relay_s"] for r in runs)
                ratios = " / ".join(f"{r['plain_s'] / r['relay_s']:.2f}" for r in runs)
                print(
                    f"| {backend} | {per_saga} | {plain:,.0f} | {relay:,.0f} | "
                    f"{relay / plain:.2f} | {ratios} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
