"""
The inbox's HTTP door: a signed webhook in, one inbox delivery out.

:class:`WebhookDoor` is what ``POST /webhooks/<provider>`` does, without the
HTTP framework: check the signature against the provider's secret (before
anything is stored), parse the body, hand it to the provider's receiver,
and say what the sender should hear.  A request refused at the door
(unknown provider, unsigned, mis-signed, replayed too late, malformed) is
answered 4xx and changes nothing else; it is counted per hour, provider and
reason (``inbox_refusal_counts``) and only the newest :data:`REFUSAL_SAMPLE`
are kept whole (``inbox_refusals``), so what a sender can make the engine
store is bounded however many requests it sends.  A valid one is answered
2xx only after the inbox row committed; when it could not be (the provider
could not be asked, the database is away) the answer is 503,
and the sender's retry is safe because the inbox dedupes by event id.

Receivers come from the application (``Application.webhooks``: a
provider's events, say); any inbox route's source is also
served, with the body ``{"event_id", "type", "payload"}``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from saga.core.logs import get_logger
from saga.core.messages.inbox import Message
from saga.core.messages.signatures import DEFAULT_TOLERANCE_S, SignatureRefused, check, shape
from saga.core.sagas.registry import Context
from saga.exceptions import DatabaseError, InvalidInput, ProviderUnavailable

if TYPE_CHECKING:
    from saga.core.store.db import Tx

log = get_logger(__name__)

MAX_BODY_BYTES: Final = 256 * 1024
MAX_HEADER_BYTES: Final = 32 * 1024
"""The request line and headers together, at most (the server answers 431 past it)."""
REFUSAL_SAMPLE: Final = 1000
"""How many refused requests are kept whole; older ones live on only in the hourly counts."""
UNKNOWN_SOURCE: Final = "(unknown)"
_EXCERPT_BYTES: Final = 512
RETRY_AFTER_S: Final = 5


class Delivered(Protocol):
    """What a receiver's delivery reports (the engine's ``Delivery``, or an application's)."""

    @property
    def outcome(self) -> str:
        """What delivering did: ``applied``, ``unmatched``, ``not_applicable``…."""

    @property
    def conflict(self) -> bool:
        """The same event id came before with other content."""

    def to_json(self) -> dict[str, Any]:
        """The delivery as plain data."""


Receiver = Callable[[Mapping[str, Any]], Delivered]


@dataclass(frozen=True, slots=True)
class Answer:
    """What the sender hears: an HTTP status, a JSON body, extra headers."""

    status: int
    body: dict[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)


class _Receives(Protocol):
    """What the door needs of an application: its routes' sources and its own receivers."""

    def route_sources(self) -> set[str]:
        """The sources its inbox routes take messages from."""

    @property
    def webhooks(self) -> Callable[[Context], Mapping[str, Receiver]]:
        """Its receivers of signed webhooks, built for an engine."""


class Served(Context, Protocol):
    """An engine seen by the webhook door (:class:`~saga.Engine` is one)."""

    @property
    def app(self) -> _Receives:
        """The application it runs."""


def message_receiver(engine: Served, source: str) -> Receiver:
    """A receiver for an inbox route's source: ``{"event_id", "type", "payload"}``."""

    def receive(body: Mapping[str, Any]) -> Delivered:
        payload = body.get("payload", {})
        if not isinstance(payload, dict):
            raise InvalidInput(field="payload", problem="must be a JSON object")
        message = Message(
            source=source,
            event_id=_text(body, "event_id"),
            type=_text(body, "type"),
            payload=payload,
        )
        delivered: Delivered = engine.messages.deliver(message)
        return delivered

    return receive


