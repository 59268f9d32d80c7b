"""
The purchase, tested with saga.testing on each backend (the project eats its own food).

The kit drives random purchases (some refused: sold out, a second seat),
events with good and bad payloads, stale decisions, clock jumps past the
hold, the due work (payment steps against the sandbox) and crashing steps,
and checks every purchase's history against the machine; the purchase adds
its own invariants: seat counters equal the purchases' seats, and each
purchase holds the seat its state says.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from saga.purchase.app import purchase_app
from saga.testing import run_saga_test
from steps import PAYMENT_METHODS
from tests.conftest import POSTGRES_URL, require_postgres
from tests.helpers import rows

INTENSIVES = {"small": 2, "large": 4}
PRICE = {"amount_minor": 1000, "currency": "EUR"}
PAYLOADS = {
    event: st.sampled_from(
        [
            {},
            PRICE,
            {"amount_minor": 999, "currency": "EUR"},
            {"provider_status": "not_paid"},
            {"provider_status": "paid", **PRICE},
            {"provider_status": "unknown"},
        ]
    )
    for event in ("payment_succeeded", "hold_expired", "refund_succeeded", "cancel")
}
REQUESTS = st.fixed_dictionaries(
    {
        # The names `saga instances start purchase --request` takes: the kit's
        # replay lines run as printed.
        "intensive_id": st.sampled_from(sorted(INTENSIVES)),
        "student_id": st.sampled_from(["ann", "bob", "cyd", "dan"]),
        # Every way the sandbox provider answers: declines, timeouts, late payments...
        "payment_method": st.sampled_from(PAYMENT_METHODS),
    }
)


def add_intensives(engine):
    for name, seats in INTENSIVES.items():
        engine.services.catalogue.add(name, seats=seats, price="10.00", currency="EUR")


def buy(engine, operation_id, request):
    started = engine.services.purchases.start(
        operation_id=operation_id,
        intensive_id=request["intensive_id"],
        student_id=request["student_id"],
        payment_method=request["payment_method"],
    )
    return started.purchase.id


def seat_counters_match_the_purchases(engine):
    for row in rows(engine, _LEDGER):
        if (row["held"], row["taken"]) != (row["purchases_held"], row["purchases_taken"]):
            yield f"intensive {row['id']}: counters {row['held']}/{row['taken']} " + (
                f"but purchases hold {row['purchases_held']}/{row['purchases_taken']}"
            )


def each_purchase_holds_what_its_state_says(engine):
    machine = engine.registry.get("purchase").machine
    for purchase in engine.services.purchases.list(limit=1000):
        declared = machine.state(purchase.state).meta["seat"]
        if declared is None:
            came_from = engine.services.purchases.get(purchase.id).history[-1].from_state
            declared = "free" if came_from == "refund_pending" else "held"
        if declared != purchase.seat:
            yield f"purchase {purchase.id} in {purchase.state} holds a {purchase.seat} seat"


_LEDGER = """
    SELECT i.id, i.capacity, i.held, i.taken,
           (SELECT count(*) FROM purchases p WHERE p.intensive_id = i.id AND p.seat = 'held')
               AS purchases_held,
           (SELECT count(*) FROM purchases p WHERE p.intensive_id = i.id AND p.seat = 'taken')
               AS purchases_taken
    FROM intensives i
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_purchase_follows_its_machine_and_keeps_seats_exact(backend):
    """Random purchases, events, clock jumps and crashes never break a seat, a state or a trail."""
    url = None
    if backend == "postgres":
        require_postgres()
        url = POSTGRES_URL
    run_saga_test(
        purchase_app(),
        kind="purchase",
        url=url,
        setup=add_intensives,
        start=buy,
        requests=REQUESTS,
        payloads=PAYLOADS,
        invariants=[seat_counters_match_the_purchases, each_purchase_holds_what_its_state_says],
        # The kit fires the provider's events by hand here (payment_succeeded,
        # refund_succeeded with made-up payloads), which no provider backs:
        # the purchase's money invariants rightly fail on that side door.
        # Until the machine declares who fires each event, they are left out.
        app_invariants=False,
        max_examples=25 if backend == "sqlite" else 10,
    )
