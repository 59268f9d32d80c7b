"""``saga stats`` and ``saga dlq list|replay``."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

from saga import validation as _validation
from saga.cli.common import (
    EXIT_OK,
    Command,
    Output,
    add_common_options,
    open_engine,
    operator_name,
    positive_float,
    whole,
)
from saga.exceptions import InvalidInput

if TYPE_CHECKING:
    import argparse

FLAGS = {
    "batch": "--batch",
    "rate": "--rate",
    "limit": "--limit",
    "app": "--app",
    "actor": "--actor",
    "reason": "--reason",
    "queue": "--queue",
    "yes": "--yes",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add ``stats`` and ``dlq``."""
    stats = subparsers.add_parser("stats", help="queue, reconciliation and saga figures")
    add_common_options(stats, top_level=False)

    dlq = subparsers.add_parser("dlq", help="dead letters and their replay")
    dlq_commands = dlq.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = dlq_commands.add_parser("list", help="dead letters, oldest first")
    _add_filters(listing)
    listing.add_argument(
        "--limit", type=whole, default=100, metavar="N", help="at most N (default: 100)"
    )
    add_common_options(listing, top_level=False)

    replay = dlq_commands.add_parser(
        "replay", help="give dead letters a fresh set of attempts (audited)"
    )
    which = replay.add_mutually_exclusive_group(required=True)
    which.add_argument("--job", metavar="ID", help="one dead letter")
    which.add_argument(
        "--all", action="store_true", help="every dead letter (narrow with --queue/--kind)"
    )
    replay.add_argument("--queue", metavar="Q", help="only this queue (with --all)")
    replay.add_argument("--kind", metavar="K", help="only this job kind (with --all)")
    replay.add_argument(
        "--batch",
        type=whole,
        default=100,
        metavar="N",
        help="dead letters read per round, 1 to 10000 (default: 100)",
    )
    replay.add_argument(
        "--rate", type=positive_float, metavar="PER_S", help="at most this many replays per second"
    )
    replay.add_argument("--dry-run", action="store_true", help="list, change nothing")
    replay.add_argument(
        "--yes",
        action="store_true",
        help="replay --all without asking (required when stdin is not a terminal)",
    )
    replay.add_argument("--reason", metavar="TEXT", help="why, for the audit trail")
    replay.add_argument(
        "--actor",
        metavar="NAME",
        default=None,
        help="who, for the audit trail (default: your user name)",
    )
    add_common_options(replay, top_level=False)

    return {
        "stats": Command(_stats_command, FLAGS),
        "dlq list": Command(_dlq_list, FLAGS),
        "dlq replay": Command(_dlq_replay, FLAGS),
    }


def _add_filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queue", metavar="Q", help="only this queue")
    parser.add_argument("--kind", metavar="K", help="only this job kind")


def _stats_command(args: argparse.Namespace, out: Output) -> int:
    from saga.core.ops import stats as _stats

    with open_engine(args, create=False) as engine:
        figures = _stats.collect(engine.db)
        figures["application"] = {"name": engine.app.name, **engine.app.figures(engine)}
    if out.as_json:
        out.json(figures)
        return EXIT_OK
    out.table(
        ("QUEUE", "PENDING", "DUE", "RUNNING", "EXPIRED", "FAILED", "OLDEST DUE (s)", "DONE"),
        (
            (
                name,
                q["pending"],
                q["due"],
                q["running"],
                q["expired_leases"],
                q["failed"],
                q["oldest_pending_age_s"],
                q["done"],
            )
            for name, q in figures["queues"].items()
        ),
    )
    backlog = figures["reconciliation"]
    out.line()
    out.line(
        f"reconciliation: {backlog['open']} open ({backlog['escalated']} with operators, "
        f"{backlog['overdue']} OVERDUE, {backlog['review']} for review), "
        f"oldest {backlog['oldest_age_s']} s"
    )
    outbox = figures["outbox"]
    out.line(
        f"outbox: {outbox['unpublished']} unpublished (oldest {outbox['oldest_unpublished_age_s']}"
        f" s), {outbox['publish_rate_per_s']} published/s over the last minute, "
        f"{outbox['broker_errors']} broker errors"
        + (f" (last: {outbox['last_error']})" if outbox["last_error"] else "")
    )
    out.line()
    out.table(("SAGA STATE", "COUNT"), sorted(figures["sagas"].items()))
    application = figures["application"]
    extra = {name: value for name, value in application.items() if name != "name"}
    if extra:
        out.line()
        out.line(f"{application['name']}: {extra}")
    return EXIT_OK


