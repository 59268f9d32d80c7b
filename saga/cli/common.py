"""What every command shares: options, opening the engine, printing, exit codes."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TextIO

from saga import validation
from saga.exceptions import (
    ApplicationLoadFailed,
    ConflictError,
    InvalidInput,
    NotFound,
    SagaError,
)

if TYPE_CHECKING:
    from saga.core.app import Application
    from saga.core.engine import Engine

EXIT_OK: Final = 0
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_CONFLICT: Final = 3
EXIT_NOT_FOUND: Final = 4

Handler = Callable[[argparse.Namespace, "Output"], int]
_GLOBAL_FLAGS: Final = {
    "db": "--db",
    "app": "--app",
    "broker": "--broker",
    "exchange": "--exchange",
}


@dataclass(frozen=True, slots=True)
class Command:
    """A leaf command: its handler and how its options name the domain's fields."""

    handler: Handler
    flags: Mapping[str, str] = field(default_factory=dict)


def add_common_options(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    """
    ``--db`` and ``--json``, accepted before or after the subcommand.

    Subcommands use ``SUPPRESS`` defaults so that an option given before the
    subcommand is not reset by the subcommand's own default.
    """
    default: Any = None if top_level else argparse.SUPPRESS
    parser.add_argument(
        "--db",
        metavar="URL",
        default=default,
        help="database URL (default: $SAGA_DATABASE_URL, else sqlite:///saga.db)",
    )
    parser.add_argument(
        "--app",
        metavar="MODULE:NAME",
        default=default,
        help="the application: its saga kinds, steps, jobs, invariants and commands "
        "(default: $SAGA_APP, else the reference application named in saga.settings)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top_level else argparse.SUPPRESS,
        help="print machine-readable JSON on stdout",
    )
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="warning" if top_level else argparse.SUPPRESS,
        help="structured logs on stderr at this level and above (default: warning)",
    )


def add_broker_options(parser: argparse.ArgumentParser) -> None:
    """``--broker`` and ``--exchange``: where the outbox's events are published."""
    parser.add_argument(
        "--broker",
        metavar="URL",
        help="RabbitMQ to publish the outbox to, amqp://user:pass@host:5672/vhost "
        "(default: $SAGA_BROKER_URL; none: events wait in the outbox unless the "
        "application subscribes in process)",
    )
    parser.add_argument(
        "--exchange",
        metavar="NAME",
        help="the topic exchange (default: $SAGA_EXCHANGE, else saga.events)",
    )


def broker_url(args: argparse.Namespace) -> str | None:
    """``--broker``, else ``$SAGA_BROKER_URL``: an AMQP URL, with pika installed (else exit 2)."""
    from saga.core.messages.rabbitmq import BROKER_ENV, checked_url

    if given := getattr(args, "broker", None):
        return checked_url(given, field="broker")
    if from_env := os.environ.get(BROKER_ENV):
        return checked_url(from_env, field=f"${BROKER_ENV}")
    return None


def exchange(args: argparse.Namespace) -> str:
    """``--exchange``, else ``$SAGA_EXCHANGE``, else ``saga.events``."""
    from saga.core.messages.rabbitmq import DEFAULT_EXCHANGE, EXCHANGE_ENV

    name = getattr(args, "exchange", None) or os.environ.get(EXCHANGE_ENV) or DEFAULT_EXCHANGE
    return validation.identifier("exchange", name)


class Output:
    """Where a command writes: JSON or text on stdout, errors on stderr."""

    def __init__(
        self, *, as_json: bool, out: TextIO | None = None, err: TextIO | None = None
    ) -> None:
        self.as_json = as_json
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    def json(self, value: object) -> None:
        """Print ``value`` as indented JSON."""
        print(json.dumps(value, indent=2, ensure_ascii=False), file=self.out)

    def line(self, text: str = "") -> None:
        """Print one line of text."""
        print(text, file=self.out)

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        """Print aligned columns."""
        cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
        widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
        for row in cells:
            self.line(
                "  ".join(
                    value.ljust(width) for value, width in zip(row, widths, strict=True)
                ).rstrip()
            )

    def error(self, message: str) -> None:
        """Print an error on stderr."""
        print(f"saga: error: {message}", file=self.err)

    def note(self, message: str) -> None:
        """Print a note on stderr (stdout stays the command's output, JSON or text)."""
        print(f"saga: note: {message}", file=self.err)


