"""The sandbox provider's webhooks, delivered by the workers to the purchase's inbox."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from saga import crash_point
from saga.exceptions import InvalidInput, ProviderUnavailable
from saga.purchase.inbox import ProviderEvent

if TYPE_CHECKING:
    from saga import Context

log = structlog.get_logger(__name__)


class SandboxWebhooks:
    """
    Deliver the sandbox's due webhooks to the engine's inbox.

    Delivery is at least once: a webhook is marked delivered only after the
    inbox committed it, and the inbox makes a redelivery a no-op.
    """

    def __init__(self, engine: Context, *, batch: int = 50) -> None:
        self.engine = engine
        self.batch = batch

    def poll(self) -> int:
        """Deliver the webhooks that are due."""
        sandbox = self.engine.sandbox
        webhooks = sandbox.take_webhooks(limit=self.batch)
        for webhook in webhooks:
            body = webhook.body
            try:
                event = ProviderEvent(
                    event_id=webhook.event_id,
                    type=webhook.type,
                    payment_id=str(body["payment_id"]),
                    amount_minor=body.get("amount_minor"),
                    currency=body.get("currency"),
                    refund_id=body.get("refund_id"),
                    reference=body.get("reference"),
                )
            except InvalidInput as exc:
                log.warning("webhook_rejected", event_id=webhook.event_id, error=exc.message)
            else:
                try:
                    self.engine.inbox.deliver(event, source="sandbox")
                except ProviderUnavailable as exc:
                    # Not delivered: its lease runs out and it comes back, like a
                    # provider retrying a webhook the receiver answered with 503.
                    log.warning("webhook_deferred", event_id=webhook.event_id, error=exc.message)
                    continue
            crash_point("webhook.after_inbox")
            sandbox.delivered(webhook)
        return len(webhooks)

    def next_due_in(self) -> float | None:
        """Seconds until the next webhook is due."""
        wait: float | None = self.engine.sandbox.next_webhook_in()
        return wait
