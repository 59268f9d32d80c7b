"""The sandbox provider's webhooks, delivered by the workers to the purchase's inbox."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog

from saga import crash_point
from saga.exceptions import InvalidInput, ProviderUnavailable
from saga.purchase.inbox import ProviderEvent

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from saga import Context
    from saga.purchase.inbox import Delivery

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
            try:
                event = event_from_body(webhook.body)
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


def event_from_body(body: Mapping[str, Any]) -> ProviderEvent:
    """
    A provider event from a webhook's JSON body (the sandbox's format).

    ``{"event_id", "type", "payment_id", "amount_minor", "currency",
    "refund_id", "reference"}``; a missing or mistyped field is
    :class:`~saga.exceptions.InvalidInput` naming it.
    """
    return ProviderEvent(
        event_id=_field(body, "event_id", str, required=True),
        type=_field(body, "type", str, required=True),
        payment_id=_field(body, "payment_id", str, required=True),
        amount_minor=_field(body, "amount_minor", int),
        currency=_field(body, "currency", str),
        refund_id=_field(body, "refund_id", str),
        reference=_field(body, "reference", str),
    )


def http_receivers(engine: Context) -> dict[str, Callable[[Mapping[str, Any]], Delivery]]:
    """``POST /webhooks/sandbox``: the payment provider's signed webhooks, into the inbox."""

    def receive(body: Mapping[str, Any]) -> Delivery:
        delivery: Delivery = engine.inbox.deliver(event_from_body(body), source="sandbox")
        return delivery

    return {"sandbox": receive}


def _field(body: Mapping[str, Any], name: str, kind: type, *, required: bool = False) -> Any:
    value = body.get(name)
    if value is None:
        if required:
            raise InvalidInput(field=name, problem="is missing")
        return None
    # bool is an int in Python, never an amount.
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InvalidInput(field=name, problem=f"must be a JSON {_JSON_NAMES[kind]}")
    return value


_JSON_NAMES = {str: "string", int: "integer"}
