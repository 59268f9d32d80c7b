"""
The people and the weather of a ``saga chaos`` run.

:class:`Clients` accept purchases (resending requests they did not hear
back from, reusing an operation id for another request, cancelling while
the payment is on its way); :class:`Operators` work the reconciliation
queue like a hurried human, trying outcomes in a random order and letting
the provider's fresh answer refuse the wrong ones; :class:`Weather` injects
the plan's faults; :class:`EventWatcher` consumes the broker's events to
find any lost between the commit and the consumer.
"""

from __future__ import annotations

import dataclasses
import heapq
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from saga.codec import load_json
from saga.events import consume_events
from saga.exceptions import (
    BrokerUnavailable,
    ConflictError,
    DatabaseError,
    IdempotencyConflict,
    ProviderUnavailable,
    SagaError,
)
from saga.ops import get_logger
from saga.purchase.chaos_plan import Fault
from saga.purchase.inbox import ProviderEvent
from saga.queue import DeadLetterFilter, DeadLetters

if TYPE_CHECKING:
    import random

    from saga import Engine
    from saga.events import Event
    from saga.faults import Outage
    from saga.purchase.chaos_plan import ChaosPlan, Order
    from saga.queue import WorkerFleet
    from saga.recon import ReconItem

log = get_logger(__name__)

OPERATOR: Final = "chaos-operator"
# A paused worker sleeps past its lease by this much: it wakes up stale.
PAUSE_BEYOND_LEASE_S: Final = 2.0
# The checker gets this long with an item before an operator may take it.
CHECKER_HEAD_START_S: Final = 6.0


@dataclass(slots=True)
class Clients:
    """The plan's clients, accepting purchases a window at a time."""

    engine: Engine
    plan: ChaosPlan
    hold_seconds: int
    acknowledged: dict[str, str] = field(default_factory=dict)  # operation id -> purchase id
    refused: Counter[str] = field(default_factory=Counter)
    counts: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    _queue: deque[Order] = field(default_factory=deque)
    _cancels: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._queue.extend(self.plan.orders)

    @property
    def done(self) -> bool:
        """Every order was answered (accepted or refused)."""
        return not self._queue

    def accept(self, room: int, now: float) -> None:
        """Send up to ``room`` orders (a resend of an unanswered one first)."""
        for _ in range(min(room, len(self._queue))):
            order = self._queue.popleft()
            try:
                purchase_id = self._start(order)
            except DatabaseError:
                # No answer: the client sends the same request again later.
                self.counts["client_resent_after_no_answer"] += 1
                self._queue.append(order)
                return
            except IdempotencyConflict as exc:
                self.violations.append(f"{order.operation_id}: first request refused: {exc}")
                continue
            except ConflictError as exc:
                self.refused[type(exc).__name__] += 1
                continue
            self.acknowledged[order.operation_id] = purchase_id
            if order.cancel_after_s is not None:
                heapq.heappush(self._cancels, (now + order.cancel_after_s, purchase_id))
            if order.resend:
                self._resend(order, purchase_id)
            if order.conflict:
                self._conflict(order)

    def _start(self, order: Order, *, student: str | None = None) -> str:
        result = self.engine.services.purchases.start(
            operation_id=order.operation_id,
            intensive_id=order.intensive_id,
            student_id=student or order.student_id,
            payment_method=order.method,
            hold_seconds=order.hold_seconds or self.hold_seconds,
        )
        return str(result.purchase.id)

    def _resend(self, order: Order, purchase_id: str) -> None:
        self.counts["client_resent"] += 1
        try:
            again = self._start(order)
        except DatabaseError:
            return
        if again != purchase_id:
            self.violations.append(
                f"{order.operation_id}: resent, got purchase {again} instead of {purchase_id}"
            )

    def _conflict(self, order: Order) -> None:
        self.counts["client_reused_operation_id"] += 1
        try:
            self._start(order, student=f"{order.student_id}-other")
        except IdempotencyConflict:
            return
        except DatabaseError:
            return
        self.violations.append(f"{order.operation_id}: reused for another request and accepted")

    def cancel_due(self, now: float) -> None:
        """Cancel the purchases whose client changed their mind by now."""
        while self._cancels and self._cancels[0][0] <= now:
            _, purchase_id = heapq.heappop(self._cancels)
            try:
                self.engine.services.purchases.cancel(
                    purchase_id, reason="changed plans", actor="student"
                )
            except ConflictError:
                self.counts["cancel_too_late"] += 1  # already past the point of cancelling
            except DatabaseError:
                heapq.heappush(self._cancels, (now + 0.5, purchase_id))
            else:
                self.counts["cancelled_by_client"] += 1


