"""
The ``saga`` command line (DESIGN.md §4).

Exit codes: 0 ok, 2 bad input or usage, 3 conflict, 4 not found, 1 anything
else; 141 (quietly) when stdout's reader went away.  Errors go to stderr;
``--json`` output goes to stdout.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import sys
from typing import TYPE_CHECKING, Final

from saga.cli.apps import APP_LOADED, add_app_options, app_spec, register_command
from saga.cli.common import (
    EXIT_CONFLICT,
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    Output,
    add_broker_options,
    add_common_options,
    broker_url,
    exchange,
    guarded,
    open_engine,
    operator_name,
    port_number,
    positive_float,
    run,
    whole,
)
from saga.cli.common import Command as Leaf
from saga.cli.money import print_money, summary_of
from saga.core.commands import Command, Commands, Option
from saga.exceptions import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Sequence

    from saga.core.app import Application

# What an application's commands use (docs/applications.md, "Commands"):
# `Commands`, `Command` and `Option` declare them; a tree of actions registers
# a `Leaf` (handler, flags) for each path and prints through `Output`.

# Each of the engine's top-level commands and its module, modules in the order
# ``--help`` lists them (the application's commands after them): a command
# builds only its own parsers (building every command's costs more than a
# short command's whole work); ``--help`` and anything unknown build them all.
COMMAND_MODULES: Final = {
    "db": "misc",
    "diagram": "misc",
    "instances": "instances",
    "explain": "instances",
    "migrate": "migrate",
    "messages": "messages",
    "worker": "worker",
    "stats": "queue",
    "dlq": "queue",
    "relay": "events",
    "consume": "events",
    "outbox": "events",
    "prune": "retention",
    "webhook": "ops",
    "recon": "ops",
    "verify": "ops",
    "console": "ops",
    "operator": "ops",
}
MODULES: Final = tuple(dict.fromkeys(COMMAND_MODULES.values()))
# The engine's commands that are groups of actions an application may add to.
_GROUPS: Final = frozenset({"webhook"})
# A closed stdout: what a shell reports for a process killed by SIGPIPE.
EXIT_STDOUT_CLOSED: Final = 141  # 128 + SIGPIPE (13)
# The top-level options that take a value (which is not the command).
# The engine's top-level options that take a value (which is not the command).
_VALUED: Final = frozenset({"--db", "--app", "--log-level"})


def invoked_module(argv: Sequence[str], valued: frozenset[str] = _VALUED) -> str | None:
    """The module of the engine's command ``argv`` names, or ``None`` (see :func:`invoked`)."""
    return COMMAND_MODULES.get(invoked(argv, valued) or "")


def invoked(argv: Sequence[str], valued: frozenset[str] = _VALUED) -> str | None:
    """
    The command ``argv`` names, or ``None``.

    ``None`` for no command, or help asked for before the command (it lists
    every command).  An option that takes a value (the engine's, or one of
    ``valued``: the application's) may be abbreviated, as argparse allows: its
    value is never the command.
    """
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help"):
            return None
        if word.startswith("--") and "=" not in word and _takes_value(word, valued):
            next(words, None)
        elif word == "--" or not word.startswith("-"):
            return word
    return None


def _takes_value(option: str, valued: frozenset[str]) -> bool:
    return len(option) > 2 and any(flag.startswith(option) for flag in valued)


def build_parser(
    argv: Sequence[str] | None = None, app: Application | None = None
) -> tuple[argparse.ArgumentParser, dict[str, Leaf]]:
    """
    The argument parser and the command behind each subcommand path.

    The engine's commands and those of ``app`` (default: the one ``--app``
    in ``argv`` names, else ``$SAGA_APP``, else the default application).
    With ``argv``, only the parsers of the command it names (all of them if
    it names none); without, every command's.
    """
    from saga.core.app_loading import (
        load_app,  # the application's commands are known before parsing
    )

    if app is None:
        app = load_app(app_spec(argv or ()))
    own = app.commands
    _check_names(app)
    parser = argparse.ArgumentParser(
        prog="saga",
        description="Saga orchestration engine: persisted state machines in SQL.",
        epilog="Exit codes: 0 ok, 2 bad input, 3 conflict, 4 not found, 1 other errors.",
    )
    add_common_options(parser, top_level=True)
    add_app_options(parser, own.options, top_level=True)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands: dict[str, Leaf] = {}
    name = None if argv is None else invoked(argv, _VALUED | {o.flag for o in own.options})
    module = COMMAND_MODULES.get(name or "")
    # Its commands of that name, and its actions of an engine's group of that name.
    mine = [c for c in own.commands if c.name.partition(" ")[0] == name]
    everything = module is None and not mine
    for each in MODULES if everything else (module,) if module else ():
        commands.update(importlib.import_module(f"saga.cli.{each}").register(subparsers))
    for command in own.commands if everything else mine:
        group, _, action = command.name.partition(" ")
        where = _actions_of(subparsers.choices[group]) if action else subparsers
        commands.update(register_command(command, where))
    # Its options are taken before or after any command, like --db.
    for sub in subparsers.choices.values():
        add_app_options(sub, own.options, top_level=False)
    return parser, commands


