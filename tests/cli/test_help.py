"""Every option of every command says what it takes, and its default one way: `default: …`."""

from __future__ import annotations

import argparse
import re

import pytest

from saga.cli import build_parser

# Defaults a help need not spell: flags, and options that collect repeated values.
_SILENT = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._AppendAction)


def options(parser, path=("saga",)):
    """(command path, action) for every argument of ``parser`` and of its subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from options(sub, (*path, name))
        elif not isinstance(action, argparse._HelpAction):
            yield " ".join(path), action


def label(action):
    return "/".join(action.option_strings) or action.dest


def written(default):
    """A default as a help writes it: 30.0 is `30`."""
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


def problems(parser):
    found = []
    for path, action in options(parser):
        where = f"{path} {label(action)}"
        text = (action.help or "") % {**vars(action), "prog": path}
        if not text.strip() or action.help == argparse.SUPPRESS:
            found.append(f"{where}: no help")
            continue
        mentions = len(re.findall(r"default", text, re.IGNORECASE))
        if mentions != text.lower().count("default: "):
            found.append(f"{where}: a default not written `(default: …)`: {text!r}")
        if re.search(r"\(\d[\d.]*( s)?[);]", text):
            found.append(f"{where}: a bare figure in parentheses, not `(default: …)`: {text!r}")
        default = action.default
        if isinstance(action, _SILENT) or default in (None, argparse.SUPPRESS, False, []):
            continue
        if f"(default: {written(default)}" not in text:
            found.append(f"{where}: default {default!r} not written `(default: …)`: {text!r}")
    return found


def test_every_option_has_help_and_writes_its_default_one_way():
    """The whole tree: every command and subcommand, every option and positional."""
    parser, _ = build_parser()
    assert [] == problems(parser)


def test_the_walk_reaches_every_command():
    """The walk sees every command the CLI runs, the nested ones and the top-level options."""
    parser, commands = build_parser()
    seen = {(path, label(action)) for path, action in options(parser)}
    assert ("saga", "--db") in seen
    assert ("saga recon resolve", "--operator") in seen
    assert {f"saga {command}" for command in commands} <= {path for path, _ in seen}


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({}, "no help"),
        ({"help": "at most N (100)", "default": 100}, "bare figure"),
        ({"help": "at most N (default 100)", "default": 100}, "not written"),
        ({"help": "at most N (default: 50)", "default": 100}, "default 100 not written"),
    ],
)
def test_the_check_catches_what_it_promises(kwargs, problem):
    """An option with no help, or a default written another way (or stale), is named."""
    parser = argparse.ArgumentParser(prog="saga")
    sub = parser.add_subparsers(dest="command").add_parser("list")
    sub.add_argument("--limit", metavar="N", **kwargs)
    sub.add_argument("--fine", default=7, help="figures (default: %(default)s)")
    found = problems(parser)
    assert found
    assert all(line.startswith("saga list --limit: ") for line in found), found
    assert any(problem in line for line in found), found
