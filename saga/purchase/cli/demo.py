"""``saga demo``: the main job, many purchases with faults, a report, the invariants."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from saga.cli import (
    EXIT_ERROR,
    EXIT_OK,
    Output,
    add_broker_options,
    add_common_options,
    broker_url,
    exchange,
    open_engine,
    whole,
)
from saga.cli import (
    Leaf as Command,
)
from saga.exceptions import InvalidInput

if TYPE_CHECKING:
    import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add ``demo``."""
    demo = subparsers.add_parser(
        "demo", help="many purchases with faults through worker processes, then a report"
    )
    demo.add_argument(
        "--purchases",
        type=whole,
        default=1000,
        metavar="N",
        help="purchases to make (default: 1000)",
    )
    demo.add_argument(
        "--workers", type=whole, default=3, metavar="K", help="worker processes (default: 3)"
    )
    demo.add_argument(
        "--seed",
        type=whole,
        metavar="S",
        help="seed of the purchase mix (default: random; printed in the report)",
    )
    add_broker_options(demo)
    add_common_options(demo, top_level=False)
    return {"demo": Command(_demo, {"purchases": "--purchases", "workers": "--workers"})}


def _demo(args: argparse.Namespace, out: Output) -> int:
    from tqdm import tqdm

    from saga.purchase.demo import run_demo

    if not 1 <= args.purchases <= 10_000:
        raise InvalidInput(field="purchases", problem="must be between 1 and 10000")
    if not 1 <= args.workers <= 64:
        raise InvalidInput(field="workers", problem="must be between 1 and 64")
    with (
        open_engine(args, check_schema=False) as engine,
        tqdm(
            total=args.purchases,
            unit="purchase",
            desc="settled",
            file=sys.stderr,
            disable=not sys.stderr.isatty() and out.as_json,
        ) as bar,
    ):

        def progress(settled: int, total: int) -> None:
            bar.total = total
            bar.n = settled
            bar.refresh()

        report = run_demo(
            engine,
            purchases=args.purchases,
            workers=args.workers,
            seed=args.seed,
            progress=progress,
            broker=(url, exchange(args)) if (url := broker_url(args)) else None,
        )
    if out.as_json:
        out.json(report)
    else:
        _print(out, report)
    return EXIT_OK if report["verify"]["ok"] and report["settled"] else EXIT_ERROR


def _print(out: Output, report: dict[str, Any]) -> None:
    purchases = report["purchases"]
    out.line(
        f"demo run {report['run']} (seed {report['seed']}, {report['workers']} workers): "
        f"{purchases['accepted']} purchases accepted of {purchases['planned']} in "
        f"{report['seconds']} s ({report['purchases_per_second']} purchases/s)"
    )
    scope = report["database"]
    out.line(
        "  the figures below are this run's; saga verify and the outbox cover the whole "
        f"database: {_runs(scope)}"
    )
    lag = report["payment_request_lag_s"]
    out.line(
        f"  lag from acceptance to payment request: p50 {lag['p50']} s, p99 {lag['p99']} s, "
        f"max {lag['max']} s"
    )
    refused = ", ".join(f"{n} {why}" for why, n in purchases["refused"].items()) or "none"
    out.line(
        f"  refused: {refused}; same operation id retried {purchases['retried_same_operation_id']}"
        f" times (same purchase back); {purchases['cancelled_after_paying']} cancelled "
        "after paying"
    )
    out.line()
    out.line("purchases by final state:")
    for state, count in purchases["by_state"].items():
        out.line(f"  {state:<22}{count:>6}")
    out.line()
    out.line("by payment method:")
    for method, states in purchases["by_payment_method"].items():
        out.line(f"  {method:<26}" + ", ".join(f"{s} {n}" for s, n in states.items()))
    out.line()
    out.table(
        ("INTENSIVE", "CAPACITY", "HELD", "TAKEN", "FREE"),
        (
            (s["id"], s["capacity"], s["seats"]["held"], s["seats"]["taken"], s["seats"]["free"])
            for s in report["seats"]
        ),
    )
    money = report["money"]
    out.line()
    out.line(
        f"money: charges {money['charges']}, {money['charged_minor'] / 100:.2f} EUR charged; "
        f"refunds {money['refunds']}, {money['refunded_minor'] / 100:.2f} EUR refunded"
    )
    recon = report["reconciliation"]
    waiting = recon["waiting_for_an_operator"]
    out.line(
        f"reconciliation: {recon['opened']} items opened, "
        f"{recon['settled_automatically']} settled, "
        f"{len(waiting)} waiting for an operator:"
    )
    for item in waiting[:20]:
        out.line(
            f"  {item['id']}  purchase {item['saga_id']}  {item['reason']}  (owner {item['owner']})"
        )
    if len(waiting) > 20:
        out.line(f"  … and {len(waiting) - 20} more: saga recon list")
    out.line()
    verdict = report["verify"]
    out.line(
        f"saga verify, the whole database ({_runs(scope)}): "
        + ("all invariants hold" if verdict["ok"] else "INVARIANTS BROKEN")
    )
    for invariant in verdict["invariants"]:
        mark = "ok  " if not invariant["violations"] else "FAIL"
        out.line(
            f"  {mark} {invariant['name']:<26} checked {invariant['checked']:>6}, "
            f"violations {invariant['violations']}"
        )
    _print_left(out, report["left"])
    if not report["settled"]:
        out.line("the run did not settle before its time limit")


def _runs(scope: dict[str, Any]) -> str:
    runs = scope["demo_runs"]
    return f"{scope['purchases']} purchases, {runs} demo run{'s' if runs != 1 else ''}"


def _print_left(out: Output, left: dict[str, Any]) -> None:
    """What the workers left in the queue: nothing due within the horizon, unless cut short."""
    out.line()
    if not left["jobs"]:
        out.line("left in the queue: nothing")
        return
    out.line(
        f"left in the queue (whole database; what was due within {left['horizon_s']:.0f} s "
        "was worked before the workers stopped; `saga worker` runs the rest when due):"
    )
    for job in left["jobs"]:
        first, last = _in(job["first_due_in_s"]), _in(job["last_due_in_s"])
        when = f"due in {first} to {last}" if first != last else f"due in {first}"
        when = when.replace("due in now", "due now")
        what = f": {job['what']}" if job["what"] else ""
        out.line(f"  {job['pending']:>5} {job['kind']:<24} {when}{what}")


def _in(seconds: float) -> str:
    """A delay as a person reads it."""
    if seconds < 1:
        return "now"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
