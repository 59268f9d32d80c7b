"""An event declared from a definition version on: expected only for transitions from then on."""

from __future__ import annotations

import pytest

from saga import Application, Engine, Machine, Registry
from saga.events import Emit
from saga.exceptions import ApplicationError
from saga.ops import verify
from tests.helpers import engine_on, rows
from tests.outbox_app import EVENTS, order
from tests.outbox_app import app as orders_v1

pytestmark = pytest.mark.timeout(120)

ORDER_V2 = Machine("order", version=2, states=order.states, transitions=order.transitions)


def orders_with(shipped: Emit) -> Application:
    """Both versions, with order.shipped declared beside the events they always had."""
    registry = Registry()
    for machine in (order, ORDER_V2):
        registry.register(machine, emits=(*EVENTS, shipped))
    return Application(name="orders", registry=registry)


def ship(engine, operation_id):
    saga_id = engine.sagas.start(
        "order", operation_id=operation_id, request={"customer_id": "c", "total": 10}
    ).saga.id
    engine.sagas.fire(saga_id, "pay", actor="test")
    engine.sagas.fire(saga_id, "ship", actor="test")
    return saga_id


@pytest.fixture
def shipped_before(db_url):
    """Two orders shipped while order.shipped did not exist."""
    with engine_on(db_url, orders_v1()) as engine:
        return [ship(engine, "old-1"), ship(engine, "old-2")]


def outbox_types(engine, saga_id):
    found = rows(engine, "SELECT type FROM outbox WHERE saga_id = :s ORDER BY id", s=saga_id)
    return [row["type"] for row in found]


def test_declared_since_v2_verify_stays_green_over_the_past(db_url, shipped_before):
    with engine_on(db_url, orders_with(Emit("order.shipped", on="shipped", since=2))) as engine:
        assert verify(engine).ok
        new = ship(engine, "new-1")  # starts on v2: its shipping writes the event
        assert "order.shipped" in outbox_types(engine, new)
        assert verify(engine).ok


def test_a_v1_saga_moving_after_the_declaration_writes_nothing_either(db_url):
    with engine_on(db_url, orders_v1()) as engine:
        old = engine.sagas.start(
            "order", operation_id="old", request={"customer_id": "c", "total": 10}
        ).saga.id
        engine.sagas.fire(old, "pay", actor="test")
    with engine_on(db_url, orders_with(Emit("order.shipped", on="shipped", since=2))) as engine:
        engine.sagas.fire(old, "ship", actor="test")  # under v1, where it is not declared
        assert "order.shipped" not in outbox_types(engine, old)
        assert verify(engine).ok


def test_declared_without_since_verify_turns_red_and_names_since(db_url, shipped_before):
    """The issue's complaint: every past shipping lacks the new event."""
    with engine_on(db_url, orders_with(Emit("order.shipped", on="shipped"))) as engine:
        report = verify(engine)
        (rule,) = [r for r in report.invariants if r.name == "outbox"]
        assert 2 == len(rule.problems)
        first = rule.problems[0]
        assert "entered shipped without its order.shipped event in the outbox" in first
        assert "no transition under order v1 wrote one" in first
        assert "Emit('order.shipped', …, since=V)" in first


def test_since_names_a_version_the_application_registers(sqlite_url):
    wrong = orders_with(Emit("order.shipped", on="shipped", since=3))
    with pytest.raises(ApplicationError, match="declared since v3, a version the application"):
        Engine(sqlite_url, app=wrong)
