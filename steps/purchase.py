"""
The purchase saga's steps: what each calls, under which key, how outcomes read.

Keys derive from persisted data only (the saga id and the payment's key),
so a retry, a replay or a recovery after a crash reuses them: a payment is
never charged twice, and a payment never gets two refunds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping

    from steps._provider import ProviderPayment

PaymentReading = Literal["paid", "not_paid", "pending", "mismatch"]

# The provider's webhook event types, and the saga event each is a hint of.
PROVIDER_EVENTS: Final = {
    "payment.succeeded": "payment_succeeded",
    "payment.failed": "payment_failed",
    "refund.succeeded": "refund_succeeded",
    "refund.failed": "refund_failed",
}
# How long a seat is held for a purchase that was not paid, by default.
DEFAULT_HOLD_SECONDS: Final = 900


def payment_key(saga_id: str) -> str:
    """The payment's idempotency key: one payment per purchase."""
    return f"pay:{saga_id}"


def refund_key(payment_key_: str) -> str:
    """The refund's key, derived from the payment's: one refund per payment."""
    return f"refund:{payment_key_}"


def read_payment(
    payment: ProviderPayment | None, *, amount_minor: int, currency: str
) -> PaymentReading:
    """
    What a provider's answer means for the purchase.

    ``paid`` only for a success of exactly the saga's amount and currency;
    a success of anything else is a ``mismatch`` (money taken, but not what
    was asked: evidence for a human).  No payment, a failure or a
    cancellation is ``not_paid``.
    """
    if payment is None or payment.status in ("failed", "cancelled"):
        return "not_paid"
    if payment.status == "pending":
        return "pending"
    if payment.charged_minor == amount_minor and payment.currency == currency:
        return "paid"
    return "mismatch"


def payment_evidence(payment: ProviderPayment | None) -> Mapping[str, Any]:
    """A provider's answer as evidence for a reconciliation item."""
    if payment is None:
        return {"found": False}
    return {
        "found": True,
        "payment_id": payment.payment_id,
        "status": payment.status,
        "amount_minor": payment.amount_minor,
        "charged_minor": payment.charged_minor,
        "currency": payment.currency,
    }