@dataclass(slots=True)
class Operators:
    """An operator working the reconciliation queue, outcomes in a random order."""

    engine: Engine
    rng: random.Random
    counts: Counter[str] = field(default_factory=Counter)

    def work(self) -> None:
        """One pass over the dead letters and the open items."""
        try:
            self._replay_crashed()
            items = self.engine.recon.find(status="open", limit=200)
        except DatabaseError:
            return
        now = time.time()
        for item in items:
            fresh = now - item.opened_at.timestamp() < CHECKER_HEAD_START_S
            if item.owner == "checker" and (fresh or self.rng.random() < 0.5):
                continue  # the checker's turn first
            self._decide(item)

    def _replay_crashed(self) -> None:
        """
        Replay the jobs dead-lettered because their workers kept dying under them.

        Those deaths are the harness's doing, not the job's; any other dead
        letter (a permanent error) is a finding, left for ``verify`` to report.
        """
        letters = DeadLetters(self.engine.db)
        for letter in letters.find(limit=1000):
            if letter.error_class != "crashed":
                continue
            replayed = letters.replay(
                DeadLetterFilter(job_id=letter.id),
                actor=OPERATOR,
                reason="chaos: the workers died under it, not the job's fault",
            )
            self.counts["dead_letters_replayed"] += len(replayed.replayed)

    def _decide(self, item: ReconItem) -> None:
        try:
            if item.owner != OPERATOR:
                self.engine.recon.assign(item.id, operator=OPERATOR)
            for outcome, external_ref in self._choices(item):
                try:
                    self.engine.recon.resolve(
                        item.id,
                        outcome=outcome,
                        operator=OPERATOR,
                        reason=f"chaos: trying {outcome}",
                        external_ref=external_ref,
                    )
                except ConflictError:
                    self.counts["operator_refused"] += 1
                    continue
                self.counts["operator_resolved"] += 1
                return
        except (ConflictError, DatabaseError, ProviderUnavailable):
            self.counts["operator_interrupted"] += 1

    def _choices(self, item: ReconItem) -> list[tuple[str, str | None]]:
        """The outcomes to try, in a random order: the provider's answer refuses wrong ones."""
        if item.kind != "outcome":
            return [("reviewed", None)]
        if item.reason == "refund_declined":
            # The provider refuses to refund: the money goes back by bank
            # transfer, recorded with its trace (trying the provider again
            # would loop: it declines every time).
            return [("refunded", f"chaos-bank-{item.id}")]
        outcomes: list[tuple[str, str | None]] = [
            (o, None) for o in self.engine.recon.outcomes if o != "reviewed"
        ]
        self.rng.shuffle(outcomes)
        return outcomes


