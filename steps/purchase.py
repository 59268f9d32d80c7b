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

    from steps._provider import ProviderAuthorization, ProviderPayment

PaymentReading = Literal["paid", "not_paid", "pending", "mismatch"]
AuthorizationReading = Literal["authorized", "not_authorized", "pending", "mismatch", "captured"]

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


def authorization_key(saga_id: str) -> str:
    """The authorization's key (version 2): one authorization per purchase."""
    return f"auth:{saga_id}"


def capture_key(authorization_key_: str) -> str:
    """
    The capture's key, derived from the authorization's: one capture per authorization.

    The capture is the purchase's payment: its record and its refund use this key.
    """
    return f"capture:{authorization_key_}"


def void_key(authorization_key_: str) -> str:
    """The void's key, derived from the authorization's: one void per authorization."""
    return f"void:{authorization_key_}"


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


def read_authorization(
    authorization: ProviderAuthorization | None, *, amount_minor: int, currency: str
) -> AuthorizationReading:
    """
    What a provider's answer about an authorization means for the purchase.

    ``authorized`` only for a hold of exactly the saga's amount and currency
    (anything else held is a ``mismatch``); ``captured`` once the capture
    took it; no authorization, a decline, a void or a lapse is ``not_authorized``.
    """
    if authorization is None or authorization.status in ("failed", "voided", "expired"):
        return "not_authorized"
    if authorization.status in ("pending", "captured"):
        return authorization.status
    held = (authorization.authorized_minor, authorization.currency)
    return "authorized" if held == (amount_minor, currency) else "mismatch"


def authorization_evidence(authorization: ProviderAuthorization | None) -> Mapping[str, Any]:
    """A provider's answer about an authorization as evidence."""
    if authorization is None:
        return {"found": False}
    return {
        "found": True,
        "authorization_id": authorization.authorization_id,
        "status": authorization.status,
        "amount_minor": authorization.amount_minor,
        "authorized_minor": authorization.authorized_minor,
        "currency": authorization.currency,
    }
