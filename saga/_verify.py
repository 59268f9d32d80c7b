"""
``saga verify``: every invariant of DESIGN.md §2, checked on the data.

Each check reads the engine's tables (and the sandbox's ledger, for money)
with named SQL queries and reports how many things it checked and which of
them break the rule.  ``ok`` only if nothing does.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from state_machine.purchase import PURCHASE

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sqlalchemy.engine import RowMapping

    from saga._db import Tx
    from saga._engine import Engine

EXAMPLES: Final = 5
# Liveness: a saga that waits longer than twice its longest timeout is stuck
# (with a floor, so a busy worker's polling and backoff are not "stuck").
LIVENESS_FLOOR_S: Final = 60.0
_FINAL_OR_OWNED: Final = frozenset(
    {s.name for s in PURCHASE.states if s.terminal} | {"needs_reconciliation"}
)


@dataclass(slots=True)
class Invariant:
    """One rule: how many things were checked, and the ones that break it."""

    name: str
    description: str
    checked: int = 0
    problems: list[str] = field(default_factory=list)

    def check(self, ok: bool, problem: str) -> None:
        """Count one thing; remember it if it breaks the rule."""
        self.checked += 1
        if not ok:
            self.problems.append(problem)

    def to_json(self) -> dict[str, Any]:
        """The contract's invariant object, plus a few examples."""
        return {
            "name": self.name,
            "checked": self.checked,
            "violations": len(self.problems),
            "description": self.description,
            "examples": self.problems[:EXAMPLES],
        }


@dataclass(slots=True)
class Report:
    """All invariants."""

    invariants: list[Invariant]

    @property
    def ok(self) -> bool:
        """Whether every invariant holds."""
        return all(not invariant.problems for invariant in self.invariants)

    def to_json(self) -> dict[str, Any]:
        """The contract's verify object."""
        return {"ok": self.ok, "invariants": [i.to_json() for i in self.invariants]}


def verify(engine: Engine) -> Report:
    """Check every invariant on ``engine``'s database and its sandbox ledger."""
    facts = engine.db.transaction(_engine_facts, write=False)
    ledger = engine.sandbox.ledger()
    checks: list[Callable[[dict[str, Any], dict[str, Any]], Invariant]] = [
        _seats,
        _seat_follows_state,
        _one_charge,
        _one_refund,
        _money,
        _no_lost_intent,
        _reconciliation,
        _fencing,
        _audit,
        _liveness,
    ]
    return Report([check(facts, ledger) for check in checks])


def _engine_facts(tx: Tx) -> dict[str, Any]:
    transitions = tx.all("verify_transitions")
    expected = _expected_jobs(transitions, tx.all("verify_saga_versions"))
    known: set[str] = set()
    ids = sorted(expected)
    for start in range(0, len(ids), 500):
        chunk = json.dumps(ids[start : start + 500])
        known.update(row["id"] for row in tx.all("verify_known_jobs", ids=chunk))
    return {
        "ledger": tx.all("seat_ledger"),
        "purchases": tx.all("verify_purchases"),
        "without_operation": [row["id"] for row in tx.all("verify_sagas_without_operation")],
        "transitions": transitions,
        "sagas": tx.all("verify_saga_versions"),
        "expected_jobs": expected,
        "known_jobs": known,
        "open_items": tx.all("verify_open_items"),
        "orphan_results": [row["job_id"] for row in tx.all("verify_orphan_results")],
    }


def _expected_jobs(
    transitions: Iterable[RowMapping], sagas: Iterable[RowMapping]
) -> dict[str, str]:
    """Every job a saga's history queued: the actions of each state it entered, its timer."""
    expected: dict[str, str] = {}
    for row in transitions:
        state = PURCHASE.state(row["to_state"]) if PURCHASE.has_state(row["to_state"]) else None
        for action in state.actions if state else ():
            job = f"step:{row['saga_id']}:{row['version']}:{action}"
            expected[job] = f"{row['saga_id']} entered {row['to_state']} (v{row['version']})"
    for saga in sagas:
        if saga["deadline_event"] is not None:
            job = f"timer:{saga['id']}:{saga['version']}"
            expected[job] = f"{saga['id']} has a deadline at v{saga['version']}"
    return expected


def _seats(facts: dict[str, Any], ledger: dict[str, Any]) -> Invariant:
    rule = Invariant("seats", "held + taken + free = capacity, none negative, counters = purchases")
    for row in facts["ledger"]:
        free = row["capacity"] - row["held"] - row["taken"]
        rule.check(
            row["held"] >= 0
            and row["taken"] >= 0
            and free >= 0
            and (row["held"], row["taken"]) == (row["purchases_held"], row["purchases_taken"]),
            f"intensive {row['id']}: held {row['held']} taken {row['taken']} free {free}, "
            f"purchases hold {row['purchases_held']} and take {row['purchases_taken']}",
        )
    return rule


def _seat_follows_state(facts: dict[str, Any], ledger: dict[str, Any]) -> Invariant:
    rule = Invariant("seat_follows_state", "each purchase holds exactly the seat its state says")
    for row in facts["purchases"]:
        declared = PURCHASE.state(row["state"]).meta.get("seat")
        if declared is None:  # needs_reconciliation keeps what it had
            came_from = row["previous_state"]
            declared = "free" if came_from == "refund_pending" else "held"
        rule.check(
            row["seat"] == declared,
            f"purchase {row['id']} in {row['state']} has seat {row['seat']}, not {declared}",
        )
    return rule


