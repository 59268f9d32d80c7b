"""
The seeded bugs the testing kit must find, and how many examples it takes.

Shared by tests/kit/test_coverage.py and bench/kit/examples.py (the figures of
docs/testing.md).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from saga.testing import saga_state_machine
from tests.kit.test_app_invariants import STRICT
from tests.kit.test_kit import SIGNATURES, leaky, nagging
from tests.payout_app import PAYEES, expense_app

PAYOUT_OPTIONS: dict[str, Any] = {
    "requests": st.fixed_dictionaries({"payee": st.sampled_from(PAYEES)}),
    "payloads": {"approve": st.sampled_from([{"signature": "ann"}, {}])},
}


def bugs() -> dict[str, tuple[Any, dict[str, Any]]]:
    """Each seeded bug: the application (or machine) carrying it, and the kit's options."""
    return {
        "payout: processing taken as paid": (
            expense_app(processing_counts_as_paid=True),
            PAYOUT_OPTIONS,
        ),
        "ticket: a terminal state moves": (leaky(), {}),
        "reminder: a timer fires twice": (nagging(), {}),
        "approval: the app's invariant broken": (STRICT, {"payloads": SIGNATURES}),
    }


def examples_to_find(
    target: Any, options: dict[str, Any], *, at_seed: int, cap: int, guided: bool = True
) -> int | None:
    """
    Examples generated until the first failure (``None``: none within ``cap``).

    No example database (a failure saved by an earlier run would be replayed
    first) and no shrinking: the figure is the search's, not the story's.
    """
    count = [0]

    def counting(engine: Any) -> None:
        del engine
        count[0] += 1

    # setup= runs once per example, on its fresh engine: it counts them.
    machine = saga_state_machine(target, setup=counting, guided=guided, **options)
    try:
        run_state_machine_as_test(
            seed(at_seed)(machine),
            settings=settings(
                max_examples=cap,
                stateful_step_count=30,
                deadline=None,
                database=None,
                phases=[Phase.generate, Phase.target],
                suppress_health_check=list(HealthCheck),
            ),
        )
    except AssertionError:
        return count[0]
    return None
