"""
Faults around payments, on SQLite and on PostgreSQL: a worker killed after
the provider charged, duplicate and reordered webhooks, expiry racing the
payment, a late payment after the seat was sold again.
"""

from __future__ import annotations

import multiprocessing
import os

import pytest

from saga import Engine
from saga.core.faults import EXIT_CODE
from saga.core.queue.kinds import Handlers
from saga.core.queue.leases import Queue
from saga.core.sagas.timers import timer_kind
from saga.core.workers.supervisor import builtin_handlers
from saga.core.workers.worker import Worker
from saga.purchase.inbox import ProviderEvent
from tests.helpers import dump, expire_lease, make_due, rows, scalar
from tests.parallel import race
from tests.purchases import settle


def start(engine, op, student, method="pm_ok", hold=60, intensive="js"):
    return engine.services.purchases.start(
        operation_id=op,
        intensive_id=intensive,
        student_id=student,
        payment_method=method,
        hold_seconds=hold,
    ).purchase


def charges(engine, saga_id):
    return [c for c in engine.services.sandbox.ledger()["charges"] if c["reference"] == saga_id]


def refunds(engine, saga_id):
    return [r for r in engine.services.sandbox.ledger()["refunds"] if r["reference"] == saga_id]


@pytest.fixture
def shop(engine):
    engine.services.catalogue.add("js", seats=3, price="49.00", currency="EUR")
    return engine


def crash_after_charge(url, marker):
    """A worker process that dies right after the provider charged (no cleanup, like a kill)."""
    os.environ["SAGA_CRASH_POINTS"] = "request_payment.after_call"
    os.environ["SAGA_CRASH_MARKER"] = marker
    with Engine(url) as engine:
        Worker(engine.db, builtin_handlers(engine), listen=False).run(burst=True)


@pytest.mark.slow
def test_crash_after_the_charge_recovers_with_the_same_key(shop, db_url, tmp_path):
    """Killed after the provider charged, before recording it: the retry reuses the key."""
    purchase = start(shop, "op-1", "s1")
    ctx = multiprocessing.get_context("forkserver")
    worker = ctx.Process(target=crash_after_charge, args=(db_url, str(tmp_path / "crash")))
    worker.start()
    worker.join(timeout=60)
    assert EXIT_CODE == worker.exitcode
    # The intent moved it to payment_pending before the call; the answer is lost.
    assert "payment_pending" == shop.services.purchases.get(purchase.id).state
    assert 1 == len(charges(shop, purchase.id))  # but the provider charged
    # The provider's webhook is lost too: only the retry can find out.
    sandbox_execute(shop, "DELETE FROM sandbox_webhooks")
    expire_lease(shop, f"step:{purchase.id}:1:request_payment")  # the dead worker's lease
    Worker(shop.db, builtin_handlers(shop), listen=False).run(burst=True)
    after = shop.services.purchases.get(purchase.id)
    assert "confirmed" == after.state
    ledger = charges(shop, purchase.id)
    assert [("succeeded", f"pay:{purchase.id}")] == [(c["status"], c["key"]) for c in ledger]
    job = Queue(shop.db).get(f"step:{purchase.id}:1:request_payment")
    assert ("done", 2) == (job.state, job.attempts)
    assert "worker" == after.history[-1].actor


def sandbox_execute(engine, sql, **params):
    import sqlalchemy as sa

    with engine.services.sandbox.db.engine.begin() as conn:
        conn.execute(sa.text(sql), params)


def provider_settles(engine, payment_id, status="succeeded"):
    """The provider finishes a pending charge on its side (a transfer completes, or fails)."""
    sandbox_execute(
        engine,
        "UPDATE sandbox_charges SET status = :status, "
        "charged_minor = CASE WHEN :status = 'succeeded' THEN amount_minor END "
        "WHERE payment_id = :payment_id",
        status=status,
        payment_id=payment_id,
    )


def _deliver(engine, event_id, kind, payment_id, amount=4900):
    return engine.services.inbox.deliver(
        ProviderEvent(
            event_id=event_id, type=kind, payment_id=payment_id, amount_minor=amount, currency="EUR"
        )
    )


@pytest.fixture
def pending(shop):
    """A purchase whose payment is pending at the provider (pm_late), and its payment id."""
    purchase = start(shop, "op-1", "s1", method="pm_late")
    settle(shop.db.url.render_as_string(hide_password=False))
    payment = shop.services.purchases.get(purchase.id).payment
    assert "pending" == payment["status"]
    return purchase, payment["payment_id"]


