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

Observe before apply: a route may name an :class:`Observer`; its message is
then a hint.  The observer asks the source of truth by key, outside any
transaction, and the effect rests on what it :class:`Observed` alone; where
the payload said otherwise, that is kept as evidence beside the message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar

from saga import validation
from saga.codec import digest, dump_json
from saga.core.sagas.refusals import record_refusal
from saga.core.sagas.transitions import fire_in
from saga.exceptions import EventRefused, InvalidInput, TransitionNotAllowed
from state_machine import ROUTE

if TYPE_CHECKING:
    from collections.abc import Iterable

    from saga.core.sagas.registry import Context, Registry
    from saga.core.store.db import Database, Tx

Correlate = Callable[["Tx", "Message"], "str | None"]
T = TypeVar("T")
OUTCOMES: Final = ("applied", "absorbed", "not_applicable")


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


def content_digest(message: Message) -> str:
    """What the dedupe compares by default: the message's type and payload."""
    return digest({"type": message.type, "payload": dict(message.payload)})


@dataclass(frozen=True, slots=True, kw_only=True)
class Observed(Generic[T]):
    """
    What the source of truth said about what a message is about.

    Args:
        saga_id: the saga it was asked for.
        value: the answer, as the observer's ``apply`` uses it.
        evidence: the same answer as plain data, kept beside the message.
        disagreements: where the message's payload said otherwise (kept, applied never).

    """

    saga_id: str
    value: T
    evidence: Mapping[str, Any]
    disagreements: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Applied:
    """What an observer's effect did: an outcome of :data:`OUTCOMES`, and more to keep."""

    outcome: str
    detail: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)


class Observer(Protocol[T]):
    """
    Observe before apply: ask the source of truth, then act on its answer only.

    ``observe`` runs outside any transaction; raising (``ProviderUnavailable``)
    records nothing, and the sender delivers again.  ``apply`` runs in the
    transaction that claims the message, with the observation, never the payload.
    """

    def observe(self, engine: Context, saga_id: str, message: Message) -> Observed[T]:
        """Ask the source of truth about ``message`` (by a key of ``saga_id``), for ``engine``."""
        ...

    def apply(
        self, tx: Tx, registry: Registry, observation: Observed[T], *, event_id: str
    ) -> Applied:
        """The effect of what was observed, in ``tx`` (firing events of ``registry``'s sagas)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """
    Where messages of one source and type go.

    Args:
        source, type: which messages.
        correlate: the saga a message is about, looked up in the delivering
            transaction (``None``: no saga yet, kept as unmatched).
        event: the saga event the message becomes (unused with ``observe``).
        payload: the event's payload, from the message (default: all of it).
        observe: ask the source of truth first, and let its answer decide the
            effect (:class:`Observer`); the message is then only a hint.
        fingerprint: what the dedupe compares, so that the same id with other
            content is a conflict (default: the type and the whole payload).

    """

    source: str
    type: str
    correlate: Correlate
    event: str = ""
    payload: Callable[[Message], Mapping[str, Any]] = _whole_payload
    observe: Observer[Any] | None = None
    fingerprint: Callable[[Message], str] = content_digest

    def __post_init__(self) -> None:
        if not self.event and self.observe is None:
            msg = f"the route of {self.source}/{self.type} needs an event or an observer"
            raise ValueError(msg)


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
    evidence: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The delivery as plain data (``evidence`` only for an observed route's message)."""
        out: dict[str, Any] = {
            "source": self.source,
            "event_id": self.event_id,
            "outcome": "conflict" if self.conflict else self.outcome,
            "saga_id": self.saga_id,
            "state": self.state,
            "duplicate": self.duplicate,
            "conflict": self.conflict,
            "detail": self.detail,
        }
        if self.evidence is not None:
            out["evidence"] = dict(self.evidence)
        return out