@dataclass(slots=True)
class Weather:
    """The plan's faults, applied when their time comes."""

    engine: Engine
    plan: ChaosPlan
    fleet: WorkerFleet
    outage: Outage | None
    lease_seconds: float
    rng: random.Random
    counts: Counter[str] = field(default_factory=Counter)
    _next: int = 0
    _forged: list[ProviderEvent] = field(default_factory=list)

    def tick(self, now: float, *, faults_on: bool) -> None:
        """Apply the faults due by ``now`` (each lifts itself when its time is up)."""
        while faults_on and self._next < len(self.plan.faults):
            fault = self.plan.faults[self._next]
            if fault.at_s > now:
                break
            self._next += 1
            self._apply(fault)

    def calm(self) -> None:
        """No more faults: paused workers resume, the broker comes back."""
        self.fleet.resume_all()
        if self.outage is not None:
            self.outage.up()

    def redeliver_now(self, how_many: int) -> None:
        """Deliver webhooks again now, a forged one among them (``redeliver_events``)."""
        self._apply(Fault(0.0, "redeliver_webhooks", how_many))

    def _apply(self, fault: Fault) -> None:
        try:
            applied = self._inject(fault)
        except DatabaseError:
            applied = False  # the harness's own session was in the way: the fault is skipped
        if applied:
            self.counts[fault.kind] += 1

    def _inject(self, fault: Fault) -> bool:
        applied = False
        if fault.kind == "kill_worker":
            applied = self.fleet.kill(fault.target)
        elif fault.kind == "pause_worker":
            applied = self.fleet.pause(
                fault.target, seconds=self.lease_seconds + PAUSE_BEYOND_LEASE_S
            )
        elif fault.kind == "end_sessions":
            ended = self.engine.db.transaction(
                lambda tx: tx.scalar(
                    "chaos_terminate_sessions", application_name=self.fleet.application_name
                )
            )
            self.counts["sessions_terminated"] += int(ended or 0)
            applied = True
        elif fault.kind == "broker_outage" and self.outage is not None:
            self.outage.down()
            # The network comes back by itself, whatever the harness is doing.
            timer = threading.Timer(fault.target, self.outage.up)
            timer.daemon = True
            timer.start()
            applied = True
        elif fault.kind == "redeliver_webhooks":
            applied = self._redeliver(fault.target) > 0
        return applied

    def _redeliver(self, how_many: int) -> int:
        """
        Deliver events the inbox already took again (duplicates, late, out of order).

        Each time, also an event that contradicts the provider (a success
        for more money than was charged, as a replayed or forged webhook
        would claim) is delivered twice in a row, and again at the next
        redelivery: the inbox must put it before operators once.
        """
        rows = self.engine.db.transaction(
            lambda tx: tx.all("chaos_delivered_events", limit=200), write=False
        )
        events = [
            _event(row["event_id"], row["type"], load_json(row["payload"])["payload"])
            for row in rows
        ]
        chosen = self.rng.sample(events, min(how_many, len(events)))
        chosen += self._forged
        self._forged = []
        successes = [e for e in events if e.type == "payment.succeeded"]
        if successes:
            model = self.rng.choice(successes)
            forged = dataclasses.replace(
                model,
                event_id=f"{model.event_id}_forged",
                amount_minor=(model.amount_minor or 0) + 100,
            )
            chosen += [forged, forged]
            self._forged.append(forged)
            self.counts["webhooks_forged"] += 1
        done = 0
        for event in chosen:
            try:
                self.engine.services.inbox.deliver(event, source="sandbox")
            except (ProviderUnavailable, DatabaseError):
                continue
            done += 1
            self.counts["webhooks_redelivered"] += 1
        return done


def _event(event_id: str, type_: str, body: dict[str, Any]) -> ProviderEvent:
    return ProviderEvent(
        event_id=event_id,
        type=type_,
        payment_id=body["payment_id"],
        amount_minor=body.get("amount_minor"),
        currency=body.get("currency"),
        refund_id=body.get("refund_id"),
    )


class EventWatcher:
    """A consumer of the run's exchange in a thread: every event id it received."""

    def __init__(self, url: str, *, exchange: str, queue: str) -> None:
        self.url = url
        self.exchange = exchange
        self.queue = queue
        self.received: set[str] = set()
        self.deliveries = 0
        self.problem: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-events", daemon=True)

    def start(self) -> None:
        """Declare the queue and start consuming."""
        self._thread.start()

    def _take(self, event: Event) -> None:
        self.deliveries += 1
        self.received.add(event.id)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                consume_events(
                    self.url,
                    exchange=self.exchange,
                    queue=self.queue,
                    bindings=("#",),
                    handle=self._take,
                    stopping=self._stop.is_set,
                )
            except (BrokerUnavailable, SagaError, OSError) as exc:
                self.problem = str(exc)
                time.sleep(0.5)
            except Exception as exc:  # noqa: BLE001 - pika's errors; reconnect and go on
                self.problem = f"{type(exc).__name__}: {exc}"
                time.sleep(0.5)

    def stop(self) -> None:
        """Stop consuming."""
        self._stop.set()
        self._thread.join(timeout=30)

    def stats(self) -> dict[str, Any]:
        """What it received."""
        return {
            "received": len(self.received),
            "deliveries": self.deliveries,
            "consumer_problem": self.problem,
        }
