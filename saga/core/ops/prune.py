"""
Retention: ``saga prune`` deletes finished operational rows past a window.

What goes, once older than the window by the database clock:

* jobs archived as done, with their results;
* inbox messages settled (applied, absorbed, not applicable), except those
  with a recorded conflict;
* outbox events already published;
* requests refused at the inbox's door (``inbox_refusals``);
* console sign-in attempts (``sign_in_attempts``), but never those inside
  the sign-in throttle's window, whatever the window given.

What never goes: sagas and their audit trail (business records: archive
them with your database's tools), accepted operation ids, live jobs, dead
letters, open reconciliation items, unmatched inbox messages, conflicts,
unpublished events.

Each batch is its own short transaction (on PostgreSQL it skips rows
another transaction holds), so pruning a large backlog never holds a long
lock.  Before deleting, the cut-off is recorded as each target's *horizon*:
``saga verify`` does not ask for pruned rows of transitions older than it.

The window is also how long a repeat is recognised: a job id, an inbox
message or an event delivered again after its row was pruned is new to the
engine.  Keep the window longer than any redelivery you expect (a
provider's webhook retries, a broker's message TTL).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from saga import validation
from saga.codec import iso, maybe_utc
from saga.core.ops.operators import THROTTLE_WINDOW_S
from saga.exceptions import DatabaseError, InvalidInput

if TYPE_CHECKING:
    from collections.abc import Callable

    from saga.core.store.db import Database, Tx

TARGETS: Final = ("jobs", "inbox", "outbox", "refusals", "sign_ins")
_DURATION: Final = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhdw])", re.ASCII)
_UNIT: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
DEFAULT_BATCH: Final = 1000
WINDOW_MAX_DAYS: Final = 36_500


def parse_duration(text: str, *, field: str = "older_than") -> float:
    """Seconds in ``30d``, ``12h``, ``90m``, ``45s`` or ``2w``, at most :data:`WINDOW_MAX_DAYS`."""
    found = _DURATION.fullmatch(text.strip())
    if found is None:
        raise InvalidInput(
            field=field, problem=f"expected a duration like 30d, 12h, 90m or 45s, got {text!r}"
        )
    seconds = float(found.group(1)) * _UNIT[found.group(2)]
    # A window reaching before year 1 makes the database's date arithmetic
    # fail (or wrap); a century already keeps everything the engine ever wrote.
    if seconds > WINDOW_MAX_DAYS * _UNIT["d"]:
        raise InvalidInput(
            field=field, problem=f"must be at most {WINDOW_MAX_DAYS}d (100 years), got {text!r}"
        )
    return seconds


@dataclass(slots=True)
class PruneReport:
    """What a prune removed (or, in a dry run, would remove), per target."""

    older_than_s: float
    cutoff: str | None
    dry_run: bool
    pruned: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TARGETS, 0))
    batches: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON fields."""
        return {
            "older_than_s": self.older_than_s,
            "cutoff": self.cutoff,
            "dry_run": self.dry_run,
            "pruned": dict(self.pruned),
            "batches": self.batches,
        }


class Pruner:
    """
    Prune ``db`` of rows finished before ``older_than_s`` seconds ago.

    :meth:`run` does it all; :meth:`start` and :meth:`step` do it one batch
    at a time (tests interleave them with live work).
    """

    def __init__(self, db: Database, *, older_than_s: float, batch: int = DEFAULT_BATCH) -> None:
        if older_than_s < 0:
            raise InvalidInput(field="older_than", problem="must not be negative")
        validation.batch(batch)
        self.db = db
        self.older_than_s = older_than_s
        self.batch = batch
        self.cutoff: str | None = None

    def count(self) -> dict[str, int]:
        """How many rows of each target are past the window now."""
        cutoff = self.cutoff or self._cutoff()
        return self.db.transaction(
            lambda tx: {
                t: int(tx.scalar(f"count_prunable_{t}", cutoff=cutoff, **_extra(t)))
                for t in TARGETS
            },
            write=False,
        )

    def _cutoff(self) -> str:
        value = self.db.transaction(
            lambda tx: tx.scalar("prune_cutoff", seconds=self.older_than_s), write=False
        )
        stamp = iso(maybe_utc(value))
        if stamp is None:  # pragma: no cover - the clock always answers
            msg = "the database returned no time"
            raise RuntimeError(msg)
        return stamp

    def start(self) -> str:
        """Fix the cut-off and record it as every target's horizon; the cut-off."""
        cutoff = self._cutoff()

        def record(tx: Tx) -> None:
            for target in TARGETS:
                tx.run("advance_prune_horizon", target=target, cutoff=cutoff)

        self.db.transaction(record)
        self.cutoff = cutoff
        return cutoff

    def step(self, target: str) -> int:
        """Delete one batch of ``target``; how many rows went."""
        if self.cutoff is None:
            msg = "call start() before step()"
            raise RuntimeError(msg)
        cutoff = self.cutoff

        def prune(tx: Tx) -> int:
            rows = tx.all(f"prune_{target}", cutoff=cutoff, batch=self.batch, **_extra(target))
            gone = [row["id"] for row in rows]
            if target == "jobs" and gone:
                tx.run("prune_job_results", ids=json.dumps(gone))
            return len(gone)

        try:
            return self.db.transaction(prune)
        except DatabaseError:
            if target != "inbox":
                raise
            # A conflict recorded for a message after this batch's snapshot
            # and before its lock: the message is evidence now, the delete is
            # refused by its key.  The next batch's snapshot sees the conflict.
            return self.db.transaction(prune)

    def run(
        self, *, dry_run: bool = False, progress: Callable[[int], object] | None = None
    ) -> PruneReport:
        """Prune every target in batches (or count, with ``dry_run``)."""
        if dry_run:
            self.cutoff = self._cutoff()
            report = PruneReport(self.older_than_s, self.cutoff, dry_run=True)
            report.pruned = self.count()
            return report
        report = PruneReport(self.older_than_s, self.start(), dry_run=False)
        for target in TARGETS:
            while True:
                gone = self.step(target)
                report.batches += 1
                report.pruned[target] += gone
                if progress is not None and gone:
                    progress(gone)
                if gone < self.batch:
                    break
        return report


def _extra(target: str) -> dict[str, Any]:
    # Sign-in failures inside the throttle's window are what it counts.
    return {"window_seconds": THROTTLE_WINDOW_S} if target == "sign_ins" else {}
