"""Frozen values read from the database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from saga.codec import as_utc, iso, load_json, maybe_utc

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

    from sqlalchemy.engine import RowMapping


@dataclass(frozen=True, slots=True, kw_only=True)
class SagaRecord:
    """One saga as stored: its state, version, data and next deadline."""

    id: str
    kind: str
    definition_version: int
    state: str
    version: int
    data: Mapping[str, Any]
    deadline_at: datetime | None
    deadline_event: str | None
    created_at: datetime
    entered_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: RowMapping) -> SagaRecord:
        """Build it from a ``sagas`` row."""
        return cls(
            id=row["id"],
            kind=row["kind"],
            definition_version=int(row["definition_version"]),
            state=row["state"],
            version=int(row["version"]),
            data=load_json(row["data"]),
            deadline_at=maybe_utc(row["deadline_at"]),
            deadline_event=row["deadline_event"],
            created_at=as_utc(row["created_at"]),
            entered_at=as_utc(row["entered_at"]),
            updated_at=as_utc(row["updated_at"]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TransitionRecord:
    """One audit row: who moved a saga from where to where, and why."""

    version: int
    from_state: str | None
    to_state: str
    event: str
    actor: str
    cause: str | None
    payload: Mapping[str, Any]
    at: datetime
    #: The definition version it was made under (``None``: not read with it).
    definition_version: int | None = None

    @classmethod
    def from_row(cls, row: RowMapping) -> TransitionRecord:
        """Build it from a ``saga_transitions`` row."""
        definition = row.get("definition_version")
        return cls(
            version=int(row["version"]),
            from_state=row["from_state"],
            to_state=row["to_state"],
            event=row["event"],
            actor=row["actor"],
            cause=row["cause"],
            payload=load_json(row["payload"]),
            at=as_utc(row["at"]),
            definition_version=None if definition is None else int(definition),
        )

    def to_json(self) -> dict[str, Any]:
        """The contract's history entry, plus the version and cause."""
        return {
            "from": self.from_state,
            "to": self.to_state,
            "event": self.event,
            "actor": self.actor,
            "at": iso(self.at),
            "version": self.version,
            "cause": self.cause,
            "definition_version": self.definition_version,
        }