_WHOLE = re.compile(r"-?[0-9]{1,18}", re.ASCII)


def whole(text: str) -> int:
    """
    An argparse type for whole numbers: ASCII digits only.

    Python's ``int()`` also takes ``" 3"``, ``"3_0"`` and non-ASCII digits;
    a script passing those has a bug we should report, not guess around.
    """
    if not _WHOLE.fullmatch(text):
        msg = f"expected a whole number written with digits 0-9, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return int(text)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def open_engine(
    args: argparse.Namespace, *, check_schema: bool = True, create: bool = True
) -> Engine:
    """
    The engine on ``--db`` (or the default database).

    Read commands pass ``create=False``: a mistyped embedded path is then
    "not found" (exit 4), never a new empty database that looks healthy.
    """
    # Imported here, not at the top: `saga --help` and argument errors answer
    # without loading SQLAlchemy and the drivers.
    from saga.core.engine import Engine, default_url

    return Engine(
        default_url() if args.db is None else args.db,
        app=application(args),
        check_schema=check_schema,
        create=create,
    )


def application(args: argparse.Namespace) -> Application:
    """The application the command runs: loaded before parsing, given its options."""
    from saga.core.app_loading import load_app

    loaded: Application | None = getattr(args, "loaded_app", None)
    if loaded is not None:
        return loaded  # `run` gave it its options
    app = load_app(getattr(args, "app", None))
    return app.configured(vars(args))


def run(command: Command, args: argparse.Namespace, output: Output) -> int:
    """Run a command and turn the engine's errors into the contract's exit codes."""
    loaded: Application | None = getattr(args, "loaded_app", None)
    own = {} if loaded is None else loaded.commands.flags()

    def configured_then_run() -> int:
        if loaded is not None:
            # Its options checked before any command runs (exit 2 naming one).
            args.loaded_app = loaded.configured(vars(args))
        return command.handler(args, output)

    return guarded(configured_then_run, output, {**_GLOBAL_FLAGS, **own, **command.flags})


def guarded(
    work: Callable[[], int], output: Output, flags: Mapping[str, str] = _GLOBAL_FLAGS
) -> int:
    """``work()``, the engine's errors turned into the contract's exit codes."""
    try:
        return work()
    except InvalidInput as exc:
        if isinstance(exc, ApplicationLoadFailed):
            output.err.write(exc.traceback)  # the user's code failed: show them where
        output.error(f"{flags.get(exc.field, exc.field)}: {exc.problem}")
        return EXIT_USAGE
    except ConflictError as exc:
        output.error(exc.message)
        return EXIT_CONFLICT
    except NotFound as exc:
        output.error(exc.message)
        return EXIT_NOT_FOUND
    except SagaError as exc:
        output.error(exc.message)
        return EXIT_ERROR


def positive_float(text: str) -> float:
    """A positive, finite number of seconds (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        msg = f"expected a positive number, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def operator_name() -> str:
    """The operator's user name, for audit trails (``operator`` if it cannot be told)."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        return "operator"
    return name if name.isidentifier() or name.replace("-", "").isalnum() else "operator"


def port_number(text: str) -> int:
    """A TCP port for argparse: 0 (pick a free one) to 65535."""
    port = int(text) if text.isdigit() else -1
    if not 0 <= port <= 65535:
        msg = f"{text!r} is not a port (0-65535)"
        raise argparse.ArgumentTypeError(msg)
    return port