@pytest.mark.slow
def test_duplicate_webhook_applies_once(shop, pending):
    """The same event twice: applied once, the second recorded as a duplicate."""
    _, payment_id = pending
    provider_settles(shop, payment_id)
    first = _deliver(shop, "evt-1", "payment.succeeded", payment_id)
    before = dump(shop)
    again = _deliver(shop, "evt-1", "payment.succeeded", payment_id)
    assert ("applied", "confirmed") == (first.outcome, first.state)
    assert (True, "applied") == (again.duplicate, again.outcome)
    assert before == dump(shop)


@pytest.mark.slow
def test_same_event_id_with_other_content_is_a_recorded_conflict(shop, pending):
    """Reusing an event id for other content is recorded, never applied."""
    purchase, payment_id = pending
    provider_settles(shop, payment_id, status="failed")
    _deliver(shop, "evt-1", "payment.failed", payment_id, amount=None)
    conflict = _deliver(shop, "evt-1", "payment.succeeded", payment_id)
    assert conflict.conflict
    assert "cancelled" == shop.services.purchases.get(purchase.id).state
    assert 1 == scalar(shop, "SELECT count(*) FROM inbox_conflicts WHERE event_id = 'evt-1'")


@pytest.mark.slow
def test_reordered_webhook_never_regresses(shop, pending):
    """An older failure arriving after the success changes nothing."""
    purchase, payment_id = pending
    provider_settles(shop, payment_id)
    _deliver(shop, "evt-new", "payment.succeeded", payment_id)
    late = _deliver(shop, "evt-old", "payment.failed", payment_id, amount=None)
    assert ("absorbed", "confirmed") == (late.outcome, late.state)
    assert "confirmed" == shop.services.purchases.get(purchase.id).state
    assert "succeeded" == shop.services.purchases.get(purchase.id).payment["status"]


def test_event_for_an_unknown_payment_is_kept_unmatched(shop):
    """A webhook nobody expects is recorded for investigation, not lost, not an error."""
    delivery = _deliver(shop, "evt-x", "payment.succeeded", "pay_nobody")
    assert ("unmatched", None) == (delivery.outcome, delivery.saga_id)
    assert [{"outcome": "unmatched"}] == rows(shop, "SELECT outcome FROM inbox")


def fire_race(url, purchase_id, payment_id, role, *, prepare=False, prepared=None):
    """One side of the race, in its own process: the webhook or the hold timer."""
    with Engine(url) as engine:
        if prepare:
            return None
        if role == "webhook":
            delivery = engine.services.inbox.deliver(
                ProviderEvent(
                    event_id=f"evt-{purchase_id}",
                    type="payment.succeeded",
                    payment_id=payment_id,
                    amount_minor=4900,
                    currency="EUR",
                )
            )
            return ("webhook", delivery.outcome)
        worker = Worker(engine.db, Handlers([timer_kind(engine)]), listen=False)
        return ("timer", worker.run_once())


@pytest.mark.slow
def test_expiry_racing_the_payment_keeps_seats_and_money_right(shop, db_url):
    """Hold expiry and the success webhook at once: either confirmed, or expired and refunded."""
    shop.services.catalogue.add("race", seats=10, price="49.00", currency="EUR")
    purchases = [
        start(shop, f"op-{n}", f"s{n}", method="pm_late", hold=60, intensive="race")
        for n in range(4)
    ]
    settle(db_url)
    calls = []
    for purchase in purchases:
        payment_id = shop.services.purchases.get(purchase.id).payment["payment_id"]
        make_due(shop, f"timer:{purchase.id}:2")
        calls += [
            (db_url, purchase.id, payment_id, "webhook"),
            (db_url, purchase.id, payment_id, "timer"),
        ]
    race(fire_race, calls)
    settle(db_url)
    finals = {shop.services.purchases.get(p.id).state for p in purchases}
    assert finals <= {"confirmed", "refunded"}
    for purchase in purchases:
        state = shop.services.purchases.get(purchase.id).state
        assert len(refunds(shop, purchase.id)) == (1 if state == "refunded" else 0)
    intensive = shop.services.catalogue.get("race")
    confirmed = sum(1 for p in purchases if shop.services.purchases.get(p.id).state == "confirmed")
    assert (0, confirmed) == (intensive.held, intensive.taken)


@pytest.mark.slow
def test_late_payment_after_the_seat_was_sold_again(shop, db_url):
    """Expired, seat sold to someone else, then the money arrives: one refund, seats intact."""
    shop.services.catalogue.add("solo", seats=1, price="49.00", currency="EUR")
    late = start(shop, "op-late", "ann", method="pm_late", hold=600, intensive="solo")
    settle(db_url)  # the request: the payment is pending at the provider
    make_due(shop, f"timer:{late.id}:2")  # the hold runs out, by the database clock
    settle(db_url)  # the provider is told to cancel; the transfer completes anyway
    assert "expired" in [h.to_state for h in shop.services.purchases.get(late.id).history]
    other = start(shop, "op-bob", "bob", intensive="solo")
    settle(db_url)
    assert "confirmed" == shop.services.purchases.get(other.id).state
    assert "refunded" == shop.services.purchases.get(late.id).state
    assert ["succeeded"] == [r["status"] for r in refunds(shop, late.id)]
    intensive = shop.services.catalogue.get("solo")
    assert (1, 0, 1, 0) == (intensive.capacity, intensive.held, intensive.taken, intensive.free)


