"""``saga db upgrade`` and ``saga diagram``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from saga.cli.common import EXIT_OK, Command, Output, add_common_options, open_engine
from saga.exceptions import InvalidInput, NotFound
from state_machine import Machine, to_mermaid

if TYPE_CHECKING:
    import argparse
import importlib


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> dict[str, Command]:
    """Add ``db upgrade`` and ``diagram``."""
    db = subparsers.add_parser("db", help="the database schema")
    db_commands = db.add_subparsers(dest="action", metavar="ACTION", required=True)
    upgrade = db_commands.add_parser("upgrade", help="create or migrate the schema (idempotent)")
    add_common_options(upgrade, top_level=False)

    diagram = subparsers.add_parser("diagram", help="print a saga's state machine as Mermaid")
    which = diagram.add_mutually_exclusive_group()
    which.add_argument(
        "--kind",
        default=None,
        metavar="KIND",
        help="a saga kind of the application (default: its first)",
    )
    which.add_argument(
        "--machine",
        metavar="MODULE:NAME",
        help="your own saga: a Machine importable as MODULE:NAME (e.g. shop.sagas:order)",
    )
    add_common_options(diagram, top_level=False)

    return {
        "db upgrade": Command(_upgrade),
        "diagram": Command(_diagram, {"kind": "--kind", "machine": "--machine"}),
    }


def _upgrade(args: argparse.Namespace, out: Output) -> int:
    with open_engine(args, check_schema=False) as engine:
        result = engine.upgrade()
    components = {
        name: {"before": result.before.get(name, 0), "after": after}
        for name, after in result.after.items()
    }
    if out.as_json:
        out.json(
            {
                # before/after: the engine's own version, as before applications had tables.
                "before": result.before.get("engine", 0),
                "after": result.after["engine"],
                "applied": list(result.applied),
                "components": components,
            }
        )
        return EXIT_OK
    versions = ", ".join(
        f"{name} {v['before']} → {v['after']}"
        if v["before"] != v["after"]
        else f"{name} {v['after']}"
        for name, v in components.items()
    )
    if result.changed:
        out.line(f"schema upgraded: {versions} (applied {', '.join(result.applied)})")
    else:
        out.line(f"schema already current: {versions}")
    return EXIT_OK


def _diagram(args: argparse.Namespace, out: Output) -> int:
    machine = _load_machine(args.machine) if args.machine else _builtin(args.kind, args.app)
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


def _builtin(kind: str | None, app: str | None) -> Machine:
    from saga.core.app_loading import load_app

    registry = load_app(app).registry
    if kind is None:
        return next(iter(registry)).machine
    try:
        return registry.get(kind).machine
    except NotFound as exc:
        known = ", ".join(registry.kinds)
        raise InvalidInput(field="kind", problem=f"no saga kind {kind!r}; known: {known}") from exc


def _load_machine(spec: str) -> Machine:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise InvalidInput(field="machine", problem=f"expected MODULE:NAME, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(
            field="machine", problem=f"cannot import {module_name!r}: {exc}"
        ) from exc
    machine = getattr(module, attribute, None)
    if not isinstance(machine, Machine):
        raise InvalidInput(field="machine", problem=f"{spec!r} is not a state_machine.Machine")
    return machine
