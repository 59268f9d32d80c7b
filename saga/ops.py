"""
Running and watching an application.

Loading it by name, its invariants and ``saga verify``, the figures of
``saga stats``, structured logs and the provider-call metric.  docs/cli.md
and docs/metrics.md explain them; docs/api.md lists them.
"""

from __future__ import annotations

from saga.core.app_loading import load_app
from saga.core.logs import get_logger
from saga.core.metrics import record_provider_call
from saga.core.ops.invariants import Invariant, Report
from saga.core.ops.stats import collect as collect_stats
from saga.core.ops.verify import verify

__all__ = [
    "Invariant",
    "Report",
    "collect_stats",
    "get_logger",
    "load_app",
    "record_provider_call",
    "verify",
]
