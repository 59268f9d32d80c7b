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

from saga.cli.common import (
    EXIT_ERROR,
    Command,
    Output,
    add_common_options,
    run,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

# Each top-level command and its module, modules in the order ``--help``
# lists them: a command builds only its own module's parsers (building every
# command's costs more than a short command's whole work); ``--help`` and
# anything unknown build them all.
COMMAND_MODULES: Final = {
    "db": "misc",
    "diagram": "misc",
    "intensive": "catalogue",
    "purchase": "purchase",
    "instances": "instances",
    "explain": "instances",
    "messages": "messages",
    "worker": "queue",
    "stats": "queue",
    "dlq": "queue",
    "relay": "events",
    "consume": "events",
    "outbox": "events",
    "prune": "retention",
    "webhook": "ops",
    "recon": "ops",
    "sandbox": "ops",
    "verify": "ops",
    "console": "ops",
    "operator": "ops",
    "demo": "demo",
    "chaos": "chaos",
}
MODULES: Final = tuple(dict.fromkeys(COMMAND_MODULES.values()))
# A closed stdout: what a shell reports for a process killed by SIGPIPE.
EXIT_STDOUT_CLOSED: Final = 141  # 128 + SIGPIPE (13)
# The top-level options that take a value (which is not the command).
_VALUED: Final = frozenset({"--db", "--sandbox-db", "--app", "--log-level"})


def invoked_module(argv: Sequence[str]) -> str | None:
    """
    The module of the command ``argv`` names, or ``None``.

    ``None`` for no command, an unknown one, or help asked for before the
    command (it lists every command).  An option that takes a value may be
    abbreviated, as argparse allows: its value is never the command.
    """
    words = iter(argv)
    for word in words:
        if word in ("-h", "--help"):
            return None
        if word.startswith("--") and "=" not in word and _takes_value(word):
            next(words, None)
        elif word == "--" or not word.startswith("-"):
            return COMMAND_MODULES.get(word)
    return None


def _takes_value(option: str) -> bool:
    return len(option) > 2 and any(valued.startswith(option) for valued in _VALUED)


def build_parser(
    argv: Sequence[str] | None = None,
) -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    """
    The argument parser and the command behind each subcommand path.

    With ``argv``, only the parsers of the command it names (all of them if
    it names none); without, every command's.
    """
    parser = argparse.ArgumentParser(
        prog="saga",
        description="Saga orchestration engine: persisted state machines in SQL.",
        epilog="Exit codes: 0 ok, 2 bad input, 3 conflict, 4 not found, 1 other errors.",
    )
    add_common_options(parser, top_level=True)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    commands: dict[str, Command] = {}
    module = None if argv is None else invoked_module(argv)
    for name in MODULES if module is None else (module,):
        commands.update(importlib.import_module(f"saga.cli.{name}").register(subparsers))
    return parser, commands


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``saga`` command line; returns the exit code."""
    if argv is None:
        argv = sys.argv[1:]
    parser, commands = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # usage errors (2) and --help (0), already printed by argparse
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
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
