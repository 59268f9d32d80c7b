"""The sandbox payment provider's test payment methods (DESIGN.md §4)."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class PaymentMethod(StrEnum):
    """How the sandbox provider reacts to a payment, like test cards at real providers."""

    OK = "pm_ok"
    """Pays at once or after a short delay."""
    DECLINED = "pm_declined"
    """The payment is declined."""
    TIMEOUT_AFTER_CHARGE = "pm_timeout_after_charge"
    """Charges, then the create call times out."""
    TIMEOUT_BEFORE_CHARGE = "pm_timeout_before_charge"
    """The call times out before anything happened."""
    LATE = "pm_late"
    """Stays pending until the engine expired the purchase, then succeeds."""
    AMOUNT_MISMATCH = "pm_amount_mismatch"
    """Charges another amount."""
    DUPLICATE_WEBHOOKS = "pm_duplicate_webhooks"
    """Pays, and sends every webhook twice."""
    OUT_OF_ORDER_WEBHOOKS = "pm_out_of_order_webhooks"
    """Pays, and sends webhooks out of order."""
    REFUND_FAILS = "pm_refund_fails"
    """Pays fine; refunds are declined."""
    REFUND_TIMEOUT = "pm_refund_timeout"
    """Pays fine; refund calls time out."""
    STALE_FAILURE_FIRST = "pm_stale_failure_first"
    """Pays after a short delay; a stale failure about an earlier attempt arrives first."""


DEFAULT_PAYMENT_METHOD: Final = PaymentMethod.OK
PAYMENT_METHODS: Final = tuple(method.value for method in PaymentMethod)
