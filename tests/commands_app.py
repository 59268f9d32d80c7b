"""An application with two commands of its own and an option: what docs/applications.md shows."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

from saga import Application, Machine, Registry, State, Transition
from saga.cli import Command, Commands, Option
from saga.exceptions import InvalidInput

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from saga import Context


@dataclasses.dataclass(frozen=True, slots=True)
class Tallies:
    """The application's services (``engine.services``): what a tally is called."""

    label: str = "tally"


TALLY = Machine(
    "tally",
    states=[State("open", initial=True), State("closed", terminal=True)],
    transitions=[
        Transition("tick", source="open", target="open"),
        Transition("close", source="open", target="closed"),
    ],
)


def _open_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--operation-id", required=True, help="the client's id of the request")


def _open(args: argparse.Namespace, engine: Context[Tallies]) -> int:
    started = engine.sagas.start(
        "tally", operation_id=args.operation_id, request={"label": engine.services.label}
    )
    print(json.dumps({"id": started.saga.id, "created": started.created}))
    return 0


def _count_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the tally")
    parser.add_argument("--times", type=int, default=1, help="how many ticks (default: 1)")


def _count(args: argparse.Namespace, engine: Context[Tallies]) -> int | None:
    if args.times < 1:
        raise InvalidInput(field="times", problem=f"must be at least 1, got {args.times}")
    for _ in range(args.times):
        engine.sagas.fire(args.id, "tick", actor="cli")
    history = engine.sagas.history(args.id)
    print(f"{engine.services.label} {args.id}: {len(history) - 1} ticks")
    return None


def _with_label(
    app: Application[Tallies], values: Mapping[str, str | None]
) -> Application[Tallies]:
    label = values.get("label") or "tally"
    if not label.isidentifier():
        raise InvalidInput(field="label", problem=f"expected a word, got {label!r}")
    return dataclasses.replace(app, services=lambda engine: Tallies(label))


def app() -> Application[Tallies]:
    """The tally: a saga, two commands (`open`, `count`) and an option (`--label`)."""
    registry = Registry()
    registry.register(TALLY)
    return Application(
        name="tallies",
        registry=registry,
        services=lambda engine: Tallies(),
        commands=Commands(
            commands=(
                Command(name="open", help="open a tally", run=_open, arguments=_open_arguments),
                Command(
                    name="count",
                    help="tick a tally",
                    run=_count,
                    arguments=_count_arguments,
                    flags={"times": "--times"},
                ),
            ),
            options=(Option(flag="--label", metavar="WORD", help="what a tally is called"),),
            configure=_with_label,
        ),
    )
