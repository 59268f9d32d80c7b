"""``saga migrate plan|apply``: live sagas moved to a newer definition version."""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING

from saga.cli.common import (
    EXIT_OK,
    Command,
    Output,
    add_common_options,
    application,
    open_engine,
    whole,
)

if TYPE_CHECKING:
    import argparse

    from saga.core.engine import Engine
    from saga.core.sagas.migrations import Migrations
    from saga.core.sagas.plans import MigrationPlan

FLAGS = {
    "kind": "KIND",
    "to": "--to",
    "batch": "--batch",
    "actor": "--actor",
    "reason": "--reason",
    "plan": "plan",
}
DEFAULT_BATCH = 500


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add ``migrate plan`` and ``migrate apply``."""
    group = subparsers.add_parser(
        "migrate",
        help="move live sagas of a kind to a newer definition version, by the application's plan",
        description="The application declares how each live state of an older version maps "
        "onto the newer one (Migration(kind, from_version, to_version, states={…}, hooks={…})); "
        "plan shows it against the database, apply moves the sagas.  A plan that leaves a live "
        "state unmapped, names a state or a version that does not exist, or changes what a state "
        "does or holds without a hook is refused (exit 2, naming each problem).",
    )
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    plan = actions.add_parser(
        "plan",
        help="each live state of every older version: where it goes, how many sagas, what is "
        "re-derived",
    )
    _target(plan)
    apply = actions.add_parser(
        "apply",
        help="move the live sagas in batches, each batch one transaction, audited",
        description="Each saga moves by a compare-and-set on its version, with an audit row "
        "(who, why, both versions); its step jobs and timers that had not finished are fenced "
        "and re-derived from the new definition, and its state's hook runs in the same "
        "transaction.  Resumable after a crash (run it again), idempotent, safe beside running "
        "workers.",
    )
    _target(apply)
    apply.add_argument(
        "--batch",
        type=whole,
        default=DEFAULT_BATCH,
        metavar="N",
        help=f"sagas per transaction, 1 to 10000 (default: {DEFAULT_BATCH})",
    )
    apply.add_argument("--actor", required=True, metavar="NAME", help="who, for the audit trail")
    apply.add_argument("--reason", required=True, metavar="TEXT", help="why, for the audit trail")
    apply.add_argument(
        "--dry-run", action="store_true", help="check the plan and count the batches; move nothing"
    )
    return {"migrate plan": Command(_plan, FLAGS), "migrate apply": Command(_apply, FLAGS)}


def _target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", metavar="KIND", help="the saga kind, one the application registers")
    parser.add_argument(
        "--to", type=whole, required=True, metavar="V", help="the definition version to move to"
    )
    add_common_options(parser, top_level=False)


def _open(args: argparse.Namespace) -> tuple[Engine, Migrations]:
    """
    The engine, and the application's migrations apart from its check.

    A wrong plan refuses the whole application elsewhere (workers do not
    start); here it is what the command shows, problem by problem, with exit 2.
    """
    from saga.core.sagas.migrations import Migrations

    app = application(args)
    args.loaded_app = dataclasses.replace(app, migrations=())
    engine = open_engine(args)
    return engine, Migrations(engine.db, engine.registry, app.migrations)


def _plan(args: argparse.Namespace, out: Output) -> int:
    engine, migrations = _open(args)
    with engine:
        plan = migrations.plan(args.kind, args.to)
    if out.as_json:
        out.json(plan.to_json())
    else:
        _show(plan, out)
    plan.refuse_if_wrong()  # exit 2, naming each problem
    return EXIT_OK


def _show(plan: MigrationPlan, out: Output) -> None:
    out.line(f"{plan.kind}: {plan.sagas} live saga(s) on older versions, to v{plan.to_version}")
    if not plan.states:
        return
    out.table(
        ("FROM", "STATE", "SAGAS", "TO", "TIMER", "ACTIONS", "HOOK"),
        (
            (
                f"v{row.from_version}",
                row.state,
                row.sagas,
                row.target or "(unmapped)",
                row.timer or "-",
                ", ".join(
                    [f"{a} (new)" for a in row.new_actions]
                    + [f"{a} (if pending)" for a in row.pending_actions]
                )
                or "-",
                "yes" if row.hook else "-",
            )
            for row in plan.states
        ),
    )


def _apply(args: argparse.Namespace, out: Output) -> int:
    from tqdm import tqdm

    engine, migrations = _open(args)
    with engine:
        total = migrations.plan(args.kind, args.to).sagas
        with tqdm(
            total=total,
            unit="saga",
            desc="migrated",
            file=sys.stderr,
            disable=out.as_json or args.dry_run or not sys.stderr.isatty(),
        ) as bar:
            report = migrations.apply(
                args.kind,
                args.to,
                batch=args.batch,
                actor=args.actor,
                reason=args.reason,
                dry_run=args.dry_run,
                progress=bar.update,
            )
    if out.as_json:
        out.json(report.to_json())
    elif report.dry_run:
        out.line(
            f"would move {report.remaining} saga(s) of {report.kind} to v{report.to_version} "
            f"in {report.batches} batch(es)"
        )
    else:
        out.line(
            f"moved {report.moved} saga(s) of {report.kind} to v{report.to_version} in "
            f"{report.batches} batch(es) ({report.seconds:.1f} s): re-derived {report.timers} "
            f"timer(s) and {report.actions} action(s), superseded {report.superseded} job(s); "
            f"skipped {report.skipped}"
        )
    if report.remaining and not report.dry_run:
        out.note(
            f"{report.remaining} saga(s) were busy and are still on an older version: run it again"
        )
    return EXIT_OK
