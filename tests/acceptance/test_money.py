"""
Money is never rewritten, and never moves on an event's word or an operator's alone.

Each test is one defect of issue 7 that made the engine's records disagree
with the provider's money; each runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from saga.core.ops.verify import verify
from saga.core.queue.kinds import Handlers
from saga.core.recon.items import ContradictedDecision
from saga.core.workers.worker import Worker
from saga.exceptions import ProviderUnavailable
from saga.purchase.inbox import ProviderEvent
from saga.purchase.steps import PurchaseSteps
from tests.helpers import rows, saga_jobs, scalar
from tests.purchases import cli_json, settle


@pytest.fixture
def shop(engine):
    engine.services.catalogue.add("js", seats=5, price="49.00", currency="EUR")
    return engine


def url_of(engine):
    return engine.db.url.render_as_string(hide_password=False)


def start(engine, op, method="pm_ok", hold=600):
    return engine.services.purchases.start(
        operation_id=op, intensive_id="js", student_id=op, payment_method=method, hold_seconds=hold
    ).purchase


def request_payments(engine):
    """Run only the payment requests, so that what follows is the test's to decide."""
    kinds = PurchaseSteps(engine.db, engine.registry, engine.services.provider_getter).kinds()
    handlers = Handlers([k for k in kinds if k.name == "purchase.request_payment"])
    Worker(engine.db, handlers, listen=False).run(burst=True)


def deliver(engine, event_id, kind, payment_id, amount=4900, currency="EUR"):
    return engine.services.inbox.deliver(
        ProviderEvent(
            event_id=event_id,
            type=kind,
            payment_id=payment_id,
            amount_minor=amount,
            currency=currency if amount is not None else None,
        )
    )


def states(engine, saga_id):
    return [entry.to_state for entry in engine.services.purchases.get(saga_id).history]


def broken(engine):
    return {i.name for i in verify(engine).invariants if i.problems}


def provider_settles(engine, payment_id, status="succeeded"):
    """The provider completes a pending charge on its side."""
    with engine.services.sandbox.db.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE sandbox_charges SET status = :status, charged_minor = amount_minor "
                "WHERE payment_id = :payment_id"
            ),
            {"status": status, "payment_id": payment_id},
        )


@pytest.mark.slow
def test_a_paid_purchase_reads_reserved_payment_pending_confirmed(shop):
    """Writing the payment intent moves the purchase to payment_pending (defect 1)."""
    purchase = start(shop, "op-1")
    settle(url_of(shop))
    assert ["reserved", "payment_pending", "confirmed"] == states(shop, purchase.id)
    intent = rows(shop, "SELECT event, actor FROM saga_transitions WHERE version = 2")
    assert [{"event": "payment_requested", "actor": "worker"}] == intent


@pytest.mark.slow
def test_an_event_with_other_money_never_rewrites_a_settled_payment(shop):
    """A later success of 12.00 USD leaves 49.00 EUR recorded, kept as evidence (defect 2)."""
    purchase = start(shop, "op-1")
    settle(url_of(shop))
    payment_id = shop.services.purchases.get(purchase.id).payment["payment_id"]
    delivery = deliver(shop, "evt-forged", "payment.succeeded", payment_id, 1200, "USD")
    payment = shop.services.purchases.get(purchase.id).payment
    assert (4900, "succeeded") == (payment["charged_minor"], payment["status"])
    assert ("absorbed", "confirmed") == (delivery.outcome, delivery.state)
    assert delivery.contradictions
    item = shop.recon.find()[0]
    assert (delivery.review_item, "review", "event_contradicts_provider", "operators") == (
        item.id,
        item.kind,
        item.reason,
        item.owner,
    )
    assert 1200 == item.evidence["contradictions"][0]["event"]["amount_minor"]
    assert set() == broken(shop)


def test_a_premature_success_for_a_pending_charge_confirms_nothing(shop):
    """payment.succeeded while the provider says pending: evidence, no money (defect 6)."""
    purchase = start(shop, "op-1", "pm_late")
    request_payments(shop)
    payment_id = shop.services.purchases.get(purchase.id).payment["payment_id"]
    delivery = deliver(shop, "evt-early", "payment.succeeded", payment_id)
    after = shop.services.purchases.get(purchase.id)
    assert ("payment_pending", "pending") == (after.state, after.payment["status"])
    assert "absorbed" == delivery.outcome
    assert ["the event says succeeded, the provider says pending"] == list(delivery.contradictions)
    assert "pending" == delivery.provider["payment"]["status"]


