"""
``saga chaos``: purchases under faults and process kills, then the invariants.

A run has two phases.  In the first, clients accept the plan's purchases
(a window at a time), cancel some while their payment is on its way and
resend others; an operator works the reconciliation queue; worker
processes die at random crash points, are killed with SIGKILL and paused
past their leases; PostgreSQL sessions are ended; the broker goes away;
webhooks arrive twice, late and out of order.  In the second, the faults
stop and the same machinery settles what is left, as it would after an
incident.  Then every invariant of ``saga verify`` is checked, and the rows
that must be zero are counted: purchases acknowledged but lost, double
charges, double refunds, oversold seats, open items without a next check,
events committed but never received by a consumer.

This module is the run loop; what it reads of the database as it goes is
:mod:`saga.purchase.chaos_watch`'s, and the report :mod:`saga.purchase.chaos_report`'s.
"""

from __future__ import annotations

import functools
import json
import random
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from saga.events import declare_events_queue as declare_queue
from saga.events import remove_exchange
from saga.exceptions import DatabaseError
from saga.faults import Outage
from saga.purchase.chaos_actors import (
    Clients,
    EventWatcher,
    Operators,
    Weather,
)
from saga.purchase.chaos_aimed import (
    APP_SPEC,
    CLOCK_SKEW_S,
    OUTBOX_REFUSAL,
    PAUSE_PAST_LEASE_S,
    PAUSE_POINTS,
    PAUSE_RATE,
    TALLY_KIND,
    Redeliveries,
    Tallies,
    prepare_worker,
    refuse_outbox_writes,
)
from saga.purchase.chaos_plan import AIMED_FAULTS, ChaosPlan
from saga.purchase.chaos_report import chaos_report
from saga.purchase.chaos_watch import (
    ChaosRun,
    at_rest,
    count_settled,
    drain_events,
    progress_rows,
    watch_seats,
)
from saga.purchase.faults import CRASH_POINTS
from saga.queue import DeadLetterFilter, DeadLetters, WorkerFleet, WorkerOptions

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga import Engine

HOLD_SECONDS: Final = 10
LEASE_SECONDS: Final = 3.0
# Crash-point chance per point reached: a few worker deaths a second under load.
CRASH_RATE: Final = 0.004
# Accepted purchases waiting for their payment request, at most: arrivals
# are paced so that a backlog of the machine's making does not expire them.
WINDOW: Final = 30
TICK_S: Final = 0.05


@dataclass(frozen=True, slots=True)
class ChaosOptions:
    """A run's knobs (``saga chaos``'s options)."""

    purchases: int
    workers: int
    seed: int | None = None
    duration_s: float | None = None  # the faults' phase, at most
    fault_every_s: float = 3.0
    broker_url: str | None = None
    settle_timeout_s: float = 600.0
    crash_rate: float = CRASH_RATE
    crash_points: tuple[str, ...] = CRASH_POINTS
    fault_kinds: tuple[str, ...] | None = None  # default: every kind the setup allows
    # A guard removed on purpose (saga.purchase.chaos_mutants), in the harness
    # (the caller applies it before opening the engine) and in every worker.
    mutant: str | None = None


def run_chaos(
    engine: Engine,
    options: ChaosOptions,
    *,
    progress: Callable[[int, int, str], None] | None = None,
) -> dict[str, Any]:
    """Run the harness on ``engine``'s database (the report as plain data)."""
    seed = options.seed if options.seed is not None else secrets.randbelow(2**31)
    run_id = secrets.token_hex(3)
    plan = ChaosPlan.draw(
        run=run_id,
        seed=seed,
        purchases=options.purchases,
        workers=options.workers,
        fault_every_s=options.fault_every_s,
        postgres=engine.db.dialect == "postgres",
        broker=options.broker_url is not None,
        fault_kinds=options.fault_kinds,
    )
    engine.upgrade()
    for intensive, seats in plan.intensives.items():
        engine.services.catalogue.add(intensive, seats=seats, price="49.00", currency="EUR")
    exchange = f"saga.chaos.{run_id}"
    outage = Outage(options.broker_url) if options.broker_url else None
    watcher = None
    if options.broker_url:
        watcher = EventWatcher(options.broker_url, exchange=exchange, queue=f"{exchange}.watch")
        declare_queue(options.broker_url, exchange=exchange, queue=watcher.queue, bindings=("#",))
        watcher.start()
    aimed = frozenset(
        kind
        for kind, _ in AIMED_FAULTS
        if options.fault_kinds is None or kind in options.fault_kinds
    )
    fleet = _fleet(
        engine,
        options,
        seed=seed,
        run_id=run_id,
        outage=outage,
        exchange=exchange,
        crash_rate=options.crash_rate,
        aimed=aimed,
    )
    run = ChaosRun(
        plan=plan,
        clients=Clients(engine, plan, HOLD_SECONDS),
        operators=Operators(engine, random.Random(f"{seed}:operator")),
        weather=Weather(
            engine,
            plan,
            fleet,
            outage,
            LEASE_SECONDS,
            random.Random(f"{seed}:weather"),
        ),
        fleet=fleet,
        watcher=watcher,
        aimed=aimed,
    )
    if "race_events" in aimed and TALLY_KIND in engine.registry.kinds:
        run.tallies = Tallies(engine, run=run_id, seed=seed)
    if "redeliver_events" in aimed:
        run.redeliveries = Redeliveries(engine, seed=seed)
    try:
        fleet.start()
        if "refuse_outbox_writes" in aimed:
            refuse_outbox_writes(engine, refuse=True)
        if run.tallies is not None:
            run.tallies.start()
        _loop(engine, run, options, progress)
    finally:
        _lift_aimed(engine, run)
        run.fleet.close()
        if outage is not None:
            outage.close()
        if watcher is not None:
            drain_events(engine, watcher)
            watcher.stop()
            remove_exchange(options.broker_url or "", exchange=exchange, queues=(watcher.queue,))
    return chaos_report(
        engine, run, mutant=options.mutant, workers=options.workers, seconds=run.now()
    )


