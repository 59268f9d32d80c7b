"""
The operators' desk of the reconciliation queue: list, show, assign, resolve.

A decision is taken in one transaction under the item's lock, on the version
the operator read; for an outcome item the application's :class:`~saga.core.recon.items.Judge`
first asks the outside world again and refuses what the fresh evidence
contradicts.  Every refusal (stale, contradicted, unanswerable) is audited in
a transaction of its own, since the refused one rolled back.
"""

from __future__ import annotations

import functools
import typing
from typing import TYPE_CHECKING, Any

from saga import validation as _validation
from saga.codec import as_utc, iso, load_json
from saga.core.recon.items import (
    REVIEWED,
    ContradictedDecision,
    Decision,
    Observation,
    ReconItem,
    ReconPolicy,
    StaleDecision,
)
from saga.core.recon.lifecycle import close_item, event_log, get_item_in
from saga.core.sagas.transitions import fire_in, get_in
from saga.exceptions import ConflictError, InvalidInput, SagaError
from state_machine import RECONCILIATION

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from saga.core.recon.items import Judge
    from saga.core.sagas.registry import Registry
    from saga.core.store.db import Database, Tx


class Reconciliation:
    """The operators' side of the queue: list, show, assign, resolve."""

    def __init__(
        self,
        db: Database,
        registry: Registry,
        policy: ReconPolicy | None = None,
        *,
        policies: Mapping[str, ReconPolicy] | None = None,
        judges: Mapping[str, Judge | None] | None = None,
    ) -> None:
        self.db = db
        self.registry = registry
        self.policies = dict(policies or {})
        # Each kind's judge, as its policy names it; None: its decisions go unchecked.
        self.judges = dict(judges or {})
        self._policy = policy or next(iter(self.policies.values()), None) or ReconPolicy()

    @property
    def policy(self) -> ReconPolicy:
        """The application's policy (with one per kind, the first: see :meth:`policy_for`)."""
        return self._policy

    def policy_for(self, kind: str) -> ReconPolicy:
        """The reconciliation policy of saga kind ``kind``."""
        return self.policies.get(kind, self._policy)

    def judge_for(self, kind: str) -> Judge | None:
        """The judge of saga kind ``kind``'s decisions; ``None``: they are not checked."""
        return self.judges.get(kind)

    def kind_of(self, item: ReconItem) -> str:
        """The saga kind of an item's saga."""
        return self.db.transaction(lambda tx: get_in(tx, item.saga_id).kind, write=False)

    def judge_of(self, item: ReconItem) -> Judge | None:
        """The judge of an item's saga kind."""
        return self.judge_for(self.kind_of(item))

    def outcomes_for(self, kind: str) -> tuple[str, ...]:
        """The outcomes an operator may give an item of a ``kind`` saga, and ``reviewed``."""
        return (*self.policy_for(kind).outcomes, REVIEWED)

    @property
    def outcomes(self) -> tuple[str, ...]:
        """The operators' outcomes: every kind's, and ``reviewed`` for review items."""
        policies = list(self.policies.values()) or [self._policy]
        return (*dict.fromkeys(o for p in policies for o in p.outcomes), REVIEWED)

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

        The application's policy reads it (in the saga's currency, say); an
        application without one takes no amounts.
        """
        _validation.identifier("item_id", item_id)

        def work(tx: Tx) -> int:
            item = get_item_in(tx, item_id)
            saga = get_in(tx, item.saga_id)
            parse = self.policy_for(saga.kind).amount
            if parse is None:
                raise InvalidInput(field="amount", problem="this application takes no amounts")
            return parse(saga, text)

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

        An outcome item (one of the policy's outcomes, ``paid`` or
        ``not_paid`` for instance) moves its saga through the
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
        kind = self.kind_of(item)
        policy, judge = self.policy_for(kind), self.judge_for(kind)
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
        if outcome not in policy.outcomes:
            raise InvalidInput(
                field="outcome",
                problem=f"this item holds a {kind} saga: resolve it as "
                f"{' | '.join(policy.outcomes)}"
                + (" ('reviewed' closes review items)" if outcome == REVIEWED else ""),
            )
        observation: Observation | None = None
        if judge is not None:
            observation = self._audited_call(
                item_id, operator, what, lambda: _observed(judge, decision)
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
            if judge is not None and observation is not None:
                judge.check(tx, current, observation)
            else:
                event_log(
                    tx,
                    item_id,
                    current.actor,
                    "unchecked",
                    why=f"the {kind} reconciliation policy says decisions are not checked",
                )
            fire_in(
                tx,
                self.registry,
                locked.saga_id,
                policy.outcomes[outcome],
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
                origin=RECONCILIATION,
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


def judge_problems(judges: Mapping[str, Judge | None]) -> list[str]:
    """
    What is wrong with the judges of each kind, seen without asking anything.

    A judge needs ``observe`` and ``check``; the observation ``observe``
    says it returns (its annotation) must have ``to_json()``.  Without an
    annotation, the observation is checked when a decision is made.
    """
    found: list[str] = []
    for kind, judge in judges.items():
        if judge is None:
            continue
        name = type(judge).__name__
        if not callable(getattr(judge, "observe", None)) or not callable(
            getattr(judge, "check", None)
        ):
            found.append(
                f"the judge of {kind!r} ({name}) needs observe(decision) and "
                "check(tx, decision, observation)"
            )
            continue
        try:
            returned = typing.get_type_hints(judge.observe).get("return")
        except (NameError, TypeError, AttributeError):
            continue  # an annotation it cannot resolve: checked at the decision
        if isinstance(returned, type) and not callable(getattr(returned, "to_json", None)):
            found.append(
                f"the judge of {kind!r} ({name}): observe returns {returned.__name__}, which has "
                "no to_json(); an observation is an Observation (to_json() -> dict)"
            )
    return found


def _observed(judge: Judge, decision: Decision) -> Observation:
    """What the judge saw, refused clearly if it is no :class:`Observation`."""
    observation = judge.observe(decision)
    if not isinstance(observation, Observation):
        raise InvalidInput(
            field="app",
            problem=f"the judge {type(judge).__name__}.observe returned a "
            f"{type(observation).__name__}, which has no to_json(): a judge's observation is "
            "an Observation (to_json() -> dict); nothing was applied",
        )
    return observation


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