def test_a_success_the_provider_denies_goes_to_a_human(shop):
    """A declined payment, then a forged success: cancelled stays, a review item opens."""
    purchase = start(shop, "op-1", "pm_declined")
    settle(url_of(shop))
    payment_id = shop.services.purchases.get(purchase.id).payment["payment_id"]
    delivery = deliver(shop, "evt-forged", "payment.succeeded", payment_id)
    assert "cancelled" == shop.services.purchases.get(purchase.id).state
    assert delivery.review_item is not None
    assert 0 == scalar(shop, "SELECT count(*) FROM payments WHERE status = 'succeeded'")


def test_a_stale_failure_first_does_not_cancel_a_paid_purchase(shop):
    """A failure about an earlier attempt, then the success: confirmed, one charge (defect 5)."""
    purchase = start(shop, "op-1", "pm_late")
    request_payments(shop)
    payment_id = shop.services.purchases.get(purchase.id).payment["payment_id"]
    stale = deliver(shop, "evt-stale", "payment.failed", payment_id, amount=None)
    assert ("absorbed", "payment_pending") == (stale.outcome, stale.state)
    provider_settles(shop, payment_id)
    late = deliver(shop, "evt-success", "payment.succeeded", payment_id)
    assert ("applied", "confirmed") == (late.outcome, late.state)


@pytest.mark.slow
def test_pm_stale_failure_first_ends_confirmed_with_one_charge_and_no_refund(shop):
    """The sandbox method: the stale failure webhook comes first, the purchase is paid."""
    purchase = start(shop, "op-1", "pm_stale_failure_first")
    settle(url_of(shop))
    after = shop.services.purchases.get(purchase.id)
    assert ("confirmed", None) == (after.state, after.refund)
    ledger = shop.services.sandbox.ledger()
    assert ["succeeded"] == [c["status"] for c in ledger["charges"]]
    assert [] == ledger["refunds"]
    inbox = rows(shop, "SELECT type, outcome FROM inbox ORDER BY received_at")
    assert {"type": "payment.failed", "outcome": "absorbed"} == inbox[0]
    assert set() == broken(shop)


@pytest.fixture
def timed_out(shop):
    """pm_timeout_before_charge: an item for a payment the provider never took."""
    purchase = start(shop, "op-1", "pm_timeout_before_charge")
    request_payments(shop)
    item = shop.recon.find()[0]
    shop.recon.assign(item.id, operator="ann")
    return purchase, item


def test_an_operator_cannot_confirm_money_that_was_never_taken(shop, timed_out):
    """resolve --outcome paid is refused after asking the provider; audited (defect 3)."""
    purchase, item = timed_out
    with pytest.raises(ContradictedDecision, match="external-ref"):
        shop.recon.resolve(item.id, outcome="paid", operator="ann", reason="customer says paid")
    after = shop.services.purchases.get(purchase.id)
    assert ("needs_reconciliation", "held") == (after.state, after.seat)
    _, events = shop.recon.show(item.id)
    assert "refused" == events[-1]["action"]
    assert "the provider says not_paid" in events[-1]["detail"]["why"]


def test_the_cli_refusal_of_an_unbacked_paid_exits_3(shop, timed_out, db_url, capsys):
    """The same refusal through the command line: exit 3, nothing changed."""
    _, item = timed_out
    code, _ = cli_json(
        capsys,
        "recon",
        "resolve",
        item.id,
        "--outcome",
        "paid",
        "--operator",
        "ann",
        "--reason",
        "trust me",
        "--db",
        db_url,
    )
    assert 3 == code


