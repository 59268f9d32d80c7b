"""
Faults on purpose.

The named crash points a test or ``saga chaos`` arms, and a network outage
that cuts a server off.  docs/chaos.md explains them; docs/api.md lists them.
"""

from __future__ import annotations

from saga.core.faults import CRASH_POINTS, crash_point
from saga.core.messages.netfault import Outage

__all__ = ["CRASH_POINTS", "Outage", "crash_point"]
