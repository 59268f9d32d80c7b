"""Effects of the sagas and their adapters: the steps that call the outside world.

Each step has an idempotency key derived from persisted saga data and
classifies its outcome as succeeded, failed or unknown.
"""

from __future__ import annotations

from steps._methods import DEFAULT_PAYMENT_METHOD, PAYMENT_METHODS, PaymentMethod

__all__ = ["DEFAULT_PAYMENT_METHOD", "PAYMENT_METHODS", "PaymentMethod"]
