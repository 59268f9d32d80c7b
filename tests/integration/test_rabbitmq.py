"""
The outbox relay and a consumer against the real RabbitMQ, on each backend.

Every test has an exchange and queues of its own, deleted afterwards.  Crashes
are real: a relay or consumer process dies at a named crash point
(``os._exit``, like a kill) and a new one takes over.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from saga import Engine
from saga.core.messages.rabbitmq import connect
from saga.events import Event
from saga.purchase.events import recorded_sales
from tests import schemas
from tests.contract.test_outbox import Collect, Tally, expire_leases, make_due, outbox, place
from tests.helpers import engine_on
from tests.outbox_app import app
from tests.purchases import cli_json

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]
ORDERS = "tests.outbox_app:orders"


@pytest.fixture
def orders(db_url):
    with engine_on(db_url, app()) as engine:
        yield engine


def saga_cli(*argv, crash=None, marker=None):
    """Run ``saga`` in a process of its own; (exit code, stdout, stderr)."""
    env = {**os.environ}
    env.pop("SAGA_CRASH_POINTS", None)
    if crash:
        env["SAGA_CRASH_POINTS"] = crash
        env["SAGA_CRASH_MARKER"] = str(marker)
    done = subprocess.run(
        [sys.executable, "-m", "saga", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def relay_cli(db_url, broker, *extra, crash=None, marker=None):
    return saga_cli(
        "relay",
        "--db",
        db_url,
        "--app",
        ORDERS,
        "--broker",
        broker.url,
        "--exchange",
        broker.exchange,
        "--burst",
        *extra,
        crash=crash,
        marker=marker,
    )


def test_the_relay_publishes_persistent_confirmed_messages_routed_by_type(orders, broker):
    """Each event reaches the queues bound to its type, persistent, with its id."""
    everything = broker.bind("all", "#")
    paid = broker.bind("paid", "order.paid")
    first, _ = place(orders, 2)
    orders.sagas.fire(first, "pay", actor="test")
    relay = orders.relay(broker_url=broker.url, exchange=broker.exchange)
    report = relay.run(burst=True)
    relay.close()
    assert (3, 0) == (report.published, report.failed)
    got = broker.drain(everything)
    assert sorted(row["event_id"] for row in outbox(orders)) == sorted(b["id"] for b, _ in got)
    for body, properties in got:
        assert (properties.delivery_mode, properties.message_id, properties.type) == (
            2,
            body["id"],
            body["type"],
        )
        assert "application/json" == properties.content_type
    assert [f"{first}:2:order.paid"] == [b["id"] for b, _ in broker.drain(paid)]
    assert all(row["published_at"] is not None for row in outbox(orders))


def test_an_event_no_queue_wants_is_kept_unrouted_and_holds_nothing_back(orders, broker):
    """The alternate exchange keeps it; the saga's next event is published after it."""
    paid = broker.bind("paid", "order.paid")
    (saga_id,) = place(orders)
    orders.sagas.fire(saga_id, "pay", actor="test")
    relay = orders.relay(broker_url=broker.url, exchange=broker.exchange)
    assert 2 == relay.run(burst=True).published
    relay.close()
    unrouted = broker.drain(f"{broker.exchange}.unrouted")
    assert ["order.placed"] == [body["type"] for body, _ in unrouted]
    assert ["order.paid"] == [body["type"] for body, _ in broker.drain(paid)]


def test_a_broker_outage_delays_events_and_loses_none(orders, broker, outage):
    """Through a cut connection: events wait with their errors, then all go out, once."""
    queue = broker.bind("all", "#")
    relay = orders.relay(broker_url=outage.url, exchange=broker.exchange)
    place(orders, 1)
    assert 1 == relay.run(burst=True).published  # connected, and it works
    outage.down()
    orders.sagas.start("order", operation_id="later-1", request={"customer_id": "x", "total": 1})
    orders.sagas.start("order", operation_id="later-2", request={"customer_id": "y", "total": 2})
    assert 2 == relay.poll()
    waiting = [row for row in outbox(orders) if row["published_at"] is None]
    assert 2 == len(waiting)
    assert all(row["errors"] == 1 and "RabbitMQ" in row["last_error"] for row in waiting)
    outage.up()
    make_due(orders)
    assert 3 == relay.run(burst=True).published  # the report counts from the start
    relay.close()
    ids = [body["id"] for body, _ in broker.drain(queue)]
    assert sorted(row["event_id"] for row in outbox(orders)) == sorted(ids)
    assert len(ids) == len(set(ids))


