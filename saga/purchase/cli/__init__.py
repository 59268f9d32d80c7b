"""
The purchase's commands: ``saga intensive|purchase|sandbox|demo|chaos``, ``saga webhook deliver``.

Each command's module is imported only when its parser is built: a command
builds its own parser, ``saga --help`` builds them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

from saga.cli import Command

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping

    from saga.cli import Leaf


def _module(name: str) -> Command:
    """The command ``name``, registered by ``saga.purchase.cli.<module>`` when built."""
    module = {"intensive": "catalogue", "webhook deliver": "webhook"}.get(name, name)

    def register(
        subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    ) -> Mapping[str, Leaf]:
        found: Mapping[str, Leaf] = importlib.import_module(f"saga.purchase.cli.{module}").register(
            subparsers
        )
        return found

    return Command(name=name, register=register)


# In the order `saga --help` lists them, after the engine's commands.
# `webhook deliver`: an action of the engine's `webhook` (its provider's events).
COMMANDS: Final = tuple(
    _module(name)
    for name in ("intensive", "purchase", "sandbox", "demo", "chaos", "webhook deliver")
)
