"""``saga db upgrade`` and ``saga diagram``."""

from __future__ import annotations

import argparse

from saga._cli._common import EXIT_OK, Command, Output, add_common_options, open_engine
from saga._engine import default_registry
from saga.exceptions import InvalidInput, NotFound
from state_machine import to_mermaid


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add ``db upgrade`` and ``diagram``."""
    db = subparsers.add_parser("db", help="the database schema")
    db_commands = db.add_subparsers(dest="action", metavar="ACTION", required=True)
    upgrade = db_commands.add_parser("upgrade", help="create or migrate the schema (idempotent)")
    add_common_options(upgrade, top_level=False)

    diagram = subparsers.add_parser("diagram", help="print a saga's state machine as Mermaid")
    diagram.add_argument(
        "--kind", default="purchase", metavar="KIND", help="saga kind (default purchase)"
    )
    add_common_options(diagram, top_level=False)

    return {
        "db upgrade": Command(_upgrade),
        "diagram": Command(_diagram, {"kind": "--kind"}, needs_engine=False),
    }


def _upgrade(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args, check_schema=False) as engine:
        result = engine.upgrade()
    if out.as_json:
        out.json({"before": result.before, "after": result.after, "applied": list(result.applied)})
    elif result.changed:
        out.line(
            f"schema upgraded from version {result.before} to {result.after} "
            f"(applied {', '.join(result.applied)})"
        )
    else:
        out.line(f"schema already at version {result.after}")
    return EXIT_OK


def _diagram(args: argparse.Namespace, out: Output) -> int:
    try:
        machine = default_registry().get(args.kind).machine
    except NotFound as exc:
        raise InvalidInput(field="kind", problem=f"no saga kind {args.kind!r}") from exc
    if not out.as_json:
        out.out.write(to_mermaid(machine))
        return EXIT_OK
    out.json(
        {
            "kind": machine.name,
            "version": machine.version,
            "mermaid": to_mermaid(machine),
            "states": [
                {
                    "name": state.name,
                    "initial": state.initial,
                    "terminal": state.terminal,
                    "timeout": state.timeout.describe() if state.timeout else None,
                    "actions": list(state.actions),
                    "meta": dict(state.meta),
                    "description": state.description,
                }
                for state in machine.states
            ],
            "transitions": [
                {
                    "event": t.event,
                    "source": list(t.source),
                    "target": t.target,
                    "guard": t.guard.name if t.guard else None,
                    "compensation": t.compensation,
                }
                for t in machine.transitions
            ],
        }
    )
    return EXIT_OK