@pytest.mark.slow
def test_a_relay_killed_after_the_broker_confirmed_publishes_again_and_the_consumer_applies_once(
    orders, db_url, broker, tmp_path
):
    """Crash between confirm and mark: duplicates on the wire, one effect at the consumer."""
    queue = broker.bind("all", "#")
    place(orders, 3)
    code, _, _ = relay_cli(db_url, broker, crash="relay.after_publish", marker=tmp_path / "m")
    assert 137 == code
    assert all(row["published_at"] is None for row in outbox(orders))
    expire_leases(orders)
    code, out, err = relay_cli(db_url, broker, "--json")
    assert 0 == code, err
    assert 3 == json.loads(out)["published"]
    delivered = broker.drain(queue)
    assert 6 == len(delivered)
    tally = Tally()
    outcomes = [tally.receive(orders.db, Event.from_json(body)) for body, _ in delivered]
    assert (3, 3) == (outcomes.count("applied"), outcomes.count("duplicate"))
    assert sorted(tally.applied) == sorted(row["event_id"] for row in outbox(orders))


@pytest.mark.slow
def test_a_relay_killed_after_claiming_publishes_after_a_restart(orders, db_url, broker, tmp_path):
    """Crash between commit and publish: nothing went out; the next relay sends it, once."""
    queue = broker.bind("all", "#")
    place(orders, 2)
    code, _, _ = relay_cli(db_url, broker, crash="relay.before_publish", marker=tmp_path / "m")
    assert 137 == code
    assert 0 == broker.count(queue)
    expire_leases(orders)
    assert 0 == relay_cli(db_url, broker)[0]
    ids = sorted(body["id"] for body, _ in broker.drain(queue))
    assert sorted(row["event_id"] for row in outbox(orders)) == ids


def test_relays_in_many_workers_share_the_outbox(orders, broker):
    """Two relays polling the same outbox publish every event, none twice."""
    queue = broker.bind("all", "#")
    place(orders, 40)
    first = orders.relay(broker_url=broker.url, exchange=broker.exchange, batch=7)
    second = orders.relay(broker_url=broker.url, exchange=broker.exchange, batch=7)
    while first.poll() + second.poll():
        pass
    first.close()
    second.close()
    ids = [body["id"] for body, _ in broker.drain(queue)]
    assert 40 == len(ids) == len(set(ids))
    assert first.report.published > 0
    assert second.report.published > 0


# -- the purchase's events and the example consumer ------------------------------------


@pytest.fixture
def shop(db_url, capsys):
    assert 0 == cli_json(capsys, "db", "upgrade", "--db", db_url)[0]
    code, _ = cli_json(
        capsys,
        "intensive",
        "add",
        "py",
        "--seats",
        "3",
        "--price",
        "49.00",
        "--currency",
        "EUR",
        "--db",
        db_url,
    )
    assert 0 == code
    return db_url


def consume(db_url, broker, queue, *extra, crash=None, marker=None):
    return saga_cli(
        "consume",
        "sales",
        "--db",
        db_url,
        "--broker",
        broker.url,
        "--exchange",
        broker.exchange,
        "--queue",
        queue,
        "--json",
        *extra,
        crash=crash,
        marker=marker,
    )


def buy(capsys, db_url, n):
    for i in range(n):
        code, _ = cli_json(
            capsys,
            "purchase",
            "start",
            "--operation-id",
            f"op-{i}",
            "--intensive",
            "py",
            "--student",
            f"s-{i}",
            "--db",
            db_url,
        )
        assert 0 == code


def work(db_url, broker):
    code, _, err = saga_cli(
        "worker",
        "--burst",
        "--db",
        db_url,
        "--broker",
        broker.url,
        "--exchange",
        broker.exchange,
        "--poll-interval",
        "0.2",
    )
    assert 0 == code, err


def figures(capsys, db_url):
    code, projected = cli_json(capsys, "consume", "sales", "--figures", "--db", db_url)
    assert 0 == code
    with Engine(db_url) as engine:
        recorded = engine.db.transaction(recorded_sales, write=False)
    return projected, recorded


