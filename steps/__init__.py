"""
Effects of the sagas: the steps that call the outside world, and their ports.

The payment provider port says what any provider must offer; the purchase
steps say what they call, under which key, and how outcomes are read.

Each step has an idempotency key derived from persisted saga data and
classifies its outcome as succeeded, failed or unknown.
"""

from __future__ import annotations

from steps._methods import DEFAULT_PAYMENT_METHOD, PAYMENT_METHODS, PaymentMethod
from steps._provider import (
    ObservedProvider,
    PaymentProvider,
    ProviderAuthorization,
    ProviderPayment,
    ProviderRefund,
)
from steps.errors import OutcomeUnknown, PermanentError, StepError, TransientError

__all__ = [
    "DEFAULT_PAYMENT_METHOD",
    "PAYMENT_METHODS",
    "ObservedProvider",
    "OutcomeUnknown",
    "PaymentMethod",
    "PaymentProvider",
    "PermanentError",
    "ProviderAuthorization",
    "ProviderPayment",
    "ProviderRefund",
    "StepError",
    "TransientError",
]
