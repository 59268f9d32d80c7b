"""``saga chaos``: the fault harness, its report, and exit 1 on any violation."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from saga.cli import (
    EXIT_ERROR,
    EXIT_OK,
    Output,
    add_common_options,
    broker_url,
    open_engine,
    positive_float,
    whole,
)
from saga.cli import (
    Leaf as Command,
)
from saga.exceptions import InvalidInput
from saga.purchase.chaos_mutants import MUTANTS, ONLY_ON
from saga.purchase.chaos_plan import AIMED_FAULTS, FAULT_KINDS

if TYPE_CHECKING:
    import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add ``chaos``."""
    chaos = subparsers.add_parser(
        "chaos",
        help="purchases under crashes, kills and outages, then every invariant",
        description=(
            "Purchases with every sandbox payment method on contested intensives, worked by "
            "worker processes that die at random crash points, are killed and paused past "
            "their leases; PostgreSQL sessions ended, the broker cut, webhooks repeated and "
            "reordered; then the faults stop, the rest settles, and every invariant is checked. "
            "Exit 1 on any violation; --seed replays the same schedule of faults."
        ),
    )
    chaos.add_argument(
        "--purchases", type=whole, default=500, metavar="N", help="purchases (default: 500)"
    )
    chaos.add_argument(
        "--workers", type=whole, default=2, metavar="K", help="worker processes (default: 2)"
    )
    chaos.add_argument(
        "--seed", type=whole, metavar="S", help="seed of the plan (default: random; printed)"
    )
    chaos.add_argument(
        "--duration",
        type=positive_float,
        metavar="SECONDS",
        help="end the faults after this long (default: once every purchase is answered and "
        "settled)",
    )
    chaos.add_argument(
        "--fault-every",
        type=positive_float,
        default=3.0,
        metavar="SECONDS",
        help="mean time between scheduled faults, in seconds (default: 3)",
    )
    chaos.add_argument(
        "--crash-rate",
        type=positive_float,
        default=0.004,
        metavar="P",
        help="chance that a worker dies at each crash point it reaches (default: 0.004)",
    )
    chaos.add_argument(
        "--crash-points",
        metavar="NAMES",
        help="comma-separated crash points to arm "
        "(default: all; see saga.purchase.faults.CRASH_POINTS)",
    )
    chaos.add_argument(
        "--faults",
        metavar="KINDS",
        help="comma-separated fault kinds (default: all the setup allows): scheduled "
        + ", ".join(kind for kind, _, _ in FAULT_KINDS)
        + "; aimed at the guards "
        + ", ".join(kind for kind, _ in AIMED_FAULTS),
    )
    chaos.add_argument(
        "--broker",
        metavar="URL",
        help="RabbitMQ to publish to, through a path the harness cuts (default: "
        "$SAGA_BROKER_URL; none: no broker faults and no lost-event count)",
    )
    chaos.add_argument(
        "--mutant",
        metavar="NAME",
        help="break one guard on purpose, in the harness and every worker, to see the run "
        "fail (the harness's own test): " + ", ".join(MUTANTS),
    )
    add_common_options(chaos, top_level=False)
    return {
        "chaos": Command(
            _chaos, {"purchases": "--purchases", "workers": "--workers", "mutant": "--mutant"}
        )
    }


