"""
How many examples the testing kit needs to find each seeded bug, with fixed seeds.

Run from the repository's root: ``python -m bench.kit.examples [--seeds 5] [--cap 400]``.
Each bug is searched with hypothesis seeds 0..N-1 (no example database, no
shrinking: the figure is the examples generated until the first failure);
a bug not found within ``--cap`` examples counts as ``>cap``.  The median
over the seeds is the figure docs/testing.md reports.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field

from saga.core.logs import configure_logging
from tests.kit.seeded import bugs, examples_to_find


@dataclass
class Found:
    """Examples needed per seed (None: not within the cap)."""

    per_seed: list[int | None] = field(default_factory=list)
    seconds: float = 0.0

    def median(self, cap: int) -> float:
        return statistics.median(cap + 1 if n is None else n for n in self.per_seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default 5)")
    parser.add_argument("--cap", type=int, default=400, help="examples at most (default 400)")
    parser.add_argument("--only", default=None, help="bugs whose name contains this")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--unguided",
        action="store_true",
        help="the plain random rules (guided=False: the kit before coverage guidance)",
    )
    args = parser.parse_args(argv)
    configure_logging("error")  # the engine's retries and warnings are expected here
    results: dict[str, Found] = {}
    for name, (target, options) in bugs().items():
        if args.only and args.only not in name:
            continue
        found = results[name] = Found()
        started = time.monotonic()
        for at_seed in range(args.seeds):
            found.per_seed.append(
                examples_to_find(
                    target, options, at_seed=at_seed, cap=args.cap, guided=not args.unguided
                )
            )
        found.seconds = time.monotonic() - started
        row = [">" + str(args.cap) if n is None else str(n) for n in found.per_seed]
        if not args.json:
            print(
                f"{name:40} median {found.median(args.cap):>6g}   per seed {' '.join(row)}"
                f"   ({found.seconds:.0f} s)",
                flush=True,
            )
    if args.json:
        print(
            json.dumps(
                {
                    name: {"per_seed": f.per_seed, "median": f.median(args.cap)}
                    for name, f in results.items()
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
