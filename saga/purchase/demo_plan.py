"""
The demo's scenario: the mix of payment methods, the purchases a seed draws, and what a run did.

:class:`Plan` is drawn from the seed alone (``saga demo --seed`` replays the
same purchases); :class:`Outcome` is what ``saga demo``'s run
(:mod:`saga.purchase.demo`) accepted, refused and cancelled.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Final

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
