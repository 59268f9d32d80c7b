"""The sandbox provider's webhooks, delivered by the workers to the engine's inbox."""

from __future__ import annotations

import http.client
import json
import time
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from saga.events import sign_webhook
from saga.exceptions import InvalidInput, ProviderUnavailable
from saga.faults import crash_point
from saga.ops import get_logger
from saga.purchase.inbox import event_from_body

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from saga import Context
    from saga.purchase.inbox import Delivery
    from saga.purchase.sandbox import Webhook

log = get_logger(__name__)


SANDBOX_WEBHOOK_URL_ENV: Final = "SAGA_SANDBOX_WEBHOOK_URL"
SANDBOX_SECRET_ENV: Final = "SAGA_WEBHOOK_SECRET_SANDBOX"  # noqa: S105 - a variable's name


class HttpSender:
    """
    The sandbox as a real provider sends: each webhook signed and POSTed.

    To ``<url>/webhooks/sandbox`` (``saga webhook serve``), signed with the
    shared secret.  The receiver has the event on a 2xx, on "unmatched" (kept,
    matched when it comes again) and on a conflict (recorded); anything else
    (a refusal, a 503, no answer) leaves it to be sent again.
    """

    def __init__(self, url: str, secret: str, *, timeout_s: float = 10.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(
                field=SANDBOX_WEBHOOK_URL_ENV, problem=f"{url!r} is not an http(s) URL"
            )
        if not secret:
            raise InvalidInput(field=SANDBOX_SECRET_ENV, problem="the sandbox needs it to sign")
        self.parts = parts
        self.secret = secret
        self.timeout_s = timeout_s

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> HttpSender | None:
        """A sender if ``$SAGA_SANDBOX_WEBHOOK_URL`` is set, else ``None``."""
        url = env.get(SANDBOX_WEBHOOK_URL_ENV)
        return cls(url, env.get(SANDBOX_SECRET_ENV, "")) if url else None

    def send(self, webhook: Webhook) -> bool:
        """POST one webhook; whether the receiver has it."""
        body = json.dumps(webhook.body, sort_keys=True).encode()
        signed = sign_webhook(self.secret, body, timestamp=int(time.time()))
        connection_type = (
            http.client.HTTPSConnection
            if self.parts.scheme == "https"
            else http.client.HTTPConnection
        )
        connection = connection_type(
            self.parts.hostname or "", self.parts.port, timeout=self.timeout_s
        )
        path = f"{self.parts.path.rstrip('/')}/webhooks/sandbox"
        try:
            connection.request(
                "POST",
                path,
                body=body,
                headers={"Content-Type": "application/json", signed.header: signed.value},
            )
            response = connection.getresponse()
            answer = response.read()
        except OSError as exc:
            log.warning("webhook_not_sent", event_id=webhook.event_id, error=str(exc))
            return False
        finally:
            connection.close()
        if response.status in (200, 409) or (response.status == 404 and b'"unmatched"' in answer):
            return True
        log.warning(
            "webhook_not_taken",
            event_id=webhook.event_id,
            status=response.status,
            answer=answer[:300].decode("utf-8", "replace"),
        )
        return False


class SandboxWebhooks:
    """
    Deliver the sandbox's due webhooks to the engine's inbox.

    Delivery is at least once: a webhook is marked delivered only after the
    inbox committed it, and the inbox makes a redelivery a no-op.
    """

    def __init__(
        self, engine: Context, *, batch: int = 50, sender: HttpSender | None = None
    ) -> None:
        self.engine = engine
        self.batch = batch
        self.sender = sender

    def poll(self) -> int:
        """Deliver the webhooks that are due."""
        sandbox = self.engine.services.sandbox
        webhooks = sandbox.take_webhooks(limit=self.batch)
        for webhook in webhooks:
            sent = self._deliver_here(webhook) if self.sender is None else self.sender.send(webhook)
            if not sent:
                continue  # its lease runs out and it is sent again
            crash_point("webhook.after_inbox")
            sandbox.delivered(webhook)
        return len(webhooks)

    def _deliver_here(self, webhook: Webhook) -> bool:
        """Into the inbox in this process; whether it has the event now."""
        try:
            event = event_from_body(webhook.body)
        except InvalidInput as exc:
            log.warning("webhook_rejected", event_id=webhook.event_id, error=exc.message)
            return True  # never deliverable: kept out of the way
        try:
            self.engine.services.inbox.deliver(event, source="sandbox")
        except ProviderUnavailable as exc:
            # Like a provider retrying a webhook the receiver answered with 503.
            log.warning("webhook_deferred", event_id=webhook.event_id, error=exc.message)
            return False
        return True

    def next_due_in(self) -> float | None:
        """Seconds until the next webhook is due."""
        wait: float | None = self.engine.services.sandbox.next_webhook_in()
        return wait


def http_receivers(engine: Context) -> dict[str, Callable[[Mapping[str, Any]], Delivery]]:
    """``POST /webhooks/sandbox``: the payment provider's signed webhooks, into the inbox."""

    def receive(body: Mapping[str, Any]) -> Delivery:
        delivery: Delivery = engine.services.inbox.deliver(event_from_body(body), source="sandbox")
        return delivery

    return {"sandbox": receive}
