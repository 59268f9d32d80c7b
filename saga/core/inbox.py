"""
The engine's inbox: messages from outside, however often and late, applied once.

An application declares its routes: a message of a source and a type is
correlated to a saga (by a key in its payload, looked up in the transaction)
and becomes a saga event.  The (source, event id) pair is claimed under a
unique key in the same transaction as the event's effect, so a repeat finds
it taken and changes nothing; the same pair with other content is recorded as
a conflict and never applied; a message no saga matches yet is kept and
matched again when it comes again.  The machine absorbs late and
out-of-order messages: final states ignore them, undeclared events change
nothing (``not_applicable``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from saga import validation
from saga.codec import digest, dump_json
from saga.core.refusals import record_refusal
from saga.core.sagas import fire_in
from saga.exceptions import EventRefused, InvalidInput, TransitionNotAllowed
from state_machine import ROUTE

if TYPE_CHECKING:
    from collections.abc import Iterable

    from saga.core.db import Database, Tx
    from saga.core.sagas import Registry

Correlate = Callable[["Tx", "Message"], "str | None"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One message from outside: who sent it, its id there, its type and content."""

    source: str
    event_id: str
    type: str
    payload: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validation.identifier("source", self.source)
        validation.operation_id(self.event_id, field="event_id")
        validation.identifier("type", self.type)


def _whole_payload(message: Message) -> Mapping[str, Any]:
    return message.payload


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """
    Where messages of one source and type go.

    Args:
        source, type: which messages.
        correlate: the saga a message is about, looked up in the delivering
            transaction (``None``: no saga yet, kept as unmatched).
        event: the saga event the message becomes.
        payload: the event's payload, from the message (default: all of it).

    """

    source: str
    type: str
    correlate: Correlate
    event: str
    payload: Callable[[Message], Mapping[str, Any]] = _whole_payload


def by_saga_id(key: str) -> Correlate:
    """A correlation that reads the saga's id from the payload's ``key``."""

    def correlate(tx: Tx, message: Message) -> str | None:
        saga_id = message.payload.get(key)
        if not isinstance(saga_id, str) or tx.one("get_saga", id=saga_id) is None:
            return None
        return saga_id

    return correlate


@dataclass(frozen=True, slots=True)
class Delivery:
    """What delivering one message did."""

    source: str
    event_id: str
    outcome: str
    saga_id: str | None = None
    state: str | None = None
    duplicate: bool = False
    conflict: bool = False
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The delivery as plain data."""
        return {
            "source": self.source,
            "event_id": self.event_id,
            "outcome": "conflict" if self.conflict else self.outcome,
            "saga_id": self.saga_id,
            "state": self.state,
            "duplicate": self.duplicate,
            "conflict": self.conflict,
            "detail": self.detail,
        }


class Inbox:
    """Deliver messages to the sagas they concern, through an application's routes."""

    def __init__(self, db: Database, registry: Registry, routes: Iterable[Route] = ()) -> None:
        self.db = db
        self.registry = registry
        self.routes: dict[tuple[str, str], Route] = {}
        for route in routes:
            key = (route.source, route.type)
            if key in self.routes:
                msg = f"two routes for messages of type {route.type!r} from {route.source!r}"
                raise ValueError(msg)
            self.routes[key] = route

    def deliver(self, message: Message) -> Delivery:
        """Apply ``message`` at most once; see :class:`Delivery` for what happened."""
        validation.json_document("payload", message.payload)
        route = self.routes.get((message.source, message.type))
        if route is None:
            known = ", ".join(f"{s}/{t}" for s, t in sorted(self.routes)) or "none"
            raise InvalidInput(
                field="type",
                problem=f"no route for {message.source}/{message.type}; the routes are {known}",
            )
        return self.db.transaction(lambda tx: deliver_in(tx, self.registry, route, message))


def deliver_in(tx: Tx, registry: Registry, route: Route, message: Message) -> Delivery:
    """:meth:`Inbox.deliver` inside ``tx``."""
    content = {"type": message.type, "payload": dict(message.payload)}
    fingerprint = digest(content)
    key = {"source": message.source, "event_id": message.event_id}
    claimed = tx.one(
        "claim_message", **key, type=message.type, digest=fingerprint, payload=dump_json(content)
    )
    if claimed is None:
        seen = tx.one("get_message", **key)
        if seen is None or seen["digest"] != fingerprint:
            tx.run("record_message_conflict", **key, digest=fingerprint, payload=dump_json(content))
            return Delivery(
                message.source,
                message.event_id,
                "conflict",
                None if seen is None else seen["saga_id"],
                conflict=True,
                detail="the same event id came before with other content; recorded, not applied",
            )
        if seen["outcome"] != "unmatched":
            return Delivery(
                message.source,
                message.event_id,
                seen["outcome"],
                seen["saga_id"],
                state=_state_of(tx, seen["saga_id"]),
                duplicate=True,
                detail=seen["detail"],
            )
    saga_id = route.correlate(tx, message)
    if saga_id is None:
        unmatched = "no saga matches it yet; kept, and matched again when it comes again"
        tx.run("settle_message", **key, saga_id=None, outcome="unmatched", detail=unmatched)
        return Delivery(message.source, message.event_id, "unmatched", detail=unmatched)
    payload = {**route.payload(message), "event_id": message.event_id}
    detail: str | None = None
    try:
        fired = fire_in(
            tx,
            registry,
            saga_id,
            route.event,
            payload=payload,
            actor=message.source,
            cause=f"message {message.source}/{message.event_id}",
            origin=ROUTE,
        )
        outcome = "absorbed" if fired.absorbed else "applied"
        if fired.absorbed:
            detail = f"{fired.saga.state} is final"
    except TransitionNotAllowed as exc:
        outcome, detail = "not_applicable", exc.message
    except EventRefused as refused:
        # Nothing was written before the refusal: record it with the message.
        record_refusal(
            tx,
            refused=refused,
            actor=message.source,
            cause=f"message {message.source}/{message.event_id}",
            payload=payload,
        )
        outcome, detail = "not_applicable", refused.message
    tx.run("settle_message", **key, saga_id=saga_id, outcome=outcome, detail=detail)
    return Delivery(
        message.source,
        message.event_id,
        outcome,
        saga_id,
        state=_state_of(tx, saga_id),
        detail=detail,
    )


def _state_of(tx: Tx, saga_id: str | None) -> str | None:
    if saga_id is None:
        return None
    row = tx.one("get_saga", id=saga_id)
    return None if row is None else str(row["state"])
