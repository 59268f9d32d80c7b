"""
A chaos run's report: what it did, ``saga verify``'s invariants, the rows that must be zero.

Plain data, as ``saga chaos --json`` prints it; ``ok`` only if every
invariant holds, every count that must be zero is, the run settled and no
client saw a violation.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

from saga.ops import verify
from saga.purchase.chaos_aimed import aimed_checks, aimed_counts
from saga.purchase.chaos_watch import progress_rows

if TYPE_CHECKING:
    from saga import Engine
    from saga.ops import Report
    from saga.purchase.chaos_watch import ChaosRun


def chaos_report(
    engine: Engine, run: ChaosRun, *, mutant: str | None, workers: int, seconds: float
) -> dict[str, Any]:
    """The report of a run that has ended (its faults lifted, its workers closed)."""
    verdict = verify(engine)
    intensives = json.dumps(sorted(run.plan.intensives))
    rows = progress_rows(engine, intensives)
    states = Counter(row["state"] for row in rows)
    if run.redeliveries is not None:
        run.redeliveries.tick()  # the last events, and the last redeliveries
    zero = _must_be_zero(engine, run, rows, verdict)
    aimed_zero, aimed_problems = aimed_checks(engine, run.tallies, run.redeliveries)
    zero |= aimed_zero
    run.problems += aimed_problems
    if not run.settled:
        run.problems.append("the run did not settle before --settle-timeout")
    fleet = run.fleet.report
    faults: dict[str, Any] = {
        "workers_killed": fleet.killed,
        "workers_paused_past_lease": fleet.paused,
        "crash_points": dict(sorted(fleet.crash_points.items())),
        "paused_at_points": dict(sorted(fleet.paused_at.items())),
        "workers_restarted": fleet.restarted,
        **dict(sorted(run.weather.counts.items())),
        **dict(sorted(run.clients.counts.items())),
        **dict(sorted(run.operators.counts.items())),
        **aimed_counts(run.tallies, run.redeliveries),
        "aimed": sorted(run.aimed),
    }
    if fleet.other_exits:
        faults["unexpected_worker_exits"] = {str(k): v for k, v in fleet.other_exits.items()}
    if fleet.crashes:
        faults["worker_crashes"] = dict(fleet.crashes.most_common())
    ok = verdict.ok and not any(zero.values()) and run.settled and not run.clients.violations
    return {
        "run": run.plan.run,
        "seed": run.plan.seed,
        "mutant": mutant,
        "backend": engine.db.dialect,
        "workers": workers,
        "seconds": round(seconds, 1),
        "settled": run.settled,
        "purchases": {
            "planned": len(run.plan.orders),
            "accepted": len(run.clients.acknowledged),
            "refused": dict(run.clients.refused),
            "by_state": dict(sorted(states.items())),
        },
        "faults": faults,
        "invariants": [
            {"name": i.name, "checked": i.checked, "violations": len(i.problems)}
            for i in verdict.invariants
        ],
        "must_be_zero": zero,
        "problems": [
            *run.clients.violations,
            *run.problems,
            *(f"{i.name}: {p}" for i in verdict.invariants for p in i.problems[:5]),
        ][:50],
        "events": run.watcher.stats() if run.watcher is not None else None,
        "ok": ok,
    }


def _must_be_zero(
    engine: Engine, run: ChaosRun, rows: list[Any], verdict: Report
) -> dict[str, int | None]:
    found = {row["id"] for row in rows}
    lost = [op for op, saga_id in run.clients.acknowledged.items() if saga_id not in found]
    by_name = {i.name: len(i.problems) for i in verdict.invariants}
    seats = [engine.services.catalogue.get(name) for name in run.plan.intensives]
    oversold = (
        sum(1 for s in seats if s.held + s.taken > s.capacity)
        + by_name.get("seats", 0)
        + run.oversold_seen
    )
    items = engine.recon.find(status="open", limit=10_000)
    events_lost: int | None = None
    if run.watcher is not None:
        outbox = engine.db.transaction(lambda tx: tx.all("chaos_outbox_events"), write=False)
        missing = [row for row in outbox if row["event_id"] not in run.watcher.received]
        events_lost = len(missing)
        run.problems += [
            f"event {row['event_id']} ({'published' if row['published'] else 'never published'})"
            " never reached the consumer"
            for row in missing[:10]
        ]
    return {
        "acknowledged_but_lost": len(lost),
        "double_charges": by_name.get("one_charge_per_purchase", 0),
        "double_refunds": by_name.get("one_refund_per_payment", 0),
        "oversold_seats": oversold,
        "items_without_next_check": sum(1 for i in items if i.next_check_at is None or not i.owner),
        "events_lost": events_lost,
    }
