"""
``saga demo``: many purchases with faults, worked by several processes, then verified.

The purchases carry a realistic mix of payment methods, several worker
processes work them, and the run ends with a report and ``saga verify``.

The mix is drawn from a seeded random generator, so ``--seed`` replays the
same purchases, and the run is built so that the seed alone decides where
each purchase ends, whatever the machine's load: the contested intensive
sells out before any worker runs, the others have a seat for every buyer,
and arrivals are paced so that no more than a window of purchases waits for
its payment request (holds are short, so expiry and late payments happen
within the run, and a backlog must not expire them instead).  The report
gives the lag from acceptance to the payment request.

The run ends when its purchases settled and no job is due within
``DRAIN_HORIZON_S`` (late looks at the provider, retries): the workers stop
on a queue with nothing due soon, and the report names what is left (the
deadlines of the items waiting for an operator).  Its figures are this
run's, except ``verify`` and ``outbox``, which cover the whole database: the
report says how many purchases and demo runs that is.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from saga.exceptions import ConflictError, TransitionNotAllowed
from saga.ops import collect_stats, verify
from steps import PaymentMethod

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga import Engine

# (payment method, weight): mostly fine, some declines, late payments,
# timeouts, wrong amounts, messy webhooks and refund trouble.
MIX: Final = (
    ("pm_ok", 70),
    ("pm_declined", 7),
    ("pm_late", 4),
    ("pm_timeout_after_charge", 3),
    ("pm_timeout_before_charge", 3),
    ("pm_amount_mismatch", 2),
    ("pm_duplicate_webhooks", 4),
    ("pm_out_of_order_webhooks", 3),
    ("pm_refund_fails", 2),
    ("pm_refund_timeout", 2),
    ("pm_stale_failure_first", 2),
)
# Share of fine purchases whose student cancels after paying (a refund).
CANCEL_SHARE: Final = 0.03
HOLD_SECONDS: Final = 15
# Workers' leases: short against the hold they guard, so that a killed
# worker's purchases come back (in one batch) long before their hold runs out.
LEASE_SECONDS: Final = 5
# At most this many accepted purchases wait for their payment request.
WINDOW: Final = 20
SETTLED: Final = frozenset({"confirmed", "expired", "cancelled", "refunded"})
# Jobs due within this many seconds (database clock) of the run's settling are
# worked before the workers stop; later ones are named in the report.
DRAIN_HORIZON_S: Final = 60.0
# What each kind of job left behind is, for the report.
LEFT_BEHIND: Final = {
    "recon.deadline": "deadlines of reconciliation items waiting for an operator",
    "purchase.check_payment": "late looks at a payment still unsettled at the provider",
}


@dataclass(slots=True)
class Plan:
    """The purchases a run makes, drawn from ``seed``."""

    run: str
    intensives: dict[str, int]
    purchases: list[tuple[str, str, str, str]]  # operation id, intensive, student, method
    cancel: set[str] = field(default_factory=set)  # operation ids cancelled after paying

    @classmethod
    def draw(cls, *, purchases: int, seed: int, run: str) -> Plan:
        """
        A reproducible plan: ``purchases`` purchases over four intensives.

        One intensive has half as many seats as buyers (it sells out); the
        others have a seat for each of their buyers.
        """
        rng = random.Random(seed)
        hot = max(5, purchases // 50)
        rest = purchases - hot
        weights_of = {
            f"demo-{run}-js-bootcamp": max(1, rest * 2 // 5),
            f"demo-{run}-python-deep-dive": max(1, rest * 7 // 20),
            f"demo-{run}-sql-masterclass": max(1, rest // 4),
            f"demo-{run}-rust-weekend": hot,
        }
        names = list(weights_of)
        weights = list(weights_of.values())
        methods = [method for method, _ in MIX]
        mix = [weight for _, weight in MIX]
        plan = cls(run=run, intensives={}, purchases=[])
        for n in range(purchases):
            operation = f"demo-{run}-op-{n:05d}"
            method = rng.choices(methods, mix)[0]
            intensive = rng.choices(names, weights)[0]
            plan.purchases.append((operation, intensive, f"student-{n:05d}", method))
            if method in ("pm_refund_fails", "pm_refund_timeout") or (
                method == "pm_ok" and rng.random() < CANCEL_SHARE
            ):
                plan.cancel.add(operation)
        buyers = Counter(intensive for _, intensive, _, _ in plan.purchases)
        for name in names:
            contested = name.endswith("rust-weekend")
            plan.intensives[name] = max(1, buyers[name] // 2 if contested else buyers[name])
        return plan

    @property
    def contested(self) -> str:
        """The intensive with fewer seats than buyers."""
        return next(name for name in self.intensives if name.endswith("rust-weekend"))


@dataclass(slots=True)
class Outcome:
    """What a run did and found."""

    accepted: dict[str, str] = field(default_factory=dict)  # operation id -> purchase id
    refused: Counter[str] = field(default_factory=Counter)
    retried_same_key: int = 0
    cancelled_after_paying: int = 0
    seconds: float = 0.0
    settled: bool = False
    # Purchases that may still wait for their payment request: the count of
    # the last look at the database, plus every acceptance since.
    waiting: int = 0


def run_demo(
    engine: Engine,
    *,
    purchases: int,
    workers: int,
    seed: int | None,
    progress: Callable[[int, int], None] | None = None,
    timeout_s: float = 600.0,
    broker: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """
    Run the demo on ``engine``'s database; the report as plain data.

    With ``broker`` (a RabbitMQ URL and an exchange), the workers publish the
    purchases' events there, and the demo waits for the outbox to drain.
    """
    seed = seed if seed is not None else secrets.randbelow(2**31)
    plan = Plan.draw(purchases=purchases, seed=seed, run=secrets.token_hex(3))
    engine.upgrade()
    for intensive, seats in plan.intensives.items():
        engine.services.catalogue.add(intensive, seats=seats, price="49.00", currency="EUR")
    outcome = Outcome()
    start = time.monotonic()
    # The contested intensive sells out before any worker runs: which buyers
    # get a seat depends on the seed, never on how fast seats come free.
    _accept(engine, plan, outcome, only=plan.contested)
    process = _start_workers(engine, workers, broker)
    try:
        _accept(engine, plan, outcome, progress=progress, skip=plan.contested)
        outcome.settled = _work_until_settled(
            engine,
            plan,
            outcome,
            progress=progress,
            start=start,
            timeout_s=timeout_s,
            drain_outbox=broker is not None,
        )
    finally:
        _stop(process)
    outcome.seconds = time.monotonic() - start
    return _report(engine, plan, outcome, seed=seed, workers=workers)


def _start_workers(
    engine: Engine, workers: int, broker: tuple[str, str] | None
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "saga",
        "worker",
        "--concurrency",
        str(workers),
        "--db",
        engine.db.url.render_as_string(hide_password=False),
        "--sandbox-db",
        engine.services.sandbox_url,
        "--poll-interval",
        "0.2",
        "--lease-seconds",
        str(LEASE_SECONDS),
        "--log-level",
        "error",
    ]
    if broker is not None:
        command += ["--broker", broker[0], "--exchange", broker[1]]
    # Our own interpreter running our own module: no untrusted input here.
    return subprocess.Popen(  # noqa: S603
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ}
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _accept(
    engine: Engine,
    plan: Plan,
    outcome: Outcome,
    *,
    only: str | None = None,
    skip: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """
    Accept the plan's purchases (of one intensive, or all but one), paced by the window.

    Late payments first: such a purchase ends only when its hold runs out,
    so accepting them before the others makes the run last one hold, not
    the whole arrival plus one hold.  The order within each group is the
    seed's.
    """
    mine = [
        (index, purchase)
        for index, purchase in enumerate(plan.purchases)
        if (only is None or purchase[1] == only) and (skip is None or purchase[1] != skip)
    ]
    mine.sort(key=lambda item: item[1][3] != PaymentMethod.LATE)
    for index, (operation, intensive, student, method) in mine:
        if progress is not None:
            _wait_for_room(engine, plan, outcome, progress)
        try:
            result = engine.services.purchases.start(
                operation_id=operation,
                intensive_id=intensive,
                student_id=student,
                payment_method=method,
                hold_seconds=HOLD_SECONDS,
            )
        except ConflictError as exc:
            outcome.refused[type(exc).__name__] += 1
            continue
        outcome.accepted[operation] = result.purchase.id
        outcome.waiting += 1
        if index % 97 == 0:  # a client retrying a request it did not hear back from
            again = engine.services.purchases.start(
                operation_id=operation,
                intensive_id=intensive,
                student_id=student,
                payment_method=method,
                hold_seconds=HOLD_SECONDS,
            )
            assert again.purchase.id == result.purchase.id  # noqa: S101 - demo's own check
            outcome.retried_same_key += 1


def _wait_for_room(
    engine: Engine, plan: Plan, outcome: Outcome, progress: Callable[[int, int], None]
) -> None:
    """
    Hold the next arrival while a window of purchases still waits for its payment request.

    A purchase leaves ``reserved`` only forwards, so the count of the last
    look plus the acceptances since bounds the waiting ones: the database
    is asked again only when that bound reaches the window (asking before
    every arrival read every purchase of the run each time).
    """
    if outcome.waiting < WINDOW:
        return
    intensives = json.dumps(sorted(plan.intensives))
    mine = set(outcome.accepted.values())
    while True:
        rows = engine.db.transaction(
            lambda tx: tx.all("purchase_progress", intensive_ids=intensives), write=False
        )
        states = [row for row in rows if row["id"] in mine]
        progress(
            sum(1 for row in states if _is_settled(row["state"], row["owner"])),
            len(plan.purchases),
        )
        outcome.waiting = sum(1 for row in states if row["state"] == "reserved")
        if outcome.waiting < WINDOW:
            return
        time.sleep(0.05)


def _work_until_settled(
    engine: Engine,
    plan: Plan,
    outcome: Outcome,
    *,
    progress: Callable[[int, int], None] | None,
    start: float,
    timeout_s: float,
    drain_outbox: bool,
) -> bool:
    pending_cancel = {outcome.accepted[op] for op in plan.cancel if op in outcome.accepted}
    total = len(outcome.accepted)
    mine = set(outcome.accepted.values())
    intensives = json.dumps(sorted(plan.intensives))
    while time.monotonic() - start < timeout_s:
        rows = engine.db.transaction(
            lambda tx: tx.all("purchase_progress", intensive_ids=intensives), write=False
        )
        states = {row["id"]: row for row in rows if row["id"] in mine}
        for purchase_id in sorted(pending_cancel):
            row = states.get(purchase_id)
            if row is None or row["state"] in ("reserved", "payment_pending"):
                continue
            pending_cancel.discard(purchase_id)
            if row["state"] == "confirmed":
                try:
                    engine.services.purchases.cancel(
                        purchase_id, reason="student changed plans", actor="student"
                    )
                    outcome.cancelled_after_paying += 1
                except TransitionNotAllowed:
                    pass
        settled = sum(1 for row in states.values() if _is_settled(row["state"], row["owner"]))
        if progress is not None:
            progress(settled, total)
        if (
            settled == total
            and not pending_cancel
            and _queues_idle(engine, drain_outbox)
            and not _due_soon(engine)
        ):
            return True
        time.sleep(0.5)
    return False


def _is_settled(state: str, owner: str | None) -> bool:
    if state in SETTLED:
        return True
    # Waiting for a human is where the machine's own work ends.
    return state == "needs_reconciliation" and owner is not None and owner != "checker"


def _queues_idle(engine: Engine, drain_outbox: bool) -> bool:
    figures = collect_stats(engine.db)
    busy = any(q["due"] or q["running"] for q in figures["queues"].values())
    busy = busy or (drain_outbox and figures["outbox"]["unpublished"] > 0)
    return not busy and engine.services.sandbox.next_webhook_in() is None


def _jobs_left(engine: Engine) -> list[dict[str, Any]]:
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


def _due_soon(engine: Engine) -> bool:
    """Whether a pending job is due within the drain horizon."""
    return any(job["first_due_in_s"] <= DRAIN_HORIZON_S for job in _jobs_left(engine))


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


def _report(
    engine: Engine, plan: Plan, outcome: Outcome, *, seed: int, workers: int
) -> dict[str, Any]:
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
        "left": {"horizon_s": DRAIN_HORIZON_S, "jobs": _jobs_left(engine)},
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
