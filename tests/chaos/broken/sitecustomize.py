"""
Variants of the engine broken on purpose, for the chaos harness's own tests.

Python imports ``sitecustomize`` at startup from the path; the harness's
tests put this folder on ``PYTHONPATH`` with ``SAGA_BROKEN_VARIANT`` naming
one variant, so that the harness and every worker process it starts run the
broken engine.  Nothing in the package knows about these variants.  Each
patch checks that it changed what it means to change: a variant that no
longer applies (the code it breaks moved) fails loudly instead of testing
nothing.
"""

from __future__ import annotations

import dataclasses
import os
import re
import uuid

VARIANT = os.environ.get("SAGA_BROKEN_VARIANT", "")


def _sql_patch(patches, *, dialects=("postgres", "sqlite")):
    """Rewrite named queries: {query name: [(pattern, replacement)]}, each must match."""
    from saga.core import db as _db

    merged = _db.merged_queries

    def broken(dialect, components):
        queries = dict(merged(dialect, components))
        if dialect not in dialects:
            return queries
        for name, edits in patches.items():
            if name not in queries:
                continue  # another component's database
            sql = queries[name].sql
            for pattern, replacement in edits:
                sql, count = re.subn(pattern, replacement, sql)
                if count == 0:
                    raise RuntimeError(f"broken variant {VARIANT}: {pattern!r} not in {name}")
            queries[name] = dataclasses.replace(queries[name], sql=sql)
        return queries

    _db.merged_queries = broken


_LEASE = (
    r"j\.lease_token = (i\.token|json_extract\(i\.value, '\$\.token'\))\s+AND j\.lease_until > "
    r"(clock_timestamp\(\)|strftime\('%Y-%m-%dT%H:%M:%fZ', 'now'\))"
)


def no_fencing():
    """A worker whose lease expired completes its jobs anyway."""
    _sql_patch({"fence_jobs": [(_LEASE, "true")], "archive_owned_jobs": [(_LEASE, "true")]})


def no_inbox_dedupe():
    """
    The inbox takes an event id it already has as if it were new.

    Both halves of the dedupe go: the read before the provider is asked
    (which would otherwise skip a known event) and the claim in the
    transaction of the event's effect.
    """
    from saga.purchase import inbox

    if not callable(getattr(inbox, "_prepare", None)):
        raise RuntimeError("broken variant no_inbox_dedupe: saga.purchase.inbox._prepare moved")
    inbox._prepare = lambda tx, event, fingerprint: (inbox._find_purchase(tx, event), True)
    _sql_patch(
        {
            "insert_inbox_event": [
                (
                    r"ON CONFLICT \(event_id\) DO NOTHING",
                    "ON CONFLICT (event_id) DO UPDATE SET outcome = 'unmatched'",
                )
            ]
        }
    )


def no_seat_guard():
    """Seats move without the capacity check (and the table's own check is dropped)."""
    _sql_patch(
        {"move_seats": [(r"\s+AND held \+ taken \+ :held_delta \+ :taken_delta <= capacity", "")]}
    )
    from saga.core import engine as _engine

    upgrade = _engine.Engine.upgrade

    def upgrade_and_drop(self):
        result = upgrade(self)
        import sqlalchemy as sa

        if self.db.dialect != "postgres":
            return result  # SQLite cannot drop a CHECK: there it still stops the oversell
        with self.db.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "ALTER TABLE intensives DROP CONSTRAINT IF EXISTS intensives_seats_in_range"
                )
            )
        return result

    _engine.Engine.upgrade = upgrade_and_drop


def random_refund_key():
    """Each refund attempt mints a new key instead of reusing the one written."""
    from saga.purchase import steps

    steps.refund_key = lambda payment_key: f"refund:{uuid.uuid4().hex}"
    _sql_patch(
        {
            "record_refund_intent": [
                (
                    r"ON CONFLICT \(saga_id\) DO NOTHING",
                    "ON CONFLICT (saga_id) DO UPDATE SET key = excluded.key",
                )
            ]
        }
    )


def expiry_without_asking():
    """A hold expires without asking the provider whether the money arrived."""
    from saga.purchase import app, steps

    def not_paid(db, provider, saga, event):
        return (
            {"provider_status": "not_paid", "checked": "nobody asked"}
            if event == ("hold_expired")
            else {}
        )

    steps.hold_expiry_payload = app.hold_expiry_payload = not_paid


def cas_without_version():
    """A transition moves the saga whatever version it was decided on."""
    _sql_patch(
        {
            "transition_saga": [(r"AND version = :version", "AND CAST(:version AS integer) > 0")],
            "lock_saga": [(r"\s+FOR UPDATE", "")],
        },
        dialects=("postgres",),
    )


def outbox_after_commit():
    """The outbox event is written in a transaction of its own, after the transition commits."""
    from saga.core import sagas

    emit_in = sagas.emit_in
    if not callable(emit_in):
        raise RuntimeError("broken variant outbox_after_commit: saga.core.sagas.emit_in moved")

    def split(tx, emits, saga):
        db = tx.db
        tx.after_commit(lambda: db.transaction(lambda later: emit_in(later, emits, saga)))
        return 0

    sagas.emit_in = split


VARIANTS = {
    "outbox_after_commit": outbox_after_commit,
    "no_fencing": no_fencing,
    "no_inbox_dedupe": no_inbox_dedupe,
    "no_seat_guard": no_seat_guard,
    "random_refund_key": random_refund_key,
    "expiry_without_asking": expiry_without_asking,
    "cas_without_version": cas_without_version,
}

if VARIANT:
    VARIANTS[VARIANT]()