def _dlq_list(args: argparse.Namespace, out: Output) -> int:
    from saga.core.queue.dead_letters import (
        DeadLetters,
        Filter,
        dead_letter_json,
    )

    with open_engine(args, create=False) as engine:
        letters = DeadLetters(engine.db).find(
            Filter(queue=args.queue, kind=args.kind), limit=args.limit
        )
    if out.as_json:
        out.json([dead_letter_json(letter) for letter in letters])
        return EXIT_OK
    out.table(
        ("JOB", "KIND", "ATTEMPTS", "REASON", "FAILED AT", "LAST ERROR"),
        (
            (
                d.id,
                d.kind,
                f"{d.attempts}/{d.max_attempts}",
                d.error_class,
                d.finished_at.isoformat(timespec="seconds") if d.finished_at else "",
                (d.last_error or "")[:80],
            )
            for d in letters
        ),
    )
    return EXIT_OK


def _dlq_replay(args: argparse.Namespace, out: Output) -> int:
    from tqdm import tqdm

    from saga.core.queue.dead_letters import (
        DeadLetters,
        Filter,
    )
    from saga.core.queue.leases import Queue

    if args.job is not None and (args.queue or args.kind):
        raise InvalidInput(
            field="job", problem="--job replays one job; --queue/--kind go with --all"
        )
    _validation.batch(args.batch)
    if args.all and not (args.yes or args.dry_run or _confirmed(out)):
        raise InvalidInput(
            field="yes",
            problem="--all replays every dead letter: confirm with --yes "
            "(or answer the question on a terminal); nothing was replayed",
        )
    where = Filter(job_id=args.job, queue=args.queue, kind=args.kind)
    actor = args.actor or operator_name()
    stop = {"requested": False}

    def request_stop(*_: object) -> None:
        stop["requested"] = True

    previous = signal.signal(signal.SIGINT, request_stop)
    try:
        with open_engine(args) as engine:
            letters = DeadLetters(engine.db)
            if args.job is not None:
                Queue(engine.db).get(args.job)  # NotFound (exit 4) for an id never accepted
            total = len(letters.find(where, limit=100_000))
            with tqdm(
                total=total,
                unit="job",
                file=sys.stderr,
                disable=out.as_json or args.dry_run or total < 2,
            ) as bar:
                report = letters.replay(
                    where,
                    actor=actor,
                    reason=args.reason,
                    batch=args.batch,
                    rate=args.rate,
                    dry_run=args.dry_run,
                    progress=bar.update,
                    should_stop=lambda: stop["requested"],
                )
    finally:
        signal.signal(signal.SIGINT, previous)
    if out.as_json:
        out.json(report.to_json())
    elif args.dry_run:
        out.line(
            f"would replay {len(report.replayed)} dead letter(s): {', '.join(report.replayed)}"
        )
    else:
        state = " (stopped early)" if report.stopped else ""
        out.line(
            f"replayed {len(report.replayed)} dead letter(s), "
            f"skipped {len(report.skipped)} already resolved{state}"
        )
    return EXIT_OK


def _confirmed(out: Output) -> bool:
    """Ask on a terminal whether to replay every dead letter; ``False`` when not interactive."""
    if not sys.stdin.isatty():
        return False
    out.err.write("replay every dead letter matching the filters? [y/N] ")
    out.err.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")
