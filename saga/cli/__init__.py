"""
The ``saga`` command line (DESIGN.md §4).

Exit codes: 0 ok, 2 bad input or usage, 3 conflict, 4 not found, 1 anything
else.  Errors go to stderr; ``--json`` output goes to stdout.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from saga.cli import (
    catalogue,
    chaos,
    demo,
    events,
    instances,
    messages,
    misc,
    ops,
    purchase,
    queue,
    retention,
)
from saga.cli.common import (
    EXIT_ERROR,
    Command,
    Output,
    add_common_options,
    run,
)

if TYPE_CHECKING:
    from collections.abc import Sequence


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    """The argument parser and the command behind each subcommand path."""
    parser = argparse.ArgumentParser(
        prog="saga",
        description="Saga orchestration engine: persisted state machines in SQL.",
        epilog="Exit codes: 0 ok, 2 bad input, 3 conflict, 4 not found, 1 other errors.",
    )
    add_common_options(parser, top_level=True)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands: dict[str, Command] = {}
    modules = (
        misc,
        catalogue,
        purchase,
        instances,
        messages,
        queue,
        events,
        retention,
        ops,
        demo,
        chaos,
    )
    for module in modules:
        commands.update(module.register(subparsers))
    return parser, commands


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``saga`` command line; returns the exit code."""
    parser, commands = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2) and --help (0), already printed by argparse
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    from saga.core.logs import configure_logging  # structlog: only for a command that runs

    configure_logging(args.log_level)
    path = " ".join(part for part in (args.command, getattr(args, "action", None)) if part)
    output = Output(as_json=args.json)
    try:
        return run(commands[path], args, output)
    except KeyboardInterrupt:
        output.error("interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence: a message, not a trace
        output.error(f"unexpected {type(exc).__name__}: {exc}")
        return EXIT_ERROR


def entry_point() -> None:
    """Console-script entry point."""
    sys.exit(main())
