"""
Real concurrency: many processes racing for the last seats and for one
operation id.  Each process opens its own engine, waits at a barrier, and
fires at once.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.helpers import scalar
from tests.parallel import race

PROCESSES = 24


def buy(url, operation_id, student_id, payment_method, *, prepare=False, prepared=None):
    """One purchase attempt in a child process: the saga id, or the error class."""
    from saga import Engine

    if prepare:
        return None
    with Engine(url) as engine:
        try:
            result = engine.services.purchases.start(
                operation_id=operation_id,
                intensive_id="hot",
                student_id=student_id,
                payment_method=payment_method,
            )
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            return ("error", type(exc).__name__)
        return ("ok", result.purchase.id)


@pytest.mark.slow
def test_racing_for_the_last_seats_sells_exactly_capacity(engine, db_url):
    """24 buyers, 5 seats: exactly 5 purchases, 19 sold out, counters exact."""
    engine.services.catalogue.add("hot", seats=5, price="10.00", currency="EUR")
    outcomes = race(buy, [(db_url, f"op-{n}", f"student-{n}", "pm_ok") for n in range(PROCESSES)])
    kinds = Counter(kind if kind == "ok" else detail for kind, detail in outcomes)
    assert {"ok": 5, "SoldOut": PROCESSES - 5} == dict(kinds)
    intensive = engine.services.catalogue.get("hot")
    assert (5, 0, 0) == (intensive.held, intensive.taken, intensive.free)
    assert 5 == scalar(engine, "SELECT count(*) FROM purchases WHERE seat = 'held'")
    assert 5 == scalar(engine, "SELECT count(*) FROM sagas")


@pytest.mark.slow
def test_racing_one_operation_id_creates_one_saga(engine, db_url):
    """24 copies of one request: one saga, and every caller gets its id."""
    engine.services.catalogue.add("hot", seats=30, price="10.00", currency="EUR")
    outcomes = race(buy, [(db_url, "op-same", "student-1", "pm_ok")] * PROCESSES)
    assert {"ok"} == {kind for kind, _ in outcomes}
    assert 1 == len({saga_id for _, saga_id in outcomes})
    assert 1 == scalar(engine, "SELECT count(*) FROM sagas")
    assert 1 == scalar(engine, "SELECT count(*) FROM saga_operations")
    assert 1 == engine.services.catalogue.get("hot").held


@pytest.mark.slow
def test_racing_one_operation_id_with_two_payloads_keeps_one(engine, db_url):
    """Half the callers reuse the id for another request: one saga; the losers conflict."""
    engine.services.catalogue.add("hot", seats=30, price="10.00", currency="EUR")
    calls = [
        (db_url, "op-same", "student-1", "pm_ok"),
        (db_url, "op-same", "student-1", "pm_declined"),
    ] * (PROCESSES // 2)
    outcomes = race(buy, calls)
    winners = {saga_id for kind, saga_id in outcomes if kind == "ok"}
    losers = [detail for kind, detail in outcomes if kind == "error"]
    assert 1 == len(winners)
    assert PROCESSES // 2 == len(losers)
    assert {"IdempotencyConflict"} == set(losers)
    assert 1 == scalar(engine, "SELECT count(*) FROM sagas")


@pytest.mark.slow
def test_one_student_racing_with_many_operation_ids_holds_one_seat(engine, db_url):
    """One student, 16 different operation ids at once: one seat, the rest refused."""
    engine.services.catalogue.add("hot", seats=30, price="10.00", currency="EUR")
    outcomes = race(buy, [(db_url, f"op-{n}", "student-1", "pm_ok") for n in range(16)])
    kinds = Counter(kind if kind == "ok" else detail for kind, detail in outcomes)
    assert {"ok": 1, "DuplicatePurchase": 15} == dict(kinds)
    assert 1 == engine.services.catalogue.get("hot").held
