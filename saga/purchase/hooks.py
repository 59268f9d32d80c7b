"""
What a purchase's transitions do in their own transaction, and what its hold expiry asks first.

:class:`AccessHook` grants access with the confirmation,
:class:`LatePaymentHook` looks at the provider again after a purchase ended
with its payment unsettled, and :class:`ExpiryAnswerHook` records what
:func:`hold_expiry_payload` heard from the provider before the hold expired.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from saga.purchase.answers import QUEUE
from saga.purchase.payments import record_payment
from saga.queue import NewJob, enqueue_in, error_text
from steps import ProviderPayment
from steps.purchase import payment_evidence, payment_key, read_payment

if TYPE_CHECKING:
    from saga import SagaRecord, Tx
    from saga.sagas import Change
    from saga.store import Database
    from steps import PaymentProvider


class LatePaymentHook:
    """
    Look at the provider again after a purchase ended without a known payment.

    A purchase can expire or be cancelled while its payment is pending or its
    outcome unknown; if money arrives and no webhook says so, this check turns
    it into a refund.  Queued in the transition's own transaction.
    """

    def __init__(self, delay_seconds: float) -> None:
        self.delay_seconds = delay_seconds

    def on_create(self, tx: Tx, saga: SagaRecord) -> None:
        """Nothing to do for a new purchase."""

    def on_transition(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Change) -> None:
        """Queue a late check when a purchase ends with its payment unsettled."""
        if after.state not in ("expired", "cancelled"):
            return
        payment = tx.one("get_payment", saga_id=after.id)
        if payment is None or payment["status"] not in ("intent", "pending", "unknown"):
            return
        enqueue_in(
            tx,
            NewJob(
                id=f"step:{after.id}:{after.version}:check_payment:late",
                queue=QUEUE,
                kind="purchase.check_payment",
                payload={"saga_id": after.id, "late": True},
                saga_id=after.id,
                delay_seconds=self.delay_seconds,
            ),
        )


class AccessHook:
    """
    Give the student access in the transaction that confirms the purchase.

    Access is a row in this database, not a call to the outside: granted with
    the confirmation, "confirmed" and "has access" are one fact (DESIGN.md:
    confirmed means paid, verified, access granted) and the purchase needs no
    job, claim and completion for it.  Taking access back stays a step of
    ``refund_pending`` (``revoke_access``).
    """

    def on_create(self, tx: Tx, saga: SagaRecord) -> None:
        """Nothing to do for a new purchase."""

    def on_transition(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Change) -> None:
        """Grant access when the purchase becomes confirmed."""
        if after.state == "confirmed" and before.state != "confirmed":
            tx.run("grant_access", saga_id=after.id, student_id=after.data["student_id"])


class ExpiryAnswerHook:
    """
    Record what the provider said when a hold expired, with the transition it decided.

    The timer asks the provider before it fires (:func:`hold_expiry_payload`);
    what it heard is money evidence like any other answer, so it is written
    to the payment record in the transition's own transaction.
    """

    def on_create(self, tx: Tx, saga: SagaRecord) -> None:
        """Nothing to do for a new purchase."""

    def on_transition(self, tx: Tx, before: SagaRecord, after: SagaRecord, change: Change) -> None:
        """Record the payment the expiry check saw, if it saw one."""
        seen = change.payload.get("provider_payment")
        if change.transition.event != "hold_expired" or not seen or not seen.get("found"):
            return
        record_payment(
            tx,
            after.id,
            ProviderPayment(
                payment_id=str(seen["payment_id"]),
                key=payment_key(after.id),
                status=seen["status"],
                amount_minor=int(seen["amount_minor"]),
                charged_minor=None if seen["charged_minor"] is None else int(seen["charged_minor"]),
                currency=str(seen["currency"]),
            ),
        )


def hold_expiry_payload(
    db: Database, provider: PaymentProvider, saga: SagaRecord, event: str
) -> dict[str, Any]:
    """
    Ask the provider before a hold expires (DESIGN.md §1).

    Paid: the payload says so, with the amount (the purchase confirms, or goes
    to reconciliation if the amount is wrong).  Not paid, or still pending:
    the intent is cancelled first and the purchase expires; a success that
    still comes later is a late payment, refunded.  No answer: unknown, and
    the purchase goes to reconciliation.  What the provider said travels in
    the payload, and :class:`ExpiryAnswerHook` records it.
    """
    if event != "hold_expired":
        return {}
    intent = db.transaction(lambda tx: tx.one("get_payment", saga_id=saga.id), write=False)
    if intent is None:
        return {"provider_status": "not_paid", "checked": "no payment was requested"}
    try:
        payment = provider.payment_status(key=intent["key"])
        if payment is not None and payment.status == "pending":
            payment = provider.cancel_payment(key=intent["key"]) or payment
    except Exception as exc:  # noqa: BLE001 - no answer is an unknown outcome, never "not paid"
        return {"provider_status": "unknown", "error": error_text(exc)}
    reading = read_payment(
        payment, amount_minor=int(saga.data["amount_minor"]), currency=str(saga.data["currency"])
    )
    evidence = dict(payment_evidence(payment))
    if reading in ("paid", "mismatch") and payment is not None:
        return {
            "provider_status": "paid",
            "payment_id": payment.payment_id,
            "amount_minor": payment.charged_minor,
            "currency": payment.currency,
            "provider_payment": evidence,
        }
    return {"provider_status": "not_paid", "checked": evidence, "provider_payment": evidence}