class WebhookDoor:
    """
    Signed webhooks into the inbox, one provider per path.

    Args:
        engine: the engine (its application's receivers and routes).
        secrets: each served provider's secrets (two while one is rotated);
            a provider without a secret is not served.
        tolerance_s: how far a signed timestamp may be from the database's clock.
        sample: how many refused requests are kept whole (the newest).

    """

    def __init__(
        self,
        engine: Served,
        secrets: Mapping[str, tuple[str, ...]],
        *,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
        sample: int = REFUSAL_SAMPLE,
    ) -> None:
        if sample < 1:
            raise InvalidInput(field="sample", problem="must be at least 1")
        receivers = known_receivers(engine)
        unknown = sorted(set(secrets) - set(receivers))
        if unknown:
            raise InvalidInput(
                field="secret",
                problem=f"no provider named {', '.join(unknown)}; the application receives "
                f"webhooks from {', '.join(sorted(receivers)) or 'none'}",
            )
        usable = {name: tuple(s for s in given if s) for name, given in secrets.items()}
        if not any(usable.values()):
            raise InvalidInput(
                field="secret",
                problem="no webhook secret: a door that cannot check signatures stays shut",
            )
        self.engine = engine
        self.tolerance_s = tolerance_s
        self.sample = sample
        # An empty secret is no secret (anyone can compute an HMAC with it).
        self.secrets = {name: given for name, given in usable.items() if given}
        self.receivers = {name: receivers[name] for name in self.secrets}

    def receive(
        self, provider: str, body: bytes, signature: str | None, *, remote: str | None = None
    ) -> Answer:
        """One request to ``/webhooks/<provider>``: check, deliver, answer."""
        try:
            receiver, parsed = self._admit(provider, body, signature)
            delivery = receiver(parsed)
        except _Refused as refused:
            return self._refuse(provider, refused, body, remote)
        except InvalidInput as exc:
            malformed = _Refused(400, "malformed", f"{exc.field}: {exc.problem}")
            return self._refuse(provider, malformed, body, remote)
        except (ProviderUnavailable, DatabaseError) as exc:
            log.warning("webhook_deferred", provider=provider, error=exc.message)
            return Answer(
                503,
                {"refused": "unavailable", "detail": f"{exc.message}; nothing was stored"},
                {"Retry-After": str(RETRY_AFTER_S)},
            )
        return _answer(delivery)

    def _admit(
        self, provider: str, body: bytes, signature: str | None
    ) -> tuple[Receiver, dict[str, Any]]:
        """The provider's receiver and the parsed body, or :class:`_Refused`."""
        receiver = self.receivers.get(provider)
        if receiver is None:
            raise _Refused(404, "unknown_provider", f"no webhooks are taken from {provider!r}")
        if len(body) > MAX_BODY_BYTES:
            raise _Refused(413, "too_large", f"{len(body)} bytes; at most {MAX_BODY_BYTES}")
        try:
            # Unsigned or out of shape: refused before the database is asked anything.
            shape(signature)
            check(
                self.secrets[provider],
                body,
                signature,
                now=self._now(),
                tolerance_s=self.tolerance_s,
            )
        except SignatureRefused as exc:
            raise _Refused(400, exc.reason, exc.detail) from exc
        try:
            parsed = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _Refused(400, "malformed", f"not JSON: {exc}") from exc
        if not isinstance(parsed, dict):
            raise _Refused(400, "malformed", "the body must be a JSON object")
        return receiver, parsed

    def _now(self) -> float:
        # The database's clock judges the timestamp, as it judges leases.
        now = self.engine.db.transaction(lambda tx: tx.scalar("db_now_epoch"), write=False)
        return float(now)

    def _refuse(self, provider: str, refused: _Refused, body: bytes, remote: str | None) -> Answer:
        log.warning(
            "webhook_refused", provider=provider, reason=refused.reason, detail=refused.detail
        )
        # A made-up provider name is kept in the sample only: counted by name,
        # each one would add a row.
        counted = provider if provider in self.receivers else UNKNOWN_SOURCE
        row = {
            "source": _storable(provider[:100]),
            "reason": refused.reason,
            "detail": _storable(refused.detail[:1000]),
            "body_digest": hashlib.sha256(body).hexdigest(),
            "body_excerpt": _storable(body[:_EXCERPT_BYTES].decode("utf-8", "replace")),
            "remote": remote,
            "keep": self.sample,
        }

        def record(tx: Tx) -> None:
            tx.run("count_refusal", source=counted, reason=refused.reason, bytes=len(body))
            tx.run("record_refusal", **row)

        try:
            self.engine.db.transaction(record)
        except DatabaseError as exc:  # still refused; only the record is missing
            log.error("webhook_refusal_not_recorded", provider=provider, error=exc.message)
        return Answer(refused.status, {"refused": refused.reason, "detail": refused.detail})


class _Refused(Exception):
    """A request the door turns away: its status, reason and detail."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.reason = reason
        self.detail = detail


def known_receivers(engine: Served) -> dict[str, Receiver]:
    """Every provider the application takes webhooks from, by name."""
    app = engine.app
    receivers: dict[str, Receiver] = {
        source: message_receiver(engine, source) for source in sorted(app.route_sources())
    }
    receivers.update(app.webhooks(engine))
    return receivers


def _answer(delivery: Delivered) -> Answer:
    body = delivery.to_json()
    if delivery.conflict:
        return Answer(409, body)  # recorded as a conflict, never applied
    if delivery.outcome == "unmatched":
        # Kept, and matched again when it comes again: the sender should retry.
        return Answer(404, body)
    return Answer(200, body)


def _storable(text: str) -> str:
    # PostgreSQL text holds no NUL: a body crafted with one must still be recorded.
    return text.replace("\x00", "\\x00")


def _text(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidInput(field=name, problem="must be a non-empty string")
    return value