@pytest.mark.slow
def test_event_that_overtook_the_payment_answer_is_matched_when_delivered_again(shop, pending):
    """Unmatched is not consumed: the provider's retry applies once the payment is known."""
    purchase, payment_id = pending
    shop.db.transaction(
        lambda tx: tx.execute_sql("UPDATE payments SET provider_ref = NULL")
    )  # as if the answer had not come back yet
    first = _deliver(shop, "evt-early", "payment.succeeded", payment_id)
    assert "unmatched" == first.outcome
    shop.db.transaction(
        lambda tx: tx.run(
            "record_payment_answer",
            saga_id=purchase.id,
            status="pending",
            provider_ref=payment_id,
            charged_minor=None,
            charged_currency=None,
            job_id=None,
            lease_token=None,
        )
    )
    provider_settles(shop, payment_id)
    again = _deliver(shop, "evt-early", "payment.succeeded", payment_id)
    assert ("applied", "confirmed") == (again.outcome, again.state)


def test_access_comes_with_the_confirmation(shop, db_url):
    """The transaction that confirms the purchase grants the access: one fact, no job for it."""
    from saga.purchase.steps import PurchaseSteps

    purchase = start(shop, "op-1", "s1")
    steps = PurchaseSteps(shop.db, shop.registry, shop.services.provider_getter)
    kinds = {k.name: k for k in steps.kinds()}
    Worker(shop.db, Handlers([kinds["purchase.request_payment"]]), listen=False).run(burst=True)
    assert "confirmed" == shop.services.purchases.get(purchase.id).state
    assert [("s1", None)] == [
        (row["student_id"], row["revoked_at"])
        for row in rows(shop, "SELECT student_id, revoked_at FROM access_grants")
    ]
    assert 0 == scalar(shop, "SELECT count(*) FROM jobs WHERE kind = 'purchase.grant_access'")


def test_an_old_grant_job_gives_no_access_to_a_purchase_that_is_not_confirmed(shop, db_url):
    """A grant job from before access came with the confirmation, run after a cancellation."""
    from saga.purchase.steps import PurchaseSteps
    from saga.queue import NewJob

    purchase = start(shop, "op-1", "s1")
    shop.services.purchases.cancel(purchase.id, reason="changed plans")
    Queue(shop.db).enqueue(
        NewJob(
            id=f"step:{purchase.id}:1:grant_access",
            queue="purchase",
            kind="purchase.grant_access",
            payload={"saga_id": purchase.id, "version": 1, "action": "grant_access"},
            saga_id=purchase.id,
        )
    )
    steps = PurchaseSteps(shop.db, shop.registry, shop.services.provider_getter)
    kinds = {k.name: k for k in steps.kinds()}
    Worker(shop.db, Handlers([kinds["purchase.grant_access"]]), listen=False).run(burst=True)
    assert "done" == Queue(shop.db).get(f"step:{purchase.id}:1:grant_access").state
    assert 0 == scalar(shop, "SELECT count(*) FROM access_grants")


@pytest.mark.slow
def test_money_that_arrives_without_a_webhook_after_expiry_is_refunded(shop, db_url):
    """Expired with the payment in flight, the success webhook lost: the late check refunds."""
    from saga.purchase.steps import PurchaseSteps

    purchase = start(shop, "op-1", "s1", method="pm_late")
    steps = PurchaseSteps(shop.db, shop.registry, shop.services.provider_getter)
    kinds = {k.name: k for k in steps.kinds()}
    Worker(shop.db, Handlers([kinds["purchase.request_payment"]]), listen=False).run(burst=True)
    assert "payment_pending" == shop.services.purchases.get(purchase.id).state
    make_due(shop, f"timer:{purchase.id}:2")  # the hold runs out
    Worker(shop.db, Handlers([timer_kind(shop)]), listen=False).run(burst=True)
    assert "expired" == shop.services.purchases.get(purchase.id).state
    sandbox_execute(shop, "DELETE FROM sandbox_webhooks")  # the provider never tells us
    settle(db_url)
    assert "refunded" == shop.services.purchases.get(purchase.id).state
    assert 1 == len(refunds(shop, purchase.id))
