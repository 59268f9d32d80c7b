"""
The purchase saga's steps: what each calls, under which key, how outcomes read.

Keys derive from persisted data only (the saga id and the payment's key),
so a retry, a replay or a recovery after a crash reuses them: a payment is
never charged twice, and a payment never gets two refunds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping

    from steps._provider import ProviderPayment

PaymentReading = Literal["paid", "not_paid", "pending", "mismatch"]


@dataclass(frozen=True, slots=True)
class Step:
    """One step: its name, how its key is derived, and the step that undoes it."""

    name: str
    key_prefix: str
    compensation: str | None = None
    description: str = ""

    def key(self, subject: str) -> str:
        """The step's idempotency key for ``subject`` (a saga id or a payment key)."""
        return f"{self.key_prefix}:{subject}"


REQUEST_PAYMENT: Final = Step(
    "request_payment",
    "pay",
    compensation="refund",
    description="create the payment intent at the provider (key from the saga id)",
)
CHECK_PAYMENT: Final = Step(
    "check_payment", "pay", description="ask the provider about the intent, by its key"
)
CANCEL_PAYMENT: Final = Step(
    "cancel_payment", "pay", description="cancel an intent that has not succeeded"
)
GRANT_ACCESS: Final = Step(
    "grant_access",
    "access",
    compensation="revoke_access",
    description="give the student access (an effect in the engine's database)",
)
REVOKE_ACCESS: Final = Step("revoke_access", "access", description="take access back")
REFUND: Final = Step(
    "refund", "refund", description="give the money back (key from the payment's key)"
)
STEPS: Final = (REQUEST_PAYMENT, CHECK_PAYMENT, CANCEL_PAYMENT, GRANT_ACCESS, REVOKE_ACCESS, REFUND)


def payment_key(saga_id: str) -> str:
    """The payment's idempotency key: one payment per purchase."""
    return REQUEST_PAYMENT.key(saga_id)


def refund_key(payment_key_: str) -> str:
    """The refund's key, derived from the payment's: one refund per payment."""
    return REFUND.key(payment_key_)


def access_key(saga_id: str) -> str:
    """The access grant's key."""
    return GRANT_ACCESS.key(saga_id)


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
