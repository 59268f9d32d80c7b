"""``saga stats``: queue, reconciliation and saga figures (DESIGN.md §3)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

from saga.codec import as_utc, iso

if TYPE_CHECKING:
    from saga.core.store.db import Database, Tx

# How often a worker folds the counts' deltas into their totals (PostgreSQL).
# Readers add the deltas left, so this bounds their work, not their accuracy.
ROLL_UP_EVERY_S: Final = 1.0


def collect(db: Database) -> dict[str, Any]:
    """
    Figures per queue and per saga state.

    Per queue: pending (and due), running, expired leases, dead letters by
    reason, oldest due age, done; per saga state: count and time in state;
    the outbox: unpublished events, the oldest one's age, the publish rate
    over the last minute, broker errors.
    """
    return db.transaction(_collect, write=False)


def _collect(tx: Tx) -> dict[str, Any]:
    queues: dict[str, dict[str, Any]] = {}

    def queue(name: str) -> dict[str, Any]:
        return queues.setdefault(
            name,
            {
                "pending": 0,
                "due": 0,
                "running": 0,
                "expired_leases": 0,
                "failed": 0,
                "failed_by_reason": {},
                "oldest_pending_age_s": 0.0,
                "done": 0,
            },
        )

    for row in tx.all("queue_stats"):
        figures = queue(row["queue"])
        for name in ("pending", "due", "running", "expired_leases", "failed"):
            figures[name] = int(row[name])
        figures["oldest_pending_age_s"] = round(float(row["oldest_pending_age_s"] or 0), 3)
    for row in tx.all("failed_by_reason"):
        queue(row["queue"])["failed_by_reason"][row["error_class"]] = int(row["failed"])
    for row in tx.all("done_by_queue"):
        queue(row["queue"])["done"] = int(row["done"])
    sagas: dict[str, int] = {}
    kinds: dict[str, dict[str, Any]] = {}
    for row in tx.all("saga_state_stats"):
        sagas[row["state"]] = sagas.get(row["state"], 0) + int(row["sagas"])
        kinds.setdefault(row["kind"], {})[row["state"]] = {
            "count": int(row["sagas"]),
            "oldest_in_state_s": round(float(row["oldest_in_state_s"] or 0), 3),
            "mean_in_state_s": round(float(row["mean_in_state_s"] or 0), 3),
        }
    backlog = tx.one("recon_backlog")
    reconciliation = {
        "open": int(backlog["open"]) if backlog else 0,
        "oldest_age_s": round(float(backlog["oldest_age_s"] or 0), 3) if backlog else 0.0,
        "escalated": int(backlog["escalated"] or 0) if backlog else 0,
        "overdue": int(backlog["overdue"] or 0) if backlog else 0,
        "review": int(backlog["review"] or 0) if backlog else 0,
    }
    return {
        "queues": dict(sorted(queues.items())),
        "reconciliation": reconciliation,
        "outbox": _outbox(tx),
        "sagas": sagas,
        "saga_kinds": kinds,
    }


def _outbox(tx: Tx) -> dict[str, Any]:
    row: dict[str, Any] = dict(tx.one("outbox_stats") or {})  # an aggregate: one row
    last = tx.one("outbox_last_error")
    counts = ("unpublished", "dead", "published", "published_last_minute", "failing")
    figures: dict[str, Any] = {name: int(row.get(name) or 0) for name in counts}
    figures["broker_errors"] = int(row.get("broker_errors") or 0)
    figures["oldest_unpublished_age_s"] = round(float(row.get("oldest_unpublished_age_s") or 0), 3)
    figures["publish_rate_per_s"] = round(figures["published_last_minute"] / 60.0, 3)
    figures["last_error"] = last["last_error"] if last else None
    return figures


def activity(db: Database) -> list[dict[str, Any]]:
    """
    The last hour, minute by minute: jobs finished, and the backlog at each minute's end.

    For the console's chart; derived from the jobs and their archive, so it
    needs no sampling process (and ends where retention pruned the archive).
    """
    rows = db.transaction(lambda tx: tx.all("activity_last_hour"), write=False)
    return [
        {
            "minute": iso(as_utc(row["minute"])),
            "finished": int(row["finished"]),
            "backlog": int(row["backlog"]),
        }
        for row in rows
    ]


class CountsRollUp:
    """
    A worker's poller that folds the kept counts' deltas into their totals.

    On PostgreSQL the triggers behind ``saga stats`` append a delta row per
    write instead of updating a total that every worker would queue on; this
    folds them at most every ``every`` seconds (a short transaction; deltas
    another worker is folding are left to it).  A fold that finds nothing
    doubles the wait before the next, up to ``idle_every``, so an idle worker
    is not kept busy; readers add the deltas not folded yet, so the figures
    are exact either way.  It never wakes a worker up.
    """

    def __init__(
        self, db: Database, *, every: float = ROLL_UP_EVERY_S, idle_every: float = 60.0
    ) -> None:
        self.db = db
        self.every = every
        self.idle_every = idle_every
        self._wait = every
        self._last = float("-inf")

    def poll(self) -> int:
        """Fold the deltas if it is time; how many totals changed."""
        now = time.monotonic()
        if now - self._last < self._wait:
            return 0
        self._last = now
        folded = self.db.transaction(lambda tx: tx.run("roll_up_stat_deltas"))
        self._wait = self.every if folded else min(self.idle_every, max(self._wait, 0.5) * 2)
        return folded

    def next_due_in(self) -> float | None:
        """Never a reason to wake up."""
        return None