@pytest.mark.slow
def test_a_consumer_that_dies_before_its_ack_gets_the_message_again_and_applies_it_once(
    shop, broker, capsys, tmp_path
):
    """The purchase's events through RabbitMQ: the projection matches the engine's records."""
    queue = broker.queue("sales")
    code, _, _ = consume(shop, broker, queue, "--declare")
    assert 0 == code
    buy(capsys, shop, 2)
    work(shop, broker)
    code, _, _ = consume(
        shop, broker, queue, "--idle-exit", "1", crash="consumer.before_ack", marker=tmp_path / "m"
    )
    assert 137 == code
    code, out, err = consume(shop, broker, queue, "--idle-exit", "1")
    assert 0 == code, err
    summary = json.loads(out)
    published = 6  # reserved, payment_pending, confirmed for each
    assert (summary["received"], summary["duplicate"], summary["applied"]) == (
        published,
        1,
        published - 1,
    )
    projected, recorded = figures(capsys, shop)
    assert recorded == projected
    assert 2 == projected["intensives"]["py"]["seats_sold"]


@pytest.mark.slow
def test_the_same_event_id_with_other_content_is_a_conflict_at_the_consumer(shop, broker, capsys):
    """A forged copy of a delivered event is recorded, and the figures do not move."""
    queue = broker.queue("sales")
    consume(shop, broker, queue, "--declare")
    buy(capsys, shop, 1)
    work(shop, broker)
    assert 0 == consume(shop, broker, queue, "--idle-exit", "1")[0]
    before, _ = figures(capsys, shop)
    with Engine(shop) as engine:
        confirmed = next(r for r in outbox(engine) if r["type"] == "purchase.confirmed")
    body = {
        "id": confirmed["event_id"],
        "type": "purchase.confirmed",
        "schema_version": 1,
        "saga_id": confirmed["saga_id"],
        "saga_kind": "purchase",
        "saga_version": 99,
        "occurred_at": "2026-01-01T00:00:00.000Z",
        "data": {"intensive_id": "py", "student_id": "s-0", "amount_minor": 1, "currency": "EUR"},
    }
    connection = connect(broker.url)
    connection.channel().basic_publish(
        broker.exchange, "purchase.confirmed", json.dumps(body).encode()
    )
    connection.close()
    code, out, _ = consume(shop, broker, queue, "--idle-exit", "1")
    assert (0, 1, 0) == (code, json.loads(out)["conflict"], json.loads(out)["applied"])
    after, _ = figures(capsys, shop)
    assert before == after


def test_in_process_subscribers_and_the_broker_both_confirm_before_a_row_is_marked(db_url, broker):
    """With two publishers, an event is marked only when both took it."""
    got = Collect()
    subscribed = app(subscribers=lambda engine: {"order.*": [got]})
    with Engine(db_url, app=subscribed, check_schema=False) as engine:
        schemas.migrate(engine)
        queue = broker.bind("all", "#")
        place(engine, 2)
        got.failing = True
        relay = engine.relay(broker_url=broker.url, exchange=broker.exchange)
        relay.run(burst=True)
        assert all(row["published_at"] is None for row in outbox(engine))
        assert 0 == broker.count(queue)  # the subscriber came first and failed
        got.failing = False
        make_due(engine)
        assert 2 == relay.run(burst=True).published
        relay.close()
        assert 2 == len(got.events) == broker.count(queue)


@pytest.mark.slow
def test_after_a_demo_the_example_consumers_figures_match_the_engines(postgres_url, broker, capsys):
    """The demo's purchases, faults included, published and projected: the same sales."""
    queue = broker.queue("sales")
    assert 0 == cli_json(capsys, "db", "upgrade", "--db", postgres_url)[0]
    assert 0 == consume(postgres_url, broker, queue, "--declare")[0]
    code, report = cli_json(
        capsys,
        "demo",
        "--purchases",
        "60",
        "--workers",
        "2",
        "--seed",
        "7",
        "--db",
        postgres_url,
        "--broker",
        broker.url,
        "--exchange",
        broker.exchange,
    )
    assert 0 == code
    assert (0, 0) == (report["outbox"]["unpublished"], report["outbox"]["broker_errors"])
    code, out, err = consume(postgres_url, broker, queue, "--idle-exit", "2")
    assert 0 == code, err
    assert report["outbox"]["published"] == json.loads(out)["applied"]
    projected, recorded = figures(capsys, postgres_url)
    assert recorded == projected
    assert sum(i["seats_sold"] for i in projected["intensives"].values()) == (
        report["purchases"]["by_state"].get("confirmed", 0)
    )
