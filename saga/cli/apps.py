"""The application's part of the command line: its options and its commands."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Final

from saga.cli.common import EXIT_OK, Command, Output, add_common_options, open_engine

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from saga.core.commands import Command as AppCommand
    from saga.core.commands import Option

# Where the parsed arguments keep the application loaded before parsing.
APP_LOADED: Final = "loaded_app"


def app_spec(argv: Sequence[str]) -> str | None:
    """
    The ``--app`` that ``argv`` gives (the last one, as argparse keeps), or ``None``.

    Read before parsing: the application's commands are part of the parser.
    ``--app`` may be abbreviated as argparse allows (no other option of the
    engine starts with ``--a``).
    """
    found = None
    words = iter(argv)
    for word in words:
        if word == "--":
            break
        flag, equals, value = word.partition("=")
        if len(flag) > 2 and "--app".startswith(flag):
            found = value if equals else next(words, None)
    return found


def add_app_options(
    parser: argparse.ArgumentParser, options: Iterable[Option], *, top_level: bool
) -> None:
    """The application's options, on the top level and on every command (as ``--db`` is)."""
    # Only where the engine's common options are: the commands, not their groups.
    common = top_level or "--db" in parser._option_string_actions
    for option in options:
        if common and option.flag not in parser._option_string_actions:
            parser.add_argument(
                option.flag,
                metavar=option.metavar,
                default=None if top_level else argparse.SUPPRESS,
                help=option.help,
            )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                add_app_options(sub, options, top_level=False)


def register_command(
    command: AppCommand, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]
) -> dict[str, Command]:
    """Add an application's command: its tree, or one command run on an engine."""
    if command.register is not None:
        return dict(command.register(subparsers))
    parser = subparsers.add_parser(command.name, help=command.help, description=command.help)
    if command.arguments is not None:
        command.arguments(parser)
    add_common_options(parser, top_level=False)
    work = command.run
    assert work is not None  # noqa: S101 - Command checks it has one of run and register

    def handler(args: argparse.Namespace, out: Output) -> int:
        del out
        with open_engine(args, create=not command.read_only) as engine:
            code: Any = work(args, engine)
        return EXIT_OK if code is None else int(code)

    return {command.name: Command(handler, command.flags)}