@pytest.mark.slow
def test_money_received_outside_the_provider_confirms_with_its_trace(shop, timed_out):
    """paid --external-ref: confirmed, the transfer recorded, verify counts it (defect 4)."""
    purchase, item = timed_out
    shop.recon.resolve(
        item.id,
        outcome="paid",
        operator="ann",
        reason="bank transfer seen on the statement",
        external_ref="BANK-2026-001",
    )
    assert "confirmed" == shop.services.purchases.get(purchase.id).state
    moved = rows(
        shop, "SELECT direction, reference, amount_minor, operator FROM external_movements"
    )
    assert [
        {"direction": "in", "reference": "BANK-2026-001", "amount_minor": 4900, "operator": "ann"}
    ] == moved
    settle(url_of(shop))  # the access grant
    assert set() == broken(shop)


def test_an_external_amount_other_than_the_price_is_refused(shop, timed_out):
    """An external payment must be the price: otherwise confirmed would lie about the money."""
    _, item = timed_out
    with pytest.raises(ContradictedDecision, match=r"must be 49\.00 EUR"):
        shop.recon.resolve(
            item.id,
            outcome="paid",
            operator="ann",
            reason="partial transfer",
            external_ref="BANK-1",
            amount_minor=1000,
        )
    assert 0 == scalar(shop, "SELECT count(*) FROM external_movements")


@pytest.mark.slow
def test_refunded_by_hand_keeps_verify_green_for_good(shop, db_url):
    """A declined refund paid back by transfer: refunded, and verify stays green (defect 4)."""
    purchase = start(shop, "op-1", "pm_refund_fails")
    settle(db_url)
    shop.services.purchases.cancel(purchase.id, reason="student asked")
    settle(db_url)
    item = shop.recon.find()[0]
    shop.recon.resolve(
        item.id,
        outcome="refunded",
        operator="ann",
        reason="refunded by bank transfer",
        external_ref="BANK-OUT-7",
    )
    settle(db_url)
    assert "refunded" == shop.services.purchases.get(purchase.id).state
    assert set() == broken(shop)


def test_no_answer_from_the_provider_refuses_the_decision(shop, timed_out, monkeypatch):
    """A decision that cannot be checked is not taken: exit 1, audited, nothing changed."""
    _, item = timed_out

    def down(**_):
        raise ConnectionError("provider unreachable")

    monkeypatch.setattr(shop.services.sandbox, "payment_status", down)
    with pytest.raises(ProviderUnavailable):
        shop.recon.resolve(item.id, outcome="not_paid", operator="ann", reason="r")
    assert "needs_reconciliation" == shop.services.purchases.get(item.saga_id).state
    assert "refused" == shop.recon.show(item.id)[1][-1]["action"]


def test_an_event_is_not_recorded_while_the_provider_cannot_be_asked(shop, monkeypatch):
    """No answer from the provider: the delivery fails, nothing recorded, the sender retries."""
    purchase = start(shop, "op-1", "pm_late")
    request_payments(shop)
    payment_id = shop.services.purchases.get(purchase.id).payment["payment_id"]

    def down(**_):
        raise ConnectionError("provider unreachable")

    monkeypatch.setattr(shop.services.sandbox, "payment_status", down)
    with pytest.raises(ProviderUnavailable):
        deliver(shop, "evt-1", "payment.succeeded", payment_id)
    assert 0 == scalar(shop, "SELECT count(*) FROM inbox")


def test_a_refused_transition_completes_its_job_instead_of_dead_lettering(shop):
    """A step's answer for a purchase that moved on is logged and done (defect 7)."""
    from saga.core.queue.leases import Queue
    from saga.purchase.answers import queue_step

    purchase = start(shop, "op-1")
    request_payments(shop)
    shop.services.purchases.cancel(
        purchase.id, reason="changed plans"
    )  # refund_pending, not refunded yet
    shop.db.transaction(lambda tx: queue_step(tx, purchase.id, "check_payment", delay=0))
    kinds = PurchaseSteps(shop.db, shop.registry, shop.services.provider_getter).kinds()
    check = Handlers([k for k in kinds if k.name == "purchase.check_payment"])
    Worker(shop.db, check, listen=False).run(
        burst=True
    )  # "paid" is not an event refund_pending takes
    (job_id,) = [
        j["id"] for j in saga_jobs(shop, purchase.id) if j["kind"] == "purchase.check_payment"
    ]
    assert "done" == Queue(shop.db).get(job_id).state
    assert "refund_pending" == shop.services.purchases.get(purchase.id).state
