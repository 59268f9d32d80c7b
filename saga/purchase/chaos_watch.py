"""
A chaos run's state, and what the harness reads of the database while it runs.

:class:`ChaosRun` is what the loop of :func:`~saga.purchase.chaos.run_chaos`
keeps; the rest look: the purchases' progress, the seats at every moment
(the invariant holds throughout, not only at the end), whether nothing more
will happen by itself, and whether the consumer received every event.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from saga.exceptions import DatabaseError
from saga.ops import collect_stats
from saga.queue import Queue, WorkerFleet

if TYPE_CHECKING:
    from saga import Engine
    from saga.purchase.chaos_actors import Clients, EventWatcher, Operators, Weather
    from saga.purchase.chaos_aimed import Redeliveries, Tallies
    from saga.purchase.chaos_plan import ChaosPlan

SETTLED: Final = frozenset({"confirmed", "expired", "cancelled", "refunded"})
# Work due further away than this does not keep a run from ending.
REST_HORIZON_S: Final = 120.0
TIMER_KIND: Final = "saga.timeout"


@dataclass(slots=True)
class ChaosRun:
    """One run as its loop keeps it: the actors, the fleet, the faults' phase, what was seen."""

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
        """Seconds since the run started."""
        return time.monotonic() - self.started


def progress_rows(engine: Engine, intensives: str) -> list[Any]:
    """The state of every purchase of the run's intensives (none if the session just ended)."""
    try:
        return list(
            engine.db.transaction(
                lambda tx: tx.all("purchase_progress", intensive_ids=intensives), write=False
            )
        )
    except Exception:  # noqa: BLE001 - a session ended under us: look again next tick
        return []


def watch_seats(engine: Engine, run: ChaosRun) -> None:
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


def count_settled(rows: list[Any], run: ChaosRun) -> int:
    """How many of the purchases the clients had acknowledged have settled."""
    mine = set(run.clients.acknowledged.values())
    return sum(1 for row in rows if row["id"] in mine and row["state"] in SETTLED)


def at_rest(engine: Engine, run: ChaosRun, settled: int) -> bool:
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


def _idle(engine: Engine, run: ChaosRun) -> bool:
    figures = collect_stats(engine.db)
    busy = any(q["due"] or q["running"] for q in figures["queues"].values())
    if run.watcher is not None:
        busy = busy or figures["outbox"]["unpublished"] > 0
    return not busy and engine.services.sandbox.next_webhook_in() is None


def drain_events(engine: Engine, watcher: EventWatcher, timeout_s: float = 60.0) -> None:
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
