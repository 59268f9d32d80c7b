"""
The reconciliation queue's values: its items, the policy working them, decisions.

"Unknown" is not "failed".  When a saga enters ``needs_reconciliation`` an
*outcome* item opens in the same transaction, owned by the automatic checker,
with the evidence of what was sent and what came back; the saga stays there
until the item is resolved.  A *review* item holds no saga: it is evidence
for a human (an event that contradicts the provider).

Every item has a deadline: when it passes unresolved, the item is escalated
to the operators and marked overdue (a job due at the deadline does it, and
``saga verify`` reports an overdue item nobody escalated).  A resolution,
automatic or by an operator with a reason, moves the saga through a
declared transition only; an operator's decision is first checked against
fresh evidence by the application's :class:`Judge`, and is refused when the
item changed since it was read or when the evidence contradicts it, audited
either way.

This module holds what an item, a policy and a decision are; what opens,
closes and escalates items in SQL is :mod:`saga.core.recon.lifecycle`, apart
so that an application and the console read these values without it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from saga.codec import as_utc, iso, load_json, maybe_utc
from saga.exceptions import ConflictError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import datetime

    from sqlalchemy.engine import RowMapping

    from saga.core.sagas.changes import Change
    from saga.core.sagas.registry import Context
    from saga.core.store.db import Tx
    from saga.core.store.records import SagaRecord

CHECKER: Final = "checker"
OPERATORS: Final = "operators"
RECON_STATE: Final = "needs_reconciliation"
RECON_QUEUE: Final = "reconciliation"
DEADLINE_KIND: Final = "recon.deadline"
REVIEWED: Final = "reviewed"


class StaleDecision(ConflictError):
    """The item changed since the decision was made on it; nothing was applied."""

    def __init__(self, *, item_id: str, expected: int, actual: int | None, status: str) -> None:
        self.item_id = item_id
        self.expected = expected
        self.actual = actual
        self.status = status
        if status != "open":
            message = (
                f"reconciliation item {item_id} is already {status} (version {actual}); "
                "nothing was applied"
            )
        else:
            message = (
                f"reconciliation item {item_id} is at version {actual}, not {expected}: "
                "it changed since it was read; nothing was applied"
            )
        super().__init__(message)
        self._kwargs = {
            "item_id": item_id,
            "expected": expected,
            "actual": actual,
            "status": status,
        }


class ContradictedDecision(ConflictError):
    """The evidence contradicts the decision; nothing was applied."""

    def __init__(self, *, item_id: str, outcome: str, why: str) -> None:
        self.item_id = item_id
        self.outcome = outcome
        self.why = why
        super().__init__(f"refusing {outcome!r} for item {item_id}: {why}")
        self._kwargs = {"item_id": item_id, "outcome": outcome, "why": why}


def _one_subject(before: SagaRecord) -> str:
    del before
    return "outcome"


def _event_is_the_reason(change: Change, after: SagaRecord) -> str:
    del after
    return change.transition.event


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconPolicy:
    """
    An application's reconciliation: what an unknown outcome is, how it is worked.

    Args:
        state: the saga state that means "outcome unknown"; entering it opens
            an outcome item, leaving it resolves the item.
        check_kind: the job kind of the automatic checker (the application's).
        outcomes: the operators' outcomes and the saga event each fires.
        subject: what the item is about, from the saga before it entered ``state``.
        reason: why, from the transition that entered ``state``.
        human_reasons: reasons no automatic check can settle (the operators own
            those items from the start).
        first_check_seconds, max_attempts, backoff_base, backoff_cap: the checker's
            schedule; review_seconds: the next look of a human-owned item;
            deadline_seconds: when an unresolved item becomes overdue.
        amount: how an operator's amount of money moved outside the provider
            (``--amount``, the console's field) becomes minor units, from the
            saga (its currency); ``None``: the application takes no amounts.
        judge: builds, for an engine, the :class:`Judge` that checks operators'
            decisions against fresh evidence (``judge=EnvelopeJudge``).  A
            policy with outcomes names its judge, or says ``unchecked=True``.
        unchecked: operators' decisions are applied as given, unchecked
            (``saga recon resolve`` says so, and the audit records it).
        hints: when each outcome fits, shown beside it to operators: by outcome,
            or by ``"outcome:reason"`` for an item's reason of its own.

    An application with several saga kinds gives one policy per kind
    (``Application(recon={"order": …, "payout": …})``).

    """

    state: str = RECON_STATE
    check_kind: str = "recon.check"
    outcomes: Mapping[str, str] = field(default_factory=dict)
    subject: Callable[[SagaRecord], str] = _one_subject
    reason: Callable[[Change, SagaRecord], str] = _event_is_the_reason
    human_reasons: frozenset[str] = frozenset()
    first_check_seconds: float = 2.0
    max_attempts: int = 5
    backoff_base: float = 2.0
    backoff_cap: float = 60.0
    review_seconds: float = 3600.0
    deadline_seconds: float = 24 * 3600.0
    amount: Callable[[SagaRecord, str], int] | None = None
    judge: Callable[[Context], Judge] | None = None
    unchecked: bool = False
    hints: Mapping[str, str] = field(default_factory=dict)

    def hint(self, outcome: str, reason: str) -> str:
        """When ``outcome`` fits an item of ``reason`` (``""`` if the policy does not say)."""
        found = self.hints.get(f"{outcome}:{reason}") or self.hints.get(outcome)
        if found is None and outcome == REVIEWED:
            return "only for review items (evidence put before you, no saga held): you have read it"
        return found or ""

    def next_check(self, attempts: int) -> float:
        """Seconds until the check after ``attempts`` checks (exponential, capped)."""
        return min(self.backoff_cap, self.backoff_base * 2.0 ** max(0, attempts - 1))

    def outcome_of(self, event: str) -> str:
        """The operators' outcome a saga event stands for (the event itself if none)."""
        return next((o for o, e in self.outcomes.items() if e == event), event)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconItem:
    """One reconciliation item."""

    id: str
    saga_id: str
    kind: str
    status: str
    subject: str
    reason: str
    evidence: dict[str, Any]
    owner: str
    next_check_at: datetime | None
    attempts: int
    max_attempts: int
    deadline: datetime
    escalated_at: datetime | None
    overdue_at: datetime | None
    version: int
    opened_at: datetime
    resolved_at: datetime | None
    resolution: str | None
    resolved_by: str | None
    resolution_reason: str | None

    @classmethod
    def from_row(cls, row: RowMapping) -> ReconItem:
        """Build it from a ``recon_items`` row."""
        return cls(
            id=row["id"],
            saga_id=row["saga_id"],
            kind=row["kind"],
            status=row["status"],
            subject=row["subject"],
            reason=row["reason"],
            evidence=load_json(row["evidence"]),
            owner=row["owner"],
            next_check_at=maybe_utc(row["next_check_at"]),
            attempts=int(row["attempts"]),
            max_attempts=int(row["max_attempts"]),
            deadline=as_utc(row["deadline"]),
            escalated_at=maybe_utc(row["escalated_at"]),
            overdue_at=maybe_utc(row["overdue_at"]),
            version=int(row["version"]),
            opened_at=as_utc(row["opened_at"]),
            resolved_at=maybe_utc(row["resolved_at"]),
            resolution=row["resolution"],
            resolved_by=row["resolved_by"],
            resolution_reason=row["resolution_reason"],
        )

    @property
    def latest_reading(self) -> str | None:
        """What the outside world said last (``paid``, ``not_paid``, ``refunded``…), if asked."""
        observations = self.evidence.get("observations") or []
        for observation in reversed(observations):
            reading = observation.get("reading")
            if reading not in (None, "unknown"):
                return str(reading)
        return None

    def to_json(self) -> dict[str, Any]:
        """The contract's reconciliation item, plus its kind, subject, version and resolution."""
        return {
            "id": self.id,
            "saga_id": self.saga_id,
            "status": self.status,
            "reason": self.reason,
            "evidence": self.evidence,
            "owner": self.owner,
            "next_check_at": iso(self.next_check_at),
            "attempts": self.attempts,
            "deadline": iso(self.deadline),
            "kind": self.kind,
            "subject": self.subject,
            "max_attempts": self.max_attempts,
            "escalated_at": iso(self.escalated_at),
            "overdue": self.overdue_at is not None,
            "overdue_at": iso(self.overdue_at),
            "version": self.version,
            "opened_at": iso(self.opened_at),
            "resolved_at": iso(self.resolved_at),
            "resolution": self.resolution,
            "resolved_by": self.resolved_by,
            "resolution_reason": self.resolution_reason,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """An operator's decision about an outcome item, as given on the command line."""

    item: ReconItem
    outcome: str
    operator: str
    reason: str
    external_ref: str | None = None
    amount_minor: int | None = None

    @property
    def actor(self) -> str:
        """Who decides, as the audit trail names them."""
        return f"operator:{self.operator}"


@runtime_checkable
class Observation(Protocol):
    """
    What a :class:`Judge` saw when it asked the outside world again.

    ``to_json()`` is recorded with the decision (the resolving event's
    ``observation``) and shown to operators; a judge's ``observe`` returns
    an object that has it (checked when an engine opens the application).
    """

    def to_json(self) -> dict[str, Any]:
        """The observation as evidence (plain data)."""


class Judge(Protocol):
    """
    How an application checks operators' decisions against fresh evidence.

    ``observe`` runs outside any transaction and asks the outside world (the
    provider) again; ``check`` runs in the decision's transaction,
    records what was seen, and raises :class:`ContradictedDecision` when the
    evidence contradicts the decision.
    """

    def observe(self, decision: Decision) -> Observation:
        """Ask the outside world about the item (no transaction is open)."""

    def check(self, tx: Tx, decision: Decision, observation: Observation) -> None:
        """Record what was seen; refuse a decision the evidence contradicts."""


def record_observation(item: ReconItem, observation: Mapping[str, Any]) -> str:
    """The item's evidence with one more observation, as JSON."""
    evidence = dict(item.evidence)
    evidence["observations"] = [*evidence.get("observations", []), dict(observation)]
    return json.dumps(evidence, sort_keys=True)
