"""
The transactional outbox: events written with the transition that causes them.

A saga kind declares its events (:class:`Emit`): entering a state publishes
an event of a type, carrying only the fields a consumer needs.  The runtime
writes the outbox row in the transaction of the transition, so an event
exists if and only if its transition committed; a relay
(:mod:`saga.core.messages.relay`) publishes it afterwards.

An event's id is ``<saga id>:<saga version>:<type>``: derived from persisted
data, so a row published twice (a relay that died after the broker
confirmed and before it marked the row) carries the same id both times and a
consumer's inbox applies it once.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from saga.codec import as_utc, dump_json, iso, load_json

if TYPE_CHECKING:
    from datetime import datetime

    from sqlalchemy.engine import RowMapping

    from saga.core.store.db import Database, Tx
    from saga.core.store.records import SagaRecord
    from state_machine import Machine

# Event types are routing keys: dot-separated lower-case words ("order.confirmed").
_TYPE: Final = re.compile(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)*", re.ASCII)

Fields = Callable[["SagaRecord"], Mapping[str, Any]]


def _no_fields(saga: SagaRecord) -> Mapping[str, Any]:
    del saga
    return {}


@dataclass(frozen=True, slots=True)
class Emit:
    """
    An event a saga kind publishes when one of its sagas enters a state.

    Args:
        type: the event's type, also its routing key (``order.confirmed``).
        on: the state (or states) whose entry emits it; the initial state's
            entry is the saga's creation.
        fields: keys of the saga's data copied into the event.  Name only what
            consumers need: ids and amounts, never personal data.
        compute: more fields, computed from the saga after the transition.
        schema_version: the version of the event's shape; raise it when a
            field changes meaning, so consumers can tell.
        since: the first definition version of the kind whose transitions
            emit it (default: every version).  An event added to a running
            application is declared with a new version of its machine and
            ``since=`` that version: transitions made under older versions
            never wrote it, and ``saga verify`` expects it only from then on.

    """

    type: str
    on: str | Sequence[str]
    fields: Sequence[str] = ()
    compute: Fields = _no_fields
    schema_version: int = 1
    since: int | None = None
    _states: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        states = (self.on,) if isinstance(self.on, str) else tuple(self.on)
        object.__setattr__(self, "_states", states)
        object.__setattr__(self, "fields", tuple(self.fields))

    @property
    def states(self) -> tuple[str, ...]:
        """The states whose entry emits the event."""
        return self._states

    def problems(self, machine: Machine) -> list[str]:
        """What is wrong with this declaration for ``machine``."""
        where = f"saga {machine.name!r}: event {self.type!r}"
        found = []
        if not _TYPE.fullmatch(self.type):
            found.append(f"{where}: a type is dot-separated lower-case words (order.confirmed)")
        if not self.states:
            found.append(f"{where} is emitted on no state")
        found += [f"{where} names no state {s!r}" for s in self.states if not machine.has_state(s)]
        if self.schema_version < 1:
            found.append(f"{where}: schema_version starts at 1")
        if self.since is not None and self.since < 1:
            found.append(f"{where}: since names a definition version (1 or more)")
        return found

    def applies_to(self, definition_version: int) -> bool:
        """Whether transitions made under ``definition_version`` emit it (see ``since``)."""
        return self.since is None or definition_version >= self.since

    def data(self, saga: SagaRecord) -> dict[str, Any]:
        """The event's fields for ``saga`` (missing data keys are ``None``)."""
        return {**{key: saga.data.get(key) for key in self.fields}, **self.compute(saga)}


def event_id(saga_id: str, version: int, type_: str) -> str:
    """The stable id of the event ``type_`` of a saga's version ``version``."""
    return f"{saga_id}:{version}:{type_}"


def replay_dead(db: Database, *, event_id: str | None, actor: str, reason: str | None) -> list[str]:
    """
    Give dead-lettered events a fresh start (one, or all with ``event_id=None``), audited.

    Each replayed event gets an ``outbox_replays`` row (who, why, the error it
    had) in the same transaction; an event dead-lettered while this runs waits
    for the next replay rather than going out unaudited.
    """
    batch = uuid.uuid4().hex

    def replay(tx: Tx) -> list[str]:
        tx.run("record_outbox_replays", event_id=event_id, batch=batch, actor=actor, reason=reason)
        return [row["event_id"] for row in tx.all("replay_outbox", batch=batch)]

    return db.transaction(replay)


def emit_in(tx: Tx, emits: Sequence[Emit], saga: SagaRecord) -> int:
    """Write the outbox rows of ``saga`` entering its state, inside ``tx``; how many."""
    written = 0
    for emit in emits:
        if saga.state not in emit.states or not emit.applies_to(saga.definition_version):
            continue
        tx.run(
            "insert_outbox_event",
            event_id=event_id(saga.id, saga.version, emit.type),
            type=emit.type,
            schema_version=emit.schema_version,
            saga_id=saga.id,
            saga_kind=saga.kind,
            saga_version=saga.version,
            data=dump_json(emit.data(saga)),
        )
        written += 1
    return written


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One outbox event, as published and as a consumer receives it."""

    id: str
    type: str
    schema_version: int
    saga_id: str
    saga_kind: str
    saga_version: int
    occurred_at: datetime
    data: Mapping[str, Any]

    def __post_init__(self) -> None:
        # Published times carry milliseconds (as the engine writes them
        # everywhere): an event equals its own published body parsed back.
        at = self.occurred_at
        object.__setattr__(
            self, "occurred_at", at.replace(microsecond=at.microsecond // 1000 * 1000)
        )

    @classmethod
    def from_row(cls, row: RowMapping) -> Event:
        """Build it from an ``outbox`` row."""
        return cls(
            id=row["event_id"],
            type=row["type"],
            schema_version=int(row["schema_version"]),
            saga_id=row["saga_id"],
            saga_kind=row["saga_kind"],
            saga_version=int(row["saga_version"]),
            occurred_at=as_utc(row["occurred_at"]),
            data=load_json(row["data"]),
        )

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Event:
        """Parse a published body (:class:`ValueError` if it is not one)."""
        try:
            return cls(
                id=str(body["id"]),
                type=str(body["type"]),
                schema_version=int(body["schema_version"]),
                saga_id=str(body["saga_id"]),
                saga_kind=str(body["saga_kind"]),
                saga_version=int(body["saga_version"]),
                occurred_at=as_utc(body["occurred_at"]),
                data=dict(body["data"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"not an outbox event: {exc!r}"
            raise ValueError(msg) from exc

    def to_json(self) -> dict[str, Any]:
        """The published body."""
        return {
            "id": self.id,
            "type": self.type,
            "schema_version": self.schema_version,
            "saga_id": self.saga_id,
            "saga_kind": self.saga_kind,
            "saga_version": self.saga_version,
            "occurred_at": iso(self.occurred_at),
            "data": dict(self.data),
        }
