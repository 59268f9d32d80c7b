"""
The consumer inbox: apply each published event once, whatever the broker does.

Delivery is at least once (a relay may publish an event twice, a broker
redelivers what was not acked), so a consumer claims the event's id under a
unique key in the same transaction as the event's effect: a repeat finds the
id taken and changes nothing; the same id with other content is recorded as
a conflict and not applied.  The claims live in the engine's inbox table
under the source ``consumer.<name>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from saga import validation
from saga.codec import digest, dump_json

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from saga.core.messages.outbox import Event
    from saga.core.store.db import Database, Tx

Received = Literal["applied", "duplicate", "conflict"]
SOURCE_PREFIX: Final = "consumer."


def _no_figures(tx: Tx) -> Mapping[str, Any]:
    del tx
    return {}


@dataclass(frozen=True, slots=True, kw_only=True)
class Consumer:
    """
    A consumer of published events: what it binds to and what each event does.

    Args:
        name: its inbox source is ``consumer.<name>``; its default queue too.
        bindings: routing patterns of the events it wants (``order.*``).
        apply: the effect of one event, run in the transaction that claims it.
        figures: what it has computed, read in a transaction (for ``saga consume
            NAME --figures`` and for comparing with the engine's own).

    """

    name: str
    bindings: Sequence[str]
    apply: Callable[[Tx, Event], object]
    figures: Callable[[Tx], Mapping[str, Any]] = _no_figures
    description: str = ""
    _source: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        validation.identifier("consumer", self.name)
        if not self.bindings:
            msg = f"consumer {self.name!r} binds to no events"
            raise ValueError(msg)
        object.__setattr__(self, "bindings", tuple(self.bindings))
        object.__setattr__(self, "_source", f"{SOURCE_PREFIX}{self.name}")

    @property
    def source(self) -> str:
        """Its source in the inbox table."""
        return self._source

    def receive(self, db: Database, event: Event) -> Received:
        """Apply ``event`` once, in one transaction; what happened."""
        return db.transaction(lambda tx: receive_in(tx, self, event))


def receive_in(tx: Tx, consumer: Consumer, event: Event) -> Received:
    """:meth:`Consumer.receive` inside ``tx``."""
    body = event.to_json()
    # The content that identifies the event; its time is when it happened,
    # not what it says, and is left out of the comparison.
    fingerprint = digest({key: value for key, value in body.items() if key != "occurred_at"})
    claimed = tx.one(
        "claim_message",
        source=consumer.source,
        event_id=event.id,
        type=event.type,
        digest=fingerprint,
        payload=dump_json(body),
        via=None,
    )
    if claimed is None:
        seen = tx.one("get_message", source=consumer.source, event_id=event.id)
        if seen is not None and seen["digest"] == fingerprint:
            return "duplicate"
        tx.run(
            "record_message_conflict",
            source=consumer.source,
            event_id=event.id,
            digest=fingerprint,
            payload=dump_json(body),
        )
        return "conflict"
    consumer.apply(tx, event)
    tx.run(
        "settle_message",
        source=consumer.source,
        event_id=event.id,
        saga_id=None,
        outcome="applied",
        detail=None,
        evidence=None,
    )
    return "applied"
