"""
The demo's report: the run's purchases, seats and money, its lag, what is left, and ``saga verify``.

Its figures are the run's, except ``verify`` and ``outbox``, which cover
the whole database: the report says how many purchases and demo runs that
is.  Plain data, as ``saga demo --json`` prints it.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any, Final

from saga.ops import collect_stats, verify

if TYPE_CHECKING:
    from saga import Engine
    from saga.purchase.demo_plan import Outcome, Plan

# Jobs due within this many seconds (database clock) of the run's settling are
# worked before the workers stop; later ones are named in the report.
DRAIN_HORIZON_S: Final = 60.0
# What each kind of job left behind is, for the report.
LEFT_BEHIND: Final = {
    "recon.deadline": "deadlines of reconciliation items waiting for an operator",
    "purchase.check_payment": "late looks at a payment still unsettled at the provider",
}


def jobs_left(engine: Engine) -> list[dict[str, Any]]:
    """Pending jobs of the whole database by kind, and when they are due."""
    rows = engine.db.transaction(lambda tx: tx.all("demo_jobs_left"), write=False)
    return [
        {
            "queue": row["queue"],
            "kind": row["kind"],
            "pending": int(row["pending"]),
            "first_due_in_s": round(float(row["first_due_in_s"]), 1),
            "last_due_in_s": round(float(row["last_due_in_s"]), 1),
            "what": LEFT_BEHIND.get(row["kind"], ""),
        }
        for row in rows
    ]


def _scope(engine: Engine, figures: dict[str, Any]) -> dict[str, Any]:
    """What the whole-database figures (``verify``, ``outbox``) cover."""
    purchases = figures["saga_kinds"].get("purchase", {})
    runs = {
        intensive.id.split("-")[1]
        for intensive in engine.services.catalogue.list(limit=10_000)
        if intensive.id.startswith("demo-")
    }
    return {
        "purchases": sum(int(state["count"]) for state in purchases.values()),
        "demo_runs": len(runs),
        "sagas": sum(int(count) for count in figures["sagas"].values()),
    }


def demo_report(
    engine: Engine, plan: Plan, outcome: Outcome, *, seed: int, workers: int
) -> dict[str, Any]:
    """The report of a run whose workers have stopped."""
    mine = set(outcome.accepted.values())
    purchases = [
        purchase
        for intensive in plan.intensives
        for purchase in engine.services.purchases.list(intensive_id=intensive, limit=10_000)
    ]
    states = Counter(p.state for p in purchases)
    methods = {op: method for op, _, _, method in plan.purchases}
    by_method: dict[str, Counter[str]] = {}
    for purchase in purchases:
        by_method.setdefault(methods[purchase.operation_id or ""], Counter())[purchase.state] += 1
    ledger = engine.services.sandbox.ledger()
    charges = [c for c in ledger["charges"] if c["reference"] in mine]
    refunds = [r for r in ledger["refunds"] if r["reference"] in mine]
    items = [p.reconciliation for p in purchases if p.reconciliation is not None]
    lags = sorted(
        float(row["lag_s"])
        for row in engine.db.transaction(
            lambda tx: tx.all(
                "payment_request_lag", intensive_ids=json.dumps(sorted(plan.intensives))
            ),
            write=False,
        )
    )
    report = verify(engine)
    figures = collect_stats(engine.db)
    return {
        "run": plan.run,
        "seed": seed,
        "workers": workers,
        "purchases": {
            "planned": len(plan.purchases),
            "accepted": len(outcome.accepted),
            "refused": dict(outcome.refused),
            "retried_same_operation_id": outcome.retried_same_key,
            "cancelled_after_paying": outcome.cancelled_after_paying,
            "by_state": dict(sorted(states.items())),
            "by_payment_method": {m: dict(sorted(c.items())) for m, c in sorted(by_method.items())},
        },
        "seats": [engine.services.catalogue.get(i).to_json() for i in plan.intensives],
        "money": {
            "charges": dict(Counter(c["status"] for c in charges)),
            "charged_minor": sum(
                int(c["charged_minor"] or 0) for c in charges if c["status"] == "succeeded"
            ),
            "refunds": dict(Counter(r["status"] for r in refunds)),
            "refunded_minor": sum(
                int(r["amount_minor"]) for r in refunds if r["status"] == "succeeded"
            ),
        },
        "reconciliation": {
            "opened": len(items),
            "settled_automatically": sum(1 for i in items if i["status"] == "resolved"),
            "waiting_for_an_operator": [
                {"id": i["id"], "saga_id": p.id, "reason": i["reason"], "owner": i["owner"]}
                for p in purchases
                if (i := p.reconciliation) is not None and i["status"] == "open"
            ],
        },
        "payment_request_lag_s": {
            "p50": _quantile(lags, 0.50),
            "p99": _quantile(lags, 0.99),
            "max": round(lags[-1], 3) if lags else None,
        },
        "outbox": {
            key: value
            for key, value in figures["outbox"].items()
            if key in ("unpublished", "published", "broker_errors")
        },
        # verify and outbox read the whole database, which may hold earlier runs.
        "database": _scope(engine, figures),
        "left": {"horizon_s": DRAIN_HORIZON_S, "jobs": jobs_left(engine)},
        "settled": outcome.settled,
        "seconds": round(outcome.seconds, 1),
        "purchases_per_second": round(len(outcome.accepted) / outcome.seconds, 1)
        if outcome.seconds
        else None,
        "verify": report.to_json(),
    }


def _quantile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile of sorted ``values`` (nearest rank), rounded to the millisecond."""
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)
