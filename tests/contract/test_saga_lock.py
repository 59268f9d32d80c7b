"""
Contract: a transaction reads a saga it holds locked once; its own transitions update the copy.

Steps lock their saga and then fire an event on it; the second lock would
only repeat a round trip, since the first keeps every other writer out.
On SQLite and on PostgreSQL.
"""

from __future__ import annotations

from saga import fire_in
from saga.sagas import lock_in
from tests.helpers import statements_seen


def purchase(engine):
    engine.services.catalogue.add("js-101", seats=2, price="49.90", currency="EUR")
    return engine.services.purchases.start(
        operation_id="op-1", intensive_id="js-101", student_id="s-1"
    )


def test_a_saga_locked_twice_in_a_transaction_is_read_once(engine, monkeypatch):
    saga_id = purchase(engine).purchase.id
    seen = statements_seen(engine.db, monkeypatch)
    first, second = engine.db.transaction(lambda tx: (lock_in(tx, saga_id), lock_in(tx, saga_id)))
    assert first == second
    assert 1 == sum("FROM sagas WHERE id" in statement for statement in seen)


def test_a_transition_in_the_transaction_updates_the_locked_copy(engine):
    saga_id = purchase(engine).purchase.id

    def work(tx):
        before = lock_in(tx, saga_id)
        fire_in(
            tx, engine.registry, saga_id, "payment_failed", payload={}, actor="test", cause="test"
        )
        return before, lock_in(tx, saga_id)

    before, after = engine.db.transaction(work)
    assert ("reserved", "cancelled") == (before.state, after.state)
    assert before.version + 1 == after.version
    assert after == engine.sagas.get(saga_id)


def test_each_transaction_locks_the_saga_afresh(engine, monkeypatch):
    saga_id = purchase(engine).purchase.id
    seen = statements_seen(engine.db, monkeypatch)
    engine.db.transaction(lambda tx: lock_in(tx, saga_id))
    engine.db.transaction(lambda tx: lock_in(tx, saga_id))
    assert 2 == sum("FROM sagas WHERE id" in statement for statement in seen)
