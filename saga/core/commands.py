"""
What an application adds to the ``saga`` command line.

The engine's commands (``stats``, ``instances``, ``recon``, ``worker``, …)
work for any application; an application adds its own with
``Application(commands=Commands(...))``: each :class:`Command` is one
top-level subcommand, and each :class:`Option` an option every command takes
(before or after the subcommand) that configures the application, not the
engine.  The command line loads the application (``--app`` or ``$SAGA_APP``)
before it parses, so under another application these commands do not exist.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse

    from saga.core.sagas.registry import Context

# Adds a command's parser to argparse's subparsers; returns each path's
# `saga.cli.Leaf` (its handler and flags): the command line's types, not the core's.
Register = Callable[[Any], Mapping[str, Any]]
Run = Callable[["argparse.Namespace", "Context"], "int | None"]
Arguments = Callable[["argparse.ArgumentParser"], None]
# (application, its options' values) to the application given them; typed
# loosely here, as the application's module imports this one.
Configure = Callable[[Any, Mapping[str, "str | None"]], Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """
    One top-level command: ``saga NAME …``.

    The simple form: ``arguments(parser)`` adds its options and ``run(args,
    engine)`` does the work on an engine opened for it (on ``--db``, with the
    application), printing what it prints; it returns the exit code (``None``
    is 0).  An error of :mod:`saga.exceptions` it raises becomes the
    contract's exit code (bad input 2, conflict 3, not found 4).

    The tree form, for a command with actions of its own (``saga order
    start|show|…``): ``register(subparsers)`` adds its parser and returns a
    :class:`saga.cli.Leaf` for each path (``{"order start": Leaf(handler,
    flags)}``), its handler taking the parsed arguments and the command
    line's :class:`saga.cli.Output` and returning the exit code.

    A name of two words (``"webhook deliver"``) adds an action to a group of
    the engine's commands (``saga webhook serve|refusals``): the tree form,
    ``register`` given the group's actions.

    Args:
        name: the subcommand (or the engine's group and the action).
        help: its line in ``saga --help``.
        run: the simple form's work.
        arguments: the simple form's options and positionals.
        read_only: the simple form opens an existing database only (a
            mistyped path is "not found", never a new empty database).
        register: the tree form.
        flags: how the options name the fields of its errors
            (``{"intensive_id": "--intensive"}``), for messages.

    """

    name: str
    help: str = ""
    run: Run | None = None
    arguments: Arguments | None = None
    read_only: bool = False
    register: Register | None = None
    flags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.run is None) == (self.register is None):
            msg = f"command {self.name!r}: give run (one command) or register (a tree), not both"
            raise ValueError(msg)


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """
    An option of the application that every command takes (``--provider-db URL``).

    Its value (a string, or ``None`` when not given) goes to
    :attr:`Commands.configure` under ``dest`` (the flag without its dashes,
    ``-`` read as ``_``: ``provider_db``), also in each worker process.
    """

    flag: str
    help: str
    metavar: str = "VALUE"

    @property
    def dest(self) -> str:
        """Where argparse puts its value."""
        return self.flag.lstrip("-").replace("-", "_")


def _unchanged(app: object, values: Mapping[str, str | None]) -> object:
    del values
    return app


@dataclass(frozen=True, slots=True, kw_only=True)
class Commands:
    """
    Everything an application adds to the ``saga`` command line.

    Args:
        commands: its top-level commands, in the order ``saga --help`` lists
            them after the engine's.
        options: its options every command takes.
        configure: the :class:`~saga.Application` given its options' values (by
            :attr:`Option.dest`); raise :class:`~saga.exceptions.InvalidInput`
            on the option's ``dest`` for a bad value (exit 2 naming the flag).

    """

    commands: tuple[Command, ...] = ()
    options: tuple[Option, ...] = ()
    configure: Configure = _unchanged

    def names(self) -> tuple[str, ...]:
        """Its commands' names."""
        return tuple(command.name for command in self.commands)

    def named(self, name: str) -> Command | None:
        """Its command ``name``, if it has one."""
        return next((c for c in self.commands if c.name == name), None)

    def flags(self) -> dict[str, str]:
        """Each option's field and flag (``{"provider_db": "--provider-db"}``)."""
        return {option.dest: option.flag for option in self.options}


# An application without commands of its own.
NO_COMMANDS = Commands()
