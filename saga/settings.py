"""
The engine's one setting naming an application.

:data:`DEFAULT_APP` is the application every command and every
:class:`~saga.Engine` runs when neither ``--app`` nor ``$SAGA_APP`` names
one (docs/applications.md, "The default application").  The engine's core
knows no application: it loads this one by name, like any user's.
"""

from __future__ import annotations

from typing import Final

# The reference application: the purchase of a seat of a paid intensive.
DEFAULT_APP: Final = "saga.purchase.app:purchase_app"
