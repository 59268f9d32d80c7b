"""
The operators' desk of the reconciliation queue: list, show, assign, resolve.

A decision is taken in one transaction under the item's lock, on the version
the operator read; for an outcome item the application's :class:`~saga.core.recon.Judge`
first asks the outside world again and refuses what the fresh evidence
contradicts.  Every refusal (stale, contradicted, unanswerable) is audited in
a transaction of its own, since the refused one rolled back.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from saga import validation as _validation
from saga.codec import as_utc, iso, load_json
from saga.core.recon import (
    REVIEWED,
    ContradictedDecision,
    Decision,
    ReconItem,
    ReconPolicy,
    StaleDecision,
    close_item,
    event_log,
    get_item_in,
)
from saga.core.sagas import fire_in, get_in
from saga.exceptions import ConflictError, InvalidInput, SagaError

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga.core.db import Database, Tx
    from saga.core.recon import Judge, Observation
    from saga.core.sagas import Registry


class Reconciliation:
    """The operators' side of the queue: list, show, assign, resolve."""

    def __init__(
        self,
        db: Database,
        registry: Registry,
        judge: Judge | None = None,
        policy: ReconPolicy | None = None,
    ) -> None:
        self.db = db
        self.registry = registry
        self.judge = judge
        self.policy = policy or ReconPolicy()

    @property
    def outcomes(self) -> tuple[str, ...]:
        """The operators' outcomes: the application's, and ``reviewed`` for review items."""
        return (*self.policy.outcomes, REVIEWED)

    def find(
        self,
        *,
        status: str | None = "open",
        owner: str | None = None,
        overdue: bool = False,
        limit: int = 100,
    ) -> list[ReconItem]:
        """Items, oldest first; ``status=None`` for every item, ``overdue`` for those only."""
        if status is not None:
            _validation.one_of("status", status, ("open", "resolved"))
        if owner is not None:
            _validation.identifier("owner", owner)
        limit = _validation.whole_number("limit", limit, minimum=1, maximum=10_000)
        rows = self.db.transaction(
            lambda tx: tx.all(
                "list_recon_items", status=status, owner=owner, overdue=overdue, limit=limit
            ),
            write=False,
        )
        return [ReconItem.from_row(row) for row in rows]

    def show(self, item_id: str) -> tuple[ReconItem, list[dict[str, Any]]]:
        """One item and its audit trail."""
        _validation.identifier("item_id", item_id)

        def work(tx: Tx) -> tuple[ReconItem, list[dict[str, Any]]]:
            item = get_item_in(tx, item_id)
            events = [
                {
                    "actor": r["actor"],
                    "action": r["action"],
                    "detail": load_json(r["detail"]),
                    "at": iso(as_utc(r["at"])),
                }
                for r in tx.all("list_recon_events", item_id=item_id)
            ]
            return item, events

        return self.db.transaction(work, write=False)

    def assign(
        self, item_id: str, *, operator: str, expected_version: int | None = None
    ) -> ReconItem:
        """Give an open item to ``operator``; the checker stops working it."""
        _validation.identifier("item_id", item_id)
        operator = _validation.identifier("operator", operator)

        def work(tx: Tx) -> ReconItem:
            item = get_item_in(tx, item_id, lock=True)
            version = item.version if expected_version is None else expected_version
            if (
                item.status != "open"
                or tx.one("assign_recon_item", id=item_id, version=version, owner=operator) is None
            ):
                raise StaleDecision(
                    item_id=item_id, expected=version, actual=item.version, status=item.status
                )
            event_log(
                tx,
                item_id,
                f"operator:{operator}",
                "assigned",
                owner=operator,
                previous_owner=item.owner,
            )
            return get_item_in(tx, item_id)

        return self._audited(item_id, operator, "assign", work)

    def parse_amount(self, item_id: str, text: str) -> int:
        """
        An operator's amount of external money, in the item's saga's minor units.

        The application's policy reads it (the purchase: in the purchase's
        currency); an application without one takes no amounts.
        """
        if self.policy.amount is None:
            raise InvalidInput(field="amount", problem="this application takes no amounts")
        parse = self.policy.amount
        _validation.identifier("item_id", item_id)

        def work(tx: Tx) -> int:
            item = get_item_in(tx, item_id)
            return parse(get_in(tx, item.saga_id), text)

        return self.db.transaction(work, write=False)

    def resolve(
        self,
        item_id: str,
        *,
        outcome: str,
        operator: str,
        reason: str,
        expected_version: int | None = None,
        external_ref: str | None = None,
        amount_minor: int | None = None,
    ) -> ReconItem:
        """
        Resolve an item for a reason.

        An outcome item (the policy's outcomes; the purchase's ``paid``,
        ``not_paid``, ``refund``, ``refunded``) moves its saga through the
        matching declared transition, after the application's
        :class:`Judge` asked the outside world again: a
        decision the fresh evidence contradicts is refused.  A review item
        takes ``reviewed`` and moves nothing.  A stale ``expected_version``
        or an item already resolved is refused too (:class:`ConflictError`);
        every refusal is audited.
        """
        _validation.identifier("item_id", item_id)
        outcome = _validation.one_of("outcome", outcome, self.outcomes)
        operator = _validation.identifier("operator", operator)
        reason = _validation.text("reason", reason)
        if external_ref is not None:
            external_ref = _validation.operation_id(external_ref, field="external_ref")
        what = f"resolve as {outcome}"
        item = self.db.transaction(lambda tx: get_item_in(tx, item_id), write=False)
        decision = Decision(
            item=item,
            outcome=outcome,
            operator=operator,
            reason=reason,
            external_ref=external_ref,
            amount_minor=amount_minor,
        )
        if item.kind == "review":
            review = functools.partial(_review, decision=decision, expected=expected_version)
            return self._audited(item_id, operator, what, review)
        if outcome == REVIEWED:
            raise InvalidInput(
                field="outcome",
                problem="'reviewed' closes review items; this item holds its saga: "
                f"resolve it as {' | '.join(self.policy.outcomes)}",
            )
        observation: Observation | None = None
        if self.judge is not None:
            judge = self.judge
            observation = self._audited_call(
                item_id, operator, what, lambda: judge.observe(decision)
            )

        def work(tx: Tx) -> ReconItem:
            locked = get_item_in(tx, item_id, lock=True)
            version = locked.version if expected_version is None else expected_version
            if locked.status != "open" or locked.version != version:
                raise StaleDecision(
                    item_id=item_id, expected=version, actual=locked.version, status=locked.status
                )
            current = Decision(
                item=locked,
                outcome=outcome,
                operator=operator,
                reason=reason,
                external_ref=external_ref,
                amount_minor=amount_minor,
            )
            if self.judge is not None and observation is not None:
                self.judge.check(tx, current, observation)
            fire_in(
                tx,
                self.registry,
                locked.saga_id,
                self.policy.outcomes[outcome],
                payload={
                    "item_id": item_id,
                    "item_version": version,
                    "outcome": outcome,
                    "reason": reason,
                    "external_ref": external_ref,
                    "observation": None if observation is None else observation.to_json(),
                },
                actor=current.actor,
                cause=reason,
            )
            return get_item_in(tx, item_id)

        return self._audited(item_id, operator, what, work)

    def _audited(
        self, item_id: str, operator: str, what: str, work: Callable[[Tx], ReconItem]
    ) -> ReconItem:
        item: ReconItem = self._audited_call(
            item_id, operator, what, lambda: self.db.transaction(work)
        )
        return item

    def _audited_call(self, item_id: str, operator: str, what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except (ConflictError, InvalidInput, SagaError) as exc:
            # The refused decision rolled back; its audit row commits on its own.
            refusal = functools.partial(
                _log_refusal, item_id=item_id, operator=operator, what=what, why=exc.message
            )
            self.db.transaction(refusal)
            raise


def _review(tx: Tx, *, decision: Decision, expected: int | None) -> ReconItem:
    item = get_item_in(tx, decision.item.id, lock=True)
    if decision.outcome != REVIEWED:
        raise ContradictedDecision(
            item_id=item.id,
            outcome=decision.outcome,
            why="a review item holds no saga: it takes 'reviewed' once a human has looked",
        )
    version = item.version if expected is None else expected
    if item.status != "open" or item.version != version:
        raise StaleDecision(
            item_id=item.id, expected=version, actual=item.version, status=item.status
        )
    close_item(
        tx, item, expected=version, outcome=REVIEWED, actor=decision.actor, reason=decision.reason
    )
    event_log(tx, item.id, decision.actor, "resolved", outcome=REVIEWED, reason=decision.reason)
    return get_item_in(tx, item.id)


def _log_refusal(tx: Tx, *, item_id: str, operator: str, what: str, why: str) -> None:
    if tx.one("get_recon_item", id=item_id) is not None:
        event_log(tx, item_id, f"operator:{operator}", "refused", decision=what, why=why)
