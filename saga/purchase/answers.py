"""
The provider's answers about a purchase's money, applied in one transaction.

The steps ask the provider and its webhooks tell the inbox; what either
heard is recorded here first (an answer that contradicts a settled record
goes to a human as evidence) and then moves the saga.  Also the helpers the
steps share: firing an event that may come late, and queueing one more run
of a step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from saga import SagaRecord, fire_in
from saga.exceptions import TransitionNotAllowed
from saga.ops import get_logger
from saga.purchase.payments import payment_record, record_payment, record_refund, refund_evidence
from saga.queue import NewJob, enqueue_in
from saga.recon import open_review
from saga.sagas import lock_in
from steps.purchase import payment_evidence, read_payment

if TYPE_CHECKING:
    from collections.abc import Mapping

    from saga import Registry, Tx
    from steps import ProviderPayment, ProviderRefund

log = get_logger(__name__)

QUEUE: Final = "purchase"
OPEN: Final = ("reserved", "payment_pending")
# Which saga event a provider's reading of a payment is.  "pending" is none:
# the purchase already waits in payment_pending.
PAYMENT_EVENT: Final = {
    "paid": "payment_succeeded",
    "mismatch": "payment_succeeded",
    "not_paid": "payment_failed",
}
REFUND_EVENT: Final = {"succeeded": "refund_succeeded", "failed": "refund_failed"}


def apply_payment(
    tx: Tx,
    registry: Registry,
    saga_id: str,
    payment: ProviderPayment,
    *,
    actor: str,
    cause: str,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """
    Act on what the provider said about a purchase's payment, in ``tx``.

    The answer is recorded first; one that contradicts a settled record goes
    to a human as evidence and moves nothing.  Then the reading moves the
    saga: paid (or another amount: reconciliation) or not paid.  A payment
    still pending for a purchase that is over is cancelled.
    """
    saga = _locked(tx, saga_id)
    if not record_payment(tx, saga_id, payment):
        item = open_review(
            tx,
            saga_id,
            subject="payment",
            reason="provider_contradicts_record",
            evidence={
                "what": f"the provider's answer ({cause}) differs from the settled record",
                "provider": dict(payment_evidence(payment)),
                "record": payment_record(tx.one("get_payment", saga_id=saga_id)),
            },
            actor=actor,
        )
        return {"reading": "contradiction", "review_item": item, "outcome": "absorbed"}
    reading = read_payment(
        payment, amount_minor=int(saga.data["amount_minor"]), currency=str(saga.data["currency"])
    )
    event = PAYMENT_EVENT.get(reading)
    outcome = "absorbed"
    if event is not None:
        payload = {
            "provider_status": payment.status,
            "payment_id": payment.payment_id,
            "amount_minor": payment.charged_minor,
            "currency": payment.currency,
            **(extra or {}),
        }
        outcome = fire_quietly(tx, registry, saga_id, event, payload, cause=cause, actor=actor)
    elif saga.state not in OPEN:
        # The purchase is over but the intent is alive: cancel it.
        queue_step(tx, saga_id, "cancel_payment", delay=0)
    return {"reading": reading, "event": event, "outcome": outcome}


def apply_refund(
    tx: Tx,
    registry: Registry,
    saga_id: str,
    refund: ProviderRefund,
    *,
    actor: str,
    cause: str,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Act on what the provider said about a purchase's refund, in ``tx`` (like payments)."""
    _locked(tx, saga_id)
    if not record_refund(tx, saga_id, refund):
        item = open_review(
            tx,
            saga_id,
            subject="refund",
            reason="provider_contradicts_record",
            evidence={
                "what": f"the provider's answer ({cause}) differs from the settled refund",
                "provider": dict(refund_evidence(refund)),
            },
            actor=actor,
        )
        return {"refund": "contradiction", "review_item": item, "outcome": "absorbed"}
    event = REFUND_EVENT.get(refund.status)
    outcome = "absorbed"
    if event is not None:
        payload = {
            "refund_id": refund.refund_id,
            "status": refund.status,
            "amount_minor": refund.amount_minor,
            **(extra or {}),
        }
        outcome = fire_quietly(tx, registry, saga_id, event, payload, cause=cause, actor=actor)
    return {"refund": refund.status, "event": event, "outcome": outcome}


def fire_quietly(
    tx: Tx,
    registry: Registry,
    saga_id: str,
    event: str,
    payload: Mapping[str, Any],
    *,
    cause: str,
    actor: str = "worker",
) -> str:
    """
    Fire ``event``: ``applied``, ``absorbed`` (a final state ignored it) or ``not_applicable``.

    A step's event may come after the purchase moved on; that is an answer,
    not an error.
    """
    try:
        fired = fire_in(tx, registry, saga_id, event, payload=payload, actor=actor, cause=cause)
    except TransitionNotAllowed as exc:
        log.info("event_not_applicable", saga_id=saga_id, saga_event=event, state=exc.state)
        return "not_applicable"
    return "absorbed" if fired.absorbed else "applied"


def queue_step(tx: Tx, saga_id: str, action: str, *, delay: float) -> None:
    """Queue one more run of a purchase step, outside its state's own actions."""
    saga = _locked(tx, saga_id)
    enqueue_in(
        tx,
        NewJob(
            id=f"step:{saga_id}:{saga.version}:{action}:late",
            queue=QUEUE,
            kind=f"purchase.{action}",
            payload={"saga_id": saga_id, "action": action},
            saga_id=saga_id,
            delay_seconds=delay,
        ),
    )


def _locked(tx: Tx, saga_id: str) -> SagaRecord:
    """The saga, locked first and read second (a read before the lock may be stale)."""
    return lock_in(tx, saga_id)