def _chaos(args: argparse.Namespace, out: Output) -> int:
    import secrets
    import signal

    from tqdm import tqdm

    from saga.purchase.chaos import ChaosOptions, run_chaos
    from saga.purchase.chaos_aimed import APP_SPEC
    from saga.purchase.faults import CRASH_POINTS

    if not 1 <= args.purchases <= 1_000_000:
        raise InvalidInput(field="purchases", problem="must be between 1 and 1000000")
    if not 1 <= args.workers <= 64:
        raise InvalidInput(field="workers", problem="must be between 1 and 64")
    if not args.crash_rate < 1:
        raise InvalidInput(field="crash_rate", problem="must be below 1")
    points = _names(args.crash_points, "crash_points", CRASH_POINTS)
    kinds = _names(
        args.faults,
        "faults",
        (*(kind for kind, _, _ in FAULT_KINDS), *(kind for kind, _ in AIMED_FAULTS)),
    )
    _check_mutant(args)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    # A stopped harness stops its workers too (paused ones included): SIGTERM
    # unwinds like Ctrl-C, through the run's cleanup.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # First, so that a run that dies still says how to replay it.
    print(f"saga chaos: seed {seed}", file=sys.stderr, flush=True)
    options = ChaosOptions(
        purchases=args.purchases,
        workers=args.workers,
        seed=seed,
        duration_s=args.duration,
        fault_every_s=args.fault_every,
        broker_url=broker_url(args),
        crash_rate=args.crash_rate,
        crash_points=points or CRASH_POINTS,
        fault_kinds=kinds,
        mutant=args.mutant,
    )
    if args.mutant is not None:
        from saga.purchase.chaos_mutants import apply

        # Before the engine exists: the mutant changes what it loads.
        print(f"saga chaos: mutant {args.mutant} (a guard removed on purpose)", file=sys.stderr)
        apply(args.mutant)
    if getattr(args, "app", None) is None:
        # The purchase, and the tally sagas the aimed faults race on (the CLI
        # loaded the plain purchase before parsing: this run opens its own).
        from saga.ops import load_app

        args.app = APP_SPEC
        args.loaded_app = load_app(APP_SPEC).configured(vars(args))
    with (
        open_engine(args, check_schema=False) as engine,
        tqdm(
            total=args.purchases,
            unit="purchase",
            desc="settled",
            file=sys.stderr,
            disable=not sys.stderr.isatty(),
        ) as bar,
    ):

        def progress(settled: int, total: int, phase: str) -> None:
            bar.total = total
            bar.n = settled
            bar.set_description(f"settled ({phase})", refresh=False)
            bar.refresh()

        report = run_chaos(engine, options, progress=progress)
    if out.as_json:
        out.json(report)
    else:
        _print(out, report)
    return EXIT_OK if report["ok"] else EXIT_ERROR


def _check_mutant(args: argparse.Namespace) -> None:
    """A known mutant, for the backend it breaks."""
    if args.mutant is None:
        return
    if args.mutant not in MUTANTS:
        raise InvalidInput(
            field="mutant", problem=f"unknown {args.mutant!r}; known: {', '.join(MUTANTS)}"
        )
    only = ONLY_ON.get(args.mutant)
    backend = "sqlite" if args.db is None or str(args.db).startswith("sqlite") else "postgres"
    if only is not None and only != backend:
        raise InvalidInput(
            field="mutant",
            problem=f"{args.mutant} breaks a guard of {only} only; this run is on {backend}",
        )


def _names(text: str | None, field: str, known: tuple[str, ...]) -> tuple[str, ...] | None:
    """A comma-separated list of known names (``None`` if not given)."""
    if text is None:
        return None
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise InvalidInput(
            field=field,
            problem=f"unknown {', '.join(map(repr, unknown)) or 'empty list'}; "
            f"known: {', '.join(known)}",
        )
    return names


def _print(out: Output, report: dict[str, Any]) -> None:
    purchases = report["purchases"]
    out.line(
        f"chaos run {report['run']} (seed {report['seed']}, {report['backend']}, "
        f"{report['workers']} workers): {purchases['accepted']} of {purchases['planned']} "
        f"purchases accepted in {report['seconds']} s; "
        + ("settled" if report["settled"] else "DID NOT SETTLE")
    )
    refused = ", ".join(f"{n} {why}" for why, n in purchases["refused"].items()) or "none"
    out.line(f"  refused at acceptance: {refused}")
    out.line()
    out.line("sagas by final state:")
    for state, count in purchases["by_state"].items():
        out.line(f"  {state:<24}{count:>7}")
    out.line()
    out.line("faults injected:")
    for name, value in report["faults"].items():
        if isinstance(value, dict):
            out.line(f"  {name}:")
            for point, count in value.items():
                out.line(f"    {point:<30}{count:>7}")
        else:
            out.line(f"  {name:<32}{value:>7}")
    out.line()
    out.line("invariants:")
    for invariant in report["invariants"]:
        mark = "ok  " if not invariant["violations"] else "FAIL"
        out.line(
            f"  {mark} {invariant['name']:<28} checked {invariant['checked']:>7}, "
            f"violated {invariant['violations']}"
        )
    out.line()
    out.line("must be zero:")
    for name, value in report["must_be_zero"].items():
        shown = "not measured (no broker)" if value is None else str(value)
        out.line(f"  {'ok  ' if not value else 'FAIL'} {name:<28}{shown:>7}")
    for problem in report["problems"]:
        out.line(f"  ! {problem}")
    out.line()
    out.line("chaos: " + ("no violation" if report["ok"] else "VIOLATIONS FOUND"))