class Inbox:
    """Deliver messages to the sagas they concern, through an application's routes."""

    def __init__(
        self,
        db: Database,
        registry: Registry,
        routes: Iterable[Route] = (),
        *,
        context: Context | None = None,
    ) -> None:
        self.db = db
        self.registry = registry
        # What an observer asks through (its application's services).
        self.context = context
        self.routes: dict[tuple[str, str], Route] = {}
        for route in routes:
            key = (route.source, route.type)
            if key in self.routes:
                msg = f"two routes for messages of type {route.type!r} from {route.source!r}"
                raise ValueError(msg)
            self.routes[key] = route
            if route.observe is not None and context is None:
                msg = (
                    f"the route of {route.source}/{route.type} observes: the inbox needs an engine"
                )
                raise ValueError(msg)

    def deliver(self, message: Message, *, via: str | None = None) -> Delivery:
        """
        Apply ``message`` at most once; see :class:`Delivery` for what happened.

        ``via`` names the door it came through (kept, not part of the key).
        A route with an observer asks it first, outside any transaction.
        """
        validation.json_document("payload", message.payload)
        route = self.routes.get((message.source, message.type))
        if route is None:
            known = ", ".join(f"{s}/{t}" for s, t in sorted(self.routes)) or "none"
            raise InvalidInput(
                field="type",
                problem=f"no route for {message.source}/{message.type}; the routes are {known}",
            )
        observation = None
        if route.observe is not None:
            saga_id = self.db.transaction(lambda tx: _to_observe(tx, route, message), write=False)
            if saga_id is not None and self.context is not None:
                observation = route.observe.observe(self.context, saga_id, message)
        return self.db.transaction(
            lambda tx: deliver_in(
                tx, self.registry, route, message, via=via, observation=observation
            )
        )


def _to_observe(tx: Tx, route: Route, message: Message) -> str | None:
    """The saga to ask about, or ``None`` (a duplicate, a conflict, no saga yet)."""
    seen = tx.one("get_message", source=message.source, event_id=message.event_id)
    if seen is not None and (
        seen["digest"] != route.fingerprint(message) or seen["outcome"] != "unmatched"
    ):
        return None  # nothing will be applied: do not ask
    return route.correlate(tx, message)


def deliver_in(
    tx: Tx,
    registry: Registry,
    route: Route,
    message: Message,
    *,
    via: str | None = None,
    observation: Observed[Any] | None = None,
) -> Delivery:
    """:meth:`Inbox.deliver` inside ``tx``, with the observation (if any) in hand."""
    content = {"type": message.type, "payload": dict(message.payload)}
    fingerprint = route.fingerprint(message)
    key = {"source": message.source, "event_id": message.event_id}
    claimed = tx.one(
        "claim_message",
        **key,
        type=message.type,
        digest=fingerprint,
        payload=dump_json(content),
        via=via,
    )
    if claimed is None:
        seen = tx.one("get_message", **key)
        if seen is None or seen["digest"] != fingerprint:
            tx.run("record_message_conflict", **key, digest=fingerprint, payload=dump_json(content))
            saga_id = None if seen is None else seen["saga_id"]
            return Delivery(
                message.source,
                message.event_id,
                "conflict",
                saga_id,
                state=_state_of(tx, saga_id),
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
    if saga_id is None or (
        route.observe is not None and (observation is None or observation.saga_id != saga_id)
    ):
        # No saga yet, or one found only now (nobody was asked about it).
        unmatched = "no saga matches it yet; kept, and matched again when it comes again"
        tx.run(
            "settle_message",
            **key,
            saga_id=None,
            outcome="unmatched",
            detail=unmatched,
            evidence=None,
        )
        return Delivery(message.source, message.event_id, "unmatched", detail=unmatched)
    if route.observe is not None and observation is not None:
        return _apply_observed(tx, registry, route.observe, message, observation)
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
    tx.run("settle_message", **key, saga_id=saga_id, outcome=outcome, detail=detail, evidence=None)
    return Delivery(
        message.source,
        message.event_id,
        outcome,
        saga_id,
        state=_state_of(tx, saga_id),
        detail=detail,
    )


def _apply_observed(
    tx: Tx,
    registry: Registry,
    observer: Observer[Any],
    message: Message,
    observation: Observed[Any],
) -> Delivery:
    """The observer's effect, and the evidence kept beside the message."""
    applied = observer.apply(tx, registry, observation, event_id=message.event_id)
    if applied.outcome not in OUTCOMES:
        msg = f"an observer's outcome is one of {', '.join(OUTCOMES)}, not {applied.outcome!r}"
        raise ValueError(msg)
    disagreements = list(observation.disagreements)
    detail = applied.detail or "; ".join(disagreements) or None
    evidence = {
        "observed": dict(observation.evidence),
        "disagreements": disagreements,
        **applied.evidence,
    }
    tx.run(
        "settle_message",
        source=message.source,
        event_id=message.event_id,
        saga_id=observation.saga_id,
        outcome=applied.outcome,
        detail=detail,
        evidence=dump_json(evidence),
    )
    return Delivery(
        message.source,
        message.event_id,
        applied.outcome,
        observation.saga_id,
        state=_state_of(tx, observation.saga_id),
        detail=detail,
        evidence=evidence,
    )


def _state_of(tx: Tx, saga_id: str | None) -> str | None:
    if saga_id is None:
        return None
    row = tx.one("get_saga", id=saga_id)
    return None if row is None else str(row["state"])
