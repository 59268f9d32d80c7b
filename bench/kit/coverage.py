"""
The coverage of a default run (50 examples) of the kit, guided and not, with fixed seeds.

Run from the repository's root: ``python -m bench.kit.coverage [--seeds 3]``:
the approval (saga/examples/approvals.py), the expense (tests/payout_app.py) and the
purchase, as their tests drive them.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from saga.core.logs import configure_logging
from saga.examples.approvals import app as approvals
from saga.purchase.app import purchase_app
from saga.testing import run_saga_test
from tests.contract import test_store_model as store
from tests.kit.seeded import PAYOUT_OPTIONS
from tests.kit.test_kit import SIGNATURES
from tests.payout_app import expense_app


def runs() -> dict[str, tuple[Any, dict[str, Any]]]:
    """Each application, and the options its test gives the kit."""
    return {
        "approval": (approvals, {"payloads": SIGNATURES}),
        "expense": (expense_app(), PAYOUT_OPTIONS),
        "purchase": (
            purchase_app(),
            {
                "kind": "purchase",
                "setup": store.add_intensives,
                "start": store.buy,
                "requests": store.REQUESTS,
                "payloads": store.PAYLOADS,
                "app_invariants": False,
            },
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (default 3)")
    parser.add_argument("--only", default=None, help="applications whose name contains this")
    args = parser.parse_args(argv)
    configure_logging("error")
    for name, (app, options) in runs().items():
        if args.only and args.only not in name:
            continue
        for guided in (False, True):
            figures = []
            for seed in range(args.seeds):
                coverage = run_saga_test(app, seed=seed, guided=guided, **options)
                figures.append(f"{len(coverage.reached_transitions)}/{len(coverage.transitions)}")
            print(f"{name:10} guided={guided!s:5} transitions per seed {' '.join(figures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