def _lift_aimed(engine: Engine, run: ChaosRun) -> None:
    """The aimed faults end: adds stop, the outbox takes every write (idempotent)."""
    if run.tallies is not None:
        run.tallies.stop()
    if "refuse_outbox_writes" in run.aimed:
        try:
            refuse_outbox_writes(engine, refuse=False)
        except DatabaseError:
            # A session ended under us: try once more, the settling phase needs the outbox.
            refuse_outbox_writes(engine, refuse=False)


def _replay_refused(engine: Engine) -> None:
    """
    Replay the dead letters the refused outbox writes made, as an operator would.

    A job whose every attempt met a refused write is dead-lettered: that is
    the engine answering a failing database rightly (its transition rolled
    back each time), not a broken guard; after the incident an operator
    replays it (audited), and the run must still settle.
    """
    letters = DeadLetters(engine.db)
    for job in letters.find(limit=10_000):
        if OUTBOX_REFUSAL in (job.last_error or ""):
            letters.replay(
                DeadLetterFilter(job_id=job.id),
                actor="chaos",
                reason="the outbox refused its writes (the harness's fault), now lifted",
            )


def _fleet(
    engine: Engine,
    options: ChaosOptions,
    *,
    seed: int,
    run_id: str,
    outage: Outage | None,
    exchange: str,
    crash_rate: float,
    aimed: frozenset[str],
) -> WorkerFleet:
    worker = WorkerOptions(
        url=engine.db.url.render_as_string(hide_password=False),
        # The workers fire the tallies' deadlines too: they need to know the kind.
        app=APP_SPEC if TALLY_KIND in engine.registry.kinds else None,
        app_options=(("sandbox_db", engine.services.sandbox_url),),
        lease_seconds=LEASE_SECONDS,
        poll_interval=0.2,
        log_level="critical",
        broker_url=outage.url if outage is not None else None,
        exchange=exchange if outage is not None else None,
    )
    return WorkerFleet(
        worker,
        size=options.workers,
        seed=seed,
        crash_rate=crash_rate,
        crash_points=options.crash_points,
        application_name=f"saga-chaos-{run_id}",
        setup=functools.partial(
            prepare_worker,
            skew_s=CLOCK_SKEW_S if "skew_clocks" in aimed else 0.0,
            mutant=options.mutant,
        ),
        pause=(
            (PAUSE_RATE, PAUSE_POINTS, LEASE_SECONDS + PAUSE_PAST_LEASE_S)
            if "pause_at_points" in aimed
            else None
        ),
    )


def _loop(
    engine: Engine,
    run: ChaosRun,
    options: ChaosOptions,
    progress: Callable[[int, int, str], None] | None,
) -> None:
    next_look = next_operator = next_webhooks = 0.0
    rows: list[Any] = []
    intensives = json.dumps(sorted(run.plan.intensives))
    while True:
        now = run.now()
        run.fleet.restart_dead()
        faulty = run.calm_since is None
        run.weather.tick(now, faults_on=faulty)
        if now >= next_look:
            rows = progress_rows(engine, intensives)
            watch_seats(engine, run)
            if faulty and run.tallies is not None:
                run.tallies.keep_open()
            if run.redeliveries is not None:
                run.redeliveries.tick()
                if faulty and now >= next_webhooks:
                    # The provider's side of redelivery: webhooks again, a forged one twice.
                    run.weather.redeliver_now(3)
                    next_webhooks = now + 1.0
            next_look = now + 0.25
            waiting = sum(1 for row in rows if row["state"] == "reserved")
            run.clients.accept(max(0, WINDOW - waiting), now)
            settled = count_settled(rows, run)
            if progress is not None:
                progress(settled, len(run.plan.orders), "faults" if faulty else "settling")
            if run.clients.done and at_rest(engine, run, settled):
                if faulty:
                    _calm_down(engine, run, options)
                else:
                    run.settled = True
                    return
        run.clients.cancel_due(now)
        if now >= next_operator:
            run.operators.work()
            next_operator = now + 1.0
        if faulty and options.duration_s is not None and now >= options.duration_s:
            _calm_down(engine, run, options)
        if run.calm_since is not None and now - run.calm_since > options.settle_timeout_s:
            return
        time.sleep(TICK_S)


def _calm_down(engine: Engine, run: ChaosRun, options: ChaosOptions) -> None:
    """End the faults: healthy workers settle what is left."""
    run.calm_since = run.now()
    run.weather.calm()
    _lift_aimed(engine, run)
    if "refuse_outbox_writes" in run.aimed:
        _replay_refused(engine)
    run.fleet.stop()
    healthy = WorkerFleet(
        run.fleet.options,
        size=run.fleet.size,
        seed=run.plan.seed,
        application_name=run.fleet.application_name,
        # The same engine, mutant included: only the faults stop (clocks agree again).
        setup=functools.partial(prepare_worker, skew_s=0.0, mutant=options.mutant),
    )
    healthy.report = run.fleet.report  # one account of the run's processes
    run.fleet.close()
    run.fleet = healthy
    run.weather.fleet = healthy
    healthy.start()
