"""
Messages in, events out.

What the inbox did with a message and the observers that check one before
it applies; signed webhooks into the inbox; the outbox's events, the relay
publishing them, consumers, and RabbitMQ.  docs/sagas.md (messages from
outside), docs/webhooks.md and docs/events.md explain them; docs/api.md
lists them.
"""

from __future__ import annotations

from saga.core.messages.consumer import Consumer
from saga.core.messages.inbox import Applied, Delivery, Observed, Observer
from saga.core.messages.outbox import Emit, Event
from saga.core.messages.rabbitmq import consume as consume_events
from saga.core.messages.rabbitmq import declare as declare_events_queue
from saga.core.messages.rabbitmq import remove as remove_exchange
from saga.core.messages.relay import Publisher, Relay, Subscribers
from saga.core.messages.signatures import SignatureRefused
from saga.core.messages.signatures import check as check_signature
from saga.core.messages.signatures import sign as sign_webhook
from saga.core.messages.webhooks import WebhookDoor

__all__ = [
    "Applied",
    "Consumer",
    "Delivery",
    "Emit",
    "Event",
    "Observed",
    "Observer",
    "Publisher",
    "Relay",
    "SignatureRefused",
    "Subscribers",
    "WebhookDoor",
    "check_signature",
    "consume_events",
    "declare_events_queue",
    "remove_exchange",
    "sign_webhook",
]
