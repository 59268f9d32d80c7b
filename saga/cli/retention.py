"""``saga prune``: finished operational rows past a window, removed in batches."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from saga.cli.common import EXIT_OK, Command, Output, add_common_options, open_engine, whole

if TYPE_CHECKING:
    import argparse

FLAGS = {"older_than": "--older-than", "batch": "--batch"}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add ``prune``."""
    from saga.core.ops.prune import DEFAULT_BATCH

    prune = subparsers.add_parser(
        "prune",
        help="remove finished jobs, settled inbox messages and published events past a window",
        description="Remove, in short batches, jobs archived as done (with their results), "
        "settled inbox messages without conflicts and published outbox events, older than "
        "the window by the database clock.  Sagas, their audit trail, operation ids, live "
        "and dead jobs, open items, unmatched messages and unpublished events are kept.  "
        "A repeat (a job id, a message, an event) arriving after its row was pruned is new "
        "to the engine: keep the window longer than any redelivery.",
    )
    prune.add_argument(
        "--older-than",
        required=True,
        metavar="DURATION",
        help="the window: 30d, 12h, 90m, 45s or 2w (at most 36500d)",
    )
    prune.add_argument(
        "--batch",
        type=whole,
        default=DEFAULT_BATCH,
        metavar="N",
        help=f"rows per transaction, 1 to 10000 (default: {DEFAULT_BATCH})",
    )
    prune.add_argument("--dry-run", action="store_true", help="count what would go, remove nothing")
    add_common_options(prune, top_level=False)
    return {"prune": Command(_prune, FLAGS)}


def _prune(args: argparse.Namespace, out: Output) -> int:
    from tqdm import tqdm

    from saga.core.ops.prune import (
        Pruner,
        parse_duration,
    )

    older_than = parse_duration(args.older_than)
    with open_engine(args, create=False) as engine:
        pruner = Pruner(engine.db, older_than_s=older_than, batch=args.batch)
        if args.dry_run:
            report = pruner.run(dry_run=True)
        else:
            total = sum(pruner.count().values())
            with tqdm(
                total=total,
                unit="row",
                desc="pruned",
                file=sys.stderr,
                disable=not sys.stderr.isatty(),
            ) as bar:
                report = pruner.run(progress=bar.update)
    summary = report.as_dict()
    if out.as_json:
        out.json(summary)
        return EXIT_OK
    verb = "would remove" if report.dry_run else "removed"
    pruned = summary["pruned"]
    out.line(
        f"{verb} {pruned['jobs']} finished jobs, {pruned['inbox']} settled inbox messages, "
        f"{pruned['outbox']} published events, {pruned['refusals']} refused webhook requests "
        f"and {pruned['sign_ins']} console sign-in attempts from before {summary['cutoff']}"
    )
    return EXIT_OK
