"""
What a ``saga chaos`` run does, drawn from its seed before anything runs.

The purchases (intensives with fewer seats than buyers, every sandbox
payment method, clients retrying and cancelling) and the schedule of faults
(which worker is killed or paused when, when PostgreSQL sessions are ended,
when the broker goes away, when webhooks are delivered again) come from
one seeded generator: the same seed replays the same plan.  How the
processes interleave is up to the machine; the plan is not.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Final

# Every sandbox payment method, the happy path most often.
METHODS: Final = (
    ("pm_ok", 34),
    ("pm_declined", 7),
    ("pm_late", 6),
    ("pm_timeout_after_charge", 6),
    ("pm_timeout_before_charge", 6),
    ("pm_amount_mismatch", 5),
    ("pm_duplicate_webhooks", 7),
    ("pm_out_of_order_webhooks", 7),
    ("pm_refund_fails", 6),
    ("pm_refund_timeout", 6),
    ("pm_stale_failure_first", 6),
)
# Clients: some cancel (racing the payment), some resend a request they did
# not hear back from, some reuse an operation id for another request.
CANCEL_SHARE: Final = 0.12
RESEND_SHARE: Final = 0.05
CONFLICT_SHARE: Final = 0.02
# Seats: each intensive has seats for this share of its buyers.
SEAT_SHARE: Final = 0.6
BUYERS_PER_INTENSIVE: Final = 60

# The faults, with their weights: (kind, weight, needs)
FAULT_KINDS: Final = (
    ("kill_worker", 4, None),
    ("pause_worker", 2, None),
    ("end_sessions", 2, "postgres"),
    ("broker_outage", 1, "broker"),
    ("redeliver_webhooks", 3, None),
)
# Faults aimed at the guards, on for the whole fault phase (saga.purchase.chaos_aimed).
AIMED_FAULTS: Final = (
    ("pause_at_points", "workers stop themselves past their lease before completing or firing"),
    ("skew_clocks", "each worker process's clock is off by up to 6 s"),
    ("race_events", "threads adding to one saga at once while its deadline fires"),
    ("redeliver_events", "a consumer with an inbox gets events twice, some at once"),
    ("refuse_outbox_writes", "the database refuses one outbox insert in twenty"),
)
# Purchases whose hold is this short (1-3 s), so that the payment request races the expiry.
SHORT_HOLD_SHARE: Final = 0.15
_HORIZON_S: Final = 4 * 3600.0


@dataclass(frozen=True, slots=True)
class Order:
    """One client's purchase, and what the client does around it."""

    operation_id: str
    intensive_id: str
    student_id: str
    method: str
    cancel_after_s: float | None  # the client cancels this long after acceptance
    resend: bool  # the client sends the same request again
    conflict: bool  # the client reuses the operation id for another request
    hold_seconds: int | None = None  # a short hold; None: the harness's default


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault of the schedule: ``kind`` at ``at_s`` seconds into the run."""

    at_s: float
    kind: str
    target: int  # the worker slot, or how many webhooks, or the outage's seconds


@dataclass(frozen=True, slots=True)
class ChaosPlan:
    """The run's intensives, orders and faults."""

    run: str
    seed: int
    intensives: dict[str, int]
    orders: tuple[Order, ...]
    faults: tuple[Fault, ...]

    @classmethod
    def draw(
        cls,
        *,
        run: str,
        seed: int,
        purchases: int,
        workers: int,
        fault_every_s: float,
        postgres: bool,
        broker: bool,
        fault_kinds: tuple[str, ...] | None = None,
    ) -> ChaosPlan:
        """The plan of ``seed``: the orders, then the faults, each from its own generator."""
        orders = _orders(random.Random(f"{seed}:orders"), run, purchases)
        buyers = Counter(order.intensive_id for order in orders)
        intensives = {name: max(2, round(count * SEAT_SHARE)) for name, count in buyers.items()}
        faults = _faults(
            random.Random(f"{seed}:faults"),
            workers=workers,
            every_s=fault_every_s,
            enabled={None, *(["postgres"] if postgres else []), *(["broker"] if broker else [])},
            only=fault_kinds,
        )
        return cls(run, seed, dict(sorted(intensives.items())), tuple(orders), faults)


def _orders(rng: random.Random, run: str, purchases: int) -> list[Order]:
    names = [f"chaos-{run}-i{n:03d}" for n in range(max(2, purchases // BUYERS_PER_INTENSIVE))]
    methods = [method for method, _ in METHODS]
    weights = [weight for _, weight in METHODS]
    orders = []
    for n in range(purchases):
        orders.append(
            Order(
                operation_id=f"chaos-{run}-op-{n:06d}",
                intensive_id=rng.choice(names),
                student_id=f"student-{n:06d}",
                method=rng.choices(methods, weights)[0],
                cancel_after_s=rng.uniform(0.0, 4.0) if rng.random() < CANCEL_SHARE else None,
                resend=rng.random() < RESEND_SHARE,
                conflict=rng.random() < CONFLICT_SHARE,
                hold_seconds=rng.randint(1, 3) if rng.random() < SHORT_HOLD_SHARE else None,
            )
        )
    return orders


def _faults(
    rng: random.Random,
    *,
    workers: int,
    every_s: float,
    enabled: set[str | None],
    only: tuple[str, ...] | None,
) -> tuple[Fault, ...]:
    kinds = [
        (kind, weight)
        for kind, weight, needs in FAULT_KINDS
        if needs in enabled and (only is None or kind in only)
    ]
    if not kinds:
        return ()
    names = [kind for kind, _ in kinds]
    weights = [weight for _, weight in kinds]
    faults = []
    at = every_s
    while at < _HORIZON_S:
        kind = rng.choices(names, weights)[0]
        if kind in ("kill_worker", "pause_worker"):
            target = rng.randrange(workers)
        elif kind == "broker_outage":
            target = rng.randint(1, 4)  # seconds
        elif kind == "redeliver_webhooks":
            target = rng.randint(1, 8)  # webhooks
        else:
            target = 0
        faults.append(Fault(round(at, 3), kind, target))
        at += rng.uniform(0.5, 1.5) * every_s
    return tuple(faults)