def _parsed(argv: Sequence[str]) -> tuple[argparse.Namespace, dict[str, Leaf]] | int:
    """
    The arguments and the commands, or the exit code of a usage error (or ``--help``).

    The application is loaded first (its commands are part of the parser): a
    bad ``--app`` is reported as any bad option is, before argparse sees the rest.
    """
    from saga.core.app_loading import load_app

    built: list[tuple[Application, argparse.ArgumentParser, dict[str, Leaf]]] = []

    def build() -> int:
        app = load_app(app_spec(argv))
        built.append((app, *build_parser(argv, app)))
        return EXIT_OK

    early = guarded(build, Output(as_json="--json" in argv))
    if early != EXIT_OK:
        return early
    app, parser, commands = built[0]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2) and --help (0), already printed by argparse
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    setattr(args, APP_LOADED, app)
    return args, commands


def _check_names(app: Application) -> None:
    """An application's command may not take an engine's name, nor join one that has no actions."""
    names = app.commands.names()
    for command in app.commands.commands:
        name = command.name
        group, _, action = name.partition(" ")
        if names.count(name) > 1:
            problem = f"command {name!r} is declared {names.count(name)} times"
        elif not action and name in COMMAND_MODULES:
            problem = f"command {name!r} has the name of one of the engine's"
        elif action and (group not in _GROUPS or " " in action or command.register is None):
            problem = (
                f"command {name!r}: an action joins one of the engine's groups "
                f"({', '.join(sorted(_GROUPS))}) with register=…"
            )
        else:
            continue
        raise InvalidInput(field="app", problem=f"the {app.name} application's {problem}")


def _actions_of(
    group: argparse.ArgumentParser,
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """The actions of one of the engine's command groups (``webhook``)."""
    return next(a for a in group._actions if isinstance(a, argparse._SubParsersAction))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``saga`` command line; returns the exit code."""
    if argv is None:
        argv = sys.argv[1:]
    parsed = _parsed(argv)
    if isinstance(parsed, int):
        return parsed
    args, commands = parsed
    from saga.core.logs import configure_logging  # structlog: only for a command that runs

    configure_logging(args.log_level)
    path = " ".join(part for part in (args.command, getattr(args, "action", None)) if part)
    output = Output(as_json=args.json)
    try:
        code = run(commands[path], args, output)
        output.out.flush()  # output still buffered meets a closed pipe here, not at exit
    except BrokenPipeError as exc:
        if _stdout_closed():
            return _end_quietly()
        output.error(f"unexpected {type(exc).__name__}: {exc}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        output.error("interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence: a message, not a trace
        output.error(f"unexpected {type(exc).__name__}: {exc}")
        return EXIT_ERROR
    return code


def _stdout_closed() -> bool:
    """
    Whether the reader of stdout went away (``saga … | head``), not some other pipe.

    POSIX ``poll`` flags the write end of a pipe whose read end is closed
    with ``POLLERR``; without ``poll`` (Windows), any broken pipe is stdout's.
    """
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    if not hasattr(select, "poll"):
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _end_quietly() -> int:
    """
    End as a Unix tool does when its reader has gone: no message, status 141.

    141 is what a shell reports for a tool killed by SIGPIPE (128 + 13), so
    ``set -o pipefail`` scripts see what they see for ``grep`` or ``cat``.
    Whatever is still buffered is sent to /dev/null: flushing it to the
    closed pipe at exit would print Python's "Exception ignored" instead.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_STDOUT_CLOSED


def entry_point() -> None:
    """Console-script entry point."""
    sys.exit(main())


__all__ = [
    "EXIT_CONFLICT",
    "EXIT_ERROR",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "Command",
    "Commands",
    "Leaf",
    "Option",
    "Output",
    "add_broker_options",
    "add_common_options",
    "broker_url",
    "entry_point",
    "exchange",
    "main",
    "open_engine",
    "operator_name",
    "port_number",
    "positive_float",
    "print_money",
    "summary_of",
    "whole",
]
