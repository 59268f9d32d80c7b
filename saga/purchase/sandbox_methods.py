"""
The sandbox's test payment methods (DESIGN.md §4): what each does to a charge, and its webhooks.

A method decides the charge's outcome (declined, pending, another amount),
which webhooks announce it and when (twice, late, a stale failure first or
after), and when a delayed charge settles.  The ledger that keeps the
charges is :class:`~saga.purchase.sandbox.Sandbox`'s.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any, Final

from steps import PaymentMethod

if TYPE_CHECKING:
    from saga import Tx
    from steps import ProviderAuthorization, ProviderPayment

# What pm_amount_mismatch charges on top of the asked amount, in minor units.
MISMATCH_EXTRA: Final = 100
# How long a pm_stale_failure_first charge stays pending before it succeeds.
SETTLE_SECONDS: Final = 1.0
# A create call that timed out after charging: the provider's webhook about
# that charge comes later than the call's answer would have, so the engine
# meets the unknown outcome first (reconciliation) and the webhook after it.
LATE_WEBHOOK_SECONDS: Final = 3.0
# An authorization nobody captured or voided lapses after a week, as at real providers.
AUTHORIZATION_LIFETIME_SECONDS: Final = 7 * 24 * 3600


def announce_charge(tx: Tx, payment: ProviderPayment, method: str, reference: str) -> None:
    """Queue the webhooks a new charge sends, as its method says (none while it is pending)."""
    if payment.status == "pending" and method != PaymentMethod.STALE_FAILURE_FIRST:
        return
    kind = "payment.succeeded" if payment.status == "succeeded" else "payment.failed"
    body = payment_body(payment, reference)
    event_id = f"evt_{uuid.uuid4().hex[:20]}"
    copies = 2 if method == PaymentMethod.DUPLICATE_WEBHOOKS else 1
    delay = LATE_WEBHOOK_SECONDS if method == PaymentMethod.TIMEOUT_AFTER_CHARGE else 0.0
    for _ in range(copies):
        queue_webhook(tx, event_id, kind, body, delay=delay)
    if method == PaymentMethod.STALE_FAILURE_FIRST:
        # A failure about an earlier attempt arrives at once, before the
        # charge settles; the success follows when it does.
        stale = {**body, "status": "failed", "created_order": 0}
        queue_webhook(tx, f"evt_{uuid.uuid4().hex[:20]}", "payment.failed", stale, delay=0.0)
        settled = {**body, "status": "succeeded", "amount_minor": payment.amount_minor}
        queue_webhook(
            tx,
            f"evt_{uuid.uuid4().hex[:20]}",
            "payment.succeeded",
            settled,
            delay=SETTLE_SECONDS,
        )
        return
    if method == PaymentMethod.OUT_OF_ORDER_WEBHOOKS:
        # An older event about an earlier, declined attempt arrives after
        # the success: it must not make the purchase regress.
        stale = {**body, "status": "failed", "created_order": 0}
        queue_webhook(tx, f"evt_{uuid.uuid4().hex[:20]}", "payment.failed", stale, delay=0.3)


def settle_due(tx: Tx) -> None:
    """
    What time did to the ledger, read lazily before anything looks.

    Charges and authorizations that settle after a delay succeed once it
    has passed; holds past their lifetime lapse.
    """
    for query in ("settle_due_charges", "settle_due_authorizations"):
        tx.run(query, method=PaymentMethod.STALE_FAILURE_FIRST.value, settle_seconds=SETTLE_SECONDS)
    tx.run("expire_authorizations", lifetime_seconds=AUTHORIZATION_LIFETIME_SECONDS)


def charge_outcome(method: str, amount_minor: int) -> tuple[str, int | None]:
    """A new charge's status and the amount it took, as ``method`` says."""
    if method == PaymentMethod.DECLINED:
        return "failed", None
    if method in (PaymentMethod.LATE, PaymentMethod.STALE_FAILURE_FIRST):
        return "pending", None
    if method == PaymentMethod.AMOUNT_MISMATCH:
        return "succeeded", amount_minor + MISMATCH_EXTRA
    return "succeeded", amount_minor


def authorization_outcome(method: str, amount_minor: int) -> tuple[str, int | None]:
    """
    A new authorization's status and the amount it holds, as ``method`` says.

    Like a charge (:func:`charge_outcome`), but for the timeouts: in version
    2 the money moves at the capture, so that is where they strike.
    """
    if method == PaymentMethod.DECLINED:
        return "failed", None
    if method in (PaymentMethod.LATE, PaymentMethod.STALE_FAILURE_FIRST):
        return "pending", None
    if method == PaymentMethod.AMOUNT_MISMATCH:
        return "authorized", amount_minor + MISMATCH_EXTRA
    return "authorized", amount_minor


def announce_authorization(
    tx: Tx, authorization: ProviderAuthorization, method: str, reference: str
) -> None:
    """Queue the webhooks a new authorization sends, as its method says (like a charge's)."""
    if authorization.status == "pending" and method != PaymentMethod.STALE_FAILURE_FIRST:
        return
    body = authorization_body(authorization, reference)
    if method == PaymentMethod.STALE_FAILURE_FIRST:
        stale = {**body, "status": "failed", "created_order": 0}
        queue_webhook(tx, f"evt_{uuid.uuid4().hex[:20]}", "authorization.failed", stale, delay=0.0)
        settled = {**body, "status": "authorized", "amount_minor": authorization.amount_minor}
        queue_webhook(
            tx,
            f"evt_{uuid.uuid4().hex[:20]}",
            "authorization.succeeded",
            settled,
            delay=SETTLE_SECONDS,
        )
        return
    kind = (
        "authorization.succeeded"
        if authorization.status == "authorized"
        else "authorization.failed"
    )
    event_id = f"evt_{uuid.uuid4().hex[:20]}"
    for _ in range(2 if method == PaymentMethod.DUPLICATE_WEBHOOKS else 1):
        queue_webhook(tx, event_id, kind, body, delay=0.0)
    if method == PaymentMethod.OUT_OF_ORDER_WEBHOOKS:
        stale = {**body, "status": "failed", "created_order": 0}
        queue_webhook(tx, f"evt_{uuid.uuid4().hex[:20]}", "authorization.failed", stale, delay=0.3)


def authorization_body(authorization: ProviderAuthorization, reference: str) -> dict[str, Any]:
    """The body of a webhook about ``authorization`` (its id as the event's ``payment_id``)."""
    return {
        "payment_id": authorization.authorization_id,
        "amount_minor": authorization.authorized_minor,
        "currency": authorization.currency,
        "reference": reference,
        "status": authorization.status,
    }


def payment_body(payment: ProviderPayment, reference: str) -> dict[str, Any]:
    """The body of a webhook about ``payment``."""
    return {
        "payment_id": payment.payment_id,
        "amount_minor": payment.charged_minor,
        "currency": payment.currency,
        "reference": reference,
        "status": payment.status,
    }


def queue_webhook(tx: Tx, event_id: str, kind: str, body: dict[str, Any], *, delay: float) -> None:
    """Queue a webhook in the ledger, due ``delay`` seconds from now."""
    tx.run(
        "queue_webhook",
        event_id=event_id,
        type=kind,
        body=json.dumps({**body, "event_id": event_id, "type": kind}),
        delay_seconds=delay,
    )
