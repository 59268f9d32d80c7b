"""The purchase's crash points, beside the engine's (``saga.faults.CRASH_POINTS``)."""

from __future__ import annotations

from typing import Final

from saga.faults import CRASH_POINTS as ENGINE_CRASH_POINTS

# Where its steps and its webhooks can die (``saga.faults.crash_point``), by boundary.
PURCHASE_CRASH_POINTS: Final = (
    "request_payment.before_call",  # the intent committed, the provider not yet asked
    "request_payment.after_call",  # the provider answered, the answer not yet recorded
    "cancel_payment.after_call",  # compensation: the provider cancelled, not yet recorded
    "refund.before_call",  # compensation: the refund intent committed, not yet asked
    "refund.after_call",  # compensation: the provider refunded, not yet recorded
    "webhook.after_inbox",  # the inbox committed a webhook, the sender not yet answered
)
# Every point a run of the purchase can arm (`saga chaos --crash-points`).
CRASH_POINTS: Final = (*ENGINE_CRASH_POINTS, *PURCHASE_CRASH_POINTS)
