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
"""

from __future__ import annotations

import functools
import json
import random
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from saga.events import declare_events_queue as declare_queue
from saga.events import remove_exchange
from saga.exceptions import DatabaseError
from saga.faults import Outage
from saga.ops import collect_stats, verify
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
    aimed_checks,
    aimed_counts,
    prepare_worker,
    refuse_outbox_writes,
)
from saga.purchase.chaos_plan import AIMED_FAULTS, ChaosPlan
from saga.purchase.faults import CRASH_POINTS
from saga.queue import DeadLetterFilter, DeadLetters, Queue, WorkerFleet, WorkerOptions

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga import Engine
    from saga.ops import Report

HOLD_SECONDS: Final = 10
LEASE_SECONDS: Final = 3.0
# Crash-point chance per point reached: a few worker deaths a second under load.
CRASH_RATE: Final = 0.004
# Accepted purchases waiting for their payment request, at most: arrivals
# are paced so that a backlog of the machine's making does not expire them.
WINDOW: Final = 30
SETTLED: Final = frozenset({"confirmed", "expired", "cancelled", "refunded"})
TICK_S: Final = 0.05
# Work due further away than this does not keep a run from ending.
REST_HORIZON_S: Final = 120.0
TIMER_KIND: Final = "saga.timeout"


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


@dataclass(slots=True)
class _Run:
    plan: ChaosPlan
    clients: Clients
    operators: Operators
    weather: Weather
    fleet: WorkerFleet
    watcher: EventWatcher | None
    aimed: frozenset[str]
    tallies: Tallies | None = None
    redeliveries: Redeliveries | None = None
    started: float = field(default_factory=time.monotonic)
    faults_until: float | None = None
    calm_since: float | None = None
    settled: bool = False
    problems: list[str] = field(default_factory=list)
    oversold_seen: int = 0  # intensives seen with more seats out than capacity, during the run

    def now(self) -> float:
        return time.monotonic() - self.started


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
    run = _Run(
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
            _drain_events(engine, watcher)
            watcher.stop()
            remove_exchange(options.broker_url or "", exchange=exchange, queues=(watcher.queue,))
    return _report(engine, run, options, seconds=run.now())


def _lift_aimed(engine: Engine, run: _Run) -> None:
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
    run: _Run,
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
            rows = _progress_rows(engine, intensives)
            _watch_seats(engine, run)
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
            settled = _settled(rows, run)
            if progress is not None:
                progress(settled, len(run.plan.orders), "faults" if faulty else "settling")
            if run.clients.done and _at_rest(engine, run, settled):
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


def _progress_rows(engine: Engine, intensives: str) -> list[Any]:
    try:
        return list(
            engine.db.transaction(
                lambda tx: tx.all("purchase_progress", intensive_ids=intensives), write=False
            )
        )
    except Exception:  # noqa: BLE001 - a session ended under us: look again next tick
        return []


def _watch_seats(engine: Engine, run: _Run) -> None:
    """The seats invariant holds at every moment, not only at the end: look while it runs."""
    try:
        seats = engine.services.catalogue.list(limit=10_000)
    except Exception:  # noqa: BLE001 - a session ended under us: look again next tick
        return
    for intensive in seats:
        if intensive.id in run.plan.intensives and (
            intensive.held + intensive.taken > intensive.capacity
            or intensive.held < 0
            or intensive.taken < 0
        ):
            run.oversold_seen += 1
            if len(run.problems) < 20:
                run.problems.append(
                    f"intensive {intensive.id} seen with {intensive.held} held and "
                    f"{intensive.taken} taken of {intensive.capacity} seats"
                )


def _settled(rows: list[Any], run: _Run) -> int:
    mine = set(run.clients.acknowledged.values())
    return sum(1 for row in rows if row["id"] in mine and row["state"] in SETTLED)


def _calm_down(engine: Engine, run: _Run, options: ChaosOptions) -> None:
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


def _at_rest(engine: Engine, run: _Run, settled: int) -> bool:
    """
    Nothing more will happen by itself: no work due or running, nothing due soon.

    Either every purchase settled, or those that did not wait on nothing the
    machine will do (a dead letter, a finding ``verify`` reports).
    """
    try:
        if not _idle(engine, run):
            return False
        if settled >= len(run.clients.acknowledged):
            return True
        kinds = {kind.name for kind in engine.step_kinds()} | {TIMER_KIND}
        wait = Queue(engine.db).next_due_in(kinds)
    except DatabaseError:
        return False
    return wait is None or wait > REST_HORIZON_S


def _idle(engine: Engine, run: _Run) -> bool:
    figures = collect_stats(engine.db)
    busy = any(q["due"] or q["running"] for q in figures["queues"].values())
    if run.watcher is not None:
        busy = busy or figures["outbox"]["unpublished"] > 0
    return not busy and engine.services.sandbox.next_webhook_in() is None


def _drain_events(engine: Engine, watcher: EventWatcher, timeout_s: float = 60.0) -> None:
    """Wait until the consumer received every published event (or the time is up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        published = {
            row["event_id"]
            for row in engine.db.transaction(lambda tx: tx.all("chaos_outbox_events"), write=False)
            if row["published"]
        }
        if published <= watcher.received:
            return
        time.sleep(0.2)


def _report(engine: Engine, run: _Run, options: ChaosOptions, *, seconds: float) -> dict[str, Any]:
    verdict = verify(engine)
    intensives = json.dumps(sorted(run.plan.intensives))
    rows = _progress_rows(engine, intensives)
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
        "mutant": options.mutant,
        "backend": engine.db.dialect,
        "workers": options.workers,
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
    engine: Engine, run: _Run, rows: list[Any], verdict: Report
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