def _charges_by_purchase(ledger: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    charges: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for charge in ledger["charges"]:
        charges[charge["reference"]].append(charge)
    return charges


def _one_charge(facts: dict[str, Any], ledger: dict[str, Any]) -> Invariant:
    rule = Invariant("one_charge_per_purchase", "at most one successful charge per purchase")
    for reference, charges in _charges_by_purchase(ledger).items():
        succeeded = [c for c in charges if c["status"] == "succeeded"]
        rule.check(
            len(succeeded) <= 1, f"purchase {reference}: {len(succeeded)} successful charges"
        )
    return rule


def _one_refund(facts: dict[str, Any], ledger: dict[str, Any]) -> Invariant:
    rule = Invariant("one_refund_per_payment", "at most one refund per payment")
    by_payment: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for refund in ledger["refunds"]:
        by_payment[refund["payment_id"]].append(refund)
    for charge in ledger["charges"]:
        refunds = [r for r in by_payment.get(charge["payment_id"], []) if r["status"] != "failed"]
        rule.check(len(refunds) <= 1, f"payment {charge['payment_id']}: {len(refunds)} refunds")
    return rule


def _money(facts: dict[str, Any], ledger: dict[str, Any]) -> Invariant:
    rule = Invariant(
        "money_matches_state",
        "confirmed: charged - refunded = price; expired/cancelled: nothing charged or refunded; "
        "refunded: all of it back",
    )
    charges = _charges_by_purchase(ledger)
    refunded: dict[str, int] = defaultdict(int)
    for refund in ledger["refunds"]:
        if refund["status"] == "succeeded":
            refunded[refund["reference"]] += int(refund["amount_minor"])
    for row in facts["purchases"]:
        charged = sum(
            int(c["charged_minor"] or 0)
            for c in charges.get(row["id"], [])
            if c["status"] == "succeeded"
        )
        back = refunded[row["id"]]
        state = row["state"]
        if state == "confirmed":
            ok = charged - back == row["amount_minor"]
        elif state in ("expired", "cancelled"):
            ok = charged in (0, back)  # nothing taken, or all of it given back
        elif state == "refunded":
            ok = charged > 0 and back == charged
        else:
            continue  # still moving, or owned by an operator
        rule.check(
            ok,
            f"purchase {row['id']} is {state} with {charged} charged and {back} "
            f"refunded (price {row['amount_minor']})",
        )
    return rule


def _no_lost_intent(facts: dict[str, Any], ledger: dict[str, Any]) -> Invariant:
    rule = Invariant(
        "no_lost_intent",
        "every saga has its accepting operation, and every step and timer it queued",
    )
    for saga_id in facts["without_operation"]:
        rule.check(False, f"saga {saga_id} has no operation id")
    for job, why in sorted(facts["expected_jobs"].items()):
        rule.check(job in facts["known_jobs"], f"job {job} is missing ({why})")
    return rule


def _reconciliation(facts: dict[str, Any], ledger: dict[str, Any]) -> Invariant:
    rule = Invariant(
        "reconciliation_visible",
        "every purchase in needs_reconciliation has exactly one open item with "
        "an owner and a next check; no other purchase has one",
    )
    items: dict[str, list[RowMapping]] = defaultdict(list)
    for item in facts["open_items"]:
        items[item["saga_id"]].append(item)
    for row in facts["purchases"]:
        mine = items.get(row["id"], [])
        if row["state"] == "needs_reconciliation":
            rule.check(
                len(mine) == 1 and bool(mine[0]["owner"]) and mine[0]["next_check_at"],
                f"purchase {row['id']} needs reconciliation with {len(mine)} open item(s)",
            )
        elif mine:
            rule.check(False, f"purchase {row['id']} is {row['state']} with an open item")
    return rule


def _fencing(facts: dict[str, Any], ledger: dict[str, Any]) -> Invariant:
    rule = Invariant("fencing", "results exist only for jobs completed under a valid lease")
    rule.checked += 1
    for job_id in facts["orphan_results"]:
        rule.problems.append(f"job {job_id} has a result but was not completed")
    return rule


def _audit(facts: dict[str, Any], ledger: dict[str, Any]) -> Invariant:
    rule = Invariant("audit", "one append-only row per transition, versions 1..n, chained states")
    trail: dict[str, list[RowMapping]] = defaultdict(list)
    for row in facts["transitions"]:
        trail[row["saga_id"]].append(row)
    for saga in facts["sagas"]:
        rows = trail.get(saga["id"], [])
        versions = [row["version"] for row in rows]
        chained = all(rows[i]["from_state"] == rows[i - 1]["to_state"] for i in range(1, len(rows)))
        ok = (
            versions == list(range(1, saga["version"] + 1))
            and chained
            and bool(rows)
            and rows[-1]["to_state"] == saga["state"]
            and rows[0]["from_state"] is None
        )
        rule.check(
            ok,
            f"saga {saga['id']}: audit versions {versions[:8]} for version "
            f"{saga['version']} in {saga['state']}",
        )
    return rule


def _liveness(facts: dict[str, Any], ledger: dict[str, Any]) -> Invariant:
    rule = Invariant(
        "liveness",
        "every purchase is final or owned by reconciliation within twice its longest timeout",
    )
    for row in facts["purchases"]:
        if row["state"] in _FINAL_OR_OWNED:
            rule.checked += 1
            continue
        limit = max(LIVENESS_FLOOR_S, 2 * float(row["hold_seconds"] or 0))
        rule.check(
            float(row["in_state_s"]) <= limit,
            f"purchase {row['id']} in {row['state']} for {float(row['in_state_s']):.0f} s "
            f"(limit {limit:.0f} s)",
        )
    return rule
