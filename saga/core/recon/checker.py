"""
The automatic checker of reconciliation items, for any application.

One job per due check.  The application says how to look at the outside
world (``look``, outside any transaction) and what the answer means
(``decide``, inside the check's transaction, where it may record what it
saw).  The checker does the rest: it settles the item through the policy's
outcome when the answer is plain, otherwise counts the attempt and plans the
next check with backoff, and escalates to the operators when the attempts
run out or the answer needs a human.  A check that lands after an operator
(or another check) acted is discarded, on the record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from saga.core.faults import crash_point
from saga.core.queue.kinds import Apply, JobKind
from saga.core.recon.items import (
    CHECKER,
    OPERATORS,
    RECON_QUEUE,
    ReconItem,
    ReconPolicy,
    record_observation,
)
from saga.core.recon.lifecycle import event_log, get_item_in, schedule_check
from saga.core.sagas.transitions import fire_in, get_in
from state_machine import RECONCILIATION

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from saga.core.queue.values import Job
    from saga.core.sagas.registry import Registry
    from saga.core.store.db import Database, Tx
    from saga.core.store.records import SagaRecord

Seen = TypeVar("Seen")


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """
    What one look at the outside world means for an item.

    Args:
        reading: the answer in a word (``paid``, ``sent``, ``unknown``…), for the audit.
        observation: the answer as evidence.
        outcome: an outcome of the policy the checker may take on its own, or ``None``.
        escalate: a human must decide now (the answer is not one a check can settle).

    """

    reading: str
    observation: Mapping[str, Any] = field(default_factory=dict)
    outcome: str | None = None
    escalate: bool = False


class Checker(Generic[Seen]):
    """
    The job kind checking an application's items.

    Args:
        look: asks the outside world about an item's saga (outside any transaction);
            it should not raise: no answer is a reading of ``unknown``.
        decide: reads the answer in the check's transaction (and may record it).

    """

    ACTOR: ClassVar[str] = CHECKER
    """The name checks go by in the audit and as an item's owner."""

    def __init__(
        self,
        db: Database,
        registry: Registry,
        policy: ReconPolicy,
        *,
        look: Callable[[ReconItem, SagaRecord], Seen],
        decide: Callable[[Tx, ReconItem, Seen], Verdict],
    ) -> None:
        self.db = db
        self.registry = registry
        self.policy = policy
        self.look = look
        self.decide = decide

    def kind(self) -> JobKind:
        """The job kind of the checks (the policy's ``check_kind``)."""
        return JobKind(self.policy.check_kind, self.reconcile, queue=RECON_QUEUE, max_attempts=5)

    def reconcile(self, job: Job) -> Any:
        """One automatic check of an item: look outside, then settle or plan the next."""
        item_id = str(job.payload["item_id"])
        item = self.db.transaction(lambda tx: get_item_in(tx, item_id), write=False)
        if (
            item.status != "open"
            or item.owner != CHECKER
            or item.attempts != job.payload["attempts"]
        ):
            return {"skipped": f"item is {item.status}, owned by {item.owner}"}
        saga = self.db.transaction(lambda tx: get_in(tx, item.saga_id), write=False)
        seen = self.look(item, saga)
        # The outside world answered; nothing is decided yet.
        crash_point("checker.after_answer")
        return Apply(lambda tx: self.settle(tx, item, seen))

    def settle(self, tx: Tx, seen_item: ReconItem, seen: Seen) -> dict[str, Any]:
        """Decide on what was seen, unless the item moved on meanwhile."""
        item = get_item_in(tx, seen_item.id, lock=True)
        if item.status != "open" or item.version != seen_item.version or item.owner != CHECKER:
            event_log(
                tx,
                item.id,
                CHECKER,
                "check_discarded",
                why=f"item is {item.status} at version {item.version}",
            )
            return {"discarded": True}
        verdict = self.decide(tx, item, seen)
        observation = dict(verdict.observation)
        if verdict.outcome is not None and not verdict.escalate:
            # The look that settles the item is an attempt too: an item settled
            # on the first look reads 1/N, not 0/N.
            counted = tx.run(
                "record_settling_check",
                id=item.id,
                version=item.version,
                evidence=record_observation(item, observation),
            )
            if counted != 1:  # pragma: no cover - the row is locked above
                return {"discarded": True}
            fire_in(
                tx,
                self.registry,
                item.saga_id,
                self.policy.outcomes[verdict.outcome],
                payload={
                    "item_id": item.id,
                    "item_version": item.version,
                    "outcome": verdict.outcome,
                    "reason": f"the check read {verdict.reading}",
                    "observation": observation,
                },
                actor=CHECKER,
                cause=f"automatic check: {verdict.reading}",
                origin=RECONCILIATION,
            )
            return {"resolved": verdict.outcome, "attempts": item.attempts + 1}
        attempts = item.attempts + 1
        escalate = verdict.escalate or attempts >= item.max_attempts
        row = tx.one(
            "record_recon_check",
            id=item.id,
            version=item.version,
            evidence=record_observation(item, observation),
            owner=OPERATORS if escalate else CHECKER,
            next_check_seconds=(
                self.policy.review_seconds if escalate else self.policy.next_check(attempts)
            ),
            escalated=escalate,
        )
        if row is None:  # pragma: no cover - the row is locked above
            return {"discarded": True}
        event_log(
            tx,
            item.id,
            CHECKER,
            "escalated" if escalate else "checked",
            reading=verdict.reading,
            attempts=attempts,
        )
        if not escalate:
            schedule_check(tx, get_item_in(tx, item.id), self.policy)
        return {"reading": verdict.reading, "escalated": escalate}
