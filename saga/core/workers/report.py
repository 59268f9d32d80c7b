"""
What a worker did: its counters, which a supervisor sums over its processes.

Apart from :mod:`saga.core.workers.worker`: the supervisor and the test
plugin read reports without running a worker, and every part of one counts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final

# The counters of a report; a supervisor adds its workers' (or their deltas).
COUNTERS: Final = (
    *("claimed", "done", "retried", "dead_lettered", "unknown"),
    *("lost_leases", "released", "timed_out", "published"),
)


@dataclass(slots=True)
class WorkerReport:
    """What one worker did before it stopped."""

    claimed: int = 0
    done: int = 0
    retried: int = 0
    dead_lettered: int = 0
    unknown: int = 0
    lost_leases: int = 0
    released: int = 0
    timed_out: int = 0
    published: int = 0
    started_at: float = field(default_factory=time.monotonic)

    def as_dict(self) -> dict[str, Any]:
        """The counters as plain data."""
        counters: dict[str, Any] = {name: getattr(self, name) for name in COUNTERS}
        return {**counters, "seconds": round(time.monotonic() - self.started_at, 3)}

    def add(self, other: dict[str, Any]) -> None:
        """Add another worker's counters (the supervisor sums its children)."""
        for name in COUNTERS:
            setattr(self, name, getattr(self, name) + int(other.get(name, 0)))
