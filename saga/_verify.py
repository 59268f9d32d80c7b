"""
``saga verify``: every invariant of DESIGN.md §2, checked on the data.

Each check reads the engine's tables with named SQL queries (and asks the
payment provider, through its port, about every money record) and reports
how many things it checked and which of them break the rule.  ``ok`` only if
nothing does.  Run it at quiescence: it reads the engine and the provider
one after the other, not in one snapshot.

The engine's own invariants live here; the purchase's (seats, money,
access) in :mod:`saga._verify_purchase`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Final

from saga._invariants import Invariant, Report
from saga._verify_purchase import PURCHASE_CHECKS, ProviderView, provider_view
from state_machine.purchase import PURCHASE

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sqlalchemy.engine import RowMapping

    from saga._db import Tx
    from saga._engine import Engine
    from saga._sagas import Registry

# Liveness: a saga that waits longer than twice its longest timeout is stuck
# (with a floor, so a busy worker's polling and backoff are not "stuck").
LIVENESS_FLOOR_S: Final = 60.0
_FINAL_OR_OWNED: Final = frozenset(
    {s.name for s in PURCHASE.states if s.terminal} | {"needs_reconciliation"}
)


def verify(engine: Engine) -> Report:
    """Check every invariant on ``engine``'s database and its payment provider."""
    facts = engine.db.transaction(_engine_facts, write=False)
    facts["registry"] = engine.registry
    view = provider_view(engine, facts)
    checks: list[Callable[[dict[str, Any], ProviderView], Invariant]] = [
        *PURCHASE_CHECKS,
        _no_lost_intent,
        _reconciliation,
        _fencing,
        _audit,
        _declared,
        _one_effect_per_event,
        _liveness,
    ]
    return Report([check(facts, view) for check in checks])


def _engine_facts(tx: Tx) -> dict[str, Any]:
    transitions = tx.all("verify_transitions")
    sagas = tx.all("verify_saga_versions")
    expected = _expected_jobs(transitions, sagas)
    known: set[str] = set()
    ids = sorted(expected)
    for start in range(0, len(ids), 500):
        chunk = json.dumps(ids[start : start + 500])
        known.update(row["id"] for row in tx.all("verify_known_jobs", ids=chunk))
    return {
        "ledger": tx.all("seat_ledger"),
        "purchases": tx.all("verify_purchases"),
        "payments": tx.all("verify_payments"),
        "refunds": tx.all("verify_refunds"),
        "external": tx.all("verify_external"),
        "access": tx.all("verify_access"),
        "without_operation": [row["id"] for row in tx.all("verify_sagas_without_operation")],
        "transitions": transitions,
        "sagas": sagas,
        "expected_jobs": expected,
        "known_jobs": known,
        "open_items": tx.all("verify_open_items"),
        "orphan_results": [row["job_id"] for row in tx.all("verify_orphan_results")],
        "dead_letters": tx.all("verify_dead_letters"),
        "inbox_effects": tx.all("verify_inbox_effects"),
    }


def _expected_jobs(
    transitions: Iterable[RowMapping], sagas: Iterable[RowMapping]
) -> dict[str, str]:
    """Every job a saga's history queued: the actions of each state it entered, its timer."""
    expected: dict[str, str] = {}
    for row in transitions:
        state = PURCHASE.state(row["to_state"]) if PURCHASE.has_state(row["to_state"]) else None
        if row["kind"] != PURCHASE.name:
            state = None
        for action in state.actions if state else ():
            job = f"step:{row['saga_id']}:{row['version']}:{action}"
            expected[job] = f"{row['saga_id']} entered {row['to_state']} (v{row['version']})"
    for saga in sagas:
        if saga["deadline_event"] is not None:
            job = f"timer:{saga['id']}:{saga['version']}"
            expected[job] = f"{saga['id']} has a deadline at v{saga['version']}"
    return expected


