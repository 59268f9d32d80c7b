"""``python -m saga``: the same as the ``saga`` command."""

from __future__ import annotations

from saga.cli import entry_point

entry_point()
