"""
``saga chaos``'s faults aimed at the guards, and the checks that see a guard give way.

The purchase's own traffic reaches some guards only by luck: two writers
deciding on one saga at the same moment, a timer claimed just as the saga
moves on, a consumer getting an event twice.  These faults make those
moments common, each with a check that counts what a broken guard lets
through:

- **tallies** (``race_events``): sagas of a small kind of their own
  (:data:`TALLY`) that several threads, each with its own database session,
  add to at once, each add reading the count and writing it plus one in one
  transaction; a deadline since creation closes each while the adds go on,
  so its timer races them.  An add the database acknowledged and the count
  does not hold is a lost update (``tally_adds_lost``), and an add whose
  transaction failed half-way on a lock and ran again did not take its lock
  up front (``writes_rerun_after_lock_errors``); a timer that moved a
  saga at a version other than the one it was set for fired on a decision
  it never saw (``timers_fired_on_another_version``, every kind's timers);
- **redeliveries** (``redeliver_events``): a consumer with an inbox receives
  every outbox event, many of them again, some at once from two threads; an
  event it applied twice is counted (``events_applied_twice``); and every
  second the provider's webhooks come again, a forged one twice in a row
  (the provider inbox's dedupe: ``one_review_per_event``);
- **refused outbox writes** (``refuse_outbox_writes``): the database refuses
  one outbox insert in twenty; the transition must roll back with it, or the
  ``outbox`` invariant finds a state entered without its event;
- **short holds**: some purchases hold their seat 1 to 3 s, so that their
  payment request races their expiry; a payment intent written after its
  hold ran out (by the database clock) is counted (``payments_after_hold``).

The workers' own faults (pausing themselves at the worst points, clocks
that disagree) are set up by :func:`prepare_worker`, run in each worker
process before its engine exists.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Final

from saga import fire_in
from saga.events import Consumer, Event
from saga.exceptions import ConflictError, DatabaseError, SagaError
from saga.purchase.app import purchase_app
from saga.sagas import lock_in
from state_machine import Machine, State, Timeout, Transition

if TYPE_CHECKING:
    from saga import Application, Engine, Tx

# The chaos application: the purchase, and the tally kind.
APP_SPEC: Final = "saga.purchase.chaos_aimed:chaos_app"
TALLY_KIND: Final = "chaos_tally"
TALLY = Machine(
    TALLY_KIND,
    states=[
        State(
            "open",
            initial=True,
            timeout=Timeout("close_due", seconds_from="close_after", since="created"),
            description="taking adds until its deadline since creation",
        ),
        State("closed", terminal=True, description="its deadline fired"),
    ],
    transitions=[
        Transition("add", source="open", target="open"),
        Transition("close_due", source="open", target="closed"),
    ],
)
TALLY_THREADS: Final = 3
TALLIES_OPEN: Final = 2
OUTBOX_REFUSAL: Final = "chaos: outbox write refused"
# A worker pausing itself here wakes up past its lease with work to finish
# (the rarer points, where money moved, more often).
PAUSE_POINTS: Final = (
    "worker.before_complete",
    "timer.before_fire@0.05",
    "request_payment.after_call@0.1",
    "refund.after_call@0.3",
)
PAUSE_RATE: Final = 0.02
# Just past the lease: another worker may or may not have taken the work over
# when the paused one wakes, and it tries to finish either way.
PAUSE_PAST_LEASE_S: Final = 0.4
# Each worker process's clock is off by up to this much (either way).
CLOCK_SKEW_S: Final = 6.0
_VERSION: Final = re.compile(r"of version (\d+)$")


def chaos_app() -> Application:
    """The purchase application with the tally kind registered beside it."""
    app = purchase_app()
    app.registry.register(TALLY)
    return app


def prepare_worker(*, skew_s: float, mutant: str | None) -> None:
    """
    Set up one worker process before its engine exists: its clock, then the mutant.

    The clock's skew is drawn from the process's crash seed (its slot and
    life), so a seed replays it.  The engine must not care: every deadline
    and lease is read on the database's clock.
    """
    if skew_s > 0:
        rng = random.Random(f"{os.environ.get('SAGA_CRASH_SEED', '0')}:clock")
        skew = rng.uniform(-skew_s, skew_s)
        real = time.time
        time.time = lambda: real() + skew
    if mutant is not None:
        from saga.purchase.chaos_mutants import apply  # noqa: PLC0415

        apply(mutant)


class Tallies:
    """Tally sagas taking adds from several threads at once while their deadlines fire."""

    def __init__(self, engine: Engine, *, run: str, seed: int) -> None:
        self.engine = engine
        self.run = run
        self.seed = seed
        self.rng = random.Random(f"{seed}:tallies")
        self.acked: Counter[str] = Counter()
        self.reruns = 0
        self.counts: Counter[str] = Counter()
        self.started: list[str] = []
        self._open: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Open the first tallies and start the adding threads."""
        self.keep_open()
        for n in range(TALLY_THREADS):
            thread = threading.Thread(target=self._add_loop, args=(n,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def keep_open(self) -> None:
        """Replace the tallies that closed (called by the harness's loop while faults are on)."""
        if self._stop.is_set():
            return
        try:
            still = [s for s in self._open if self.engine.sagas.get(s).state == "open"]
            while len(still) < TALLIES_OPEN:
                n = len(self.started)
                saga = self.engine.sagas.start(
                    TALLY_KIND,
                    operation_id=f"chaos-{self.run}-tally-{n:04d}",
                    request={"count": 0, "close_after": round(self.rng.uniform(1.5, 3.0), 3)},
                ).saga
                self.started.append(saga.id)
                still.append(saga.id)
        except (DatabaseError, ConflictError):
            return  # a session ended under us: look again next tick
        with self._lock:
            self._open = still

    def stop(self) -> None:
        """No more adds; the open tallies close on their deadlines."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _add_loop(self, n: int) -> None:
        rng = random.Random(f"{self.seed}:tally-thread:{n}")
        while not self._stop.is_set():
            with self._lock:
                targets = list(self._open)
            if targets:
                self._add(rng.choice(targets))
            time.sleep(rng.uniform(0.002, 0.03))

    def _add(self, saga_id: str) -> None:
        registry = self.engine.registry
        runs = 0

        def add(tx: Tx) -> bool:
            nonlocal runs
            runs += 1
            saga = lock_in(tx, saga_id)
            if saga.state != "open":
                return False
            fire_in(
                tx,
                registry,
                saga_id,
                "add",
                payload={},
                actor="chaos-tally",
                cause=None,
                data_update={"count": int(saga.data.get("count", 0)) + 1},
            )
            return True

        try:
            added = self.engine.db.transaction(add)
        except (DatabaseError, ConflictError):
            self.counts["tally_add_refused"] += 1
            return
        finally:
            if runs > 1:
                # It failed half-way on a lock and ran again: a writer that
                # takes its lock up front waits instead (BEGIN IMMEDIATE, FOR UPDATE).
                with self._lock:
                    self.reruns += 1
        if added:
            with self._lock:
                self.acked[saga_id] += 1
            self.counts["tally_adds"] += 1

    def rerun(self) -> tuple[int, list[str]]:
        """Adds whose transaction failed half-way on a lock and ran again."""
        found = [f"{self.reruns} tally adds ran again after a lock error"] if self.reruns else []
        return self.reruns, found

    def lost(self) -> tuple[int, list[str]]:
        """Adds acknowledged that the tallies' counts do not hold, and where."""
        lost = 0
        problems = []
        for saga_id in self.started:
            count = int(self.engine.sagas.get(saga_id).data.get("count", 0))
            if count < self.acked[saga_id]:
                lost += self.acked[saga_id] - count
                problems.append(
                    f"tally {saga_id} counts {count} of {self.acked[saga_id]} acknowledged adds"
                )
        return lost, problems


class Redeliveries:
    """A consumer with an inbox, receiving every outbox event, many twice or more."""

    def __init__(self, engine: Engine, *, seed: int) -> None:
        self.engine = engine
        self.rng = random.Random(f"{seed}:redeliveries")
        self.consumer = Consumer(name="chaos", bindings=("#",), apply=self._apply)
        self.applied: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self._after = 0
        self._again: list[Event] = []
        self._lock = threading.Lock()

    def _apply(self, tx: Tx, event: Event) -> None:
        def done() -> None:
            with self._lock:
                self.applied[event.id] += 1

        tx.after_commit(done)

    def tick(self) -> None:
        """Receive the events written since the last tick, and some again."""
        try:
            rows = self.engine.db.transaction(
                lambda tx: tx.all("chaos_outbox_rows", after=self._after, limit=200), write=False
            )
        except DatabaseError:
            return
        events = []
        for row in rows:
            self._after = max(self._after, int(row["id"]))
            events.append(Event.from_row(row))
        again, self._again = self._again, []
        for event in [*events, *again]:
            self._receive(event)
            roll = self.rng.random()
            if roll < 0.3:
                self._again.append(event)  # a redelivery, a tick or more later
            elif roll < 0.5:
                # Two at once, as two consumers of one queue get a redelivered message.
                other = threading.Thread(target=self._receive, args=(event,), daemon=True)
                other.start()
                self._receive(event)
                other.join(timeout=30)

    def _receive(self, event: Event) -> None:
        try:
            outcome = self.consumer.receive(self.engine.db, event)
        except (DatabaseError, SagaError):
            self.counts["consumer_interrupted"] += 1
            return
        self.counts[f"consumer_{outcome}"] += 1

    def twice(self) -> tuple[int, list[str]]:
        """Events applied more than once, and which."""
        found = [event for event, n in self.applied.items() if n > 1]
        return len(found), [f"event {e} applied {self.applied[e]} times" for e in found[:10]]


def refuse_outbox_writes(engine: Engine, *, refuse: bool) -> None:
    """Arm (or lift) the database's refusal of one outbox insert in twenty."""
    name = "chaos_refuse_outbox_writes" if refuse else "chaos_allow_outbox_writes"
    engine.db.transaction(lambda tx: tx.run(name))


def timers_on_another_version(engine: Engine) -> tuple[int, list[str]]:
    """Transitions a timer made at a version other than the one it was set for."""
    rows = engine.db.transaction(lambda tx: tx.all("chaos_timer_transitions"), write=False)
    problems = []
    for row in rows:
        found = _VERSION.search(row["cause"] or "")
        if found is not None and int(row["version"]) != int(found[1]) + 1:
            problems.append(
                f"saga {row['saga_id']}: timer of version {found[1]} moved it to version "
                f"{row['version']} ({row['event']})"
            )
    return len(problems), problems[:10]


def payments_after_hold(engine: Engine) -> tuple[int, list[str]]:
    """Payment intents written after their purchase's hold ran out."""
    rows = engine.db.transaction(lambda tx: tx.all("chaos_payments_after_hold"), write=False)
    return len(rows), [
        f"purchase {row['saga_id']}: payment intent {row['late_s']:.1f} s after its hold"
        for row in rows[:10]
    ]


def aimed_checks(
    engine: Engine, tallies: Tallies | None, redeliveries: Redeliveries | None
) -> tuple[dict[str, int | None], list[str]]:
    """The must-be-zero rows of the aimed faults (``None``: not measured), and the problems."""
    rows: dict[str, int | None] = {}
    problems: list[str] = []
    for name, check in (
        ("timers_fired_on_another_version", lambda: timers_on_another_version(engine)),
        ("payments_after_hold", lambda: payments_after_hold(engine)),
        ("tally_adds_lost", None if tallies is None else tallies.lost),
        ("writes_rerun_after_lock_errors", None if tallies is None else tallies.rerun),
        ("events_applied_twice", None if redeliveries is None else redeliveries.twice),
    ):
        if check is None:
            rows[name] = None
            continue
        count, found = check()
        rows[name] = count
        problems += found
    return rows, problems


def aimed_counts(tallies: Tallies | None, redeliveries: Redeliveries | None) -> dict[str, Any]:
    """What the aimed faults did, for the report's faults."""
    counts: Counter[str] = Counter()
    if tallies is not None:
        counts.update(tallies.counts)
        counts["tallies"] = len(tallies.started)
    if redeliveries is not None:
        counts.update(redeliveries.counts)
    return dict(sorted(counts.items()))
