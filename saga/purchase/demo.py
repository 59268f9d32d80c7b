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

The plan a seed draws is :mod:`saga.purchase.demo_plan`'s, the report
:mod:`saga.purchase.demo_report`'s.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any, Final

from saga.exceptions import ConflictError, TransitionNotAllowed
from saga.ops import collect_stats
from saga.purchase.demo_plan import Outcome, Plan
from saga.purchase.demo_report import DRAIN_HORIZON_S, demo_report, jobs_left
from steps import PaymentMethod

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga import Engine

HOLD_SECONDS: Final = 15
# Workers' leases: short against the hold they guard, so that a killed
# worker's purchases come back (in one batch) long before their hold runs out.
LEASE_SECONDS: Final = 5
# At most this many accepted purchases wait for their payment request.
WINDOW: Final = 20
SETTLED: Final = frozenset({"confirmed", "expired", "cancelled", "refunded"})


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
    return demo_report(engine, plan, outcome, seed=seed, workers=workers)


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


def _due_soon(engine: Engine) -> bool:
    """Whether a pending job is due within the drain horizon."""
    return any(job["first_due_in_s"] <= DRAIN_HORIZON_S for job in jobs_left(engine))