def _no_lost_intent(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant(
        "no_lost_intent",
        "every saga has its accepting operation, and every step and timer it queued",
    )
    for saga_id in facts["without_operation"]:
        rule.check(False, f"saga {saga_id} has no operation id")
    for job, why in sorted(facts["expected_jobs"].items()):
        rule.check(job in facts["known_jobs"], f"job {job} is missing ({why})")
    return rule


def _reconciliation(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant(
        "reconciliation_visible",
        "every saga in needs_reconciliation has exactly one open outcome item, no other saga "
        "has one, and every open item has an owner and a next check",
    )
    outcome_items: dict[str, list[RowMapping]] = defaultdict(list)
    for item in facts["open_items"]:
        rule.check(
            bool(item["owner"]) and item["next_check_at"] is not None,
            f"item {item['id']} has no owner or no next check",
        )
        if item["kind"] == "outcome":
            outcome_items[item["saga_id"]].append(item)
    for saga in facts["sagas"]:
        mine = outcome_items.get(saga["id"], [])
        if saga["state"] == "needs_reconciliation":
            rule.check(
                len(mine) == 1,
                f"saga {saga['id']} needs reconciliation with {len(mine)} open outcome item(s)",
            )
        elif mine:
            rule.check(False, f"saga {saga['id']} is {saga['state']} with an open outcome item")
    return rule


def _fencing(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant(
        "fencing",
        "no write to sagas, payments, refunds or results under an expired or superseded lease",
    )
    for row in facts["transitions"]:
        if row["job_id"] is None:
            continue
        rule.check(
            row["lease_valid"] is None or bool(row["lease_valid"]),
            f"saga {row['saga_id']} v{row['version']} ({row['event']}) was written by job "
            f"{row['job_id']} after its lease expired or passed to another worker",
        )
    for table in ("payments", "refunds"):
        for row in facts[table]:
            rule.check(
                int(row["stale_writes"]) == 0,
                f"{table[:-1]} {row['key']}: {row['stale_writes']} write(s) under a lost lease",
            )
    rule.checked += 1
    for job_id in facts["orphan_results"]:
        rule.problems.append(f"job {job_id} has a result but was not completed")
    return rule


def _audit(facts: dict[str, Any], view: ProviderView) -> Invariant:
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


def _declared(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant(
        "transitions_declared",
        "every persisted transition is one its machine declares (source, event, target)",
    )
    registry: Registry = facts["registry"]
    for row in facts["transitions"]:
        where = f"saga {row['saga_id']} v{row['version']}"
        try:
            machine = registry.get(row["kind"], int(row["definition_version"])).machine
        except LookupError:
            rule.check(False, f"{where}: kind {row['kind']} v{row['definition_version']} unknown")
            continue
        if row["from_state"] is None:
            ok = row["event"] == "start" and row["to_state"] == machine.initial.name
        else:
            ok = any(
                t.event == row["event"]
                and row["from_state"] in t.source
                and t.target == row["to_state"]
                for t in machine.transitions
            )
        rule.check(
            ok,
            f"{where}: {row['from_state']} --{row['event']}--> {row['to_state']} "
            f"is not declared by {machine.name} v{machine.version}",
        )
    return rule


def _one_effect_per_event(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant(
        "one_effect_per_event", "a provider event (by event id) moves a saga at most once"
    )
    rule.checked = len({row["event_id"] for row in facts["transitions"] if row["event_id"]})
    for row in facts["inbox_effects"]:
        rule.problems.append(f"event {row['event_id']} moved sagas {row['effects']} times")
    return rule


def _liveness(facts: dict[str, Any], view: ProviderView) -> Invariant:
    rule = Invariant(
        "liveness",
        "every purchase is final or owned by reconciliation within twice its longest timeout; "
        "no dead letter; no overdue check or unseen escalation",
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
    for job in facts["dead_letters"]:
        rule.check(
            False,
            f"dead letter {job['id']} ({job['kind']}, {job['error_class']}): "
            f"{(job['last_error'] or '')[:120]}",
        )
    for item in facts["open_items"]:
        late = float(item["past_deadline_s"])
        rule.check(
            late <= LIVENESS_FLOOR_S or item["overdue_at"] is not None,
            f"item {item['id']} is {late:.0f} s past its deadline and was never escalated",
        )
        if item["owner"] == "checker":
            behind = float(item["past_check_s"])
            rule.check(
                behind <= LIVENESS_FLOOR_S,
                f"item {item['id']}: the checker is {behind:.0f} s late for its next check",
            )
    return rule
