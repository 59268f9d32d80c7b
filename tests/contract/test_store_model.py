"""
Stateful property test of the purchase store on each backend.

Hypothesis drives random purchases, retries with reused operation ids, and
random events (duplicated, reordered, with good and bad payloads) against a
real database, and after every step checks that seat counters, purchase rows,
states and audit trails agree.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from saga import Engine
from saga.exceptions import (
    DuplicatePurchase,
    IdempotencyConflict,
    SoldOut,
    TransitionNotAllowed,
)
from state_machine import PREVIOUS_STATE
from state_machine.purchase import PURCHASE
from tests.conftest import PostgresSchema, require_postgres
from tests.helpers import rows

INTENSIVES = {"small": 2, "large": 4}
PRICE = {"amount_minor": 1000, "currency": "EUR"}
payloads = st.sampled_from(
    [
        {},
        PRICE,
        {"amount_minor": 999, "currency": "EUR"},
        {"provider_status": "not_paid"},
        {"provider_status": "paid", **PRICE},
        {"provider_status": "unknown"},
    ]
)


class PurchaseStore(RuleBasedStateMachine):
    """The store against the pure machine and the seat invariants."""

    make_url = None  # set per backend

    purchases = Bundle("purchases")

    @initialize()
    def open(self):
        self.url, self.cleanup = type(self).make_url()
        with Engine(self.url, check_schema=False) as setup:
            setup.upgrade()
        self.engine = Engine(self.url)
        for name, seats in INTENSIVES.items():
            self.engine.catalogue.add(name, seats=seats, price="10.00", currency="EUR")
        self.requests = {}

    def teardown(self):
        if hasattr(self, "engine"):
            self.engine.close()
            self.cleanup()

    @rule(
        target=purchases,
        operation=st.sampled_from([f"op-{n}" for n in range(8)]),
        intensive=st.sampled_from(sorted(INTENSIVES)),
        student=st.sampled_from(["ann", "bob", "cyd", "dan"]),
    )
    def start(self, operation, intensive, student):
        request = (intensive, student)
        try:
            result = self.engine.purchases.start(
                operation_id=operation, intensive_id=intensive, student_id=student
            )
        except IdempotencyConflict:
            assert self.requests[operation][0] != request
            return multiple()
        except SoldOut:
            assert 0 == self.engine.catalogue.get(intensive).free
            assert operation not in self.requests
            return multiple()
        except DuplicatePurchase:
            live = [
                p
                for p in self.engine.purchases.list(intensive_id=intensive)
                if p.student_id == student and p.seat != "free"
            ]
            assert len(live) == 1
            return multiple()
        if operation in self.requests:
            assert (request, result.purchase.id) == self.requests[operation]
            assert not result.created
        else:
            assert result.created
            self.requests[operation] = (request, result.purchase.id)
        return result.purchase.id

    @rule(purchase=purchases, event=st.sampled_from(PURCHASE.events), payload=payloads)
    def fire(self, purchase, event, payload):
        before = self.engine.purchases.get(purchase)
        data = {
            "amount_minor": 1000,
            "currency": "EUR",
            PREVIOUS_STATE: (before.history[-1].from_state if before.history else None),
        }
        try:
            expected = PURCHASE.decide(before.state, event, data, payload)
        except TransitionNotAllowed:
            expected = "refused"
        try:
            fired = self.engine.sagas.fire(purchase, event, payload=payload, actor="model")
        except TransitionNotAllowed:
            assert "refused" == expected
            assert before.version == self.engine.purchases.get(purchase).version
            return
        if expected is None:
            assert fired.absorbed
            assert before.version == fired.saga.version
        else:
            assert expected != "refused"
            assert (expected.target, before.version + 1) == (fired.saga.state, fired.saga.version)

    @invariant()
    def seat_counters_match_the_purchases(self):
        if not hasattr(self, "engine"):
            return
        for row in rows(self.engine, _LEDGER):
            assert (row["held"], row["taken"]) == (row["purchases_held"], row["purchases_taken"])
            assert row["held"] + row["taken"] <= row["capacity"]

    @invariant()
    def each_purchase_holds_what_its_state_says(self):
        if not hasattr(self, "engine"):
            return
        for purchase in self.engine.purchases.list(limit=1000):
            declared = PURCHASE.state(purchase.state).meta["seat"]
            if declared is None:
                came_from = self.engine.purchases.get(purchase.id).history[-1].from_state
                declared = "free" if came_from == "refund_pending" else "held"
            assert declared == purchase.seat, purchase.id

    @invariant()
    def one_audit_row_per_version(self):
        if not hasattr(self, "engine"):
            return
        for row in rows(self.engine, _AUDIT):
            assert row["version"] == row["audit_rows"] == row["last_version"]


_LEDGER = """
    SELECT i.id, i.capacity, i.held, i.taken,
           (SELECT count(*) FROM purchases p WHERE p.intensive_id = i.id AND p.seat = 'held')
               AS purchases_held,
           (SELECT count(*) FROM purchases p WHERE p.intensive_id = i.id AND p.seat = 'taken')
               AS purchases_taken
    FROM intensives i
"""
_AUDIT = """
    SELECT s.id, s.version, count(t.id) AS audit_rows, max(t.version) AS last_version
    FROM sagas s JOIN saga_transitions t ON t.saga_id = s.id
    GROUP BY s.id, s.version
"""


def _sqlite_factory(tmp_path_factory):
    def make():
        folder = tmp_path_factory.mktemp("model")
        return f"sqlite:///{folder}/saga.db", lambda: None

    return make


def _postgres_factory():
    def make():
        schema = PostgresSchema()
        return schema.url, schema.drop

    return make


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_store_follows_the_machine_and_keeps_seats_exact(backend, tmp_path_factory):
    """Random purchases and events never break a seat count, a state or the audit."""
    if backend == "postgres":
        require_postgres()
        factory = _postgres_factory()
    else:
        factory = _sqlite_factory(tmp_path_factory)
    machine = type(
        f"PurchaseStore_{backend}", (PurchaseStore,), {"make_url": staticmethod(factory)}
    )
    run_state_machine_as_test(
        machine,
        settings=settings(max_examples=25, stateful_step_count=30, deadline=None),
    )
