"""Work a worker finds outside the job queue: what an application polls."""

from __future__ import annotations

from typing import Protocol


class Poller(Protocol):
    """Something a worker checks between claims."""

    def poll(self) -> int:
        """Do what is due; how many things were done."""

    def next_due_in(self) -> float | None:
        """Seconds until something is due; ``None`` if nothing waits."""
