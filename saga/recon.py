"""
Reconciliation beyond its policy.

Items, the hook that opens them, the checker that looks again, the judge
that checks operators' decisions, and the evidence they record.
docs/applications.md explains them; docs/api.md lists them.
"""

from __future__ import annotations

from saga.core.recon.checker import Checker, Verdict
from saga.core.recon.items import (
    ContradictedDecision,
    Decision,
    Judge,
    Observation,
    ReconItem,
    record_observation,
)
from saga.core.recon.lifecycle import ReconHook, open_review

__all__ = [
    "Checker",
    "ContradictedDecision",
    "Decision",
    "Judge",
    "Observation",
    "ReconHook",
    "ReconItem",
    "Verdict",
    "open_review",
    "record_observation",
]
